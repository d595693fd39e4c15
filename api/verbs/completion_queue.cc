// The verbs front end's completion queues and completion channels: polling,
// arming, and the notifier thread that raises a channel's events.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "api/verbs/objects.h"
#include "api/verbs/poll_yield.h"

namespace rdmaplane::verbs {

// Takes up to `max` of the completions of queue pairs `qps` (their send
// or receive side) into wc; gathers from the daemon what is not there yet.
int TakeCompletions(const std::vector<Qp*>& qps, bool sends, int max,
                    ibv_wc* wc) {
  int n = 0;
  for (Qp* q : qps) {
    if (n >= max) break;
    std::lock_guard<std::mutex> lock(q->mu);
    std::deque<ibv_wc>& wcs = sends ? q->send_wcs : q->recv_wcs;
    if (wcs.size() < static_cast<size_t>(max - n)) Pump(q);
    while (n < max && !wcs.empty()) {
      wc[n++] = wcs.front();
      wcs.pop_front();
      if (!sends) q->recv_solicited.pop_front();
    }
  }
  return n;
}

// The completions gathered for an armed CQ so far (see Qp::gathered), from
// the daemon's rings now. Caller holds the CQ's mutex.
uint64_t Gathered(Cq* cq) {
  uint64_t n = 0;
  for (const auto* qps : {&cq->recv_qps, &cq->send_qps}) {
    const int side = qps == &cq->send_qps ? 1 : 0;
    for (Qp* q : *qps) {
      std::lock_guard<std::mutex> lock(q->mu);
      Pump(q);
      n += cq->solicited_only ? q->gathered_solicited[side] : q->gathered[side];
    }
  }
  return n;
}

// Rounds of empty polls in a row (PollYield) after which ibv_poll_cq
// gives the CPU away once: RDMAPLANE_VERBS_YIELD_AFTER, a number (0: never),
// default 1. An application that waits by polling often shares its CPU with
// the engine that would complete its request (two daemons and two perftest
// ends on two CPUs): yielding at once lets that engine run, where 64 polls
// in a row (about 10 us) doubled ib_write_lat's typical over memif. With a
// CPU to itself the yield returns at once.
uint32_t YieldAfter() {
  const char* env = std::getenv("RDMAPLANE_VERBS_YIELD_AFTER");
  if (env == nullptr || env[0] == '\0') return 1;
  char* end = nullptr;
  const int saved_errno = errno;  // the application's
  errno = 0;
  const unsigned long n = std::strtoul(env, &end, 10);
  const bool bad =
      errno != 0 || *end != '\0' || env[0] == '-' || n > UINT32_MAX;
  errno = saved_errno;
  if (bad) {
    std::fprintf(stderr,
                 "rdmaplane verbs: RDMAPLANE_VERBS_YIELD_AFTER=%s is not a "
                 "number from 0 to %u; yielding after every round of empty "
                 "polls\n",
                 env, UINT32_MAX);
    return 1;
  }
  return static_cast<uint32_t>(n);
}

// Takes up to `max` completions of cq (sends first). Takes cq->mu.
int TakeFromCq(Cq* cq, int max, ibv_wc* wc) {
  int n;
  {
    std::lock_guard<std::mutex> lock(cq->mu);
    n = TakeCompletions(cq->send_qps, true, max, wc);
    n += TakeCompletions(cq->recv_qps, false, max - n, wc + n);
  }
  // An application that spins on empty CQs holds a CPU the daemon's engine
  // may share: give it away (YieldAfter), outside the CQ's lock.
  static const uint32_t yield_after = YieldAfter();
  thread_local PollYield yield(yield_after);
  if (yield.AfterPoll(cq, n)) sched_yield();
  return n;
}

int PollCq(ibv_cq* ibcq, int num_entries, ibv_wc* wc) {
  if (num_entries < 0) return -EINVAL;
  return TakeFromCq(CqOf(ibcq), num_entries, wc);
}

// --- The extended poll (ibv_create_cq_ex(3)) --------------------------------

Cq* CqOfEx(ibv_cq_ex* cqx) { return CqOf(ibv_cq_ex_to_cq(cqx)); }

// The iterator moves to the next completion, if there is one.
int NextPoll(ibv_cq_ex* cqx) {
  Cq* cq = CqOfEx(cqx);
  if (TakeFromCq(cq, 1, &cq->current) == 0) return ENOENT;
  cqx->wr_id = cq->current.wr_id;
  cqx->status = cq->current.status;
  return 0;
}

// Opens a batch (the poll region) on its first completion; with none, the
// region stays closed and ibv_end_poll is not to be called.
int StartPoll(ibv_cq_ex* cqx, ibv_poll_cq_attr* attr) {
  if (attr == nullptr || attr->comp_mask != 0) return EINVAL;
  Cq* cq = CqOfEx(cqx);
  cq->poll_mu.lock();
  const int r = NextPoll(cqx);
  if (r != 0) cq->poll_mu.unlock();
  return r;
}

void EndPoll(ibv_cq_ex* cqx) { CqOfEx(cqx)->poll_mu.unlock(); }

const ibv_wc& Current(ibv_cq_ex* cqx) { return CqOfEx(cqx)->current; }
ibv_wc_opcode ReadOpcode(ibv_cq_ex* cqx) { return Current(cqx).opcode; }
uint32_t ReadVendorErr(ibv_cq_ex* cqx) { return Current(cqx).vendor_err; }
uint32_t ReadByteLen(ibv_cq_ex* cqx) { return Current(cqx).byte_len; }
__be32 ReadImmData(ibv_cq_ex* cqx) { return Current(cqx).imm_data; }
uint32_t ReadQpNum(ibv_cq_ex* cqx) { return Current(cqx).qp_num; }
uint32_t ReadSrcQp(ibv_cq_ex* cqx) { return Current(cqx).src_qp; }
unsigned int ReadWcFlags(ibv_cq_ex* cqx) { return Current(cqx).wc_flags; }
uint32_t ReadSlid(ibv_cq_ex* cqx) { return Current(cqx).slid; }
uint8_t ReadSl(ibv_cq_ex* cqx) { return Current(cqx).sl; }
uint8_t ReadDlidPathBits(ibv_cq_ex* cqx) {
  return Current(cqx).dlid_path_bits;
}
// Fields a CQ cannot be made to report (timestamps, VLAN, flow tags, tag
// matching): CreateCqEx refuses them, and reading one anyway reads 0.
uint64_t ReadNone64(ibv_cq_ex*) { return 0; }
uint16_t ReadNone16(ibv_cq_ex*) { return 0; }
uint32_t ReadNone32(ibv_cq_ex*) { return 0; }
void ReadNoTmInfo(ibv_cq_ex*, ibv_wc_tm_info* info) {
  if (info != nullptr) *info = ibv_wc_tm_info{};
}

// A CQ of `cqe` entries on channel (or none); null with errno set.
Cq* NewCq(ibv_context* context, int cqe, void* cq_context,
          ibv_comp_channel* channel, int comp_vector) {
  Context* c = Ctx(context);
  if (cqe <= 0 || cqe > kMaxCqe || comp_vector != 0) {
    return Fail<Cq*>(EINVAL, nullptr);
  }
  if (c->cq_count.fetch_add(1) >= kMaxCq) {
    c->cq_count.fetch_sub(1);
    return Fail<Cq*>(ENOMEM, nullptr);
  }
  auto* cq = new Cq();
  cq->cq.context = context;
  cq->cq.channel = channel;
  cq->cq.cq_context = cq_context;
  cq->cq.cqe = cqe;
  pthread_mutex_init(&cq->cq.mutex, nullptr);
  pthread_cond_init(&cq->cq.cond, nullptr);
  if (channel != nullptr) {
    cq->channel = reinterpret_cast<Channel*>(channel);
    std::lock_guard<std::mutex> lock(cq->channel->mu);
    cq->channel->cqs.push_back(cq);
  }
  return cq;
}

ibv_cq_ex* CreateCqEx(ibv_context* context, ibv_cq_init_attr_ex* attr) {
  if (attr == nullptr) return Fail<ibv_cq_ex*>(EINVAL, nullptr);
  // What a completion of ours carries (as Linux's soft-RoCE offers).
  constexpr uint64_t kWcFlags =
      IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM |
      IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL |
      IBV_WC_EX_WITH_DLID_PATH_BITS;
  // Single-threaded use is a hint; a CQ here never overruns, so ignoring
  // overruns changes nothing. Parent domains are not served.
  constexpr uint32_t kFlags =
      IBV_CREATE_CQ_ATTR_SINGLE_THREADED | IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
  if ((attr->comp_mask & ~uint32_t{IBV_CQ_INIT_ATTR_MASK_FLAGS}) != 0 ||
      (attr->wc_flags & ~kWcFlags) != 0 ||
      ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
       (attr->flags & ~kFlags) != 0)) {
    return Fail<ibv_cq_ex*>(EOPNOTSUPP, nullptr);
  }
  Cq* cq = NewCq(context, attr->cqe, attr->cq_context, attr->channel,
                 static_cast<int>(attr->comp_vector));
  if (cq == nullptr) return nullptr;
  ibv_cq_ex& x = cq->cq_ex;
  x.comp_mask = 0;
  x.start_poll = StartPoll;
  x.next_poll = NextPoll;
  x.end_poll = EndPoll;
  x.read_opcode = ReadOpcode;
  x.read_vendor_err = ReadVendorErr;
  x.read_byte_len = ReadByteLen;
  x.read_imm_data = ReadImmData;
  x.read_qp_num = ReadQpNum;
  x.read_src_qp = ReadSrcQp;
  x.read_wc_flags = ReadWcFlags;
  x.read_slid = ReadSlid;
  x.read_sl = ReadSl;
  x.read_dlid_path_bits = ReadDlidPathBits;
  x.read_completion_ts = ReadNone64;
  x.read_cvlan = ReadNone16;
  x.read_flow_tag = ReadNone32;
  x.read_tm_info = ReadNoTmInfo;
  x.read_completion_wallclock_ns = ReadNone64;
  return &x;
}

