// Memory windows (verbs ibv_alloc_mw, IBV_WR_BIND_MW, IBV_WR_LOCAL_INV):
// windows onto part of a client's registered memory, with remote rights of
// their own, that the client binds, invalidates and binds again while its
// queue pairs run.
//
// A window keeps one slot of the registration table from allocation to
// deallocation (mr::RegistrationTable::Reserve), so that every rkey it is
// bound under has the same high 24 bits and the low 8 the client chose (the
// verbs consumer key, ibv_inc_rkey). A bound window is a registration of
// kind kWindowType1 or kWindowType2 in its protection domain's scope,
// pointing into the memory of the local registration (the lkey of the
// memory region) it was bound to. Type 1 windows are reached through any
// queue pair of the domain and bound again over their old binding; type 2
// windows only through the queue pair that bound them, must be invalidated
// (LOCAL_INV, or the peer's SEND with Invalidate, which the engine carries
// out itself: mr::RegistrationTable::Invalidate) before they are bound
// again, and are invalidated when that queue pair ends.
//
// The rules a bind follows are IBA 10.6.7.2's, as Linux rxe applies them,
// and stricter where rxe is lax: the window must lie inside the region,
// the region must allow binding (IBV_ACCESS_MW_BIND) and local writes when
// the window grants remote writes or atomics, the queue pair must be in the
// window's protection domain, and a type 2 window must not be bound. A
// LOCAL_INV of a window that is not bound completes (as on rxe); one of a
// type 1 window, or of a key that is no window of the caller, fails.
//
// A window is bound only to a local registration (an lkey: the memory region
// as the front end registers it), and that registration cannot be
// deregistered (ibv_dereg_mr answers EBUSY) while a window is bound to it
// or a transfer still holds a window's key that was unbound: the window's
// memory is the registration's, and an engine may be writing it.
//
// Each window counts as a registration of its user (UserAccounts) as long as
// it exists.
//
// Thread-compatible: the control thread only.
#ifndef RDMAPLANE_CONTROL_MEMORY_WINDOWS_H_
#define RDMAPLANE_CONTROL_MEMORY_WINDOWS_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>

#include "api/shm/layout.h"
#include "control/user_accounts.h"
#include "dataplane/mr/registration_table.h"

namespace rdmaplane::control {

class MemoryWindows {
 public:
  // `max_per_session`: windows one session may hold. `accounts`: charged a
  // registration of the user for each window (null: nothing is charged).
  MemoryWindows(mr::RegistrationTable* table, uint32_t max_per_session,
                UserAccounts* accounts = nullptr)
      : table_(table), max_per_session_(max_per_session), accounts_(accounts) {}

  // kOpAllocMw in protection domain `pd_scope` of session `session` of user
  // `uid`; the answer's key is the window's first rkey.
  shm::ControlResponse Alloc(uint32_t session, uid_t uid, uint32_t pd_scope,
                             uint32_t type);
  // kOpDeallocMw: the window's keys stop resolving at once.
  shm::ControlResponse Dealloc(uint32_t session, uint32_t key);

  // The outcome of a memory window request of a queue pair.
  struct Outcome {
    int32_t status = shm::kStatusOk;
    uint8_t detail = shm::kDetailNone;
  };
  // Carries out `e` (kSendBindMw or kSendLocalInvalidate) for queue pair
  // `queue_pair` (its connection end) of `session` in protection domain
  // `pd_scope`. nullopt: it cannot run yet (the window's slot still waits
  // for readers, or a transfer still holds its old key): ask again later.
  std::optional<Outcome> Execute(uint32_t session, uint32_t pd_scope,
                                 uint32_t queue_pair, const shm::SendEntry& e);

  // Whether a bound window of `session` points into local registration
  // `lkey`, or into a registration of exactly [address, address + length)
  // (the region's remote key, which the front end registers over the same
  // bytes).
  bool Holds(uint32_t session, uint32_t lkey);
  bool HoldsRegion(uint32_t session, uint64_t address, uint64_t length);

  // The session's windows go (it closed); the type 2 windows bound to queue
  // pair `scope`, or every window of protection domain `scope`, are
  // invalidated.
  void DropOwner(uint32_t session);
  void DropScope(uint32_t scope);

  // Finishes removals that had to wait; true while some still wait.
  bool Tidy();
  // The memory a bound or unbinding window of `session` points into (its
  // region's mapping owner), for each of them.
  template <typename Fn>
  void ForEachMemoryOwner(uint32_t session, Fn&& fn) const {
    for (const auto& [index, w] : windows_) {
      if (w.session == session && (w.bound || w.removing)) fn(w.memory_owner);
    }
  }

  size_t size() const { return windows_.size(); }

 private:
  struct Window {
    uint32_t session = 0;
    uint32_t pd_scope = 0;
    mr::KeyKind kind = mr::KeyKind::kWindowType1;
    uint32_t key = 0;             // its current (or last) rkey
    bool bound = false;           // `key` is published
    bool removing = false;        // unbound, but its key still awaits Unpublish
    bool dead = false;            // deallocated: its slot goes once unpublished
    uint32_t lkey = 0;            // bound: the registration it points into
    uint64_t region_address = 0;  // ... and what that registration covers
    uint64_t region_length = 0;
    const rc::MemoryOwner* memory_owner = nullptr;  // ... and its mapping's
    uint32_t queue_pair = mr::kAnyConnection;       // bound type 2: its QP
    UserAccounts::Charge charge;  // a registration of its user
  };
  static uint32_t IndexOf(uint32_t key) { return key >> 8; }

  // The window of `session` that `key` names by its slot, or nullptr.
  Window* Find(uint32_t session, uint32_t key);
  // Takes `w`'s key out of the table (it stops resolving at once); false
  // while a transfer holds it (Tidy retries).
  bool Unbind(Window& w);
  // A bound window whose key the engine invalidated (SEND with
  // Invalidate) is unbound now.
  void NoticeInvalidation(Window& w);
  Outcome Bind(Window& w, uint32_t pd_scope, uint32_t queue_pair,
               const shm::SendEntry& e, bool* again);
  // Whether a bound or unbinding window of `session` satisfies
  // `points_into` (Holds, HoldsRegion).
  template <typename Pred>
  bool AnyInUse(uint32_t session, Pred points_into);

  mr::RegistrationTable* table_;
  uint32_t max_per_session_;
  UserAccounts* accounts_;
  std::map<uint32_t, Window> windows_;  // by slot
  // Windows unbinding (removing) or deallocated that Tidy has to finish.
  uint32_t untidy_ = 0;
};

}  // namespace rdmaplane::control

#endif  // RDMAPLANE_CONTROL_MEMORY_WINDOWS_H_
