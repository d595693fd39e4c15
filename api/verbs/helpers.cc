// libibverbs' helpers that need no device: names of enum values, rate
// conversions, the kernel-ABI marshalling of <infiniband/marshall.h>, and
// fork support. They work as libibverbs' own do, so that an application
// preloading the front end prints and converts the same.
#include <errno.h>
#include <infiniband/sa.h>
#include <infiniband/verbs.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "api/verbs/objects.h"

namespace rdmaplane::verbs {
namespace {

template <size_t N>
const char* NameAt(const char* const (&names)[N], long index) {
  if (index < 0 || static_cast<size_t>(index) >= N || names[index] == nullptr) {
    return "unknown";
  }
  return names[index];
}

// IB transmission rates: the enumeration, the multiple of 2.5 Gb/s
// (0: no such multiple) and the rate in Mb/s.
struct Rate {
  ibv_rate rate;
  int mult;
  int mbps;
};
constexpr Rate kRates[] = {
    {IBV_RATE_2_5_GBPS, 1, 2500},       {IBV_RATE_5_GBPS, 2, 5000},
    {IBV_RATE_10_GBPS, 4, 10000},       {IBV_RATE_20_GBPS, 8, 20000},
    {IBV_RATE_30_GBPS, 12, 30000},      {IBV_RATE_40_GBPS, 16, 40000},
    {IBV_RATE_60_GBPS, 24, 60000},      {IBV_RATE_80_GBPS, 32, 80000},
    {IBV_RATE_120_GBPS, 48, 120000},    {IBV_RATE_14_GBPS, 0, 14062},
    {IBV_RATE_56_GBPS, 0, 56250},       {IBV_RATE_112_GBPS, 0, 112500},
    {IBV_RATE_168_GBPS, 0, 168750},     {IBV_RATE_25_GBPS, 0, 25781},
    {IBV_RATE_100_GBPS, 0, 103125},     {IBV_RATE_200_GBPS, 0, 206250},
    {IBV_RATE_300_GBPS, 0, 309375},     {IBV_RATE_28_GBPS, 11, 28125},
    {IBV_RATE_50_GBPS, 20, 53125},      {IBV_RATE_400_GBPS, 160, 425000},
    {IBV_RATE_600_GBPS, 240, 637500},   {IBV_RATE_800_GBPS, 320, 850000},
    {IBV_RATE_1200_GBPS, 480, 1275000},
};

void AhAttrFromKern(ibv_ah_attr* dst, const ib_uverbs_ah_attr& src) {
  std::memcpy(dst->grh.dgid.raw, src.grh.dgid, sizeof(dst->grh.dgid));
  dst->grh.flow_label = src.grh.flow_label;
  dst->grh.sgid_index = src.grh.sgid_index;
  dst->grh.hop_limit = src.grh.hop_limit;
  dst->grh.traffic_class = src.grh.traffic_class;
  dst->dlid = src.dlid;
  dst->sl = src.sl;
  dst->src_path_bits = src.src_path_bits;
  dst->static_rate = src.static_rate;
  dst->is_global = src.is_global;
  dst->port_num = src.port_num;
}

}  // namespace
}  // namespace rdmaplane::verbs

using namespace rdmaplane::verbs;  // NOLINT

