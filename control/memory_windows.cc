#include "control/memory_windows.h"

#include <string>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "control/reply.h"

namespace rdmaplane::control {
namespace {

using shm::ControlResponse;

// Whether [address, address + length) lies inside `r`, overflow-safe.
bool Inside(const mr::Registration& r, uint64_t address, uint64_t length) {
  if (address < r.address) return false;
  const uint64_t offset = address - r.address;
  return offset <= r.length && length <= r.length - offset;
}

}  // namespace

ControlResponse MemoryWindows::Alloc(uint32_t session, uid_t uid,
                                     uint32_t pd_scope, uint32_t type) {
  if (type != 1 && type != 2) {
    return Reply(shm::kStatusInvalid, "memory windows are of type 1 or 2");
  }
  uint32_t held = 0;
  for (const auto& [index, w] : windows_) held += w.session == session;
  if (held >= max_per_session_) {
    return Reply(shm::kStatusLimit,
                 absl::StrCat("--max_registrations_per_session reached: ",
                              max_per_session_, " memory windows"));
  }
  UserAccounts::Charge charge;
  if (accounts_ != nullptr) {
    absl::StatusOr<UserAccounts::Charge> c =
        accounts_->Take(uid, Resource::kRegistrations);
    if (!c.ok()) {
      return Reply(shm::kStatusNoBuffers, std::string(c.status().message()));
    }
    charge = std::move(*c);
  }
  const std::optional<uint32_t> index = table_->Reserve();
  if (!index) {
    return Reply(shm::kStatusNoBuffers,
                 "the registration table is full (--max_registrations)");
  }
  Window w;
  w.charge = std::move(charge);
  w.session = session;
  w.pd_scope = pd_scope;
  w.kind = type == 1 ? mr::KeyKind::kWindowType1 : mr::KeyKind::kWindowType2;
  // A first key the peer cannot guess; the client picks the later ones.
  absl::BitGen bitgen;
  w.key = *index << 8 | absl::Uniform<uint32_t>(bitgen, 1, 256);
  const uint32_t key = w.key;
  windows_[*index] = std::move(w);
  ControlResponse resp = Reply(shm::kStatusOk);
  resp.key = key;
  return resp;
}

ControlResponse MemoryWindows::Dealloc(uint32_t session, uint32_t key) {
  Window* w = Find(session, key);
  if (w == nullptr) {
    return Reply(shm::kStatusInvalid, "not a memory window of yours");
  }
  w->dead = true;
  if (Unbind(*w)) {
    table_->Unreserve(IndexOf(key));
    windows_.erase(IndexOf(key));
  } else {
    ++untidy_;  // Tidy frees it once the transfer lets go
  }
  return Reply(shm::kStatusOk);
}

MemoryWindows::Window* MemoryWindows::Find(uint32_t session, uint32_t key) {
  auto it = windows_.find(IndexOf(key));
  if (it == windows_.end() || it->second.session != session ||
      it->second.dead) {
    return nullptr;
  }
  return &it->second;
}

bool MemoryWindows::Unbind(Window& w) {
  if (!w.bound && !w.removing) return true;
  // Stops resolving now, even while a transfer holds it.
  table_->Invalidate(w.key);
  w.bound = false;
  if (table_->Unpublish(w.key) == mr::RegistrationTable::RemoveResult::kInUse) {
    if (!w.removing) ++untidy_;
    w.removing = true;
    return false;
  }
  w.removing = false;
  return true;
}

void MemoryWindows::NoticeInvalidation(Window& w) {
  if (w.bound && table_->Lookup(w.key) == nullptr) Unbind(w);
}

std::optional<MemoryWindows::Outcome> MemoryWindows::Execute(
    uint32_t session, uint32_t pd_scope, uint32_t queue_pair,
    const shm::SendEntry& e) {
  switch (e.op) {
    case shm::kSendBindMw: {
      Window* w = Find(session, e.rkey);
      if (w == nullptr) return Outcome{shm::kStatusInvalid, shm::kDetailMwBind};
      bool again = false;
      const Outcome o = Bind(*w, pd_scope, queue_pair, e, &again);
      if (again) return std::nullopt;
      return o;
    }
    case shm::kSendLocalInvalidate: {
      Window* w = Find(session, e.rkey);
      // Only a type 2 window of the queue pair's domain can be invalidated
      // (IBA o10-37.2.26); the client's own regions cannot (rxe neither).
      if (w == nullptr || w->kind != mr::KeyKind::kWindowType2 ||
          w->pd_scope != pd_scope) {
        return Outcome{shm::kStatusInvalid, shm::kDetailLocalOperation};
      }
      NoticeInvalidation(*w);
      if (!w->bound) return Outcome{};  // free already: nothing to do
      if (w->key != e.rkey) {
        return Outcome{shm::kStatusInvalid, shm::kDetailLocalOperation};
      }
      Unbind(*w);  // in use: stopped resolving all the same; Tidy ends it
      return Outcome{};
    }
    default:
      return Outcome{shm::kStatusInvalid, shm::kDetailLocalOperation};
  }
}

MemoryWindows::Outcome MemoryWindows::Bind(Window& w, uint32_t pd_scope,
                                           uint32_t queue_pair,
                                           const shm::SendEntry& e,
                                           bool* again) {
  const Outcome refused{shm::kStatusInvalid, shm::kDetailMwBind};
  // The queue pair must be in the window's protection domain (C10-72).
  if (w.pd_scope != pd_scope || (e.swap_add & ~shm::kBindKnownBits) != 0 ||
      e.num_sge > 1) {
    return refused;
  }
  NoticeInvalidation(w);
  const bool unbind = e.num_sge == 0 || e.sge[0].length == 0;
  if (w.kind == mr::KeyKind::kWindowType2) {
    // Bound once until invalidated (o10-37.2.30), never to nothing
    // (o10-37.2.40).
    if (w.bound || unbind) return refused;
  } else if (w.bound && !Unbind(w)) {
    // A type 1 window is bound again over its binding; a transfer still
    // holds the old key, which no longer resolves.
    if (unbind) return Outcome{};
    *again = true;
    return {};
  }
  if (unbind) return Outcome{};  // type 1, unbound now
  if (w.removing && !Unbind(w)) {
    *again = true;
    return {};
  }
  const uint32_t index = IndexOf(w.key);
  if (!table_->Quiet(index)) {
    table_->Reclaim();
    if (!table_->Quiet(index)) {
      *again = true;  // readers may still hold its previous binding
      return {};
    }
  }
  // The memory region: the client's own, and containing the window.
  const shm::SgeEntry& s = e.sge[0];
  // A local registration only: its lifetime is what keeps the window's
  // memory (a remote one goes with its connection or domain unasked). A
  // verbs MR's lkey is its protection domain's, which must be the window's.
  const mr::Registration* region = table_->Lookup(s.lkey);
  if (region == nullptr || region->owner != w.session ||
      !mr::IsLocalRegistration(*region) ||
      (region->connection != mr::kAnyConnection &&
       region->connection != w.pd_scope) ||
      (e.swap_add & shm::kBindRegionAllowsBind) == 0 ||
      !Inside(*region, s.address, s.length)) {
    return refused;
  }
  uint8_t access = 0;
  if (e.swap_add & shm::kBindRemoteRead) access |= mr::kAccessRemoteRead;
  if (e.swap_add & shm::kBindRemoteWrite) access |= mr::kAccessRemoteWrite;
  if (e.swap_add & shm::kBindRemoteAtomic) access |= mr::kAccessRemoteAtomic;
  // Remote writes and atomics need a region the daemon may write (C10-74).
  if ((access & (mr::kAccessRemoteWrite | mr::kAccessRemoteAtomic)) != 0 &&
      (region->access & mr::kAccessLocalWrite) == 0) {
    return refused;
  }
  mr::Registration r;
  r.owner = w.session;
  r.connection = w.pd_scope;
  r.queue_pair =
      w.kind == mr::KeyKind::kWindowType2 ? queue_pair : mr::kAnyConnection;
  r.address = (e.swap_add & shm::kBindZeroBased) != 0 ? 0 : s.address;
  r.length = s.length;
  r.host = region->host + (s.address - region->address);
  r.memory_owner = region->memory_owner;
  r.access = access;
  r.kind = w.kind;
  const std::optional<uint32_t> key =
      table_->Publish(index, static_cast<uint8_t>(e.imm), r);
  if (!key) return refused;  // the key would be 0
  w.key = *key;
  w.bound = true;
  w.lkey = s.lkey;
  w.region_address = region->address;
  w.region_length = region->length;
  w.memory_owner = region->memory_owner;
  w.queue_pair = r.queue_pair;
  return Outcome{};
}

template <typename Pred>
bool MemoryWindows::AnyInUse(uint32_t session, Pred points_into) {
  for (auto& [index, w] : windows_) {
    if (w.session != session || !points_into(w)) continue;
    NoticeInvalidation(w);
    // Unbinding still counts: a transfer may be writing through it.
    if (w.bound || w.removing) return true;
  }
  return false;
}

bool MemoryWindows::Holds(uint32_t session, uint32_t lkey) {
  return AnyInUse(session, [lkey](const Window& w) { return w.lkey == lkey; });
}

bool MemoryWindows::HoldsRegion(uint32_t session, uint64_t address,
                                uint64_t length) {
  return AnyInUse(session, [address, length](const Window& w) {
    return w.region_address == address && w.region_length == length;
  });
}

void MemoryWindows::DropOwner(uint32_t session) {
  for (auto it = windows_.begin(); it != windows_.end();) {
    Window& w = it->second;
    if (w.session != session) {
      ++it;
      continue;
    }
    w.dead = true;
    if (Unbind(w)) {
      table_->Unreserve(it->first);
      it = windows_.erase(it);
    } else {
      ++untidy_;
      ++it;
    }
  }
}

void MemoryWindows::DropScope(uint32_t scope) {
  for (auto& [index, w] : windows_) {
    if (w.pd_scope == scope ||
        (w.kind == mr::KeyKind::kWindowType2 && w.queue_pair == scope)) {
      Unbind(w);
    }
  }
}

bool MemoryWindows::Tidy() {
  if (untidy_ == 0) return false;  // the common case: one load
  uint32_t untidy = 0;
  for (auto it = windows_.begin(); it != windows_.end();) {
    Window& w = it->second;
    if (w.removing && !Unbind(w)) {
      ++untidy;
      ++it;
      continue;
    }
    if (w.dead) {
      table_->Unreserve(it->first);
      it = windows_.erase(it);
      continue;
    }
    ++it;
  }
  untidy_ = untidy;
  return untidy_ != 0;
}

}  // namespace rdmaplane::control
