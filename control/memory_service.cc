#include "control/memory_service.h"

#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "control/log.h"
#include "control/reply.h"

namespace rdmaplane::control {
namespace {

using shm::ControlRequest;
using shm::ControlResponse;

// The answer to a deregistration (the seeds give WSAEINVAL for both
// failures).
ControlResponse ReleaseReply(RegistrationCache::Release result,
                             const char* unknown) {
  switch (result) {
    case RegistrationCache::Release::kOk:
      return Reply(shm::kStatusOk);
    case RegistrationCache::Release::kInUse:
      return Reply(shm::kStatusInvalid, "in use by an in-flight transfer");
    case RegistrationCache::Release::kUnknown:
      break;
  }
  return Reply(shm::kStatusInvalid, unknown);
}

// The access flags an RDMA registration may carry: the seed's MEM_READ and
// MEM_WRITE, and remote atomics (verbs).
constexpr uint32_t kRdmaAccessFlags =
    shm::kAccessRead | shm::kAccessWrite | shm::kAccessAtomic;

}  // namespace

uint8_t RemoteAccessBits(uint32_t flags) {
  return ((flags & shm::kAccessRead) ? mr::kAccessRemoteRead : 0) |
         ((flags & shm::kAccessWrite) ? mr::kAccessRemoteWrite : 0) |
         ((flags & shm::kAccessAtomic) ? mr::kAccessRemoteAtomic : 0);
}

MemoryService::MemoryService(mr::RegistrationTable* table,
                             uint32_t max_per_session, UserAccounts* accounts,
                             ArenaMemory* arena_memory)
    : table_(table),
      cache_(table),
      windows_(table, max_per_session, accounts),
      max_per_session_(max_per_session),
      accounts_(accounts),
      arena_memory_(arena_memory) {}

uint8_t* MemoryService::Resolve(Session& s, uint64_t address, uint64_t length,
                                rc::MemoryOwner** owner,
                                ControlResponse* refusal) {
  if (uint8_t* host = s.Translate(address, length, owner); host != nullptr) {
    return host;
  }
  if (s.PiecesOf(address, length).size() < 2 || arena_memory_ == nullptr) {
    *refusal =
        Reply(shm::kStatusFault, "buffer is not inside the caller's arenas");
    return nullptr;
  }
  if (s.views.size() >= Session::kMaxViews) ReleaseUnusedViews(s);
  if (absl::Status st = s.MapView(address, length, arena_memory_); !st.ok()) {
    RDP_LOG_EVERY(kWarning, 10, "registration of pid %d refused: %s",
                  static_cast<int>(s.pid), std::string(st.message()).c_str());
    *refusal = Reply(absl::IsResourceExhausted(st) ? shm::kStatusNoBuffers
                                                   : shm::kStatusFault,
                     std::string(st.message()));
    return nullptr;
  }
  return s.Translate(address, length, owner);
}

void MemoryService::ReleaseUnusedViews(Session& s) {
  // A removed registration's memory may still be read by an engine until
  // the table reclaims it (registration_table.h).
  table_->Reclaim();
  if (table_->pending_reclaim() != 0) return;
  std::set<const rc::MemoryOwner*> used;
  cache_.ForEach([&](uint32_t, const mr::Registration& r, uint32_t) {
    if (r.owner == s.id) used.insert(r.memory_owner);
  });
  // A window's region keeps it (its registration stays while the window is
  // bound), but a window being unbound may still be written through.
  windows_.ForEachMemoryOwner(
      s.id, [&](const rc::MemoryOwner* owner) { used.insert(owner); });
  std::erase_if(s.views, [&](ArenaView& v) {
    if (used.count(v.owner.get()) != 0) return false;
    arena_memory_->Release(v.host, v.bytes, -1, std::move(v.owner));
    return true;
  });
}

ControlResponse MemoryService::Register(const Session& s,
                                        const mr::Registration& reg,
                                        uint32_t* key) {
  // The seeds' WSAENOBUFS for every shortage, with the limit named.
  UserAccounts::Charge charge;
  if (!cache_.Holds(reg)) {
    if (cache_.CountOwner(s.id) >= max_per_session_) {
      return Reply(shm::kStatusNoBuffers,
                   absl::StrCat("--max_registrations_per_session reached: ",
                                max_per_session_, " registrations"));
    }
    absl::StatusOr<UserAccounts::Charge> c =
        accounts_->Take(s.uid, Resource::kRegistrations);
    if (!c.ok()) {
      const std::string why(c.status().message());
      RDP_LOG_EVERY(kWarning, 10, "registration refused: %s", why.c_str());
      return Reply(shm::kStatusNoBuffers, why);
    }
    charge = std::move(*c);
  }
  const std::optional<uint32_t> k = cache_.Register(reg, max_per_session_);
  if (!k) {
    RDP_LOG_EVERY(kWarning, 10,
                  "registration refused: the table is full "
                  "(--max_registrations)");
    return Reply(shm::kStatusNoBuffers,
                 "the registration table is full (--max_registrations)");
  }
  if (charge.amount() != 0) cache_.AttachCharge(*k, std::move(charge));
  *key = *k;
  return Reply(shm::kStatusOk);
}

ControlResponse MemoryService::RegisterLocal(Session& s,
                                             const ControlRequest& r) {
  if (r.flags == 0 || (r.flags & ~shm::kAccessReadWrite) != 0) {
    return Reply(shm::kStatusInvalid, "flags must be read, write or both");
  }
  // A verbs MR's lkey belongs to its protection domain: only queue pairs
  // of that domain may name it.
  uint32_t scope = mr::kAnyConnection;
  if (r.connection == shm::kPdScopeSlot) {
    const std::optional<uint32_t> pd = PdScope(s, r.key);
    if (!pd) return Reply(shm::kStatusInvalid, "no such protection domain");
    scope = *pd;
  }
  rc::MemoryOwner* owner = nullptr;
  ControlResponse refusal;
  uint8_t* host = Resolve(s, r.address, r.length, &owner, &refusal);
  if (host == nullptr) return refusal;
  mr::Registration reg;
  reg.memory_owner = owner;
  reg.owner = s.id;
  reg.connection = scope;
  reg.address = r.address;
  reg.length = r.length;
  reg.host = host;
  // MEM_READ: the daemon may read it (a write's source); MEM_WRITE: it may
  // write it (a read's target).
  reg.access = ((r.flags & shm::kAccessRead) ? mr::kAccessLocal : 0) |
               ((r.flags & shm::kAccessWrite) ? mr::kAccessLocalWrite : 0);
  uint32_t key = 0;
  ControlResponse resp = Register(s, reg, &key);
  resp.key = key;
  return resp;
}

ControlResponse MemoryService::DeregisterLocal(const Session& s,
                                               const ControlRequest& r) {
  // Memory a bound window points into stays (ibv_dereg_mr: EBUSY while a
  // memory window is bound to the region; a region registered twice over
  // the same bytes shares its local key, and both wait).
  const mr::Registration* reg = cache_.Find(r.key);
  if (reg != nullptr && reg->owner == s.id && windows_.Holds(s.id, r.key)) {
    return Reply(shm::kStatusInvalid, "a memory window is bound to it");
  }
  // A local key: the session's, or one of its protection domains' (never
  // a key peers reach).
  const bool local = reg != nullptr && mr::IsLocalRegistration(*reg);
  return ReleaseReply(
      cache_.Deregister(s.id, local ? reg->connection : mr::kAnyConnection,
                        r.key),
      "not a registration of this client");
}

ControlResponse MemoryService::RegisterRdma(Session& s,
                                            std::optional<uint32_t> scope,
                                            const ControlRequest& r) {
  if (r.flags == 0 || (r.flags & ~kRdmaAccessFlags) != 0) {
    return Reply(shm::kStatusInvalid,
                 "flags must mix MEM_READ, MEM_WRITE and atomic access");
  }
  if (!scope) {
    return Reply(shm::kStatusNotConnected, "connection is not established");
  }
  rc::MemoryOwner* owner = nullptr;
  ControlResponse refusal;
  // descriptor_length 0 in a refusal: the caller's length stays as it was.
  uint8_t* host = Resolve(s, r.address, r.length, &owner, &refusal);
  if (host == nullptr) return refusal;
  if (r.descriptor_length < sizeof(shm::RdmaDescriptor)) {
    ControlResponse resp =
        Reply(shm::kStatusFault, "descriptor buffer too small");
    resp.descriptor_length = sizeof(shm::RdmaDescriptor);
    return resp;
  }
  mr::Registration reg;
  reg.owner = s.id;
  reg.connection = *scope;
  reg.address = r.address;
  reg.length = r.length;
  reg.host = host;
  reg.memory_owner = owner;
  reg.access = RemoteAccessBits(r.flags);
  uint32_t key = 0;
  if (ControlResponse refused = Register(s, reg, &key);
      refused.status != shm::kStatusOk) {
    return refused;
  }
  shm::RdmaDescriptor d{};
  d.magic = shm::kDescriptorMagic;
  d.rkey = key;
  d.address = r.address;
  d.length = r.length;
  d.access = r.flags;
  ControlResponse resp = Reply(shm::kStatusOk);
  resp.key = key;
  resp.descriptor_length = sizeof(d);
  std::memcpy(resp.descriptor, &d, sizeof(d));
  return resp;
}

ControlResponse MemoryService::DeregisterRdma(const Session& s,
                                              std::optional<uint32_t> scope,
                                              const ControlRequest& r) {
  shm::RdmaDescriptor d{};
  if (r.descriptor_length < sizeof(d) ||
      r.descriptor_length > sizeof(r.descriptor)) {
    return Reply(shm::kStatusInvalid, "not a descriptor");
  }
  std::memcpy(&d, r.descriptor, sizeof(d));
  if (d.magic != shm::kDescriptorMagic) {
    return Reply(shm::kStatusInvalid, "not a descriptor");
  }
  if (!scope) {
    return Reply(shm::kStatusInvalid, "not registered on this connection");
  }
  // A copy whose address, length or access was changed names nothing, even
  // with the right key.
  const mr::Registration* reg = cache_.Find(d.rkey);
  if (reg == nullptr || reg->owner != s.id || reg->connection != *scope ||
      d.address != reg->address || d.length != reg->length ||
      RemoteAccessBits(d.access) != reg->access ||
      (d.access & ~kRdmaAccessFlags) != 0 || d.reserved != 0) {
    return Reply(shm::kStatusInvalid, "not a registered RDMA buffer");
  }
  if (IsPdScope(*scope) && windows_.HoldsRegion(s.id, reg->address,
                                                 reg->length)) {
    return Reply(shm::kStatusInvalid, "a memory window is bound to it");
  }
  return ReleaseReply(cache_.Deregister(s.id, *scope, d.rkey),
                      "not a registered RDMA buffer");
}

ControlResponse MemoryService::AllocPd(const Session& s) {
  // A session holds at most as many domains as registrations.
  uint32_t held = 0;
  for (const auto& [pd, owner] : pds_) held += owner == s.id ? 1 : 0;
  if (held >= max_per_session_) {
    return Reply(shm::kStatusLimit,
                 absl::StrCat("--max_registrations_per_session reached: ",
                              max_per_session_, " protection domains"));
  }
  uint32_t pd = 0;
  do {  // the next free domain number (wraps after 2^31 - 1)
    pd = kPdScopeBit | next_pd_;
    next_pd_ = next_pd_ >= 0x7FFFFFFEu ? 1 : next_pd_ + 1;
  } while (pds_.count(pd) != 0);
  pds_[pd] = s.id;
  ControlResponse resp = Reply(shm::kStatusOk);
  resp.key = pd;
  return resp;
}

ControlResponse MemoryService::DeallocPd(const Session& s,
                                         const ControlRequest& r) {
  if (!PdScope(s, r.key)) {
    return Reply(shm::kStatusInvalid, "not a protection domain of yours");
  }
  pds_.erase(r.key);
  DropScope(r.key);
  return Reply(shm::kStatusOk);
}

ControlResponse MemoryService::AllocMw(const Session& s,
                                       const ControlRequest& r) {
  const std::optional<uint32_t> pd = PdScope(s, r.key);
  if (!pd) return Reply(shm::kStatusInvalid, "not a protection domain");
  return windows_.Alloc(s.id, s.uid, *pd, r.flags);
}

ControlResponse MemoryService::DeallocMw(const Session& s,
                                         const ControlRequest& r) {
  return windows_.Dealloc(s.id, r.key);
}

std::optional<uint32_t> MemoryService::PdScope(const Session& s,
                                               uint32_t pd) const {
  auto it = pds_.find(pd);
  if (it == pds_.end() || it->second != s.id) return std::nullopt;
  return pd;
}

void MemoryService::DropOwner(uint32_t session_id) {
  windows_.DropOwner(session_id);
  cache_.DropOwner(session_id);
  std::erase_if(pds_, [&](const auto& p) { return p.second == session_id; });
}

void MemoryService::AppendStatus(DaemonStatus* st) const {
  cache_.ForEach([&](uint32_t key, const mr::Registration& r, uint32_t refs) {
    RegistrationStatus rs;
    rs.key = key;
    rs.session_id = r.owner;
    // The connection id `connections` shows (a scope is the id and a side).
    rs.connection = r.connection == mr::kAnyConnection
                        ? 0
                        : ConnectionOfScope(r.connection);
    rs.address = r.address;
    rs.length = r.length;
    rs.access = ((r.access & mr::kAccessRemoteRead) ? shm::kAccessRead : 0) |
                ((r.access & mr::kAccessRemoteWrite) ? shm::kAccessWrite : 0) |
                ((r.access & mr::kAccessRemoteAtomic) ? shm::kAccessAtomic : 0);
    rs.refs = refs;
    st->registrations.push_back(rs);
  });
}

}  // namespace rdmaplane::control
