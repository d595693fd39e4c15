#include "dataplane/engine/engine.h"

#include <pthread.h>
#include <rte_launch.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "dataplane/engine/tsc.h"
#include "dataplane/port/eth_port.h"
#include "dataplane/wire/cm.h"
#include "dataplane/wire/roce.h"

namespace rdmaplane::engine {
namespace {
constexpr uint32_t kCommandSlots = 64;
constexpr uint32_t kControlSlots = 256;

}  // namespace

Engine::Engine(mr::RegistrationTable* table, const EngineOptions& options)
    : table_(table),
      options_(options),
      eventfd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      epoll_fd_(epoll_create1(EPOLL_CLOEXEC)),
      endpoints_(new Endpoint*[options.max_endpoints]),
      idle_(options.mode, options.idle_spins, options.idle_ns) {
  own_route_.fd = eventfd_;
  AddToEpoll(&own_route_);
  const size_t bytes = shm::SpscRing<Command>::BytesFor(kCommandSlots);
  command_memory_.reset(static_cast<uint8_t*>(
      ::operator new[](bytes, std::align_val_t(shm::kCacheLine))));
  commands_ = *shm::SpscRing<Command>::Create(command_memory_.get(), bytes,
                                              kCommandSlots);
  const size_t cbytes = shm::SpscRing<ControlFrame>::BytesFor(kControlSlots);
  control_memory_.reset(static_cast<uint8_t*>(
      ::operator new[](2 * cbytes, std::align_val_t(shm::kCacheLine))));
  to_control_ = *shm::SpscRing<ControlFrame>::Create(control_memory_.get(),
                                                     cbytes, kControlSlots);
  from_control_ = *shm::SpscRing<ControlFrame>::Create(
      control_memory_.get() + cbytes, cbytes, kControlSlots);
  notify_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  by_qpn_.reserve(options.max_endpoints);
}

Engine::~Engine() {
  Stop();
  if (eventfd_ >= 0) close(eventfd_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (notify_fd_ >= 0) close(notify_fd_);
}

void Engine::AttachPort(port::EthPort* port) {
  port_ = port;
  if (port_->rx_interrupt_fd() >= 0) {
    port_route_.fd = port_->rx_interrupt_fd();
    port_route_.drain = port_->rx_interrupt_drains();
    AddToEpoll(&port_route_);
  }
}

void Engine::AttachSelfLink() {
  self_rx_ = std::make_unique<FrameQueue>();
  self_tx_ = std::make_unique<LoopbackTx>(fault::FaultSpec{});
  self_tx_->Connect(self_rx_.get());
}

void Engine::SetSiblings(std::span<const int> wake_fds) {
  siblings_ = static_cast<uint32_t>(
      std::min<size_t>(wake_fds.size(), WakeRoute::kMaxEngines));
  sibling_fds_.reset(new int[siblings_]);
  std::copy_n(wake_fds.begin(), siblings_, sibling_fds_.get());
}

std::string Engine::ThreadName() const {
  // At most 15 characters (the kernel's limit).
  return "rdp-engine-" + std::to_string(options_.reader_index);
}

int Engine::LaunchOnLcore(void* engine) {
  auto* e = static_cast<Engine*>(engine);
  pthread_setname_np(pthread_self(), e->ThreadName().c_str());
  e->Run();
  return 0;
}

void Engine::Start() {
  stop_.store(false);
  running_.store(true, std::memory_order_release);
  if (options_.lcore >= 0 &&
      rte_eal_remote_launch(&Engine::LaunchOnLcore, this,
                            static_cast<unsigned>(options_.lcore)) == 0) {
    launched_on_lcore_ = true;
    return;
  }
  thread_ = std::thread([this] { Run(); });
  // Named by its creator, so that it is named once Start returns.
  pthread_setname_np(thread_.native_handle(), ThreadName().c_str());
  if (options_.cpu >= 0 && options_.cpu < CPU_SETSIZE) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(options_.cpu, &set);
    pthread_setaffinity_np(thread_.native_handle(), sizeof(set), &set);
  }
}

void Engine::Stop() {
  if (!running_.load(std::memory_order_acquire)) return;
  stop_.store(true, std::memory_order_release);
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(eventfd_, &one, sizeof(one));
  if (launched_on_lcore_) {
    rte_eal_wait_lcore(static_cast<unsigned>(options_.lcore));
    launched_on_lcore_ = false;
  } else {
    thread_.join();
  }
  running_.store(false, std::memory_order_release);
}

bool Engine::SendControlFrame(std::span<const uint8_t> frame) {
  if (frame.size() > ControlFrame::kMaxBytes) return false;
  ControlFrame f;
  f.kind = ControlFrame::kFrame;
  f.length = static_cast<uint16_t>(frame.size());
  std::memcpy(f.bytes, frame.data(), frame.size());
  if (!from_control_.TryPush(f)) return false;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(eventfd_, &one, sizeof(one));
  return true;
}

bool Engine::TakeControlFrame(ControlFrame* out) {
  return to_control_.TryPop(out) == shm::PopResult::kOk;
}

bool Engine::PassUp(const ControlFrame& f) {
  if (!to_control_.TryPush(f)) {
    counters_.control_frames_dropped.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  counters_.control_frames_in.fetch_add(1, std::memory_order_relaxed);
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(notify_fd_, &one, sizeof(one));
  return true;
}

void Engine::Dispatch(std::span<const uint8_t> frame) {
  const wire::FrameKind kind = wire::ClassifyFrame(frame);
  if (kind == wire::FrameKind::kRoce) {
    wire::ParsedPacket pkt;
    if (wire::ParseQueuePairFrame(frame, &pkt) != wire::ParseError::kOk) {
      counters_.rx_rejected.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    auto it = by_qpn_.find(pkt.bth.dest_qp.value());
    if (it == by_qpn_.end()) {
      counters_.rx_unknown_qpn.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    it->second->HandleFrame(pkt);
    return;
  }
  if (kind == wire::FrameKind::kOther) return;  // not ours to answer
  // ARP, connection management and anything else: the control plane
  // decides (it validates; frames too large for a control message are not
  // control traffic).
  if (frame.size() > ControlFrame::kMaxBytes) return;
  ControlFrame f;
  f.kind = ControlFrame::kFrame;
  f.length = static_cast<uint16_t>(frame.size());
  std::memcpy(f.bytes, frame.data(), frame.size());
  PassUp(f);
}

uint32_t Engine::PollSelfLink() {
  // The frames queued before this turn: what they make the receivers send
  // (acknowledgements, READ responses) waits for the next one.
  uint32_t n = std::min(self_rx_->size(), kRxBurstsPerTurn * options_.budget);
  for (uint32_t i = 0; i < n; ++i) {
    Dispatch(self_rx_->Front());
    self_rx_->Pop();
  }
  return n;
}

uint32_t Engine::PollPort() {
  // Receive first and more than one burst while full ones come: a turn may
  // send a burst for every endpoint, and a receive side that takes one
  // burst a turn falls behind its peer until the device's ring overflows
  // (af_packet's kernel ring drops what does not fit).
  uint32_t work = 0;
  for (uint32_t i = 0; i < kRxBurstsPerTurn; ++i) {
    const uint16_t n =
        port_->Receive([this](std::span<const uint8_t> f) { Dispatch(f); });
    work += n;
    if (n < port_->burst()) break;
  }
  ControlFrame f;
  for (uint32_t i = 0;
       i < options_.budget && from_control_.TryPop(&f) == shm::PopResult::kOk;
       ++i) {
    if (port_->Send({f.bytes, f.length})) {
      counters_.control_frames_out.fetch_add(1, std::memory_order_relaxed);
    } else {
      counters_.control_frames_dropped.fetch_add(1, std::memory_order_relaxed);
    }
    ++work;
  }
  return work;
}

void Engine::AddToEpoll(WakeRoute* route) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = route;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, route->fd, &ev);
}

void Engine::Watch(WakeRoute* route) {
  if (route == nullptr || route->fd < 0) return;
  const uint32_t self = options_.reader_index;
  if (route->endpoints[self]++ > 0) return;
  AddToEpoll(route);
  // Pairs with the acquire load in PassOnKick.
  route->engines.fetch_or(1u << self, std::memory_order_release);
}

void Engine::Unwatch(WakeRoute* route) {
  if (route == nullptr || route->fd < 0) return;
  const uint32_t self = options_.reader_index;
  if (route->endpoints[self] == 0 || --route->endpoints[self] > 0) return;
  route->engines.fetch_and(~(1u << self), std::memory_order_release);
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, route->fd, nullptr);
}

void Engine::PassOnKick(const WakeRoute& route) {
  // Pairs with the release in Watch/Unwatch. A sibling that stopped
  // serving the session meanwhile is woken for nothing, which is harmless.
  uint32_t others = route.engines.load(std::memory_order_acquire) &
                    ~(1u << options_.reader_index);
  const uint64_t one = 1;
  while (others != 0) {
    const uint32_t i = static_cast<uint32_t>(__builtin_ctz(others));
    others &= others - 1;
    if (i < siblings_) {
      [[maybe_unused]] ssize_t n = write(sibling_fds_[i], &one, sizeof(one));
      counters_.kicks_passed_on.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

void Engine::Submit(const Command& c) {
  std::atomic<bool> done{false};
  Command cmd = c;
  cmd.done = &done;
  while (!commands_.TryPush(cmd)) usleep(10);
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(eventfd_, &one, sizeof(one));
  if (!running_.load(std::memory_order_acquire)) {
    ApplyCommands();  // not started: apply on the caller's thread
  }
  // Pairs with the engine's release store once the command is applied.
  while (!done.load(std::memory_order_acquire)) usleep(5);
}

void Engine::AddRemote(Endpoint* e) {
  Submit({CommandType::kAddRemote, e, nullptr, CloseReason::kClosedByClient,
          CloseReason::kClosedByClient, nullptr, {}, {}});
}

void Engine::StartRequester(Endpoint* e, const rc::RequesterSettings& s) {
  Submit({CommandType::kStartRequester, e, nullptr,
          CloseReason::kClosedByClient, CloseReason::kClosedByClient, nullptr,
          s, {}});
}

void Engine::ModifyResponder(Endpoint* e, const rc::ResponderSettings& s) {
  Submit({CommandType::kModifyResponder, e, nullptr,
          CloseReason::kClosedByClient, CloseReason::kClosedByClient, nullptr,
          {}, s});
}

void Engine::AddPair(Endpoint* a, Endpoint* b) {
  Submit({CommandType::kAddPair, a, b, CloseReason::kClosedByClient,
          CloseReason::kClosedByClient, nullptr, {}, {}});
}

void Engine::RemovePair(Endpoint* e, CloseReason reason,
                        CloseReason peer_reason) {
  Submit({CommandType::kRemovePair, e, e->peer(), reason, peer_reason,
          nullptr, {}, {}});
}

void Engine::ApplyCommands() {
  Command c;
  while (commands_.TryPop(&c) == shm::PopResult::kOk) {
    if (c.type == CommandType::kAddPair) {
      c.a->Wire(c.b);
      c.b->Wire(c.a);
      // With no room an endpoint would be shown up and never served: it
      // ends instead (the control plane's limits keep this from happening).
      if (options_.max_endpoints - count_ < 2) {
        c.a->Close(CloseReason::kTransportError);
        c.b->Close(CloseReason::kTransportError);
      } else {
        for (Endpoint* e : {c.a, c.b}) {
          e->PublishState(shm::kConnUp);
          e->set_load(&counters_.load);
          endpoints_[count_++] = e;
          Watch(e->info().wake);
        }
      }
    } else if (c.type == CommandType::kAddRemote) {
      if (count_ >= options_.max_endpoints) {
        c.a->Close(CloseReason::kTransportError);
      } else {
        c.a->PublishState(shm::kConnUp);
        c.a->set_load(&counters_.load);
        endpoints_[count_++] = c.a;
        by_qpn_[c.a->info().qp.local_qpn.value()] = c.a;
        Watch(c.a->info().wake);
      }
    } else if (c.type == CommandType::kStartRequester) {
      c.a->StartRequester(c.requester);
    } else if (c.type == CommandType::kModifyResponder) {
      c.a->ModifyResponder(c.responder);
    } else {
      c.a->Close(c.reason);
      if (c.b != nullptr) c.b->Close(c.peer_reason);
      Remove(c.a);
      if (c.b != nullptr) Remove(c.b);
    }
    served_.store(count_, std::memory_order_relaxed);
    c.done->store(true, std::memory_order_release);
  }
}

void Engine::Remove(Endpoint* e) {
  auto* end = std::remove(endpoints_.get(), endpoints_.get() + count_, e);
  const uint32_t remaining = static_cast<uint32_t>(end - endpoints_.get());
  if (remaining < count_) Unwatch(e->info().wake);
  count_ = remaining;
  if (e->remote()) {
    auto it = by_qpn_.find(e->info().qp.local_qpn.value());
    if (it != by_qpn_.end() && it->second == e) by_qpn_.erase(it);
  }
}

bool Engine::Sleep() {
  // Tell clients we sleep, then look once more so that nothing posted in
  // between is missed (the client checks the flag after posting).
  for (uint32_t i = 0; i < count_; ++i) endpoints_[i]->SetIdle(true);
  // Pairs with the fence in Client::KickEngine (store-buffer pattern): either
  // we see the client's new entry below, or it sees our idle flag.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  bool woken = false;
  if (port_ != nullptr) port_->ArmRxInterrupt();
  bool work = commands_.Size() > 0 || from_control_.Size() > 0 ||
              (port_ != nullptr && port_->tx_pending() > 0) ||
              (self_rx_ != nullptr && !self_rx_->empty());
  uint64_t next_timer = 0;
  for (uint32_t i = 0; i < count_ && !work; ++i) {
    work = endpoints_[i]->HasWork();
    const uint64_t t = endpoints_[i]->next_timer_ns();
    if (t != 0 && (next_timer == 0 || t < next_timer)) next_timer = t;
  }
  if (!work && !stop_.load(std::memory_order_acquire)) {
    uint64_t wait_ns = options_.max_sleep_ns;
    if (next_timer != 0) {
      const uint64_t now = clock_.NowNs();
      wait_ns = next_timer > now ? std::min(wait_ns, next_timer - now) : 0;
    }
    if (port_ != nullptr &&
        (port_->rx_interrupt_fd() < 0 || port_->delayed() > 0)) {
      // No interrupt (or frames the fault model holds back): nap, longer
      // each time nothing arrived.
      const uint64_t nap =
          std::min(options_.port_nap_ns << std::min(idle_.naps(), 16u),
                   options_.port_max_nap_ns);
      wait_ns = std::min(wait_ns, nap);
    }
    table_->Offline(options_.reader_index);
    counters_.sleeps.fetch_add(1, std::memory_order_relaxed);
    const timespec timeout{static_cast<time_t>(wait_ns / 1'000'000'000),
                           static_cast<long>(wait_ns % 1'000'000'000)};
    epoll_event events[16];
    counters_.asleep.store(1, std::memory_order_relaxed);
    const int n = epoll_pwait2(epoll_fd_, events, 16, &timeout, nullptr);
    counters_.asleep.store(0, std::memory_order_relaxed);
    for (int i = 0; i < n; ++i) {
      // Drain: an eventfd yields its counter, a socket its datagrams.
      const auto* route = static_cast<const WakeRoute*>(events[i].data.ptr);
      if (!route->drain) {
        // af_packet's socket reports a pending socket error (ENETDOWN
        // after its interface went down) until it is taken: take it, or
        // every sleep would end at once from then on.
        if ((events[i].events & (EPOLLERR | EPOLLHUP)) != 0 &&
            route == &port_route_) {
          port_->ClearRxInterruptError();
          counters_.port_socket_errors.fetch_add(1, std::memory_order_relaxed);
        }
        continue;
      }
      uint8_t sink[64];
      bool drained = false;
      while (read(route->fd, sink, sizeof(sink)) > 0) drained = true;
      // A session's kick may have been meant for another engine serving it
      // (it drained nothing if a sibling got there first). The engine's own
      // routes name no engines, so nothing is passed on for them.
      if (drained) PassOnKick(*route);
    }
    if (n > 0) counters_.wakeups.fetch_add(1, std::memory_order_relaxed);
    woken = n > 0;
  } else {
    woken = true;  // work turned up while going to sleep
  }
  if (port_ != nullptr) port_->DisarmRxInterrupt();
  for (uint32_t i = 0; i < count_; ++i) endpoints_[i]->SetIdle(false);
  return woken;
}

void Engine::Run() {
  while (!stop_.load(std::memory_order_acquire)) {
    const uint64_t turn_start = ReadTsc();
    MonotonicClock::BeginTurn();
    ApplyCommands();
    uint32_t work = port_ != nullptr     ? PollPort()
                    : self_rx_ != nullptr ? PollSelfLink()
                                          : 0;
    for (uint32_t i = 0; i < count_; ++i) {
      Endpoint* e = endpoints_[i];
      work += e->Poll(options_.budget);
      if (e->remote() && e->TakeTransportError()) {
        ControlFrame f;
        f.kind = ControlFrame::kTransportError;
        f.connection_id = e->info().connection_id;
        PassUp(f);
      }
      LocalOpRequest op;
      if (e->remote() && e->TakeLocalOp(&op.entry, &op.seq)) {
        op.incarnation = e->incarnation();
        ControlFrame f;
        f.kind = ControlFrame::kLocalOp;
        f.connection_id = e->info().connection_id;
        f.length = sizeof(op);
        std::memcpy(f.bytes, &op, sizeof(op));
        // A full ring: passed up on a later turn.
        if (PassUp(f)) e->LocalOpPassedUp();
      }
    }
    if (port_ != nullptr) port_->Flush();
    MonotonicClock::EndTurn();
    table_->Quiescent(options_.reader_index);
    // Only this thread writes it: a plain store, no locked instruction.
    counters_.loops.store(counters_.loops.load(std::memory_order_relaxed) + 1,
                          std::memory_order_relaxed);
    if (work > 0) counters_.busy_cycles += ReadTsc() - turn_start;
    switch (idle_.AfterTurn(work > 0, [this] { return clock_.NowNs(); })) {
      case IdlePolicy::Action::kPoll:
        break;
      case IdlePolicy::Action::kYield:
        sched_yield();
        break;
      case IdlePolicy::Action::kSleep:
        idle_.AfterSleep(Sleep());
        // Back online before the next lookup (Sleep went offline).
        table_->Quiescent(options_.reader_index);
        break;
    }
  }
  table_->Offline(options_.reader_index);
}

}  // namespace rdmaplane::engine
