// Fuzz target for the engine's side of the send ring: arbitrary SendEntry
// bytes, as a hostile or buggy client writes them, taken by an Endpoint
// (Endpoint::PullRequests and Translate) against a registration table with
// a few real registrations, and carried out -- directly between two
// endpoints of one engine, or over a port whose frames go nowhere.
// Checks:
//   - every entry taken that a model of Translate's checks refuses (an op,
//     flag or SGE count it does not serve; an lkey that does not name
//     memory of this session with the access and range needed; more than
//     2 GiB) completes once, with the status the model gives (invalid or
//     fault), its op and no bytes: never silently dropped;
//   - every completion names an entry taken, at most once; an entry
//     accepted completes as the path allows (direct: success with its
//     length, or a remote access error that closes the connection; port:
//     never a success, no peer answers), or silently on success, or by the
//     connection's final status (its index at or past the retired count);
//     an atomic that fails directly, with the peer's refusal (remote
//     access, or invalid request for a misaligned address);
//   - a memory window request over a port (answered here as the control
//     plane would, refused when its bound key is odd) runs once every
//     request before it completed, and completes as answered (a refusal
//     breaks the connection);
//   - pins: none held between turns on the direct path, and over a port
//     exactly one per SGE of every request outstanding in the queue pair;
//     none once the endpoints closed;
//   - no memory outside the registrations' buffers is touched (exact-size
//     heap blocks, AddressSanitizer).
//
// Input: a mode byte (bit 0: over a port instead of direct; bit 1: over a
// port, time passes, so retransmissions run out and the queue pair
// fails), then records of 321 bytes: a steering byte and a SendEntry's
// 320 bytes. The steering byte's bits pull parts of the entry towards the
// registrations so that valid requests are common: bit 0 the op, bit 1
// the flags, bit 2 num_sge (an atomic's: 1), bit 3 the SGEs' keys and
// addresses, bit 4 their lengths (small; an atomic's first: 8), bit 5 the
// remote key and address, bit 6 the remote length range (small); bit 7
// runs the endpoints until idle before the next entry is pushed. wr_id is
// always the entry's index.
//
// Runs under libFuzzer (--config=fuzz) or, as endpoint_send_fuzzer under
// gcc, replaying dataplane/engine/corpus/endpoint_send (see
// dataplane/wire/fuzz.bzl).
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <vector>

#include "api/shm/layout.h"
#include "api/shm/ring.h"
#include "dataplane/engine/endpoint.h"
#include "dataplane/engine/testing/session_region.h"
#include "dataplane/mr/registration_table.h"
#include "dataplane/wire/fuzz_driver.h"

namespace rdmaplane::engine {
namespace {

constexpr size_t kRecordBytes = 1 + sizeof(shm::SendEntry);
constexpr uint32_t kMaxEntries = 64;
constexpr uint32_t kBudget = 16;
constexpr uint32_t kMaxTurns = 256;

constexpr uint32_t kRequester = 1;  // session ids
constexpr uint32_t kResponder = 2;
constexpr uint32_t kStranger = 3;
constexpr uint32_t kRequesterScope = 10;
constexpr uint32_t kResponderScope = 11;
constexpr uint32_t kPortScope = 12;

constexpr size_t kHalf = 32 << 10;
constexpr size_t kBufferBytes = 2 * kHalf;
constexpr uint64_t kLocalVa = 0x10000000;
constexpr uint64_t kHugeVa = 0x100000000;
constexpr uint64_t kRemoteVa = 0x7F0000000000;
// Longer than 2 GiB, so that one SGE can pass the range check and the
// request still be refused for its total.
constexpr uint64_t kHugeBytes = (uint64_t{1} << 31) + kBufferBytes;

// A port whose frames go nowhere.
class DropSink : public rc::FrameSink {
 public:
  std::span<uint8_t> Reserve(size_t max_len) override {
    if (buf_.size() < max_len) buf_.resize(max_len);
    return std::span<uint8_t>(buf_.data(), max_len);
  }
  void Commit(size_t) override {}

