#include "control/registration_cache.h"

#include <unistd.h>

#include <vector>

namespace rdmaplane::control {

std::optional<uint32_t> RegistrationCache::Register(const mr::Registration& r,
                                                    uint32_t owner_limit) {
  auto it = by_identity_.find(IdentityOf(r));
  if (it != by_identity_.end()) {
    const uint32_t old = it->second;
    if (table_->Lookup(old) != nullptr) {
      ++by_key_[old].refs;
      return old;
    }
    // Invalidated by an engine (read with local invalidate): the old key is
    // dead, so this registration starts afresh under a new one.
    if (table_->Remove(old) != mr::RegistrationTable::RemoveResult::kInUse) {
      by_identity_.erase(it);
      by_key_.erase(old);
      Forget(r.owner);
    } else {
      by_identity_.erase(it);  // keep the entry until its pins drain
    }
  }
  if (per_owner_[r.owner] >= owner_limit) return std::nullopt;
  std::optional<uint32_t> key = table_->Insert(r);
  if (!key) {
    table_->Reclaim();
    key = table_->Insert(r);
  }
  if (!key) return std::nullopt;
  by_key_[*key] = Entry{r, 1, {}};
  by_identity_[IdentityOf(r)] = *key;
  ++per_owner_[r.owner];
  return key;
}

bool RegistrationCache::Holds(const mr::Registration& r) const {
  auto it = by_identity_.find(IdentityOf(r));
  return it != by_identity_.end() && table_->Lookup(it->second) != nullptr;
}

void RegistrationCache::AttachCharge(uint32_t key,
                                     UserAccounts::Charge charge) {
  auto it = by_key_.find(key);
  if (it != by_key_.end()) it->second.charge = std::move(charge);
}

RegistrationCache::Release RegistrationCache::Deregister(uint32_t owner,
                                                         uint32_t connection,
                                                         uint32_t key) {
  auto it = by_key_.find(key);
  if (it == by_key_.end() || it->second.reg.owner != owner ||
      it->second.reg.connection != connection) {
    return Release::kUnknown;
  }
  if (it->second.refs > 1) {
    // Not the last reference: nothing is released, so nothing is in use.
    --it->second.refs;
    return Release::kOk;
  }
  switch (table_->Remove(key)) {
    case mr::RegistrationTable::RemoveResult::kInUse:
      return Release::kInUse;
    case mr::RegistrationTable::RemoveResult::kUnknown:
    case mr::RegistrationTable::RemoveResult::kOk:
      break;
  }
  // After an invalidation the identity may already name a newer key.
  if (auto id = by_identity_.find(IdentityOf(it->second.reg));
      id != by_identity_.end() && id->second == key) {
    by_identity_.erase(id);
  }
  by_key_.erase(it);
  Forget(owner);
  return Release::kOk;
}

template <typename Pred>
uint32_t RegistrationCache::DropIf(Pred pred) {
  std::vector<uint32_t> keys;
  for (const auto& [key, entry] : by_key_) {
    if (pred(entry.reg)) keys.push_back(key);
  }
  for (uint32_t key : keys) {
    // Engines release their pins when connections close, which happens
    // before this; wait briefly for one that is just finishing.
    for (int i = 0; i < 1000 && table_->Remove(key) ==
                                    mr::RegistrationTable::RemoveResult::kInUse;
         ++i) {
      usleep(100);
    }
    if (auto id = by_identity_.find(IdentityOf(by_key_[key].reg));
        id != by_identity_.end() && id->second == key) {
      by_identity_.erase(id);
    }
    Forget(by_key_[key].reg.owner);
    by_key_.erase(key);
  }
  return static_cast<uint32_t>(keys.size());
}

uint32_t RegistrationCache::DropOwner(uint32_t owner) {
  return DropIf([owner](const mr::Registration& r) { return r.owner == owner; });
}

uint32_t RegistrationCache::DropConnection(uint32_t connection) {
  return DropIf([connection](const mr::Registration& r) {
    return r.connection == connection;
  });
}

void RegistrationCache::Forget(uint32_t owner) {
  auto it = per_owner_.find(owner);
  if (it != per_owner_.end() && --it->second == 0) per_owner_.erase(it);
}

const mr::Registration* RegistrationCache::Find(uint32_t key) const {
  auto it = by_key_.find(key);
  return it == by_key_.end() ? nullptr : &it->second.reg;
}

uint32_t RegistrationCache::references(uint32_t key) const {
  auto it = by_key_.find(key);
  return it == by_key_.end() ? 0 : it->second.refs;
}

size_t RegistrationCache::CountOwner(uint32_t owner) const {
  auto it = per_owner_.find(owner);
  return it == per_owner_.end() ? 0 : it->second;
}

}  // namespace rdmaplane::control