int ReqNotifyCq(ibv_cq* ibcq, int solicited_only) {
  Cq* cq = CqOf(ibcq);
  if (cq->channel == nullptr) return EINVAL;
  {
    // An event comes when a completion is added from now on
    // (ibv_req_notify_cq(3)), not for those already in the CQ.
    std::lock_guard<std::mutex> lock(cq->mu);
    cq->solicited_only = solicited_only != 0;
    cq->armed_at = Gathered(cq);
    cq->armed = true;
  }
  std::lock_guard<std::mutex> lock(cq->channel->mu);
  cq->channel->armed_cv.notify_one();
  return 0;
}

// The notifier of a channel: raises an event for each armed CQ with a
// completion, and writes the channel's eventfd.
void Notify(Channel* ch) {
  std::unique_lock<std::mutex> lock(ch->mu);
  while (!ch->stop) {
    bool armed = false;
    Qp* wait_on = nullptr;
    size_t queue_pairs = 0;
    for (Cq* cq : ch->cqs) {
      std::lock_guard<std::mutex> cq_lock(cq->mu);
      if (!cq->armed) continue;
      armed = true;
      if (Gathered(cq) > cq->armed_at) {
        cq->armed = false;
        ch->events.push_back(cq);
        const uint64_t one = 1;
        [[maybe_unused]] ssize_t n = write(ch->ch.fd, &one, sizeof(one));
        continue;
      }
      for (const auto* qps : {&cq->send_qps, &cq->recv_qps}) {
        for (Qp* q : *qps) {
          if (q != wait_on) ++queue_pairs;
          wait_on = q;
        }
      }
    }
    if (!armed) {
      ch->armed_cv.wait(lock);
      continue;
    }
    // One queue pair to watch: sleep on its completion doorbell (it is not
    // destroyed meanwhile: see Qp::waiters). Several: look again shortly.
    rdp_conn conn = 0;
    if (queue_pairs == 1) {
      std::lock_guard<std::mutex> qp_lock(wait_on->mu);
      conn = wait_on->conn;
    }
    if (conn != 0) {
      wait_on->waiters.fetch_add(1);
      Client* client = wait_on->owner->client.get();
      lock.unlock();
      client->WaitForCompletions(conn, 10'000'000);
      wait_on->waiters.fetch_sub(1);
      lock.lock();
    } else {
      ch->armed_cv.wait_for(
          lock, std::chrono::microseconds(queue_pairs == 0 ? 1000 : 50));
    }
  }
}

}  // namespace rdmaplane::verbs

