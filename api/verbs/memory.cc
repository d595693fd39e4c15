// The verbs front end's protection domains and memory regions.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "api/status.h"
#include "api/verbs/objects.h"

using namespace rdmaplane;         // NOLINT
using namespace rdmaplane::verbs;  // NOLINT

extern "C" {

// --- Protection domains and memory ---------------------------------------

ibv_pd* ibv_alloc_pd(ibv_context* context) {
  Context* c = Ctx(context);
  std::lock_guard<std::mutex> lock(c->mu);
  auto id = c->client->AllocPd();
  if (!id.ok())
    return Fail<ibv_pd*>(ErrnoOf(id.status()), nullptr, id.status());
  auto* p = new Pd();
  p->pd.context = context;
  p->pd.handle = *id;
  p->id = *id;
  return &p->pd;
}

int ibv_dealloc_pd(ibv_pd* pd) {
  Pd* p = PdOf(pd);
  Context* c = Ctx(pd->context);
  std::lock_guard<std::mutex> lock(c->mu);
  if (p->users != 0) return EBUSY;
  if (absl::Status s = c->client->DeallocPd(p->id); !s.ok()) {
    return ErrnoOf(s);
  }
  delete p;
  return 0;
}

ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                         unsigned int access) {
  constexpr unsigned kServed =
      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
      IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
      IBV_ACCESS_RELAXED_ORDERING | IBV_ACCESS_MW_BIND;
  if (pd == nullptr || length == 0) return Fail<ibv_mr*>(EINVAL, nullptr);
  if ((access & ~kServed) != 0) return Fail<ibv_mr*>(EOPNOTSUPP, nullptr);
  // Remote writes (and atomics) need local write, as the verbs say.
  if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) != 0 &&
      (access & IBV_ACCESS_LOCAL_WRITE) == 0) {
    return Fail<ibv_mr*>(EINVAL, nullptr);
  }
  // Peers name remote memory by our virtual address.
  if (iova != reinterpret_cast<uint64_t>(addr)) {
    return Fail<ibv_mr*>(EOPNOTSUPP, nullptr);
  }
  Pd* p = PdOf(pd);
  Context* c = Ctx(pd->context);
  std::lock_guard<std::mutex> lock(c->mu);
  if (absl::Status s = c->client->ShareMemory(addr, length); !s.ok()) {
    return Fail<ibv_mr*>(ErrnoOf(s), nullptr, s);
  }
  auto m = std::make_unique<Mr>();
  m->local_flags =
      RDP_MEM_READ | ((access & IBV_ACCESS_LOCAL_WRITE) ? RDP_MEM_WRITE : 0);
  // The lkey serves the PD's queue pairs only.
  auto lkey = c->client->RegisterMemory(addr, length, m->local_flags, p->id);
  if (!lkey.ok())
    return Fail<ibv_mr*>(ErrnoOf(lkey.status()), nullptr, lkey.status());
  m->remote_flags = RemoteFlagsOf(access);
  uint32_t rkey = *lkey;  // reaches nothing remotely
  if (m->remote_flags != 0) {
    auto r = c->client->RegisterPdMemory(p->id, addr, length, m->remote_flags);
    if (!r.ok()) {
      (void)c->client->DeregisterMemory(*lkey);
      return Fail<ibv_mr*>(ErrnoOf(r.status()), nullptr, r.status());
    }
    rkey = *r;
  }
  m->mr.context = pd->context;
  m->mr.pd = pd;
  m->mr.addr = addr;
  m->mr.length = length;
  m->mr.handle = *lkey;
  m->mr.lkey = *lkey;
  m->mr.rkey = rkey;
  m->access = access;
  ++p->users;
  return &m.release()->mr;
}

ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  return ibv_reg_mr_iova2(pd, addr, length, reinterpret_cast<uint64_t>(addr),
                          static_cast<unsigned>(access));
}

ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                        int access) {
  return ibv_reg_mr_iova2(pd, addr, length, iova,
                          static_cast<unsigned>(access));
}

// The MR's keys out of the daemon, and out of its PD's count; the Mr
// stays. 0 or an errno (then nothing changed but what a refusal keeps).
static int DeregisterKeys(Mr* m) {
  ibv_mr* mr = &m->mr;
  Context* c = Ctx(mr->context);
  std::lock_guard<std::mutex> lock(c->mu);
  if (m->remote_flags != 0) {
    absl::Status s = c->client->DeregisterPdMemory(
        PdOf(mr->pd)->id, mr->rkey, mr->addr, mr->length, m->remote_flags);
    if (!s.ok()) return RdpCode(s) == RDP_ERR_INVALID ? EBUSY : ErrnoOf(s);
    m->remote_flags = 0;
  }
  if (absl::Status s = c->client->DeregisterMemory(mr->lkey); !s.ok()) {
    return RdpCode(s) == RDP_ERR_INVALID ? EBUSY : ErrnoOf(s);
  }
  --PdOf(mr->pd)->users;
  return 0;
}

int ibv_dereg_mr(ibv_mr* mr) {
  auto* m = reinterpret_cast<Mr*>(mr);
  if (int err = DeregisterKeys(m); err != 0) return err;
  delete m;  // the pages stay where they are, with their contents
  return 0;
}

// ibv_rereg_mr(3): a registration with the new translation, PD or access is
// made first, then the old one goes, so that any failure leaves the old MR
// as it was (IBV_REREG_MR_ERR_INPUT, errno saying why); on success the same
// ibv_mr holds the new keys (they change, as the man page allows).
int ibv_rereg_mr(ibv_mr* mr, int flags, ibv_pd* pd, void* addr, size_t length,
                 int access) {
  constexpr int kKnown = IBV_REREG_MR_CHANGE_TRANSLATION |
                         IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS;
  if (mr == nullptr || flags == 0 || (flags & ~kKnown) != 0) {
    return Fail<int>(EINVAL, IBV_REREG_MR_ERR_INPUT);
  }
  auto* m = reinterpret_cast<Mr*>(mr);
  ibv_pd* new_pd = (flags & IBV_REREG_MR_CHANGE_PD) ? pd : mr->pd;
  if (new_pd == nullptr || new_pd->context != mr->context) {
    return Fail<int>(EINVAL, IBV_REREG_MR_ERR_INPUT);
  }
  const bool move = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) != 0;
  void* new_addr = move ? addr : mr->addr;
  const size_t new_length = move ? length : mr->length;
  const unsigned new_access = (flags & IBV_REREG_MR_CHANGE_ACCESS)
                                  ? static_cast<unsigned>(access)
                                  : m->access;
  ibv_mr* fresh =
      ibv_reg_mr_iova2(new_pd, new_addr, new_length,
                       reinterpret_cast<uint64_t>(new_addr), new_access);
  if (fresh == nullptr) return IBV_REREG_MR_ERR_INPUT;  // errno set
  auto* f = reinterpret_cast<Mr*>(fresh);
  if (int err = DeregisterKeys(m); err != 0) {
    (void)ibv_dereg_mr(fresh);
    return Fail<int>(err, IBV_REREG_MR_ERR_INPUT);
  }
  m->mr = f->mr;  // the caller's ibv_mr keeps its address
  m->access = f->access;
  m->local_flags = f->local_flags;
  m->remote_flags = f->remote_flags;
  delete f;  // its keys are m's now
  return 0;
}

}  // extern "C"
