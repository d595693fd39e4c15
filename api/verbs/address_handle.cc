// UD address handles: ibv_create_ah names an IPv4-mapped GID, which the
// daemon resolves to its data port's next hop (ARP) and keeps as one of the
// session's handles; a UD SEND names the handle. ibv_init_ah_from_wc and
// ibv_create_ah_from_wc answer a received datagram through the IPv4 header
// in its GRH.
#include <arpa/inet.h>
#include <errno.h>

#include <cstring>
#include <mutex>

#include "api/verbs/objects.h"

namespace rdmaplane::verbs {
namespace {

// The sender's address of a datagram received with a GRH: for RoCEv2 over
// IPv4, the IPv4 header fills the GRH's last 20 bytes.
bool SourceOfGrh(const ibv_grh* grh, uint32_t* ip, uint8_t* ttl,
                 uint8_t* tos) {
  const uint8_t* ipv4 = reinterpret_cast<const uint8_t*>(grh) + 20;
  if (ipv4[0] != 0x45) return false;
  uint32_t be;
  std::memcpy(&be, ipv4 + 12, sizeof(be));
  *ip = ntohl(be);
  *ttl = ipv4[8];
  *tos = ipv4[1];
  return *ip != 0;
}

}  // namespace

Ah* AhOf(ibv_ah* ah) { return reinterpret_cast<Ah*>(ah); }

}  // namespace rdmaplane::verbs

using namespace rdmaplane;         // NOLINT
using namespace rdmaplane::verbs;  // NOLINT

extern "C" {

ibv_ah* ibv_create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
  if (pd == nullptr || attr == nullptr) return Fail<ibv_ah*>(EINVAL, nullptr);
  uint32_t ip = 0;
  // RoCEv2: the destination is the IPv4 address of its GID; port 1 only.
  if (!attr->is_global || !Ipv4OfGid(attr->grh.dgid, &ip) ||
      (attr->port_num != 0 && attr->port_num != 1) ||
      attr->grh.sgid_index != 0) {
    return Fail<ibv_ah*>(EINVAL, nullptr);
  }
  Context* c = Ctx(pd->context);
  auto ah = std::make_unique<Ah>();
  std::lock_guard<std::mutex> lock(c->mu);
  absl::StatusOr<uint32_t> handle = c->client->CreateAddressHandle(ip);
  if (!handle.ok()) {
    return Fail<ibv_ah*>(ErrnoOf(handle.status()), nullptr, handle.status());
  }
  ah->ah.context = pd->context;
  ah->ah.pd = pd;
  ah->ah.handle = *handle;
  ah->handle = *handle;
  ah->attr = *attr;
  ++PdOf(pd)->users;
  return &ah.release()->ah;
}

int ibv_destroy_ah(ibv_ah* ibah) {
  if (ibah == nullptr) return EINVAL;
  Ah* ah = AhOf(ibah);
  Context* c = Ctx(ibah->context);
  std::lock_guard<std::mutex> lock(c->mu);
  absl::Status s = c->client->DestroyAddressHandle(ah->handle);
  if (!s.ok()) return Fail<int>(ErrnoOf(s), ErrnoOf(s), s);
  --PdOf(ibah->pd)->users;
  delete ah;
  return 0;
}

int ibv_init_ah_from_wc(ibv_context* context, uint8_t port_num, ibv_wc* wc,
                        ibv_grh* grh, ibv_ah_attr* ah_attr) {
  if (context == nullptr || wc == nullptr || grh == nullptr ||
      ah_attr == nullptr) {
    return Fail<int>(EINVAL, -1);
  }
  uint32_t ip = 0;
  uint8_t ttl = 0, tos = 0;
  // RoCE has no route without the GRH.
  if ((wc->wc_flags & IBV_WC_GRH) == 0 || !SourceOfGrh(grh, &ip, &ttl, &tos)) {
    return Fail<int>(EINVAL, -1);
  }
  std::memset(ah_attr, 0, sizeof(*ah_attr));
  ah_attr->is_global = 1;
  ah_attr->grh.dgid = GidOf(ip);
  ah_attr->grh.sgid_index = 0;
  ah_attr->grh.hop_limit = 0xFF;
  ah_attr->grh.traffic_class = tos;
  ah_attr->dlid = wc->slid;
  ah_attr->sl = wc->sl;
  ah_attr->src_path_bits = wc->dlid_path_bits;
  ah_attr->port_num = port_num;
  return 0;
}

ibv_ah* ibv_create_ah_from_wc(ibv_pd* pd, ibv_wc* wc, ibv_grh* grh,
                              uint8_t port_num) {
  if (pd == nullptr) return Fail<ibv_ah*>(EINVAL, nullptr);
  ibv_ah_attr attr;
  if (ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &attr) != 0) {
    return nullptr;  // errno set
  }
  return ibv_create_ah(pd, &attr);
}

}  // extern "C"