 private:
  std::vector<uint8_t> buf_;
};

using Region = SessionRegion;

// The memory behind the huge registration: reserved once, never written
// (registered for local reads only), so its pages stay the zero page.
uint8_t* HugeMemory() {
  static uint8_t* const huge = [] {
    void* p = mmap(nullptr, kHugeBytes, PROT_READ,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    FUZZ_CHECK(p != MAP_FAILED);
    return static_cast<uint8_t*>(p);
  }();
  return huge;
}

// What the fuzzer registered, to predict Translate's local checks.
struct Key {
  uint32_t key = 0;
  mr::Registration r;
  bool invalidated = false;
};

// What an entry of the send ring became.
struct Outcome {
  shm::SendEntry entry{};
  std::optional<int32_t> expected;  // Translate's answer, per the model
  std::optional<shm::CompletionEntry> completion;
};

class Harness {
 public:
  Harness(bool port, bool time_passes)
      : port_(port),
        time_passes_(time_passes),
        table_(16, 1),
        local_(new uint8_t[kBufferBytes]),
        remote_(new uint8_t[kBufferBytes]) {
    for (size_t i = 0; i < kBufferBytes; ++i) {
      local_[i] = static_cast<uint8_t>(i * 7);
      remote_[i] = static_cast<uint8_t>(i * 13 + 1);
    }
    // Local: read-write, read-only, huge read-only, another session's.
    AddLocal(kRequester, kLocalVa, kHalf, local_.get(),
             mr::kAccessLocal | mr::kAccessLocalWrite);
    AddLocal(kRequester, kLocalVa + kHalf, kHalf, local_.get() + kHalf,
             mr::kAccessLocal);
    AddLocal(kRequester, kHugeVa, kHugeBytes, HugeMemory(), mr::kAccessLocal);
    AddLocal(kStranger, kLocalVa, kBufferBytes, local_.get(),
             mr::kAccessLocal | mr::kAccessLocalWrite);
    // Remote, on the responder's side: read-write-atomic, read-only, and
    // one scoped to another connection.
    AddRemote(kResponderScope, kRemoteVa, kHalf, remote_.get(),
              mr::kAccessRemoteRead | mr::kAccessRemoteWrite |
                  mr::kAccessRemoteAtomic);
    AddRemote(kResponderScope, kRemoteVa + kHalf, kHalf, remote_.get() + kHalf,
              mr::kAccessRemoteRead);
    AddRemote(kRequesterScope, kRemoteVa, kBufferBytes, remote_.get(),
              mr::kAccessRemoteRead | mr::kAccessRemoteWrite);

    if (port_) {
      EndpointInfo info = Info(a_region_, kPortScope, kRequester);
      info.qp.local_qpn = wire::Qpn(0x10);
      info.qp.remote_qpn = wire::Qpn(0x20);
      info.qp.send_psn = wire::Psn(1000);
      info.qp.recv_psn = wire::Psn(5000);
      info.qp.path.src_ip = 0x0A000001;
      info.qp.path.dst_ip = 0x0A000002;
      info.qp.pmtu = 256;
      a_ = std::make_unique<Endpoint>(info, &table_, &clock_,
                                      fault::FaultSpec{}, &sink_);
    } else {
      EndpointInfo a = Info(a_region_, kRequesterScope, kRequester);
      a.qp.local_qpn = wire::Qpn(2);
      a.qp.remote_qpn = wire::Qpn(3);
      EndpointInfo b = Info(b_region_, kResponderScope, kResponder);
      b.qp.local_qpn = wire::Qpn(3);
      b.qp.remote_qpn = wire::Qpn(2);
      a_ = std::make_unique<Endpoint>(a, &table_, &clock_, fault::FaultSpec{});
      b_ = std::make_unique<Endpoint>(b, &table_, &clock_, fault::FaultSpec{});
      a_->Wire(b_.get());
      b_->Wire(a_.get());
    }
  }

  // Rewrites the parts of `e` that `steer` says towards the registrations.
  void Steer(uint8_t steer, shm::SendEntry& e) const {
    if ((steer & 0x01) != 0) {
      constexpr uint8_t kOps[] = {shm::kSendWrite,       shm::kSendRead,
                                  shm::kSendSend,        shm::kSendCompareSwap,
                                  shm::kSendFetchAdd,    shm::kSendBindMw,
                                  shm::kSendLocalInvalidate};
      e.op = kOps[e.op % 7];
    }
    const bool atomic =
        e.op == shm::kSendCompareSwap || e.op == shm::kSendFetchAdd;
    if ((steer & 0x02) != 0) e.flags &= shm::kVerbsSendFlags;
    if ((steer & 0x04) != 0) {
      e.num_sge = atomic ? 1 : e.num_sge % (shm::kMaxSge + 1);
    }
    for (uint32_t i = 0; i < shm::kMaxSge; ++i) {
      shm::SgeEntry& s = e.sge[i];
      if ((steer & 0x08) != 0) {
        // A registered key (local or remote), key 0, or a key whose tag
        // is off by one.
        const uint32_t pick = s.lkey % (keys_.size() + 2);
        if (pick < keys_.size()) {
          const Key& k = keys_[pick];
          s.lkey = k.key;
          s.address = k.r.address + s.address % (kBufferBytes + 64);
        } else {
          s.lkey = pick == keys_.size() ? 0 : keys_[0].key ^ 1;
        }
      }
      if ((steer & 0x10) != 0)
        s.length = atomic && i == 0 ? 8 : s.length % 4096;
    }
    if ((steer & 0x20) != 0) {
      e.rkey = keys_[4 + e.rkey % 3].key;
      e.remote_address = kRemoteVa + e.remote_address % (kBufferBytes + 64);
    }
  }

  // Pushes an entry; false when the ring is full (the client would wait).
  bool Push(const shm::SendEntry& e) {
    if (!a_region_.send.TryPush(e)) return false;
    outcomes_.push_back({e, std::nullopt, std::nullopt});
    return true;
  }

  // Runs the endpoints until they are idle (or time has run out for the
  // queue pair), then checks what the entries taken became.
  void RunUntilIdle() {
    for (uint32_t turn = 0; turn < kMaxTurns; ++turn) {
      uint32_t work = a_->Poll(kBudget);
      if (b_ != nullptr) work += b_->Poll(kBudget);
      // The control plane's part in a memory window request: an odd bound
      // key is refused, any other request done.
      shm::SendEntry window;
      uint32_t seq;
      if (a_->TakeLocalOp(&window, &seq)) {
        FUZZ_CHECK(port_ && WindowOp(window));
        a_->LocalOpPassedUp();
        FUZZ_CHECK(a_->ClaimLocalOp(seq));
        const bool refuse = (window.imm & 1) != 0;
        a_->AnswerLocalOp(seq, refuse ? shm::kStatusInvalid : shm::kStatusOk,
                          refuse ? shm::kDetailMwBind : shm::kDetailNone);
        ++work;
      }
      Drain();
      if (time_passes_) {
        clock_.now += 20'000'000;
        if (turn < 64) continue;
      }
      if (work == 0) break;
    }
    Account();
    CheckPins();
  }

  // Closes the connection as the client would, and checks the end state.
  void Finish() {
    a_->Close(CloseReason::kClosedByClient);
    if (b_ != nullptr) b_->Close(CloseReason::kPeerClosed);
    Drain();
    Account();
    FUZZ_CHECK(a_->closed());
    FUZZ_CHECK(a_region_.header->final_status[0].load() != shm::kStatusOk);
    for (const Key& k : keys_) FUZZ_CHECK(table_.in_flight(k.key) == 0);
    // An entry taken and not completed ended silently, as a success
    // retired in order, or by the final status.
    const uint32_t retired = a_region_.header->retired[0].load();
    for (uint32_t i = 0; i < Taken(); ++i) {
      const Outcome& o = outcomes_[i];
      if (o.completion.has_value()) {
        // Also those that came after Account saw the entry: over a port
        // nothing succeeds.
        FUZZ_CHECK(o.completion->op == o.entry.op);
        FUZZ_CHECK(!port_ || WindowOp(o.entry) ||
                   o.completion->status != shm::kStatusOk);
        continue;
      }
      FUZZ_CHECK(i >= retired ||
                 ((!port_ || WindowOp(o.entry)) &&
                  *o.expected == shm::kStatusOk &&
                  (o.entry.flags & shm::kFlagSilentSuccess)));
    }
  }

 private:
  EndpointInfo Info(Region& r, uint32_t scope, uint32_t session) {
    EndpointInfo info;
    info.connection_id = scope;
    info.registration_scope = scope;
    info.session_id = session;
    info.header = r.header;
    info.slot = 0;
    info.send = r.send;
    info.completion = r.completion;
    info.qp.path.src_ip = info.qp.path.dst_ip = 0x7F000001;
    return info;
  }

  void AddLocal(uint32_t owner, uint64_t va, uint64_t len, uint8_t* host,
                uint8_t access) {
    Key k;
    k.r.owner = owner;
    k.r.address = va;
    k.r.length = len;
    k.r.host = host;
    k.r.access = access;
    k.key = *table_.Insert(k.r);
    keys_.push_back(k);
  }

  void AddRemote(uint32_t scope, uint64_t va, uint64_t len, uint8_t* host,
                 uint8_t access) {
    Key k;
    k.r.owner = kResponder;
    k.r.connection = scope;
    k.r.address = va;
    k.r.length = len;
    k.r.host = host;
    k.r.access = access;
    k.key = *table_.Insert(k.r);
    keys_.push_back(k);
  }

  // Entries the endpoint took from the send ring.
  uint32_t Taken() const {
    return static_cast<uint32_t>(outcomes_.size()) - a_region_.send.Size();
  }

  void Drain() {
    shm::CompletionEntry c;
    shm::PopResult r;
    while ((r = a_region_.completion.TryPop(&c)) == shm::PopResult::kOk) {
      FUZZ_CHECK(c.wr_id < outcomes_.size());
      Outcome& o = outcomes_[c.wr_id];
      FUZZ_CHECK(!o.completion.has_value());  // exactly once
      o.completion = c;
    }
    FUZZ_CHECK(r == shm::PopResult::kEmpty);
    if (b_ != nullptr) {
      // The responder's client posts nothing: nothing completes there.
      FUZZ_CHECK(b_region_.completion.TryPop(&c) == shm::PopResult::kEmpty);
    }
  }

  // Translate's answer for `e`, from the registrations as the fuzzer made
  // them (and invalidated them).
  int32_t Expected(const shm::SendEntry& e) const {
    // Over a port a memory window request is taken as it is, for the
    // control plane to check.
    if (port_ && WindowOp(e)) return shm::kStatusOk;
    const uint32_t known =
        port_ ? shm::kVerbsSendFlags : shm::kKnownSendFlags;
    const bool atomic = Atomic(e);
    if ((e.op != shm::kSendWrite && e.op != shm::kSendRead && !atomic &&
         !(e.op == shm::kSendSend && port_)) ||
        e.num_sge > shm::kMaxSge || (e.flags & ~known) != 0 ||
        ((e.op == shm::kSendRead || atomic) &&
         (e.flags & shm::kFlagImmediate) != 0) ||
        ((e.flags & shm::kFlagInvalidate) != 0 &&
         (e.op != shm::kSendSend || (e.flags & shm::kFlagImmediate) != 0)) ||
        (atomic && (e.num_sge != 1 || e.sge[0].length != 8))) {
      return shm::kStatusInvalid;
    }
    const uint8_t access = e.op == shm::kSendRead || atomic
                               ? mr::kAccessLocalWrite
                               : mr::kAccessLocal;
    uint64_t total = 0;
    for (uint32_t i = 0; i < e.num_sge; ++i) {
      const shm::SgeEntry& s = e.sge[i];
      total += s.length;
      const Key* k = Find(s.lkey);
      if (k == nullptr || k->r.owner != kRequester ||
          (k->r.access & access) != access || s.address < k->r.address ||
          s.address - k->r.address > k->r.length ||
          s.length > k->r.length - (s.address - k->r.address)) {
        return shm::kStatusFault;
      }
    }
    if (total > (uint64_t{1} << 31)) return shm::kStatusInvalid;
    return shm::kStatusOk;
  }

  static bool WindowOp(const shm::SendEntry& e) {
    return e.op == shm::kSendBindMw || e.op == shm::kSendLocalInvalidate;
  }

  static bool Atomic(const shm::SendEntry& e) {
    return e.op == shm::kSendCompareSwap || e.op == shm::kSendFetchAdd;
  }

  const Key* Find(uint32_t key) const {
    for (const Key& k : keys_) {
      if (k.key == key && key != 0 && !k.invalidated) return &k;
    }
    return nullptr;
  }

  // Checks the entries taken since the last call, in taking order.
  void Account() {
    const uint32_t taken = Taken();
    for (; checked_ < taken; ++checked_) {
      Outcome& o = outcomes_[checked_];
      const shm::SendEntry& e = o.entry;
      o.expected = Expected(e);
      if (*o.expected != shm::kStatusOk) {
        // Refused: completes at once, with the model's status.
        FUZZ_CHECK(o.completion.has_value());
        FUZZ_CHECK(o.completion->status == *o.expected);
        FUZZ_CHECK(o.completion->op == e.op);
        FUZZ_CHECK(o.completion->byte_len == 0);
        continue;
      }
      if (WindowOp(e)) {
        // Answered after every request before it completed, and then the
        // next ones wait for it: done, silently or not, or refused (the
        // connection breaks), or still waiting.
        if (o.completion.has_value()) {
          const bool refused = (e.imm & 1) != 0;
          FUZZ_CHECK(o.completion->status ==
                     (refused ? shm::kStatusInvalid : shm::kStatusOk));
          FUZZ_CHECK(o.completion->byte_len == 0);
          if (refused) {
            FUZZ_CHECK(o.completion->detail == shm::kDetailMwBind);
            FUZZ_CHECK(a_->closed());
          } else {
            FUZZ_CHECK((e.flags & shm::kFlagSilentSuccess) == 0);
          }
        } else {
          // Taken, so passed up and answered within the same run: a silent
          // success, or ended by a close.
          FUZZ_CHECK((e.flags & shm::kFlagSilentSuccess) != 0 ||
                     a_->closed());
        }
        continue;
      }
      uint64_t total = 0;
      for (uint32_t i = 0; i < e.num_sge; ++i) total += e.sge[i].length;
      if (port_) {
        // No peer answers: nothing succeeds.
        FUZZ_CHECK(!o.completion.has_value() ||
                   o.completion->status != shm::kStatusOk);
        continue;
      }
      bool succeeded = false;
      if (!o.completion.has_value()) {
        // Carried out directly: only a silent success goes without one.
        FUZZ_CHECK((e.flags & shm::kFlagSilentSuccess) != 0);
        succeeded = true;
      } else if (o.completion->status == shm::kStatusOk) {
        FUZZ_CHECK((e.flags & shm::kFlagSilentSuccess) == 0);
        FUZZ_CHECK(o.completion->byte_len == total);
        succeeded = true;
      } else if (Atomic(e) && (e.remote_address & 7) != 0) {
        // The peer refuses a misaligned atomic: the connection breaks.
        FUZZ_CHECK(o.completion->status == shm::kStatusConnAborted);
        FUZZ_CHECK(o.completion->detail == shm::kDetailRemoteInvalid);
        FUZZ_CHECK(a_->closed());
        FUZZ_CHECK(checked_ + 1 == taken);
      } else {
        // The peer's registration refused it: the connection breaks.
        FUZZ_CHECK(o.completion->status == (e.op == shm::kSendWrite
                                                ? shm::kStatusFault
                                                : shm::kStatusRemoteResources));
        FUZZ_CHECK(o.completion->detail == shm::kDetailRemoteAccess);
        FUZZ_CHECK(a_->closed());
        FUZZ_CHECK(checked_ + 1 == taken);
      }
      // A read with local invalidate retires its first buffer's key.
      if (succeeded && e.op == shm::kSendRead && e.num_sge > 0 &&
          (e.flags & shm::kFlagReadLocalInvalidate) != 0) {
        for (Key& k : keys_) {
          if (k.key == e.sge[0].lkey) k.invalidated = true;
        }
      }
    }
    // Entries not taken have not completed.
    for (uint32_t i = taken; i < outcomes_.size(); ++i) {
      FUZZ_CHECK(!outcomes_[i].completion.has_value());
    }
  }

  // Pins held now: none on the direct path; over a port, one per SGE of
  // each request the queue pair still holds (taken, accepted, and not
  // completed), unless the connection closed.
  void CheckPins() const {
    for (const Key& k : keys_) {
      uint32_t held = 0;
      if (port_ && !a_->closed()) {
        for (uint32_t i = 0; i < checked_; ++i) {
          const Outcome& o = outcomes_[i];
          if (*o.expected != shm::kStatusOk || o.completion.has_value() ||
              WindowOp(o.entry)) {
            continue;  // a window request holds no pins
          }
          for (uint32_t j = 0; j < o.entry.num_sge; ++j) {
            if (o.entry.sge[j].lkey == k.key) ++held;
          }
        }
      }
      if (port_ && time_passes_) continue;  // completions race the count
      FUZZ_CHECK(table_.in_flight(k.key) == held);
    }
  }

  const bool port_;
  const bool time_passes_;
  ManualClock clock_;
  mr::RegistrationTable table_;
  std::unique_ptr<uint8_t[]> local_;
  std::unique_ptr<uint8_t[]> remote_;
  std::vector<Key> keys_;  // 0-3 local, 4-6 remote
  DropSink sink_;
  Region a_region_;
  Region b_region_;
  std::unique_ptr<Endpoint> a_;
  std::unique_ptr<Endpoint> b_;
  std::vector<Outcome> outcomes_;
  uint32_t checked_ = 0;
};

void Run(const uint8_t* data, size_t size) {
  if (size < 1) return;
  const uint8_t mode = data[0];
  const bool port = (mode & 1) != 0;
  Harness h(port, port && (mode & 2) != 0);
  size_t at = 1;
  for (uint32_t n = 0; n < kMaxEntries && size - at >= kRecordBytes; ++n) {
    const uint8_t steer = data[at];
    shm::SendEntry e;
    std::memcpy(&e, data + at + 1, sizeof(e));
    at += kRecordBytes;
    h.Steer(steer, e);
    e.wr_id = n;
    if (!h.Push(e)) break;
    if ((steer & 0x80) != 0) h.RunUntilIdle();
  }
  h.RunUntilIdle();
  h.Finish();
}

}  // namespace
}  // namespace rdmaplane::engine

namespace rdmaplane::wire {

// For the fuzz_driver's mutation mode: on the direct path, a write of 64
// bytes, a read with local invalidate, and a raw entry; then a COMPARE
// SWAP, a FETCH ADD and a misaligned FETCH ADD, directly and over a port;
// memory window requests over a port.
std::vector<std::vector<uint8_t>> FuzzSeedCorpus() {
  auto record = [](std::vector<uint8_t>& seed, uint8_t steer, uint8_t op,
                   uint32_t flags, uint64_t remote_address = 128) {
    shm::SendEntry e{};
    e.op = op;
    e.flags = flags;
    e.num_sge = 1;
    e.sge[0] = {64, 64, 0};
    e.rkey = 0;
    e.remote_address = remote_address;
    e.compare = 0;
    e.swap_add = 5;
    seed.push_back(steer);
    const auto* p = reinterpret_cast<const uint8_t*>(&e);
    seed.insert(seed.end(), p, p + sizeof(e));
  };
  std::vector<uint8_t> seed = {0};
  record(seed, 0x7F, 0, 0);
  record(seed, 0x7F, 1, shm::kFlagReadLocalInvalidate);
  record(seed, 0x00, shm::kSendWrite, 0);
  std::vector<std::vector<uint8_t>> seeds = {seed};
  for (uint8_t mode : {0, 1}) {
    std::vector<uint8_t> atomics = {mode};
    record(atomics, 0xFF, 3, 0);  // steered to COMPARE SWAP
    record(atomics, 0xFF, 4, 0);  // FETCH ADD
    record(atomics, 0x7F, 4, 0, 132);
    seeds.push_back(atomics);
  }
  // Over a port: a bind, a write it waits for, a silent invalidation, and
  // a refused bind (odd key).
  std::vector<uint8_t> windows = {1};
  record(windows, 0x00, shm::kSendBindMw, 0);
  record(windows, 0x7E, shm::kSendWrite, 0);
  record(windows, 0x80, shm::kSendLocalInvalidate, shm::kFlagSilentSuccess);
  record(windows, 0x80, shm::kSendBindMw, 0);
  windows[windows.size() - sizeof(shm::SendEntry) +
          offsetof(shm::SendEntry, imm)] = 1;
  seeds.push_back(windows);
  return seeds;
}

}  // namespace rdmaplane::wire

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  rdmaplane::engine::Run(data, size);
  return 0;
}
