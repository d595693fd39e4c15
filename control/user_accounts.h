// What each user (uid) may hold in the daemon at once: sessions, arenas and
// the bytes in them, distinct registrations, and connection ends. Every
// part that gives a client one of these takes a Charge first and keeps it
// as long as the client holds the thing; the Charge gives it back when it
// goes (RAII), so no path can forget to.
//
// A limit of 0 means unlimited. Root and the daemon's own uid are limited
// like everyone else: the limits protect the daemon, not the users.
//
// Thread-compatible: the control thread only.
#ifndef RDMAPLANE_CONTROL_USER_ACCOUNTS_H_
#define RDMAPLANE_CONTROL_USER_ACCOUNTS_H_

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace rdmaplane::control {

enum class Resource : uint8_t {
  kSessions,
  kArenas,
  kArenaBytes,
  kRegistrations,
  kConnections,
};
inline constexpr size_t kResourceCount = 5;

// The flag that sets the limit, e.g. "--max_sessions_per_user".
const char* LimitFlag(Resource resource);

struct UserLimits {
  uint64_t sessions = 256;
  uint64_t arenas = 4096;
  uint64_t arena_bytes = 0;  // 0: unlimited (rdmaplaned: physical memory)
  uint64_t registrations = 16384;
  uint64_t connections = 256;

  uint64_t of(Resource r) const;
};

class UserAccounts {
 public:
  // What one user holds of one resource, given back on destruction.
  class Charge {
   public:
    Charge() = default;
    Charge(Charge&& other) noexcept { *this = std::move(other); }
    Charge& operator=(Charge&& other) noexcept;
    Charge(const Charge&) = delete;
    Charge& operator=(const Charge&) = delete;
    ~Charge() { Release(); }
    void Release();
    uint64_t amount() const { return amount_; }

   private:
    friend class UserAccounts;
    UserAccounts* accounts_ = nullptr;
    uid_t uid_ = 0;
    Resource resource_ = Resource::kSessions;
    uint64_t amount_ = 0;
  };

  explicit UserAccounts(const UserLimits& limits) : limits_(limits) {}
  UserAccounts(const UserAccounts&) = delete;
  UserAccounts& operator=(const UserAccounts&) = delete;

  // Charges `amount` of `resource` to `uid`, or fails with
  // ResourceExhausted and a message naming the limit and its flag.
  absl::StatusOr<Charge> Take(uid_t uid, Resource resource,
                              uint64_t amount = 1);
  uint64_t Used(uid_t uid, Resource resource) const;
  const UserLimits& limits() const { return limits_; }

 private:
  void Give(uid_t uid, Resource resource, uint64_t amount);

  UserLimits limits_;
  std::map<uid_t, std::array<uint64_t, kResourceCount>> used_;
};

}  // namespace rdmaplane::control

#endif  // RDMAPLANE_CONTROL_USER_ACCOUNTS_H_
