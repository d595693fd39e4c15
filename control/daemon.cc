#include "control/daemon.h"

#include <netinet/in.h>
#include <rte_errno.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <mutex>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "api/shm/doorbell.h"
#include "control/connection_manager.h"
#include "control/log.h"
#include "control/reply.h"
#include "control/telemetry.h"
#include "dataplane/port/dpdk_env.h"
#include "dataplane/port/eth_port.h"

namespace rdmaplane::control {

namespace {

constexpr char kDepthsTooLarge[] =
    "a queue holds at most 16384 send and 16384 receive requests";
static_assert(shm::kMaxSendRingEntries == 16384 &&
              shm::kMaxRecvRingEntries == 16384);

using shm::ControlRequest;
using shm::ControlResponse;

// Communication ids and first PSNs differ from one daemon run to the next,
// so that a restarted daemon's messages are not taken for stale ones.
uint64_t RunSeed() {
  return static_cast<uint64_t>(absl::GetCurrentTimeNanos()) ^
         (static_cast<uint64_t>(getpid()) << 32);
}

}  // namespace

Daemon::Daemon(const DaemonOptions& options)
    : options_(options),
      seed_(RunSeed()),
      accounts_(options.user_limits),
      table_(options.max_registrations, /*readers=*/EngineCount(options)),
      memory_(&table_, options.max_registrations_per_session, &accounts_,
              &arena_memory_) {
  if (options_.socket_path.empty()) {
    options_.socket_path = shm::DefaultSocketPath();
  }
  options_.engines = EngineCount(options_);
  const bool pinned = EnginesPinned();
  // Pinned engines run on EAL lcores when there is an EAL (a data port),
  // else on plain threads with that CPU affinity.
  const bool eal = !options_.port.device.empty();
  std::vector<int> wake_fds;
  std::vector<engine::Engine*> engines;
  for (uint32_t i = 0; i < options_.engines; ++i) {
    engine::EngineOptions eo;
    eo.mode = options_.poll_mode;
    eo.reader_index = i;
    eo.max_endpoints = 2 * options_.max_connections;
    eo.max_sleep_ns = options_.engine_max_sleep_ns;
    eo.budget = options_.burst;
    if (pinned) (eal ? eo.lcore : eo.cpu) = options_.engine_cpus[i];
    engines_.push_back(std::make_unique<engine::Engine>(&table_, eo));
    wake_fds.push_back(engines_.back()->wake_fd());
    engines.push_back(engines_.back().get());
  }
  for (auto& e : engines_) e->SetSiblings(wake_fds);
  ConnectionOptions co;
  co.max_connections = options_.max_connections;
  co.path_mtu = PathMtu();
  co.retransmit_timeout_ns = options_.retransmit_timeout_ns;
  co.remote_retransmit_timeout_ns = options_.remote_retransmit_timeout_ns;
  co.link_faults = options_.link_faults;
  connections_ = std::make_unique<ConnectionTable>(
      co, std::move(engines), &memory_, &accounts_,
      0x9E3779B97F4A7C15ull ^ seed_);
  SessionPolicy policy;
  policy.allowed_uids = options_.allowed_uids;
  policy.allowed_gids = options_.allowed_gids;
  policy.admin_gids = options_.admin_gids;
  policy.max_arenas_per_session = options_.max_arenas_per_session;
  SessionHooks hooks;
  hooks.closing = [this](Session* s) { SessionClosing(s); };
  hooks.status = [this] { return BuildStatus(); };
  hooks.ready = [this](Session* s) {
    s->header->port_state.store(port_state_, std::memory_order_release);
  };
  sessions_ =
      std::make_unique<SessionServer>(policy, &reactor_, &arena_memory_,
                                      &accounts_, &counters_, std::move(hooks));
}

Daemon::~Daemon() {
  Stop();
  // Not started, or the start failed: the socket may still be bound.
  sessions_->Shutdown();
}

absl::Status Daemon::Start() {
  if (!reactor_.ok()) {
    return absl::ResourceExhaustedError("cannot create the control epoll");
  }
  if (absl::Status st = sessions_->Listen(options_.socket_path); !st.ok()) {
    return st;
  }
  if (absl::Status st = StartPort(); !st.ok()) {
    sessions_->Shutdown();
    return st;
  }
  if (port_ == nullptr) StartSelfLink();
  arena_memory_.AttachPort(port_.get());
  port_state_ = port_ == nullptr || port_->LinkUp() ? 1 : 0;
  {
    absl::Status st = reactor_.Add(port_engine().control_notify_fd(),
                                   [this] { DrainEngineFrames(); });
    if (!st.ok()) {
      StopPort();
      sessions_->Shutdown();
      return st;
    }
  }
  started_ = absl::Now();
  port_state_since_ = started_;
  // Status() (and DPDK telemetry, which exists only with the EAL) reads
  // what the control loop publishes every 200 ms.
  PublishStatus(/*force=*/true);
  if (dpdk_) {
    RegisterTelemetry([this] { return Status(); });
    telemetry_ = true;
  }
  for (auto& e : engines_) e->Start();
  control_thread_ = std::thread([this] { ControlLoop(); });
  // The socket appears at its path only once the daemon serves (the data
  // port up, the engines and the control thread running).
  if (absl::Status st = sessions_->Publish(); !st.ok()) {
    Stop();
    return st;
  }
  return absl::OkStatus();
}

void Daemon::Stop() {
  if (!control_thread_.joinable()) return;
  stop_.store(true, std::memory_order_release);
  reactor_.Wake();
  control_thread_.join();
  if (telemetry_) {
    UnregisterTelemetrySource();
    telemetry_ = false;
  }
  // Farewells to peer daemons leave before the engine stops.
  for (int i = 0; i < 100 && port_engine().control_backlog() > 0; ++i) {
    usleep(1000);
  }
  for (auto& e : engines_) e->Stop();
  // Closing the port frees the frames it still held; then the arenas they
  // pointed into can go.
  arena_memory_.AttachPort(nullptr);
  StopPort();
  arena_memory_.Reap();
}

DaemonStatus Daemon::Status() const {
  std::lock_guard<std::mutex> lock(status_mu_);
  return published_status_;
}

void Daemon::ControlLoop() {
  // Control requests come in bursts (register, then deregister, ...): after
  // one, keep polling for a short while instead of paying a wake-up.
  constexpr absl::Duration kLinger = absl::Microseconds(200);
  absl::Time active_until = absl::InfinitePast();
  bool windows_waiting = false;
  while (!stop_.load(std::memory_order_acquire)) {
    const bool linger = absl::Now() < active_until;
    // A memory window request waiting for the engines to move on (one
    // turn), or for a transfer to let go of a key, is retried soon.
    const int n = reactor_.RunOnce(linger ? 0 : windows_waiting ? 1 : 100);
    windows_waiting = RetryMemoryWindows();
    if (ServeControlRings() || n > 0) active_until = absl::Now() + kLinger;
    if (cm_ != nullptr) cm_->Tick();
    if (ip_cm_ != nullptr) ip_cm_->Tick();
    ResolveAddressHandles();
    table_.Reclaim();
    arena_memory_.Reap();
    sessions_->DropStalledAdmin(absl::Now());
    sessions_->ReportLostFiles();
    PublishPortState();
    UpdateGauges();
    PublishStatus(/*force=*/false);
  }
  // Shutting down: every session goes, as if its client had exited, except
  // that clients see their connections aborted.
  sessions_->Shutdown();
  UpdateGauges();
  // Peer daemons are told (DREQ) and answer (DREP): wait a little for the
  // answers, repeating the DREQs as usual, so that a farewell is not lost
  // with a port that closes before the peer read it.
  const absl::Time farewell_end = absl::Now() + absl::Milliseconds(300);
  auto farewells = [&] {
    return (cm_ != nullptr ? cm_->farewells() : 0) +
           (ip_cm_ != nullptr ? ip_cm_->farewells() : 0);
  };
  while (cm_ != nullptr && farewells() > 0 && absl::Now() < farewell_end) {
    reactor_.RunOnce(10);
    cm_->Tick();
    ip_cm_->Tick();
  }
}

void Daemon::DrainEngineFrames() {
  uint64_t v;
  [[maybe_unused]] ssize_t r =
      read(port_engine().control_notify_fd(), &v, sizeof(v));
  engine::ControlFrame f;
  // Bounded: the engine may keep passing frames up.
  for (int i = 0; i < 256 && port_engine().TakeControlFrame(&f); ++i) {
    if (f.kind == engine::ControlFrame::kLocalOp) {
      engine::LocalOpRequest op;
      if (f.length != sizeof(op)) continue;
      std::memcpy(&op, f.bytes, sizeof(op));
      if (!HandleLocalOp(f.connection_id, op)) {
        pending_local_ops_.push_back({f.connection_id, op});
      }
      continue;
    }
    if (cm_ != nullptr) cm_->HandleControlFrame(f);
  }
}

bool Daemon::HandleLocalOp(uint32_t scope, const engine::LocalOpRequest& op) {
  Connection* c = connections_->Find(ConnectionOfScope(scope));
  if (c == nullptr || !c->running || c->endpoint[0] == nullptr ||
      c->side[0] == nullptr) {
    return true;  // the connection ended: its close ended the request
  }
  engine::Endpoint* e = c->endpoint[0].get();
  if (e->info().connection_id != scope || e->incarnation() != op.incarnation ||
      !e->ClaimLocalOp(op.seq)) {
    return true;  // another endpoint now, or this one closed first
  }
  std::optional<MemoryWindows::Outcome> outcome;
  if (c->is_queue_pair()) {
    outcome = memory_.windows().Execute(c->side[0]->id, c->queue_pair.pd_scope,
                                        scope, op.entry);
    if (!outcome) {
      e->ReleaseLocalOp();  // again later
      return false;
    }
  } else {
    // A connection of the native API has no memory windows.
    outcome = MemoryWindows::Outcome{shm::kStatusInvalid,
                                     shm::kDetailLocalOperation};
  }
  e->AnswerLocalOp(op.seq, outcome->status, outcome->detail);
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t w =
      write(engines_[c->engine]->wake_fd(), &one, sizeof(one));
  return true;
}

bool Daemon::RetryMemoryWindows() {
  std::erase_if(pending_local_ops_, [this](const PendingLocalOp& p) {
    return HandleLocalOp(p.scope, p.op);
  });
  const bool removing = memory_.windows().Tidy();
  return removing || !pending_local_ops_.empty();
}

void Daemon::PublishPortState() {
  // Asked of the device (a system call for some) at most every 10 ms.
  const uint64_t now = NowNs();
  if (now < next_port_look_ns_) return;
  next_port_look_ns_ = now + 10'000'000;
  // Without a data port the port is the self link, always up.
  const uint32_t up = port_ == nullptr || port_->LinkUp() ? 1 : 0;
  if ((port_state_ & 1) == up) return;
  port_state_ = ((port_state_ >> 1) + 1) << 1 | up;
  port_state_since_ = absl::Now();
  RDP_LOG(kInfo, "data port link %s", up != 0 ? "up" : "down");
  sessions_->ForEachReady([&](Session* s) {
    s->header->port_state.store(port_state_, std::memory_order_release);
  });
}

void Daemon::UpdateGauges() {
  counters_.SetGauges(sessions_->size(), static_cast<uint32_t>(memory_.size()),
                      connections_->size(), sessions_->arena_count());
}

void Daemon::SessionClosing(Session* s) {
  pending_address_handles_ -= s->pending_address_handles.size();
  s->pending_address_handles.clear();
  connections_->CloseSession(s, stop_.load(std::memory_order_acquire));
  if (ip_cm_ != nullptr) ip_cm_->DropSession(s);
  memory_.DropOwner(s->id);
}

bool Daemon::ServeControlRings() {
  std::vector<Session*> broken;
  std::vector<std::pair<Session*, ControlResponse>> answers;
  bool delivered = false;
  sessions_->ForEachReady([&](Session* s) {
    // Answers held for lack of room go first; while any is still held the
    // session's requests wait in their ring.
    delivered |= s->FlushHeldAnswers();
    delivered |= s->FlushHeldCmEvents();
    if (s->held_answers() > 0) return;
    uint32_t taken = 0;
    // Do not take a request we could not answer. (The client may still
    // take the room away before the answer: Session::Answer holds it then.)
    while (taken < 64 &&
           s->responses.Size() + taken < s->responses.capacity()) {
      ControlRequest req;
      const shm::PopResult pr = s->requests.TryPop(&req);
      if (pr == shm::PopResult::kEmpty) break;
      if (pr == shm::PopResult::kCorrupted) {
        broken.push_back(s);
        break;
      }
      ++taken;
      std::optional<ControlResponse> resp = Handle(s, req);
      if (!resp) continue;  // answered when a peer daemon answers
      resp->request_id = req.request_id;
      answers.push_back({s, *resp});
    }
  });
  for (Session* s : broken) {
    std::erase_if(answers, [s](const auto& a) { return a.first == s; });
    sessions_->Close(s);
  }
  if (answers.empty() && broken.empty()) return delivered;
  // Counters first, so that a client holding its answer sees them current.
  UpdateGauges();
  counters_.Count(&ControlCounters::control_requests, answers.size());
  for (const auto& [s, resp] : answers) s->Answer(resp);
  return true;
}

std::optional<ControlResponse> Daemon::Handle(Session* s,
                                              const ControlRequest& req) {
  switch (req.op) {
    case shm::kOpRegisterLocal:
      return memory_.RegisterLocal(*s, req);
    case shm::kOpDeregisterLocal:
      return memory_.DeregisterLocal(*s, req);
    case shm::kOpRegisterRdma:
      return memory_.RegisterRdma(
          *s,
          req.connection == shm::kPdScopeSlot
              ? memory_.PdScope(*s, req.key)
              : connections_->RegistrationScope(*s, req.connection),
          req);
    case shm::kOpDeregisterRdma:
      return memory_.DeregisterRdma(
          *s,
          req.connection == shm::kPdScopeSlot
              ? memory_.PdScope(*s, req.key)
              : connections_->DeregistrationScope(*s, req.connection),
          req);
    case shm::kOpAllocMw:
      return memory_.AllocMw(*s, req);
    case shm::kOpDeallocMw:
      return memory_.DeallocMw(*s, req);
    case shm::kOpAllocPd:
      return memory_.AllocPd(*s);
    case shm::kOpDeallocPd:
      return memory_.DeallocPd(*s, req);
    case shm::kOpCreateQp: {
      const std::optional<uint32_t> pd = memory_.PdScope(*s, req.key);
      if (!pd) return Reply(shm::kStatusInvalid, "not a protection domain");
      rc::lifecycle::QpType type;
      switch (req.flags) {
        case shm::kQpServiceRc:
          type = rc::lifecycle::QpType::kRc;
          break;
        case shm::kQpServiceUc:
          type = rc::lifecycle::QpType::kUc;
          break;
        case shm::kQpServiceUd:
          type = rc::lifecycle::QpType::kUd;
          break;
        default:
          return Reply(shm::kStatusInvalid,
                       "queue pairs are RC (2), UC (3) or UD (4)");
      }
      const std::optional<shm::SlotDepths> depths =
          shm::SlotDepths::Decode(req.length);
      if (!depths) return Reply(shm::kStatusInvalid, kDepthsTooLarge);
      return connections_->CreateQueuePair(s, *pd, type, *depths,
                                           req.connection);
    }
    case shm::kOpModifyQp:
      return ModifyQueuePair(s, req);
    case shm::kOpQueryDevice:
      return QueryDevice();
    case shm::kOpCreateSrq:
      if (!memory_.PdScope(*s, req.key)) {
        return Reply(shm::kStatusInvalid, "not a protection domain");
      }
      {
        // Only a receive depth.
        const std::optional<shm::SlotDepths> depths =
            shm::SlotDepths::Decode(req.length & ~uint64_t{0xFFFFFFFF});
        if (!depths || (req.length & 0xFFFFFFFF) != 0) {
          return Reply(shm::kStatusInvalid, kDepthsTooLarge);
        }
        return connections_->CreateSharedReceiveQueue(s, *depths);
      }
    case shm::kOpDestroySrq:
      return connections_->DestroySharedReceiveQueue(s, req.connection);
    case shm::kOpCreateAh:
      return CreateAddressHandle(s, req);
    case shm::kOpDestroyAh:
      return DestroyAddressHandle(s, req);
    case shm::kOpListen:
      return connections_->Listen(s, req);
    case shm::kOpUnlisten:
      return connections_->Unlisten(s, req);
    case shm::kOpConnect:
      if (req.address == 0) return connections_->Connect(s, req);
      if (std::memchr(req.service, '\0', sizeof(req.service)) == nullptr ||
          req.service[0] == '\0') {
        return Reply(shm::kStatusInvalid, "bad service name");
      }
      if (cm_ == nullptr) return Reply(shm::kStatusNetDown, NoDataPort());
      return cm_->Connect(s, req);
    case shm::kOpAccept:
      return connections_->Accept(s, req);
    case shm::kOpCmBind:
    case shm::kOpCmListen:
    case shm::kOpCmResolve:
    case shm::kOpCmConnect:
    case shm::kOpCmAccept:
    case shm::kOpCmReject:
    case shm::kOpCmDisconnect:
    case shm::kOpCmDestroy:
    case shm::kOpCmNotify:
      if (ip_cm_ == nullptr) return Reply(shm::kStatusNetDown, NoDataPort());
      return ip_cm_->Handle(s, req);
    case shm::kOpDisconnect:
      return connections_->Disconnect(s, req);
  }
  counters_.Count(&ControlCounters::bad_requests);
  return Reply(shm::kStatusInvalid, "unknown control operation");
}

std::optional<ControlResponse> Daemon::ModifyQueuePair(
    Session* s, const ControlRequest& req) {
  using rc::lifecycle::QpState;
  Connection* c = connections_->QueuePair(*s, req.connection);
  if (c == nullptr) return Reply(shm::kStatusInvalid, "not a queue pair");
  shm::QpPeer peer;
  std::memcpy(&peer, req.descriptor, sizeof(peer));
  QpState next;
  switch (req.flags) {
    case shm::kQpToInit:
      next = QpState::kInit;
      break;
    case shm::kQpToRtr:
      next = QpState::kRtr;
      break;
    case shm::kQpToRts:
      next = QpState::kRts;
      break;
    case shm::kQpToErr:
      next = QpState::kErr;
      break;
    case shm::kQpToReset:
      next = QpState::kReset;
      break;
    default:
      return Reply(shm::kStatusInvalid, "unknown queue pair transition");
  }
  const QpState current = c->queue_pair.life.state();
  // Whether the move exists from here (the front end checked the
  // application's attributes against the same table).
  const rc::lifecycle::QpAttrMask mask =
      rc::lifecycle::kQpAttrState |
      rc::lifecycle::RequiredQpAttrs(c->queue_pair.life.type(), current, next);
  if (!rc::lifecycle::CheckQpTransition(c->queue_pair.life.type(), current, next, mask)
           .ok ||
      c->cm.state == CmState::kQpResolving) {
    return Reply(
        shm::kStatusInvalid,
        absl::StrCat(
            "the queue pair is at ", rc::lifecycle::QpStateName(current),
            c->cm.state == CmState::kQpResolving ? " resolving its peer" : "",
            ": it cannot move to ", rc::lifecycle::QpStateName(next)));
  }
  switch (next) {
    case QpState::kRtr: {
      if (c->queue_pair.life.type() == rc::lifecycle::QpType::kUd) {
        // No peer: datagrams for its QPN with its Q_Key land from now on.
        c->queue_pair.qkey = peer.qkey;
        connections_->StartRemote(c);
        return Reply(shm::kStatusOk);
      }
      if (cm_ == nullptr && peer.peer_ip != own_ip_) {
        return Reply(shm::kStatusNetDown, NoDataPort());
      }
      ControlResponse resp = connections_->SetQueuePairPeer(c, peer);
      if (resp.status != shm::kStatusOk) return resp;
      if (cm_ == nullptr) {  // a queue pair of ours, over the self link
        c->peer.mac = kSelfLinkMac;
        connections_->StartRemote(c);
        return Reply(shm::kStatusOk);
      }
      // RTR once the peer's MAC is known (ConnectionManager answers).
      return cm_->StartQueuePair(s, c, req.request_id);
    }
    case QpState::kRts: {
      // From RTR the requester starts; from RTS (an attribute-only modify)
      // it goes on as it was. Either may change the responder.
      if (current == QpState::kRtr) {
        ControlResponse resp = connections_->StartRequester(c, peer);
        if (resp.status != shm::kStatusOk) return resp;
      }
      ControlResponse resp = connections_->ModifyResponder(c, peer);
      if (resp.status != shm::kStatusOk) return resp;
      break;
    }
    case QpState::kErr:
      if (current != QpState::kErr) connections_->StopQueuePair(c);
      break;
    case QpState::kReset:
      if (current != QpState::kReset) connections_->ResetQueuePair(c);
      break;
    default:
      break;
  }
  c->queue_pair.life.Modify(next, mask);
  return Reply(shm::kStatusOk);
}

std::optional<ControlResponse> Daemon::CreateAddressHandle(
    Session* s, const ControlRequest& req) {
  const uint32_t ip = req.key;
  if (ip == 0 || ip == 0xFFFFFFFF || (ip >> 28) == 0xE) {
    return Reply(shm::kStatusInvalid,
                 "an address handle names a unicast IPv4 address");
  }
  if (cm_ == nullptr && ip != own_ip_) {
    return Reply(shm::kStatusNetDown, NoDataPort());
  }
  s->EnsureAddressHandles();
  uint32_t handle = 0;
  while (handle < engine::AddressHandles::kCount &&
         s->address_handle_taken[handle]) {
    ++handle;
  }
  if (handle == engine::AddressHandles::kCount) {
    return Reply(shm::kStatusLimit,
                 absl::StrCat("a session holds at most ",
                              engine::AddressHandles::kCount,
                              " address handles"));
  }
  s->address_handle_taken[handle] = true;
  // Without a data port the address is ours (above): the self link.
  if (std::optional<wire::MacAddr> mac =
          cm_ != nullptr ? cm_->Neighbor(ip) : kSelfLinkMac) {
    s->address_handles->Set(handle, ip, *mac);
    ControlResponse resp = Reply(shm::kStatusOk);
    resp.key = handle;
    return resp;
  }
  // Answered once ARP does (ResolveAddressHandles).
  s->pending_address_handles.push_back(
      {req.request_id, ip, handle,
       NowNs() + ConnectionManager::kArpIntervalNs, 1});
  ++pending_address_handles_;
  cm_->AskNeighbor(ip);
  return std::nullopt;
}

ControlResponse Daemon::DestroyAddressHandle(Session* s,
                                             const ControlRequest& req) {
  const uint32_t handle = req.key;
  if (s->address_handles == nullptr ||
      handle >= engine::AddressHandles::kCount ||
      !s->address_handle_taken[handle] ||
      std::any_of(s->pending_address_handles.begin(),
                  s->pending_address_handles.end(),
                  [handle](const Session::PendingAddressHandle& p) {
                    return p.handle == handle;
                  })) {
    return Reply(shm::kStatusInvalid, "not an address handle of this session");
  }
  s->address_handles->Clear(handle);
  s->address_handle_taken[handle] = false;
  return Reply(shm::kStatusOk);
}

void Daemon::ResolveAddressHandles() {
  if (pending_address_handles_ == 0 || cm_ == nullptr) return;
  const uint64_t now = NowNs();
  sessions_->ForEachReady([&](Session* s) {
    std::erase_if(s->pending_address_handles,
                  [&](Session::PendingAddressHandle& p) {
      ControlResponse resp;
      if (std::optional<wire::MacAddr> mac = cm_->Neighbor(p.ip)) {
        s->address_handles->Set(p.handle, p.ip, *mac);
        resp = Reply(shm::kStatusOk);
        resp.key = p.handle;
      } else if (now < p.deadline_ns) {
        return false;
      } else if (p.tries < ConnectionManager::kArpTries) {
        ++p.tries;
        p.deadline_ns = now + ConnectionManager::kArpIntervalNs;
        cm_->AskNeighbor(p.ip);
        return false;
      } else {
        s->address_handle_taken[p.handle] = false;
        resp = Reply(shm::kStatusTimeout,
                     absl::StrCat("no ARP answer from ", IpText(p.ip)));
      }
      resp.request_id = p.request_id;
      s->Answer(resp);
      --pending_address_handles_;
      return true;
    });
  });
}

ControlResponse Daemon::QueryDevice() const {
  shm::DeviceInfo d{};
  d.ip = own_ip_;
  std::memcpy(d.mac, port_mac_.bytes.data(), sizeof(d.mac));
  d.path_mtu = static_cast<uint16_t>(connections_->options().path_mtu);
  d.max_qps = std::min(shm::kMaxConnections,
                       connections_->options().max_connections);
  d.max_mrs = options_.max_registrations_per_session;
  d.max_qp_wr = std::min(shm::kMaxSendRingEntries, shm::kMaxRecvRingEntries);
  d.max_cqe = shm::kMaxCompletionRingEntries;
  d.max_sge = shm::kMaxSge;
  d.max_rd_atomic = static_cast<uint8_t>(rc::QpConfig{}.max_rd_atomic);
  // The self link is always up.
  d.link_up = port_ == nullptr || port_->LinkUp() ? 1 : 0;
  ControlResponse resp = Reply(shm::kStatusOk);
  resp.descriptor_length = sizeof(d);
  std::memcpy(resp.descriptor, &d, sizeof(d));
  return resp;
}

// --- The data port
// -------------------------------------------------------------

namespace {

bool HasArg(const std::string& device, std::string_view key) {
  return port::DeviceArg(device, key).has_value();
}

bool IsMemif(const std::string& device) {
  return device.rfind("net_memif", 0) == 0;
}

// memif in its own zero-copy mode (zero-copy=yes).
bool MemifZeroCopy(const std::string& device) {
  return IsMemif(device) && port::DeviceArg(device, "zero-copy") == "yes";
}

// memif's buffers are the memif client's: it creates the shared rings and
// their buffers (bsize, 2048 bytes unless told), and both directions use
// them. A frame longer than one buffer is chained over several, which
// DPDK 22.11's memif does not carry reliably under load (frames are
// received several times and the link stalls). So the daemon as memif
// client asks for buffers that hold a whole frame of its path MTU, unless
// the device string sets bsize itself; in its own zero-copy mode the
// buffers are its packet buffers, and are left alone.
std::string MemifDevice(const std::string& device, uint32_t path_mtu) {
  if (!IsMemif(device) || port::DeviceArg(device, "role") != "client" ||
      HasArg(device, "bsize") || MemifZeroCopy(device)) {
    return device;
  }
  const uint32_t frame =
      static_cast<uint32_t>(wire::MaxFrameLength(path_mtu));
  const uint32_t bsize = port::MemifBufferBytes(frame);
  return bsize == 2048 ? device : absl::StrCat(device, ",bsize=", bsize);
}

// af_packet's ring slots (framesz, 2048 bytes unless told) must hold a
// whole frame behind the kernel's slot header, and its receive ring must
// hold what arrives while the engine is busy elsewhere: its default of 512
// slots is half a window of 64 KiB WRITEs at path MTU 1024, and a full ring
// drops frames. So the daemon sizes the slots for its path MTU and the
// rings for about 8 MiB of slots (about 2000 frames at path MTU 4096; the
// kernel rounds each block up to a power of two pages, so about 16 MiB a
// ring, and the transmit ring is as large), unless the device string sets any of
// them. DPDK 22.11's af_packet places slot i at i * framesz, so a block
// (a whole number of pages) must hold a whole number of slots, with no
// gap at its end where the kernel would skip ahead.
constexpr uint32_t kPacketSlotOverhead = 80;  // header, address, alignment
constexpr uint32_t kPacketRingBytes = 8u << 20;
constexpr uint32_t kPacketPage = 4096;

bool IsAfPacket(const std::string& device) {
  return device.rfind("net_af_packet", 0) == 0;
}

uint32_t PacketSlotBytes(uint32_t max_frame) {
  const uint32_t need = max_frame + kPacketSlotOverhead;
  return need <= 2048 ? 2048 : (need + 255) / 256 * 256;
}

std::string AfPacketDevice(const std::string& device, uint32_t max_frame) {
  if (!IsAfPacket(device) || HasArg(device, "framesz") ||
      HasArg(device, "blocksz") || HasArg(device, "framecnt")) {
    return device;
  }
  const uint32_t slot = PacketSlotBytes(max_frame);
  const uint32_t per_block = kPacketPage / std::gcd(slot, kPacketPage);
  const uint32_t want = std::max(512u, kPacketRingBytes / slot);
  const uint32_t blocks = (want + per_block - 1) / per_block;
  return absl::StrCat(device, ",framesz=", slot, ",blocksz=", slot * per_block,
                      ",framecnt=", blocks * per_block);
}

// The largest path MTU whose frames are at most `frame` bytes (256 at
// least).
uint32_t LargestPathMtu(uint32_t frame) {
  const uint32_t headers = static_cast<uint32_t>(wire::MaxFrameLength(0));
  return std::max<uint32_t>(
      256, wire::IbMtuBytes(
               wire::IbMtuCode(frame > headers ? frame - headers : 0)));
}

// The MTU of the kernel interface a device string names (iface=IF: af_packet,
// af_xdp, tap), as it is now in this network namespace; 0 when there is none
// or it cannot be read.
uint32_t InterfaceMtu(const std::string& device) {
  const std::optional<std::string_view> iface = port::DeviceArg(device, "iface");
  return iface ? port::InterfaceMtu(std::string(*iface)) : 0;
}

// The largest path MTU a kernel interface of MTU `mtu` carries as it is
// (its IP packets: frames without their Ethernet header).
uint32_t PathMtuForInterface(uint32_t mtu) {
  return LargestPathMtu(mtu + RTE_ETHER_HDR_LEN);
}

}  // namespace

uint32_t Daemon::PathMtuBeforeOpen(const std::string& device) {
  // memif in its copy mode carries path MTU 4096 in buffers sized for it;
  // af_packet carries what its interface's MTU lets through, in ring slots
  // sized for it (an interface shared with the kernel keeps its MTU unless
  // --mtu asks for more).
  if (IsMemif(device) && !MemifZeroCopy(device)) return kLargestPathMtu;
  if (IsAfPacket(device)) {
    const uint32_t mtu = InterfaceMtu(device);
    const uint32_t path_mtu = PathMtuForInterface(mtu != 0 ? mtu : 1500);
    RDP_LOG(kInfo, "path MTU %u: the largest the interface's MTU (%u) carries",
            path_mtu, mtu);
    return path_mtu;
  }
  return 0;
}

absl::Status Daemon::StartPort() {
  const DataPortOptions& p = options_.port;
  if (p.device.empty()) return absl::OkStatus();
  if (p.ip == 0) {
    return absl::InvalidArgumentError("a data port needs an IPv4 address");
  }
  port::EalOptions eal;
  eal.hugepages = p.hugepages;
  eal.memory_mb = p.memory_mb;
  eal.file_prefix = p.file_prefix;
  const bool vdev = p.device.rfind("net_", 0) == 0;
  eal.allow_pci = !vdev;
  // Without --mtu, what the device string tells; other devices are asked
  // once open (below).
  if (options_.path_mtu == 0) options_.path_mtu = PathMtuBeforeOpen(p.device);
  if (vdev) {
    // With the MTU still 0 the device is neither of the two these size.
    const uint32_t frame =
        static_cast<uint32_t>(wire::MaxFrameLength(options_.path_mtu));
    eal.args.push_back(
        "--vdev=" + AfPacketDevice(MemifDevice(p.device, options_.path_mtu), frame));
  } else {
    eal.args.push_back("-a");
    eal.args.push_back(p.device);
  }
  if (EnginesPinned()) {
    eal.args.push_back("-l");
    eal.args.push_back(absl::StrCat(p.control_lcore, ",",
                                    absl::StrJoin(options_.engine_cpus, ",")));
    eal.args.push_back(absl::StrCat("--main-lcore=", p.control_lcore));
  }
  eal.args.insert(eal.args.end(), p.eal_args.begin(), p.eal_args.end());
  // memif's own zero-copy mode (a memif client with zero-copy=yes) shares
  // the daemon's packet memory with its peer by descriptor, which needs
  // that memory in hugepage files (EalArguments asks for them).
  if (MemifZeroCopy(p.device) && !p.hugepages) {
    return absl::InvalidArgumentError(
        "memif with zero-copy=yes needs --hugepages (its peer maps this "
        "daemon's packet memory, which must lie in hugepage files)");
  }
  if (absl::Status s = port::InitDpdk(eal); !s.ok()) return s;
  dpdk_ = true;
  absl::StatusOr<uint16_t> id = port::FindPort(p.device);
  if (!id.ok()) return id.status();
  if (options_.path_mtu == 0) {
    // Whatever the device takes: its largest frame (and, where it is Ethernet's
    // default, the MTU no larger).
    rte_eth_dev_info info;
    if (int r = rte_eth_dev_info_get(*id, &info); r != 0) {
      return absl::UnavailableError(absl::StrCat(
          "data port ", p.device, ": dev_info: ", rte_strerror(-r)));
    }
    options_.path_mtu = LargestPathMtu(info.max_rx_pktlen);
    if (const uint32_t mtu = InterfaceMtu(p.device); mtu != 0) {
      options_.path_mtu =
          std::min(options_.path_mtu, PathMtuForInterface(mtu));
    }
    RDP_LOG(kInfo, "path MTU %u: the largest the data port carries",
            options_.path_mtu);
  }
  port::PortConfig pc;
  pc.port_id = *id;
  pc.mbufs = p.mbufs;
  pc.burst = static_cast<uint16_t>(options_.burst);
  pc.max_frame = static_cast<uint32_t>(wire::MaxFrameLength(options_.path_mtu));
  // The port enlarges them where its device needs more.
  pc.mbuf_data_room = static_cast<uint16_t>(port::PacketBufferRoom(pc.max_frame));
  // Frames to an overriding MAC must be received too.
  pc.promiscuous = p.mac.has_value();
  if (!p.zero_copy) pc.zero_copy_min_payload = 0;
  auto opened = port::EthPort::Open(pc);
  if (!opened.ok()) {
    return absl::Status(
        opened.status().code(),
        absl::StrCat("data port ", p.device, ": ", opened.status().message()));
  }
  port_ = std::move(*opened);
  port_->SetFaults(p.faults);
  port_mac_ = p.mac.value_or(port_->mac());
  own_ip_ = p.ip;
  port_engine().AttachPort(port_.get());
  PeerAddress us;
  us.ip = p.ip;
  us.mac = port_mac_;
  cm_ = std::make_unique<ConnectionManager>(
      connections_.get(), &port_engine(), &counters_, us, options_.path_mtu,
      static_cast<uint32_t>(seed_ * 0x9E3779B97F4A7C15ull >> 33));
  connections_->AttachPort(port_.get(), port_mac_, p.ip, cm_.get());
  StartIpCm(cm_.get());
  cm_->SetIpCm(ip_cm_.get());
  return absl::OkStatus();
}

void Daemon::StartIpCm(IpCm::Link* link) {
  IpCm::Options o;
  o.ip = own_ip_;
  o.path_mtu = options_.path_mtu;
  o.comm_id_seed = static_cast<uint32_t>(seed_ * 0xC2B2AE3D27D4EB4Full >> 32);
  const rc::Clock* clock = port_engine().clock();
  ip_cm_ = std::make_unique<IpCm>(o, link, [clock] { return clock->NowNs(); });
}

void Daemon::StartSelfLink() {
  own_ip_ = options_.port.ip != 0 ? options_.port.ip : INADDR_LOOPBACK;
  port_mac_ = kSelfLinkMac;
  port_engine().AttachSelfLink();
  connections_->AttachPort(port_engine().self_link(), port_mac_, own_ip_,
                           nullptr);
  StartIpCm(nullptr);
  RDP_LOG(kInfo,
          "no data port: queue pairs reach only each other, at %s (GID "
          "::ffff:%s)",
          IpText(own_ip_).c_str(), IpText(own_ip_).c_str());
}

std::string Daemon::NoDataPort() const {
  return absl::StrCat("this daemon has no data port (--port) to reach peers; "
                      "without one its queue pairs reach only each other, at ",
                      IpText(own_ip_));
}

void Daemon::StopPort() {
  port_.reset();
  if (dpdk_) {
    port::ShutdownDpdk();
    dpdk_ = false;
  }
}

}  // namespace rdmaplane::control
