#include "dataplane/engine/engine.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <new>

namespace rdmaplane::engine {
namespace {
constexpr uint32_t kCommandSlots = 64;
}  // namespace

Engine::Engine(mr::RegistrationTable* table, const EngineOptions& options)
    : table_(table),
      options_(options),
      eventfd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      epoll_fd_(epoll_create1(EPOLL_CLOEXEC)),
      endpoints_(new Endpoint*[options.max_endpoints]) {
  AddWakeFd(eventfd_);
  const size_t bytes = shm::SpscRing<Command>::BytesFor(kCommandSlots);
  command_memory_.reset(static_cast<uint8_t*>(
      ::operator new[](bytes, std::align_val_t(shm::kCacheLine))));
  commands_ = *shm::SpscRing<Command>::Create(command_memory_.get(), bytes,
                                              kCommandSlots);
}

Engine::~Engine() {
  Stop();
  if (eventfd_ >= 0) close(eventfd_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
}

void Engine::Start() {
  stop_.store(false);
  thread_ = std::thread([this] { Run(); });
}

void Engine::Stop() {
  if (!thread_.joinable()) return;
  stop_.store(true, std::memory_order_release);
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(eventfd_, &one, sizeof(one));
  thread_.join();
}

void Engine::AddWakeFd(int read_fd) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = read_fd;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, read_fd, &ev);
}

void Engine::RemoveWakeFd(int read_fd) {
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, read_fd, nullptr);
}

void Engine::Submit(const Command& c) {
  std::atomic<bool> done{false};
  Command cmd = c;
  cmd.done = &done;
  while (!commands_.TryPush(cmd)) usleep(10);
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(eventfd_, &one, sizeof(one));
  if (!thread_.joinable()) {
    ApplyCommands();  // not started: apply on the caller's thread
  }
  // Pairs with the engine's release store once the command is applied.
  while (!done.load(std::memory_order_acquire)) usleep(5);
}

void Engine::AddPair(Endpoint* a, Endpoint* b) {
  Submit({CommandType::kAddPair, a, b, 0, shm::kConnUp, 0, shm::kConnUp,
          nullptr});
}

void Engine::RemovePair(Endpoint* e, int32_t status,
                        shm::ConnectionState state, int32_t peer_status,
                        shm::ConnectionState peer_state) {
  Submit({CommandType::kRemovePair, e, e->peer(), status, state, peer_status,
          peer_state, nullptr});
}

void Engine::ApplyCommands() {
  Command c;
  while (commands_.TryPop(&c) == shm::PopResult::kOk) {
    if (c.type == CommandType::kAddPair) {
      c.a->Wire(c.b);
      c.b->Wire(c.a);
      for (Endpoint* e : {c.a, c.b}) {
        e->PublishState(shm::kConnUp);
        if (count_ < options_.max_endpoints) endpoints_[count_++] = e;
      }
    } else {
      c.a->Close(c.status, c.state);
      if (c.b != nullptr) c.b->Close(c.peer_status, c.peer_state);
      auto* end = std::remove_if(
          endpoints_.get(), endpoints_.get() + count_,
          [&](Endpoint* e) { return e == c.a || e == c.b; });
      count_ = static_cast<uint32_t>(end - endpoints_.get());
    }
    c.done->store(true, std::memory_order_release);
  }
}

void Engine::Sleep() {
  // Tell clients we sleep, then look once more so that nothing posted in
  // between is missed (the client checks the flag after posting).
  for (uint32_t i = 0; i < count_; ++i) endpoints_[i]->SetIdle(true);
  // Pairs with the fence in Client::KickEngine (store-buffer pattern): either
  // we see the client's new entry below, or it sees our idle flag.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  bool work = commands_.Size() > 0;
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
    table_->Offline(options_.reader_index);
    counters_.sleeps.fetch_add(1, std::memory_order_relaxed);
    const int timeout_ms = static_cast<int>((wait_ns + 999'999) / 1'000'000);
    epoll_event events[16];
    const int n = epoll_wait(epoll_fd_, events, 16, timeout_ms);
    for (int i = 0; i < n; ++i) {
      // Drain: an eventfd yields its counter, a pipe its bytes.
      uint8_t sink[64];
      while (read(events[i].data.fd, sink, sizeof(sink)) > 0) {
      }
    }
    if (n > 0) counters_.wakeups.fetch_add(1, std::memory_order_relaxed);
  }
  for (uint32_t i = 0; i < count_; ++i) endpoints_[i]->SetIdle(false);
}

void Engine::Run() {
  uint32_t idle = 0;
  while (!stop_.load(std::memory_order_acquire)) {
    ApplyCommands();
    uint32_t work = 0;
    for (uint32_t i = 0; i < count_; ++i) {
      work += endpoints_[i]->Poll(options_.budget);
    }
    table_->Quiescent(options_.reader_index);
    // Only this thread writes it: a plain store, no locked instruction.
    counters_.loops.store(counters_.loops.load(std::memory_order_relaxed) + 1,
                          std::memory_order_relaxed);
    if (work > 0) {
      idle = 0;
    } else if (++idle >= options_.idle_spins &&
               options_.mode == PollMode::kAdaptive) {
      Sleep();
      // Back online before the next lookup (Sleep went offline).
      table_->Quiescent(options_.reader_index);
      idle = 0;
    }
  }
  table_->Offline(options_.reader_index);
}

}  // namespace rdmaplane::engine
