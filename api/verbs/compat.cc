// Entry points of two ABIs besides the application verbs, so that no call
// reaches libibverbs (see verbs.map):
//
// - IBVERBS_1.0: libibverbs 1.0's functions, kept by libibverbs for
//   binaries built against it (before 2006) with structures of that time.
//   They are not served: each fails with ENOSYS, and the ones without a
//   result do nothing.
// - IBVERBS_PRIVATE_34: the interface between libibverbs and its provider
//   drivers. No provider is ever loaded over this front end (its devices
//   are its own), so none of these is reached by a provider; a caller gets
//   EOPNOTSUPP, or no context, and the ones without a result do nothing.
#include <errno.h>
#include <infiniband/verbs.h>

#include <cstdint>

// The names of the IBVERBS_1.0 versions: each function below is bound to
// NAME@IBVERBS_1.0 (or @IBVERBS_1.1) by .symver, beside the default
// version the other files define.
#define RDMAPLANE_COMPAT(name, version) \
  __asm__(".symver rdmaplane_compat_" #name ", " #name "@" version);

extern "C" {

// --- IBVERBS_1.0 ------------------------------------------------------------

RDMAPLANE_COMPAT(ibv_ack_async_event, "IBVERBS_1.0")
__attribute__((visibility("default"))) void
rdmaplane_compat_ibv_ack_async_event(...) {}

RDMAPLANE_COMPAT(ibv_ack_cq_events, "IBVERBS_1.0")
__attribute__((visibility("default"))) void rdmaplane_compat_ibv_ack_cq_events(
    ...) {}

RDMAPLANE_COMPAT(ibv_free_device_list, "IBVERBS_1.0")
__attribute__((visibility("default"))) void
rdmaplane_compat_ibv_free_device_list(...) {}

RDMAPLANE_COMPAT(ibv_alloc_pd, "IBVERBS_1.0")
__attribute__((visibility("default"))) void* rdmaplane_compat_ibv_alloc_pd(
    ...) {
  errno = ENOSYS;
  return nullptr;
}

RDMAPLANE_COMPAT(ibv_create_ah, "IBVERBS_1.0")
__attribute__((visibility("default"))) void* rdmaplane_compat_ibv_create_ah(
    ...) {
  errno = ENOSYS;
  return nullptr;
}

RDMAPLANE_COMPAT(ibv_create_cq, "IBVERBS_1.0")
__attribute__((visibility("default"))) void* rdmaplane_compat_ibv_create_cq(
    ...) {
  errno = ENOSYS;
  return nullptr;
}

RDMAPLANE_COMPAT(ibv_create_qp, "IBVERBS_1.0")
__attribute__((visibility("default"))) void* rdmaplane_compat_ibv_create_qp(
    ...) {
  errno = ENOSYS;
  return nullptr;
}

RDMAPLANE_COMPAT(ibv_create_srq, "IBVERBS_1.0")
__attribute__((visibility("default"))) void* rdmaplane_compat_ibv_create_srq(
    ...) {
  errno = ENOSYS;
  return nullptr;
}

RDMAPLANE_COMPAT(ibv_get_device_list, "IBVERBS_1.0")
__attribute__((visibility("default"))) void*
rdmaplane_compat_ibv_get_device_list(...) {
  errno = ENOSYS;
  return nullptr;
}

RDMAPLANE_COMPAT(ibv_get_device_name, "IBVERBS_1.0")
__attribute__((visibility("default"))) void*
rdmaplane_compat_ibv_get_device_name(...) {
  errno = ENOSYS;
  return nullptr;
}

RDMAPLANE_COMPAT(ibv_open_device, "IBVERBS_1.0")
__attribute__((visibility("default"))) void* rdmaplane_compat_ibv_open_device(
    ...) {
  errno = ENOSYS;
  return nullptr;
}

RDMAPLANE_COMPAT(ibv_reg_mr, "IBVERBS_1.0")
__attribute__((visibility("default"))) void* rdmaplane_compat_ibv_reg_mr(...) {
  errno = ENOSYS;
  return nullptr;
}

RDMAPLANE_COMPAT(ibv_attach_mcast, "IBVERBS_1.0")
__attribute__((visibility("default"))) int rdmaplane_compat_ibv_attach_mcast(
    ...) {
  errno = ENOSYS;
  return ENOSYS;
}

RDMAPLANE_COMPAT(ibv_close_device, "IBVERBS_1.0")
__attribute__((visibility("default"))) int rdmaplane_compat_ibv_close_device(
    ...) {
  errno = ENOSYS;
  return ENOSYS;
}

RDMAPLANE_COMPAT(ibv_dealloc_pd, "IBVERBS_1.0")
__attribute__((visibility("default"))) int rdmaplane_compat_ibv_dealloc_pd(
    ...) {
  errno = ENOSYS;
  return ENOSYS;
}

RDMAPLANE_COMPAT(ibv_dereg_mr, "IBVERBS_1.0")
__attribute__((visibility("default"))) int rdmaplane_compat_ibv_dereg_mr(...) {
  errno = ENOSYS;
  return ENOSYS;
}

RDMAPLANE_COMPAT(ibv_destroy_ah, "IBVERBS_1.0")
__attribute__((visibility("default"))) int rdmaplane_compat_ibv_destroy_ah(
    ...) {
  errno = ENOSYS;
  return ENOSYS;
}

RDMAPLANE_COMPAT(ibv_destroy_cq, "IBVERBS_1.0")
__attribute__((visibility("default"))) int rdmaplane_compat_ibv_destroy_cq(
    ...) {
  errno = ENOSYS;
  return ENOSYS;
}

RDMAPLANE_COMPAT(ibv_destroy_qp, "IBVERBS_1.0")
__attribute__((visibility("default"))) int rdmaplane_compat_ibv_destroy_qp(
    ...) {
  errno = ENOSYS;
  return ENOSYS;
}

RDMAPLANE_COMPAT(ibv_destroy_srq, "IBVERBS_1.0")
__attribute__((visibility("default"))) int rdmaplane_compat_ibv_destroy_srq(
    ...) {
  errno = ENOSYS;
  return ENOSYS;
}

RDMAPLANE_COMPAT(ibv_detach_mcast, "IBVERBS_1.0")
__attribute__((visibility("default"))) int rdmaplane_compat_ibv_detach_mcast(
    ...) {
  errno = ENOSYS;
  return ENOSYS;
}

RDMAPLANE_COMPAT(ibv_get_async_event, "IBVERBS_1.0")
__attribute__((visibility("default"))) int rdmaplane_compat_ibv_get_async_event(
    ...) {
  errno = ENOSYS;
  return ENOSYS;
}

RDMAPLANE_COMPAT(ibv_get_cq_event, "IBVERBS_1.0")
__attribute__((visibility("default"))) int rdmaplane_compat_ibv_get_cq_event(
    ...) {
  errno = ENOSYS;
  return ENOSYS;
}

RDMAPLANE_COMPAT(ibv_modify_qp, "IBVERBS_1.0")
__attribute__((visibility("default"))) int rdmaplane_compat_ibv_modify_qp(...) {
  errno = ENOSYS;
  return ENOSYS;
}

RDMAPLANE_COMPAT(ibv_modify_srq, "IBVERBS_1.0")
__attribute__((visibility("default"))) int rdmaplane_compat_ibv_modify_srq(
    ...) {
  errno = ENOSYS;
  return ENOSYS;
}

RDMAPLANE_COMPAT(ibv_query_device, "IBVERBS_1.0")
__attribute__((visibility("default"))) int rdmaplane_compat_ibv_query_device(
    ...) {
  errno = ENOSYS;
  return ENOSYS;
}

RDMAPLANE_COMPAT(ibv_query_gid, "IBVERBS_1.0")
__attribute__((visibility("default"))) int rdmaplane_compat_ibv_query_gid(...) {
  errno = ENOSYS;
  return ENOSYS;
}

RDMAPLANE_COMPAT(ibv_query_pkey, "IBVERBS_1.0")
__attribute__((visibility("default"))) int rdmaplane_compat_ibv_query_pkey(
    ...) {
  errno = ENOSYS;
  return ENOSYS;
}

RDMAPLANE_COMPAT(ibv_query_port, "IBVERBS_1.0")
__attribute__((visibility("default"))) int rdmaplane_compat_ibv_query_port(
    ...) {
  errno = ENOSYS;
  return ENOSYS;
}

RDMAPLANE_COMPAT(ibv_query_qp, "IBVERBS_1.0")
__attribute__((visibility("default"))) int rdmaplane_compat_ibv_query_qp(...) {
  errno = ENOSYS;
  return ENOSYS;
}

RDMAPLANE_COMPAT(ibv_query_srq, "IBVERBS_1.0")
__attribute__((visibility("default"))) int rdmaplane_compat_ibv_query_srq(...) {
  errno = ENOSYS;
  return ENOSYS;
}

RDMAPLANE_COMPAT(ibv_resize_cq, "IBVERBS_1.0")
__attribute__((visibility("default"))) int rdmaplane_compat_ibv_resize_cq(...) {
  errno = ENOSYS;
  return ENOSYS;
}

RDMAPLANE_COMPAT(ibv_get_device_guid, "IBVERBS_1.0")
__attribute__((visibility("default"))) uint64_t
rdmaplane_compat_ibv_get_device_guid(...) {
  errno = ENOSYS;
  return 0;
}

// A provider of libibverbs 1.1 registering itself: none is used here.
RDMAPLANE_COMPAT(ibv_register_driver, "IBVERBS_1.1")
__attribute__((visibility("default"))) void
rdmaplane_compat_ibv_register_driver(...) {}

// --- IBVERBS_PRIVATE_34 -----------------------------------------------------

#define RDMAPLANE_PROVIDER_COMMAND(name) \
  int name(...) { return EOPNOTSUPP; }

RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_advise_mr)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_alloc_dm)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_alloc_mw)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_alloc_pd)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_attach_mcast)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_close_xrcd)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_create_ah)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_create_counters)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_create_cq)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_create_cq_ex)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_create_flow)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_create_flow_action_esp)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_create_qp)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_create_qp_ex)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_create_qp_ex2)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_create_rwq_ind_table)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_create_srq)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_create_srq_ex)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_create_wq)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_dealloc_mw)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_dealloc_pd)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_dereg_mr)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_destroy_ah)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_destroy_counters)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_destroy_cq)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_destroy_flow)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_destroy_flow_action)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_destroy_qp)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_destroy_rwq_ind_table)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_destroy_srq)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_destroy_wq)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_detach_mcast)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_free_dm)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_get_context)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_modify_cq)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_modify_flow_action_esp)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_modify_qp)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_modify_qp_ex)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_modify_srq)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_modify_wq)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_open_qp)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_open_xrcd)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_poll_cq)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_post_recv)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_post_send)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_post_srq_recv)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_query_context)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_query_device_any)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_query_mr)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_query_port)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_query_qp)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_query_srq)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_read_counters)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_reg_dm_mr)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_reg_dmabuf_mr)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_reg_mr)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_req_notify_cq)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_rereg_mr)
RDMAPLANE_PROVIDER_COMMAND(ibv_cmd_resize_cq)
#undef RDMAPLANE_PROVIDER_COMMAND

int execute_ioctl(...) { return EOPNOTSUPP; }
unsigned int __ioctl_final_num_attrs(unsigned int num_attrs, ...) {
  return num_attrs;
}
void __verbs_log(...) {}
void* _verbs_init_and_alloc_context(...) {
  errno = EOPNOTSUPP;
  return nullptr;
}
void* verbs_open_device(...) {
  errno = EOPNOTSUPP;
  return nullptr;
}
void verbs_register_driver_34(...) {}
void verbs_set_ops(...) {}
void verbs_uninit_context(...) {}
void verbs_init_cq(...) {}
int ibv_read_ibdev_sysfs_file(...) { return -1; }
bool verbs_allow_disassociate_destroy = false;

}  // extern "C"