using namespace rdmaplane;         // NOLINT
using namespace rdmaplane::verbs;  // NOLINT

extern "C" {

// --- Completion queues and channels -----------------------------------------

ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
  auto* ch = new Channel();
  ch->ch.context = context;
  // Blocking, as a kernel device's channel fd is; an application may set
  // O_NONBLOCK on it, and ibv_get_cq_event then fails with EAGAIN.
  ch->ch.fd = eventfd(0, EFD_CLOEXEC);
  ch->ch.refcnt = 0;
  if (ch->ch.fd < 0) {
    delete ch;
    return Fail<ibv_comp_channel*>(EMFILE, nullptr);
  }
  ch->notifier = std::thread(Notify, ch);
  return &ch->ch;
}

int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
  auto* ch = reinterpret_cast<Channel*>(channel);
  {
    std::lock_guard<std::mutex> lock(ch->mu);
    if (!ch->cqs.empty()) return EBUSY;
    ch->stop = true;
    ch->armed_cv.notify_one();
  }
  ch->notifier.join();
  close(ch->ch.fd);
  delete ch;
  return 0;
}

ibv_cq* ibv_create_cq(ibv_context* context, int cqe, void* cq_context,
                      ibv_comp_channel* channel, int comp_vector) {
  Cq* cq = NewCq(context, cqe, cq_context, channel, comp_vector);
  return cq != nullptr ? &cq->cq : nullptr;
}

