// Registrations: the control operations that register and deregister client
// memory (local keys for SGEs; RDMA buffers a connection's peer may reach,
// with their descriptors), over the registration cache that publishes them
// to the engines.
//
// A registration belongs to one session (its owner) and, for RDMA buffers,
// to one scope: one end of one connection (ScopeOf), or, for the verbs
// front end, one protection domain of the session (PdScope), which every
// queue pair of the domain serves. Only requests arriving at that end, or at
// a queue pair of that domain, may use it.
//
// Thread-compatible: the control thread only.
#ifndef RDMAPLANE_CONTROL_MEMORY_SERVICE_H_
#define RDMAPLANE_CONTROL_MEMORY_SERVICE_H_

#include <cstdint>
#include <map>
#include <optional>

#include "api/shm/layout.h"
#include "control/memory_windows.h"
#include "control/registration_cache.h"
#include "control/sessions.h"
#include "control/status.h"
#include "control/user_accounts.h"
#include "dataplane/mr/registration_table.h"

namespace rdmaplane::control {

// The registration scope of end `side` (0 or 1) of connection `id`, and
// back.
inline uint32_t ScopeOf(uint32_t connection_id, int side) {
  return connection_id * 2 + static_cast<uint32_t>(side);
}
inline uint32_t ConnectionOfScope(uint32_t scope) { return scope / 2; }
// Protection domains take the scopes with the top bit set (connection scopes
// stay below 2^31 for the life of a daemon: ids are 31-bit).
inline constexpr uint32_t kPdScopeBit = 0x80000000u;
inline bool IsPdScope(uint32_t scope) {
  return (scope & kPdScopeBit) != 0 && scope != mr::kAnyConnection;
}

// A registration's remote access bits (mr::kAccessRemote*) for the
// shm::kAccessRead, kAccessWrite and kAccessAtomic bits of `flags`.
uint8_t RemoteAccessBits(uint32_t flags);

class MemoryService {
 public:
  // `max_per_session`: distinct registrations one session may hold; each
  // is also charged to its user's allowance in `accounts`.
  // `arena_memory` maps the views a registration across arenas needs
  // (Session::MapView); without it such registrations are refused.
  MemoryService(mr::RegistrationTable* table, uint32_t max_per_session,
                UserAccounts* accounts, ArenaMemory* arena_memory = nullptr);

  shm::ControlResponse RegisterLocal(Session& s,
                                     const shm::ControlRequest& r);
  shm::ControlResponse DeregisterLocal(const Session& s,
                                       const shm::ControlRequest& r);
  // `scope`: the end of the connection named by r.connection, or nullopt
  // when that slot holds no established (or pending) connection.
  shm::ControlResponse RegisterRdma(Session& s,
                                    std::optional<uint32_t> scope,
                                    const shm::ControlRequest& r);
  // The descriptor must name the registration in every field.
  shm::ControlResponse DeregisterRdma(const Session& s,
                                      std::optional<uint32_t> scope,
                                      const shm::ControlRequest& r);

  // Protection domains (kOpAllocPd / kOpDeallocPd): the answer's key is the
  // domain, which is also its registration scope. Deallocating one makes
  // what was registered in it unreachable.
  shm::ControlResponse AllocPd(const Session& s);
  shm::ControlResponse DeallocPd(const Session& s,
                                 const shm::ControlRequest& r);
  // The scope of protection domain `pd` when `s` holds it.
  std::optional<uint32_t> PdScope(const Session& s, uint32_t pd) const;
  size_t pd_count() const { return pds_.size(); }

  // Memory windows (memory_windows.h) in protection domain r.key: kOpAllocMw
  // (r.flags: the type) and kOpDeallocMw (r.key: an rkey of the window).
  shm::ControlResponse AllocMw(const Session& s, const shm::ControlRequest& r);
  shm::ControlResponse DeallocMw(const Session& s,
                                 const shm::ControlRequest& r);
  MemoryWindows& windows() { return windows_; }

  // Everything a session registered, or registered for one connection end,
  // becomes unreachable at once (a session's protection domains and memory
  // windows go too; a queue pair's type 2 windows are invalidated).
  void DropOwner(uint32_t session_id);
  void DropScope(uint32_t scope) {
    cache_.DropConnection(scope);
    windows_.DropScope(scope);
  }

  size_t size() const { return cache_.size(); }
  size_t CountOwner(uint32_t session_id) const {
    return cache_.CountOwner(session_id);
  }
  void AppendStatus(DaemonStatus* status) const;
  mr::RegistrationTable& table() { return *table_; }

 private:
  // Registers `reg` for `s`, charging its user for a new registration; the
  // key, or the refusal.
  shm::ControlResponse Register(const Session& s, const mr::Registration& reg,
                                uint32_t* key);
  // Where [address, address + length) of `s` is mapped here, and its
  // mapping's owner; maps a view when it lies across arenas (first letting
  // go of views no registration uses, when the session has its most).
  // nullptr with the refusal in `refusal`.
  uint8_t* Resolve(Session& s, uint64_t address, uint64_t length,
                   rc::MemoryOwner** owner, shm::ControlResponse* refusal);
  void ReleaseUnusedViews(Session& s);

  mr::RegistrationTable* table_;
  RegistrationCache cache_;
  MemoryWindows windows_;
  std::map<uint32_t, uint32_t> pds_;  // protection domain -> its session
  uint32_t next_pd_ = 1;
  uint32_t max_per_session_;
  UserAccounts* accounts_;
  ArenaMemory* arena_memory_;
};

}  // namespace rdmaplane::control

#endif  // RDMAPLANE_CONTROL_MEMORY_SERVICE_H_
