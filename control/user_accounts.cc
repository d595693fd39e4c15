#include "control/user_accounts.h"

#include "absl/strings/str_cat.h"

namespace rdmaplane::control {
namespace {

const char* What(Resource r) {
  switch (r) {
    case Resource::kSessions: return "sessions";
    case Resource::kArenas: return "arenas";
    case Resource::kArenaBytes: return "arena bytes";
    case Resource::kRegistrations: return "registrations";
    case Resource::kConnections: return "connections";
  }
  return "resources";
}

}  // namespace

const char* LimitFlag(Resource r) {
  switch (r) {
    case Resource::kSessions: return "--max_sessions_per_user";
    case Resource::kArenas: return "--max_arenas_per_user";
    case Resource::kArenaBytes: return "--max_arena_bytes_per_user";
    case Resource::kRegistrations: return "--max_registrations_per_user";
    case Resource::kConnections: return "--max_connections_per_user";
  }
  return "";
}

uint64_t UserLimits::of(Resource r) const {
  switch (r) {
    case Resource::kSessions: return sessions;
    case Resource::kArenas: return arenas;
    case Resource::kArenaBytes: return arena_bytes;
    case Resource::kRegistrations: return registrations;
    case Resource::kConnections: return connections;
  }
  return 0;
}

UserAccounts::Charge& UserAccounts::Charge::operator=(Charge&& other) noexcept {
  if (this != &other) {
    Release();
    accounts_ = other.accounts_;
    uid_ = other.uid_;
    resource_ = other.resource_;
    amount_ = other.amount_;
    other.accounts_ = nullptr;
    other.amount_ = 0;
  }
  return *this;
}

void UserAccounts::Charge::Release() {
  if (accounts_ != nullptr) accounts_->Give(uid_, resource_, amount_);
  accounts_ = nullptr;
  amount_ = 0;
}

absl::StatusOr<UserAccounts::Charge> UserAccounts::Take(uid_t uid,
                                                        Resource resource,
                                                        uint64_t amount) {
  const uint64_t limit = limits_.of(resource);
  uint64_t& used = used_[uid][static_cast<size_t>(resource)];
  if (limit != 0 && (amount > limit || used > limit - amount)) {
    // The flag first: answers to clients hold 63 characters.
    return absl::ResourceExhaustedError(
        absl::StrCat(LimitFlag(resource), " reached: uid ", uid, " holds ",
                     used, " ", What(resource)));
  }
  used += amount;
  Charge c;
  c.accounts_ = this;
  c.uid_ = uid;
  c.resource_ = resource;
  c.amount_ = amount;
  return c;
}

uint64_t UserAccounts::Used(uid_t uid, Resource resource) const {
  auto it = used_.find(uid);
  return it == used_.end() ? 0 : it->second[static_cast<size_t>(resource)];
}

void UserAccounts::Give(uid_t uid, Resource resource, uint64_t amount) {
  auto it = used_.find(uid);
  if (it == used_.end()) return;
  it->second[static_cast<size_t>(resource)] -= amount;
  for (uint64_t v : it->second) {
    if (v != 0) return;
  }
  used_.erase(it);
}

}  // namespace rdmaplane::control