// ibv_resize_cq(3): the CQ holds at least `cqe` entries from now on. Its
// completions live in an unbounded list, so only the count changes; a
// count below the completions it holds now is EINVAL, as the man page has
// it. A send the daemon has not ended yet counts as held: a hardware CQ
// would hold its completion within microseconds, an engine that naps
// perhaps only later, and whether the call fails must not depend on that.
int ibv_resize_cq(ibv_cq* ibcq, int cqe) {
  if (ibcq == nullptr || cqe <= 0 || cqe > kMaxCqe) return EINVAL;
  Cq* cq = CqOf(ibcq);
  std::lock_guard<std::mutex> lock(cq->mu);
  size_t held = 0;
  for (Qp* q : cq->send_qps) {
    std::lock_guard<std::mutex> qp_lock(q->mu);
    Pump(q);
    held += q->send_wcs.size() + q->owner->client->Outstanding(q->conn);
  }
  for (Qp* q : cq->recv_qps) {
    std::lock_guard<std::mutex> qp_lock(q->mu);
    Pump(q);
    held += q->recv_wcs.size();
  }
  if (held > static_cast<size_t>(cqe)) return EINVAL;
  ibcq->cqe = cqe;
  return 0;
}

int ibv_destroy_cq(ibv_cq* ibcq) {
  Cq* cq = CqOf(ibcq);
  {
    std::lock_guard<std::mutex> lock(cq->mu);
    if (!cq->send_qps.empty() || !cq->recv_qps.empty()) return EBUSY;
  }
  if (cq->channel != nullptr) {
    // Every event it raised must be acknowledged first (ibv_get_cq_event(3)).
    {
      std::unique_lock<std::mutex> lock(cq->mu);
      cq->acked_cv.wait(lock, [cq] { return cq->acked >= cq->events; });
    }
    std::lock_guard<std::mutex> lock(cq->channel->mu);
    auto& v = cq->channel->cqs;
    v.erase(std::remove(v.begin(), v.end(), cq), v.end());
    // Events raised and never taken go with it (one count each on the fd).
    auto& pending = cq->channel->events;
    const size_t before = pending.size();
    pending.erase(std::remove(pending.begin(), pending.end(), cq),
                  pending.end());
    TakeBackCounts(cq->channel->ch.fd, before - pending.size());
  }
  pthread_mutex_destroy(&cq->cq.mutex);
  pthread_cond_destroy(&cq->cq.cond);
  Ctx(ibcq->context)->cq_count.fetch_sub(1);
  delete cq;
  return 0;
}

// Takes the next event the notifier raised: blocks on the channel's fd
// (EAGAIN when the application made it non-blocking and there is none).
int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq_out,
                     void** cq_context) {
  auto* ch = reinterpret_cast<Channel*>(channel);
  uint64_t count = 0;
  while (read(ch->ch.fd, &count, sizeof(count)) != sizeof(count)) {
    if (errno != EINTR) return -1;
  }
  std::lock_guard<std::mutex> lock(ch->mu);
  // An eventfd read takes the whole count: give back all but one.
  if (count > 1) {
    const uint64_t rest = count - 1;
    [[maybe_unused]] ssize_t n = write(ch->ch.fd, &rest, sizeof(rest));
  }
  if (ch->events.empty()) {
    errno = EAGAIN;
    return -1;
  }
  Cq* cq = ch->events.front();
  ch->events.pop_front();
  {
    std::lock_guard<std::mutex> cq_lock(cq->mu);
    ++cq->events;  // to be acknowledged before the CQ may go
  }
  *cq_out = &cq->cq;
  *cq_context = cq->cq.cq_context;
  return 0;
}

void ibv_ack_cq_events(ibv_cq* ibcq, unsigned int nevents) {
  Cq* cq = CqOf(ibcq);
  std::lock_guard<std::mutex> lock(cq->mu);
  cq->cq.comp_events_completed += nevents;
  cq->acked += nevents;
  cq->acked_cv.notify_all();
}

}  // extern "C"
