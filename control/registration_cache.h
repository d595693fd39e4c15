// The daemon's registration cache: every registration a client holds, with
// reference counts so that registering the same buffer again (the same
// addresses, access and scope, mapped from the same memory) returns the
// same key, and only the last deregistration releases it. Publishes entries
// in the lock-free mr::RegistrationTable that engines read.
//
// Thread-compatible: owned by the control thread.
#ifndef RDMAPLANE_CONTROL_REGISTRATION_CACHE_H_
#define RDMAPLANE_CONTROL_REGISTRATION_CACHE_H_

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <tuple>

#include "control/user_accounts.h"
#include "dataplane/mr/registration_table.h"

namespace rdmaplane::control {

class RegistrationCache {
 public:
  explicit RegistrationCache(mr::RegistrationTable* table) : table_(table) {}

  // Registers, or adds a reference to an identical registration. Returns
  // the key, or nullopt when the table is full or the owner already holds
  // `owner_limit` distinct registrations.
  std::optional<uint32_t> Register(const mr::Registration& r,
                                   uint32_t owner_limit = UINT32_MAX);

  // True when Register(r) would add a reference to a live registration
  // rather than make a new one.
  bool Holds(const mr::Registration& r) const;
  // Keeps `charge` for as long as the registration `key` lives (its user's
  // allowance of registrations, UserAccounts).
  void AttachCharge(uint32_t key, UserAccounts::Charge charge);

  enum class Release { kOk, kUnknown, kInUse };
  // Drops one reference that `owner` holds on `key` (scoped to
  // `connection`, or mr::kAnyConnection for local registrations).
  Release Deregister(uint32_t owner, uint32_t connection, uint32_t key);

  // Removes every registration of `owner` / of `connection`, whatever their
  // reference counts (the session or connection is gone). Returns how many.
  uint32_t DropOwner(uint32_t owner);
  uint32_t DropConnection(uint32_t connection);

  const mr::Registration* Find(uint32_t key) const;
  uint32_t references(uint32_t key) const;
  size_t size() const { return by_key_.size(); }
  // Calls fn(key, registration, references) for every registration.
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    for (const auto& [key, e] : by_key_) fn(key, e.reg, e.refs);
  }
  size_t CountOwner(uint32_t owner) const;

 private:
  // The same client addresses mapped from other memory (the client handed
  // over a newer arena there) are another registration.
  using Identity = std::tuple<uint32_t, uint32_t, uint64_t, uint64_t,
                              uint8_t, const uint8_t*>;
  struct Entry {
    mr::Registration reg;
    uint32_t refs = 0;
    UserAccounts::Charge charge;
  };
  static Identity IdentityOf(const mr::Registration& r) {
    return {r.owner, r.connection, r.address, r.length, r.access, r.host};
  }
  template <typename Pred>
  uint32_t DropIf(Pred pred);
  void Forget(uint32_t owner);  // one distinct registration of owner gone

  mr::RegistrationTable* table_;
  std::map<uint32_t, Entry> by_key_;
  std::map<Identity, uint32_t> by_identity_;
  std::map<uint32_t, uint32_t> per_owner_;  // distinct registrations
};

}  // namespace rdmaplane::control

#endif  // RDMAPLANE_CONTROL_REGISTRATION_CACHE_H_