extern "C" {

const char* ibv_node_type_str(ibv_node_type node_type) {
  static const char* const kNames[] = {
      nullptr,
      "InfiniBand channel adapter",
      "InfiniBand switch",
      "InfiniBand router",
      "iWARP NIC",
      "usNIC",
      "usNIC UDP",
      "unspecified",
  };
  return NameAt(kNames, node_type);
}

const char* ibv_port_state_str(ibv_port_state port_state) {
  static const char* const kNames[] = {
      "no state change (NOP)", "down", "init", "armed", "active",
      "active defer",
  };
  return NameAt(kNames, port_state);
}

const char* ibv_event_type_str(ibv_event_type event) {
  static const char* const kNames[] = {
      "CQ error",
      "local work queue catastrophic error",
      "invalid request local work queue error",
      "local access violation work queue error",
      "communication established",
      "send queue drained",
      "path migrated",
      "path migration request error",
      "local catastrophic error",
      "port active",
      "port error",
      "LID change",
      "P_Key change",
      "SM change",
      "SRQ catastrophic error",
      "SRQ limit reached",
      "last WQE reached",
      "client reregistration",
      "GID table change",
      "WQ fatal",
  };
  return NameAt(kNames, event);
}

const char* ibv_wc_status_str(ibv_wc_status status) {
  static const char* const kNames[] = {
      "success",
      "local length error",
      "local QP operation error",
      "local EE context operation error",
      "local protection error",
      "Work Request Flushed Error",
      "memory management operation error",
      "bad response error",
      "local access error",
      "remote invalid request error",
      "remote access error",
      "remote operation error",
      "transport retry counter exceeded",
      "RNR retry counter exceeded",
      "local RDD violation error",
      "remote invalid RD request",
      "aborted error",
      "invalid EE context number",
      "invalid EE context state",
      "fatal error",
      "response timeout error",
      "general error",
      "TM error",
      "TM rendezvous error",
  };
  return NameAt(kNames, status);
}

int ibv_rate_to_mult(ibv_rate rate) {
  for (const Rate& r : kRates) {
    if (r.rate == rate && r.mult != 0) return r.mult;
  }
  return -1;
}

ibv_rate mult_to_ibv_rate(int mult) {
  for (const Rate& r : kRates) {
    if (r.mult == mult && mult != 0) return r.rate;
  }
  return IBV_RATE_MAX;
}

int ibv_rate_to_mbps(ibv_rate rate) {
  for (const Rate& r : kRates) {
    if (r.rate == rate) return r.mbps;
  }
  return -1;
}

ibv_rate mbps_to_ibv_rate(int mbps) {
  for (const Rate& r : kRates) {
    if (r.mbps == mbps) return r.rate;
  }
  return IBV_RATE_MAX;
}

// Registered memory lives in shared mappings (docs/verbs.md, "Memory"): a
// child made by fork() shares those pages instead of copying them on write,
// so the parent's registrations stay valid and fork support is never
// needed (IBV_FORK_UNNEEDED), whether ibv_fork_init was called or not.
int ibv_fork_init(void) { return 0; }
ibv_fork_status ibv_is_fork_initialized(void) { return IBV_FORK_UNNEEDED; }
int ibv_dontfork_range(void*, size_t) { return 0; }
int ibv_dofork_range(void*, size_t) { return 0; }

// Where sysfs is mounted; no rdmaplane device appears under it.
const char* ibv_get_sysfs_path(void) { return "/sys"; }

// No sysfs behind this device.
int ibv_read_sysfs_file(const char*, const char*, char*, size_t) { return -1; }

// <infiniband/marshall.h>: the kernel ABI's structures into the verbs'.
void ibv_copy_ah_attr_from_kern(ibv_ah_attr* dst, ib_uverbs_ah_attr* src) {
  AhAttrFromKern(dst, *src);
}

void ibv_copy_qp_attr_from_kern(ibv_qp_attr* dst, ib_uverbs_qp_attr* src) {
  dst->cur_qp_state = static_cast<ibv_qp_state>(src->cur_qp_state);
  dst->path_mtu = static_cast<ibv_mtu>(src->path_mtu);
  dst->path_mig_state = static_cast<ibv_mig_state>(src->path_mig_state);
  dst->qkey = src->qkey;
  dst->rq_psn = src->rq_psn;
  dst->sq_psn = src->sq_psn;
  dst->dest_qp_num = src->dest_qp_num;
  dst->qp_access_flags = static_cast<int>(src->qp_access_flags);
  dst->cap.max_send_wr = src->max_send_wr;
  dst->cap.max_recv_wr = src->max_recv_wr;
  dst->cap.max_send_sge = src->max_send_sge;
  dst->cap.max_recv_sge = src->max_recv_sge;
  dst->cap.max_inline_data = src->max_inline_data;
  AhAttrFromKern(&dst->ah_attr, src->ah_attr);
  AhAttrFromKern(&dst->alt_ah_attr, src->alt_ah_attr);
  dst->pkey_index = src->pkey_index;
  dst->alt_pkey_index = src->alt_pkey_index;
  dst->en_sqd_async_notify = src->en_sqd_async_notify;
  dst->sq_draining = src->sq_draining;
  dst->max_rd_atomic = src->max_rd_atomic;
  dst->max_dest_rd_atomic = src->max_dest_rd_atomic;
  dst->min_rnr_timer = src->min_rnr_timer;
  dst->port_num = src->port_num;
  dst->timeout = src->timeout;
  dst->retry_cnt = src->retry_cnt;
  dst->rnr_retry = src->rnr_retry;
  dst->alt_port_num = src->alt_port_num;
  dst->alt_timeout = src->alt_timeout;
}

// The same fields both ways (path records of the SA, IBA 15.2.5.16).
#define RDMAPLANE_PATH_REC_FIELDS(X)                                   \
  X(dlid)                                                              \
  X(slid) X(raw_traffic) X(flow_label) X(reversible) X(mtu) X(pkey)    \
      X(hop_limit) X(traffic_class) X(numb_path) X(sl) X(mtu_selector) \
          X(rate_selector) X(rate) X(packet_life_time_selector)        \
              X(packet_life_time) X(preference)
#define RDMAPLANE_COPY_FIELD(f) dst->f = src->f;

void ibv_copy_path_rec_from_kern(ibv_sa_path_rec* dst, ib_user_path_rec* src) {
  std::memcpy(dst->dgid.raw, src->dgid, sizeof(src->dgid));
  std::memcpy(dst->sgid.raw, src->sgid, sizeof(src->sgid));
  RDMAPLANE_PATH_REC_FIELDS(RDMAPLANE_COPY_FIELD)
}

void ibv_copy_path_rec_to_kern(ib_user_path_rec* dst, ibv_sa_path_rec* src) {
  std::memcpy(dst->dgid, src->dgid.raw, sizeof(dst->dgid));
  std::memcpy(dst->sgid, src->sgid.raw, sizeof(dst->sgid));
  RDMAPLANE_PATH_REC_FIELDS(RDMAPLANE_COPY_FIELD)
}

#undef RDMAPLANE_COPY_FIELD
#undef RDMAPLANE_PATH_REC_FIELDS

}  // extern "C"
