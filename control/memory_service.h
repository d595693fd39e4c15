// Registrations: the control operations that register and deregister client
// memory (local keys for SGEs; RDMA buffers a connection's peer may reach,
// with their descriptors), over the registration cache that publishes them
// to the engines.
//
// A registration belongs to one session (its owner) and, for RDMA buffers,
// to one connection scope: one end of one connection (ScopeOf). Only
// requests arriving at that end may use it.
//
// Thread-compatible: the control thread only.
#ifndef RDMAPLANE_CONTROL_MEMORY_SERVICE_H_
#define RDMAPLANE_CONTROL_MEMORY_SERVICE_H_

#include <cstdint>
#include <optional>

#include "api/shm/layout.h"
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

class MemoryService {
 public:
  // `max_per_session`: distinct registrations one session may hold; each
  // is also charged to its user's allowance in `accounts`.
  MemoryService(mr::RegistrationTable* table, uint32_t max_per_session,
                UserAccounts* accounts);

  shm::ControlResponse RegisterLocal(const Session& s,
                                     const shm::ControlRequest& r);
  shm::ControlResponse DeregisterLocal(const Session& s,
                                       const shm::ControlRequest& r);
  // `scope`: the end of the connection named by r.connection, or nullopt
  // when that slot holds no established (or pending) connection.
  shm::ControlResponse RegisterRdma(const Session& s,
                                    std::optional<uint32_t> scope,
                                    const shm::ControlRequest& r);
  // The descriptor must name the registration in every field.
  shm::ControlResponse DeregisterRdma(const Session& s,
                                      std::optional<uint32_t> scope,
                                      const shm::ControlRequest& r);

  // Everything a session registered, or registered for one connection end,
  // becomes unreachable at once.
  void DropOwner(uint32_t session_id) { cache_.DropOwner(session_id); }
  void DropScope(uint32_t scope) { cache_.DropConnection(scope); }

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

  mr::RegistrationTable* table_;
  RegistrationCache cache_;
  uint32_t max_per_session_;
  UserAccounts* accounts_;
};

}  // namespace rdmaplane::control

#endif  // RDMAPLANE_CONTROL_MEMORY_SERVICE_H_
