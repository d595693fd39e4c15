// rdmaplane_perf: perftest-style bandwidth and latency of one-sided RDMA
// WRITE and READ through running rdmaplane daemons.
//
// One process opens a session with each daemon, like rdmaplane_transfer: on
// the listening daemon (--listen_socket) it listens, accepts and registers
// the target memory; that side only registers memory, since one-sided
// operations need no CPU of the target. On the connecting daemon
// (--connect_socket, default the listening one) it connects, to --peer (the
// listening daemon's data-port address) or, without --peer, inside the one
// daemon, and posts every request.
//
//   rdmaplane_perf --listen_socket=/tmp/a.sock --mode=write_bw,write_lat
//       --sizes=8:4194304 --depth=16 --duration_s=1 --json=/tmp/perf.json
//   rdmaplane_perf --listen_socket=/tmp/a.sock --connect_socket=/tmp/b.sock
//       --peer=10.0.0.1 --mode=read_bw --sizes=65536 --iterations=10000
//
// Modes:
//  * write_bw, read_bw: `depth` requests outstanding on each of
//    `connections` connections, reposted as completions are reaped with
//    Client::Poll. After --warmup completions per connection the clock
//    starts; it stops after --iterations more per connection, or after
//    --duration_s. Bandwidth is the payload bytes completed in that window
//    over its length, in GB/s (1e9 bytes per second); the request rate is in
//    Mops (1e6 requests per second).
//  * write_lat, read_lat: one request outstanding at a time (connections
//    taken in turn); each sample is the time from posting to seeing the
//    completion, polling without sleeping: a full round trip (request and
//    acknowledgment or response). p50/p90/p99/max in microseconds; --samples
//    FILE keeps every sample for a CDF.
//
// Polling never sleeps, but after --yield_after empty polls in a row the
// tool yields its CPU once (sched_yield): where the engine has no core of
// its own (2 CPUs shared with other work) it would otherwise wait for the
// scheduler's next time slice, milliseconds, while the tool spins.
//
// Requests take message-sized slots of a buffer in turn, at the same
// offset on both sides. By default the buffer is `depth` messages (at most
// 64 MiB), so the data stays in the caches as in perftest; --region_mib=N
// spreads the requests over N MiB per side and connection instead, which
// makes a copy-based path pay for memory as a memcpy of N MiB buffers does.
// Before each bandwidth run the source side is filled with a pattern of
// that run, and after it every slot the run used is compared with the
// source (untimed; --noverify skips both). A failed request or a byte that
// did not arrive fails the run.
//
// Progress goes to stderr, a table to stdout, every figure to --json FILE.
// Exit status: 0 ok, 1 a run failed (or a daemon could not be reached), 2
// usage.
//
// Single-threaded: one thread posts and polls every connection.
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "api/client.h"

ABSL_FLAG(std::string, listen_socket, "",
          "socket of the daemon whose client is the target (registers memory)");
ABSL_FLAG(std::string, connect_socket, "",
          "socket of the daemon whose client posts (default: the listening "
          "one)");
ABSL_FLAG(std::string, peer, "",
          "data-port IPv4 address of the listening daemon; empty: "
          "connections inside one daemon");
ABSL_FLAG(std::string, service, "perf", "service name");
ABSL_FLAG(std::string, mode, "write_bw",
          "comma-separated: write_bw, read_bw, write_lat, read_lat");
ABSL_FLAG(std::string, sizes, "65536",
          "message sizes in bytes, comma-separated; LO:HI is every power of "
          "two from LO to HI (8:4194304)");
ABSL_FLAG(uint32_t, depth, 16,
          "requests outstanding per connection (bandwidth modes)");
ABSL_FLAG(uint32_t, connections, 1, "connections (1..16)");
ABSL_FLAG(uint32_t, region_mib, 0,
          "MiB per side and connection the requests rotate over (0: depth "
          "messages, cache-hot)");
ABSL_FLAG(uint64_t, iterations, 0,
          "measured requests per connection and size (0: use --duration_s)");
ABSL_FLAG(double, duration_s, 1.0,
          "measured time per size when --iterations is 0");
ABSL_FLAG(uint64_t, warmup, 64,
          "requests per connection completed before the clock starts");
ABSL_FLAG(int32_t, timeout_s, 20,
          "fail when no request completes for this long");
ABSL_FLAG(uint32_t, yield_after, 1000,
          "give the CPU away (sched_yield) after this many polls in a row "
          "found nothing, so an engine sharing this CPU gets to run; 0: "
          "never");
ABSL_FLAG(bool, verify, true,
          "check after each bandwidth run that every byte it moved arrived "
          "(untimed)");
ABSL_FLAG(std::string, json, "", "write every figure as JSON here");
ABSL_FLAG(std::string, samples, "",
          "write every latency sample here: 'mode bytes microseconds' lines");

namespace {

using rdmaplane::Client;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kMaxSize = 4u << 20;
constexpr uint32_t kMaxDepth = 128;  // below the send ring's 256 entries
constexpr uint64_t kMaxSlotBytes = 64ull << 20;

enum class Mode { kWriteBw, kReadBw, kWriteLat, kReadLat };

const char* ModeName(Mode m) {
  switch (m) {
    case Mode::kWriteBw:
      return "write_bw";
    case Mode::kReadBw:
      return "read_bw";
    case Mode::kWriteLat:
      return "write_lat";
    case Mode::kReadLat:
      return "read_lat";
  }
  return "?";
}

bool IsWrite(Mode m) { return m == Mode::kWriteBw || m == Mode::kWriteLat; }
bool IsLatency(Mode m) { return m == Mode::kWriteLat || m == Mode::kReadLat; }

struct Options {
  std::string listen_socket, connect_socket, peer, service;
  std::vector<Mode> modes;
  std::vector<uint32_t> sizes;
  uint32_t depth = 16, connections = 1;
  uint64_t region_bytes = 0;  // 0: depth messages
  uint64_t iterations = 0, warmup = 64;
  double duration_s = 1.0;
  bool verify = true;
  uint32_t yield_after = 1000;
  absl::Duration timeout;
};

// One connection: the posting end's buffer and the target's.
struct Connection {
  rdp_conn conn = 0;         // on the connecting session: posts
  rdp_conn target_conn = 0;  // on the listening session
  uint8_t* local = nullptr;
  uint32_t lkey = 0;
  uint8_t* remote = nullptr;
  uint8_t descriptor[RDP_DESCRIPTOR_BYTES];
  uint32_t descriptor_length = sizeof(descriptor);
  std::vector<rdp_overlapped> ovs;
  uint64_t next_slot = 0;
};

struct Result {
  Mode mode;
  uint32_t size = 0;
  // Bandwidth.
  uint64_t requests = 0;
  double seconds = 0;
  double gbps = 0;
  double mops = 0;
  // Latency, microseconds.
  std::vector<double> samples;
  double p50 = 0, p90 = 0, p99 = 0, max = 0, min = 0, mean = 0;
};

double Micros(Clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

double Percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const size_t i = static_cast<size_t>(q * static_cast<double>(sorted.size()));
  return sorted[std::min(i, sorted.size() - 1)];
}

class Bench {
 public:
  explicit Bench(const Options& o) : o_(o) {}

  // Opens both sessions, connects and registers; "" or what failed.
  std::string Setup() {
    const uint32_t biggest =
        *std::max_element(o_.sizes.begin(), o_.sizes.end());
    region_ = o_.region_bytes > 0
                  ? std::max<uint64_t>(o_.region_bytes, biggest)
                  : biggest * std::max<uint64_t>(
                                  1, std::min<uint64_t>(
                                         o_.depth, kMaxSlotBytes / biggest));
    rdmaplane::ClientOptions lo, co;
    lo.socket_path = o_.listen_socket;
    co.socket_path = o_.connect_socket;
    lo.arena_bytes = co.arena_bytes =
        std::max<uint64_t>(64ull << 20, (region_ + (1 << 20)) * o_.connections);
    auto target = Client::Open(lo);
    if (!target.ok()) {
      return absl::StrCat("open ", o_.listen_socket, ": ",
                          target.status().message());
    }
    target_ = std::move(*target);
    auto poster = Client::Open(co);
    if (!poster.ok()) {
      return absl::StrCat("open ", o_.connect_socket, ": ",
                          poster.status().message());
    }
    poster_ = std::move(*poster);
    if (absl::Status s = target_->Listen(o_.service); !s.ok()) {
      return absl::StrCat("listen: ", s.message());
    }
    conns_.resize(o_.connections);
    for (Connection& c : conns_) {
      absl::StatusOr<rdp_conn> cc = poster_->Connect(o_.service, o_.peer);
      if (!cc.ok()) {
        return absl::StrCat("connect to ", o_.service,
                            o_.peer.empty() ? "" : " at ", o_.peer, ": ",
                            cc.status().message());
      }
      c.conn = *cc;
      absl::StatusOr<rdp_conn> tc = target_->Accept(o_.service, o_.timeout);
      if (!tc.ok()) return absl::StrCat("accept: ", tc.status().message());
      c.target_conn = *tc;
      c.local = static_cast<uint8_t*>(poster_->Alloc(region_));
      c.remote = static_cast<uint8_t*>(target_->Alloc(region_));
      if (c.local == nullptr || c.remote == nullptr) {
        return "out of arena memory";
      }
      // Touch every page now so no run pays for a page fault.
      std::memset(c.local, 0x11, region_);
      std::memset(c.remote, 0x22, region_);
      absl::StatusOr<uint32_t> lkey =
          poster_->RegisterMemory(c.local, region_, RDP_MEM_READWRITE);
      if (!lkey.ok()) {
        return absl::StrCat("register memory: ", lkey.status().message());
      }
      c.lkey = *lkey;
      const int st = target_->RegisterRdmaMemory(
          c.target_conn, c.remote, static_cast<uint32_t>(region_),
          RDP_MEM_READWRITE, c.descriptor, &c.descriptor_length);
      if (st != RDP_OK) {
        return absl::StrCat("register RDMA memory: ", rdp_status_name(st));
      }
      c.ovs.resize(std::max(o_.depth, 1u));
    }
    return "";
  }

  void Teardown() {
    for (Connection& c : conns_) {
      if (poster_ != nullptr) (void)poster_->Disconnect(c.conn);
      if (target_ != nullptr) (void)target_->Disconnect(c.target_conn);
    }
    poster_.reset();
    target_.reset();
  }

  bool hugepages() const {
    return poster_ != nullptr && poster_->hugepages() && target_->hugepages();
  }
  uint64_t region_bytes() const { return region_; }

  std::string Run(Mode mode, uint32_t size, Result* r) {
    r->mode = mode;
    r->size = size;
    return IsLatency(mode) ? RunLatency(mode, size, r)
                           : RunBandwidth(mode, size, r);
  }

 private:
  // Message-sized slots the requests of `size` bytes rotate over.
  uint64_t Slots(uint32_t size) const {
    const uint64_t fit = region_ / size;
    return o_.region_bytes > 0 ? fit : std::min<uint64_t>(o_.depth, fit);
  }

  // Posts a request on c for slot `slot`, its overlapped `ov`.
  int Post(Connection& c, Mode mode, uint32_t size, uint64_t slot,
           rdp_overlapped* ov) {
    const uint64_t offset = (slot % Slots(size)) * size;
    rdp_sge sge{c.local + offset, size, c.lkey};
    if (IsWrite(mode)) {
      return poster_->Write(c.conn, &sge, 1, c.descriptor, c.descriptor_length,
                            static_cast<uint32_t>(offset), 0, ov);
    }
    return poster_->Read(c.conn, &sge, 1,
                         reinterpret_cast<uint64_t>(c.remote) + offset,
                         c.descriptor, c.descriptor_length, 0, ov);
  }

  // Fills the side the data comes from with a pattern of this run: 64-bit
  // words holding the run and their own offset, so a lost, misplaced or
  // stale message shows.
  void Fill(Mode mode) {
    ++runs_;
    for (Connection& c : conns_) {
      uint8_t* source = IsWrite(mode) ? c.local : c.remote;
      for (uint64_t off = 0; off + 8 <= region_; off += 8) {
        const uint64_t word = (uint64_t{runs_} << 40) ^ off;
        std::memcpy(source + off, &word, 8);
      }
    }
  }

  // Every byte of every slot this run used must have landed.
  std::string Verify(Mode mode, uint32_t size) {
    for (Connection& c : conns_) {
      const uint8_t* source = IsWrite(mode) ? c.local : c.remote;
      const uint8_t* sink = IsWrite(mode) ? c.remote : c.local;
      const uint64_t used = std::min<uint64_t>(c.next_slot, Slots(size)) * size;
      if (std::memcmp(source, sink, used) != 0) {
        uint64_t i = 0;
        while (source[i] == sink[i]) ++i;
        return absl::StrCat(ModeName(mode), " of ", size, " bytes: byte ", i,
                            " of the buffer did not arrive");
      }
    }
    return "";
  }

  std::string RunBandwidth(Mode mode, uint32_t size, Result* r) {
    if (o_.verify) Fill(mode);
    const uint64_t n = conns_.size();
    const uint64_t warmup_total = o_.warmup * n;
    const uint64_t measured_total = o_.iterations * n;
    const auto duration = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(o_.duration_s));
    const auto timeout = absl::ToChronoNanoseconds(o_.timeout);
    for (Connection& c : conns_) {
      c.next_slot = 0;
      for (uint32_t d = 0; d < o_.depth; ++d) {
        c.ovs[d] = rdp_overlapped{};
        const int st = Post(c, mode, size, c.next_slot++, &c.ovs[d]);
        if (st != RDP_PENDING) {
          return absl::StrCat(ModeName(mode), " of ", size,
                              " bytes refused: ", rdp_status_name(st));
        }
      }
    }
    uint64_t completed = 0;  // since the start, warm-up included
    uint64_t measured = 0;
    bool timing = warmup_total == 0;
    bool posting = true;
    Clock::time_point start = Clock::now(), stop{};
    Clock::time_point last_progress = start;
    uint64_t outstanding = n * o_.depth;
    rdp_overlapped* done[64];
    uint64_t loops = 0;
    uint32_t idle = 0;
    while (outstanding > 0) {
      bool progressed = false;
      for (Connection& c : conns_) {
        const int got = poster_->Poll(c.conn, done, 64);
        if (got < 0) {
          return absl::StrCat("poll: ", rdp_status_name(got));
        }
        if (got == 0) continue;
        progressed = true;
        const Clock::time_point now = Clock::now();
        for (int i = 0; i < got; ++i) {
          rdp_overlapped* ov = done[i];
          if (ov->status != RDP_OK) {
            return absl::StrCat(ModeName(mode), " of ", size,
                                " bytes completed with ",
                                rdp_status_name(ov->status));
          }
          --outstanding;
          ++completed;
          if (timing && posting) {
            ++measured;
            if (measured_total > 0 ? measured >= measured_total
                                   : now - start >= duration) {
              posting = false;
              stop = now;
            }
          } else if (!timing && completed >= warmup_total) {
            timing = true;
            start = now;
          }
          if (posting) {
            const int st = Post(c, mode, size, c.next_slot++, ov);
            if (st != RDP_PENDING) {
              return absl::StrCat(ModeName(mode), " of ", size,
                                  " bytes refused: ", rdp_status_name(st));
            }
            ++outstanding;
          }
        }
        last_progress = now;
      }
      if (progressed) {
        idle = 0;
      } else if (o_.yield_after > 0 && ++idle >= o_.yield_after) {
        sched_yield();
        idle = 0;
      }
      if (!progressed && (++loops & 255) == 0) {
        const Clock::time_point now = Clock::now();
        if (now - last_progress > timeout) {
          return absl::StrCat(ModeName(mode), " of ", size,
                              " bytes: ", outstanding,
                              " requests did not complete in ",
                              absl::FormatDuration(o_.timeout));
        }
        // A duration run must end even if the window saw no completion.
        if (timing && posting && measured_total == 0 &&
            now - start >= duration) {
          posting = false;
          stop = now;
        }
      }
    }
    if (o_.verify) {
      if (std::string e = Verify(mode, size); !e.empty()) return e;
    }
    r->requests = measured;
    r->seconds = std::chrono::duration<double>(stop - start).count();
    if (r->seconds > 0) {
      r->gbps = static_cast<double>(measured) * size / r->seconds / 1e9;
      r->mops = static_cast<double>(measured) / r->seconds / 1e6;
    }
    return "";
  }

  std::string RunLatency(Mode mode, uint32_t size, Result* r) {
    const auto duration = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(o_.duration_s));
    const auto timeout = absl::ToChronoNanoseconds(o_.timeout);
    const uint64_t measured_total = o_.iterations * conns_.size();
    const uint64_t warmup_total = o_.warmup * conns_.size();
    r->samples.reserve(measured_total > 0 ? measured_total : 1 << 20);
    Clock::time_point start{};
    rdp_overlapped* done[1];
    for (uint64_t i = 0;; ++i) {
      if (i == warmup_total) start = Clock::now();
      if (i >= warmup_total) {
        const uint64_t taken = i - warmup_total;
        if (measured_total > 0 ? taken >= measured_total
                               : Clock::now() - start >= duration) {
          break;
        }
      }
      Connection& c = conns_[i % conns_.size()];
      rdp_overlapped ov{};
      const Clock::time_point t0 = Clock::now();
      const int st = Post(c, mode, size, 0, &ov);
      if (st != RDP_PENDING) {
        return absl::StrCat(ModeName(mode), " of ", size,
                            " bytes refused: ", rdp_status_name(st));
      }
      int got;
      Clock::time_point t1;
      uint32_t spins = 0;
      while ((got = poster_->Poll(c.conn, done, 1)) == 0) {
        if ((++spins & 4095) == 0 && Clock::now() - t0 > timeout) {
          return absl::StrCat(ModeName(mode), " of ", size,
                              " bytes did not complete in ",
                              absl::FormatDuration(o_.timeout));
        }
        if (o_.yield_after > 0 && spins % o_.yield_after == 0) sched_yield();
      }
      t1 = Clock::now();
      if (got < 0) return absl::StrCat("poll: ", rdp_status_name(got));
      if (done[0] != &ov) return "a completion for a request never posted";
      if (ov.status != RDP_OK) {
        return absl::StrCat(ModeName(mode), " of ", size,
                            " bytes completed with ",
                            rdp_status_name(ov.status));
      }
      if (i >= warmup_total) r->samples.push_back(Micros(t1 - t0));
    }
    std::vector<double> sorted = r->samples;
    std::sort(sorted.begin(), sorted.end());
    r->requests = sorted.size();
    r->p50 = Percentile(sorted, 0.50);
    r->p90 = Percentile(sorted, 0.90);
    r->p99 = Percentile(sorted, 0.99);
    r->max = sorted.empty() ? 0 : sorted.back();
    r->min = sorted.empty() ? 0 : sorted.front();
    double sum = 0;
    for (double v : sorted) sum += v;
    r->mean = sorted.empty() ? 0 : sum / static_cast<double>(sorted.size());
    return "";
  }

  const Options& o_;
  std::unique_ptr<Client> target_, poster_;
  std::vector<Connection> conns_;
  uint64_t region_ = 0;
  uint32_t runs_ = 0;
};

// Parses --sizes into *sizes; "" or what is wrong with it.
std::string ParseSizes(const std::string& text, std::vector<uint32_t>* sizes) {
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::vector<absl::string_view> range = absl::StrSplit(part, ':');
    uint32_t lo, hi;
    if (range.size() == 1 && absl::SimpleAtoi(range[0], &lo)) {
      hi = lo;
    } else if (range.size() != 2 || !absl::SimpleAtoi(range[0], &lo) ||
               !absl::SimpleAtoi(range[1], &hi) || lo > hi) {
      return absl::StrCat("'", part,
                          "' is neither a size nor a range LO:HI with LO <= "
                          "HI");
    }
    if (lo == 0 || hi > kMaxSize) {
      return absl::StrCat("'", part, "' is out of range: sizes are 1..",
                          kMaxSize, " bytes");
    }
    for (uint64_t s = lo; s <= hi; s *= 2)
      sizes->push_back(static_cast<uint32_t>(s));
  }
  return sizes->empty() ? "no size given" : "";
}

bool ParseOptions(Options* o) {
  o->listen_socket = absl::GetFlag(FLAGS_listen_socket);
  o->connect_socket = absl::GetFlag(FLAGS_connect_socket);
  if (o->connect_socket.empty()) o->connect_socket = o->listen_socket;
  o->peer = absl::GetFlag(FLAGS_peer);
  o->service = absl::GetFlag(FLAGS_service);
  o->depth = absl::GetFlag(FLAGS_depth);
  o->connections = absl::GetFlag(FLAGS_connections);
  o->region_bytes = uint64_t{absl::GetFlag(FLAGS_region_mib)} << 20;
  o->iterations = absl::GetFlag(FLAGS_iterations);
  o->duration_s = absl::GetFlag(FLAGS_duration_s);
  o->warmup = absl::GetFlag(FLAGS_warmup);
  o->verify = absl::GetFlag(FLAGS_verify);
  o->yield_after = absl::GetFlag(FLAGS_yield_after);
  o->timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  if (o->listen_socket.empty()) {
    std::fprintf(stderr, "rdmaplane_perf: --listen_socket is required\n");
    return false;
  }
  for (absl::string_view m :
       absl::StrSplit(absl::GetFlag(FLAGS_mode), ',', absl::SkipEmpty())) {
    if (m == "write_bw") {
      o->modes.push_back(Mode::kWriteBw);
    } else if (m == "read_bw") {
      o->modes.push_back(Mode::kReadBw);
    } else if (m == "write_lat") {
      o->modes.push_back(Mode::kWriteLat);
    } else if (m == "read_lat") {
      o->modes.push_back(Mode::kReadLat);
    } else {
      std::fprintf(stderr,
                   "rdmaplane_perf: unknown mode '%s' (write_bw, read_bw, "
                   "write_lat, read_lat)\n",
                   std::string(m).c_str());
      return false;
    }
  }
  if (o->modes.empty()) {
    std::fprintf(stderr, "rdmaplane_perf: --mode names no mode\n");
    return false;
  }
  if (const std::string e = ParseSizes(absl::GetFlag(FLAGS_sizes), &o->sizes);
      !e.empty()) {
    std::fprintf(stderr,
                 "rdmaplane_perf: --sizes: %s (a list such as 8,64 or a "
                 "range of powers of two such as 8:%u)\n",
                 e.c_str(), kMaxSize);
    return false;
  }
  if (o->depth == 0 || o->depth > kMaxDepth || o->connections == 0 ||
      o->connections > rdmaplane::shm::kMaxConnections ||
      o->region_bytes > (uint64_t{1} << 31) ||
      (o->iterations == 0 && !(o->duration_s > 0)) ||
      absl::GetFlag(FLAGS_timeout_s) <= 0) {
    std::fprintf(stderr,
                 "rdmaplane_perf: need depth 1..%u, connections 1..%u, "
                 "region_mib up to 2048, iterations or a positive "
                 "duration_s, a positive timeout_s\n",
                 kMaxDepth, rdmaplane::shm::kMaxConnections);
    return false;
  }
  return true;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", ch);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

bool WriteJson(const std::string& path, const Options& o, const Bench& bench,
               const std::vector<Result>& results, const std::string& error) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    std::perror(path.c_str());
    return false;
  }
  std::fprintf(
      f,
      "{\n  \"tool\": \"rdmaplane_perf\",\n  \"units\": {\"gbps\": \"GB/s "
      "(1e9 payload bytes per second)\", \"mops\": \"1e6 requests per "
      "second\", \"us\": \"microseconds from post to completion (one round "
      "trip)\"},\n  \"config\": {\"listen_socket\": %s, \"connect_socket\": "
      "%s, \"peer\": %s, \"depth\": %u, \"connections\": %u, \"iterations\": "
      "%" PRIu64 ", \"duration_s\": %g, \"warmup\": %" PRIu64
      ", \"region_bytes\": %" PRIu64
      ", \"verified\": %s, \"yield_after\": %u, \"hugepages\": %s},\n  \"ok\": "
      "%s,\n  \"error\": "
      "%s,\n  \"results\": [",
      JsonString(o.listen_socket).c_str(), JsonString(o.connect_socket).c_str(),
      JsonString(o.peer).c_str(), o.depth, o.connections, o.iterations,
      o.duration_s, o.warmup, bench.region_bytes(), o.verify ? "true" : "false",
      o.yield_after, bench.hugepages() ? "true" : "false",
      error.empty() ? "true" : "false", JsonString(error).c_str());
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    std::fprintf(f, "%s\n    {\"mode\": \"%s\", \"bytes\": %u, ", i ? "," : "",
                 ModeName(r.mode), r.size);
    if (IsLatency(r.mode)) {
      std::fprintf(f,
                   "\"samples\": %" PRIu64
                   ", \"p50_us\": %.3f, \"p90_us\": %.3f, \"p99_us\": %.3f, "
                   "\"max_us\": %.3f, \"min_us\": %.3f, \"mean_us\": %.3f}",
                   r.requests, r.p50, r.p90, r.p99, r.max, r.min, r.mean);
    } else {
      std::fprintf(f,
                   "\"depth\": %u, \"connections\": %u, \"requests\": %" PRIu64
                   ", \"seconds\": %.6f, \"gbps\": %.6f, \"mops\": %.6f}",
                   o.depth, o.connections, r.requests, r.seconds, r.gbps,
                   r.mops);
    }
  }
  std::fprintf(f, "\n  ]\n}\n");
  if (std::fclose(f) != 0) {
    std::perror(path.c_str());
    return false;
  }
  return true;
}

bool WriteSamples(const std::string& path, const std::vector<Result>& results) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    std::perror(path.c_str());
    return false;
  }
  for (const Result& r : results) {
    for (double v : r.samples) {
      std::fprintf(f, "%s %u %.3f\n", ModeName(r.mode), r.size, v);
    }
  }
  if (std::fclose(f) != 0) {
    std::perror(path.c_str());
    return false;
  }
  return true;
}

void PrintRow(const Options& o, const Result& r) {
  if (IsLatency(r.mode)) {
    std::printf("%-9s %8u %5s %5u %10" PRIu64
                " %9s %9s %8.2f %8.2f %8.2f %9.2f\n",
                ModeName(r.mode), r.size, "1", o.connections, r.requests, "-",
                "-", r.p50, r.p90, r.p99, r.max);
  } else {
    std::printf("%-9s %8u %5u %5u %10" PRIu64 " %9.3f %9.3f %8s %8s %8s %9s\n",
                ModeName(r.mode), r.size, o.depth, o.connections, r.requests,
                r.gbps, r.mops, "-", "-", "-", "-");
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "perftest-style bandwidth and latency of RDMA WRITE and READ through "
      "rdmaplane daemons");
  absl::ParseCommandLine(argc, argv);
  Options o;
  if (!ParseOptions(&o)) return 2;
  Bench bench(o);
  std::string error = bench.Setup();
  std::vector<Result> results;
  if (error.empty()) {
    const std::string length =
        o.iterations > 0
            ? absl::StrCat(o.iterations, " requests per connection")
            : absl::StrCat(o.duration_s, " s per size");
    std::fprintf(stderr,
                 "rdmaplane_perf: %s%s, %u connection(s), depth %u, %s, "
                 "arenas on %s\n",
                 o.peer.empty() ? "inside one daemon" : "to peer ",
                 o.peer.c_str(), o.connections, o.depth, length.c_str(),
                 bench.hugepages() ? "hugepages" : "regular pages");
    std::printf("%-9s %8s %5s %5s %10s %9s %9s %8s %8s %8s %9s\n", "mode",
                "bytes", "depth", "conns", "requests", "GB/s", "Mops", "p50_us",
                "p90_us", "p99_us", "max_us");
    for (Mode mode : o.modes) {
      for (uint32_t size : o.sizes) {
        Result r;
        error = bench.Run(mode, size, &r);
        if (!error.empty()) break;
        if (IsLatency(mode)) {
          std::fprintf(stderr,
                       "rdmaplane_perf: %s %u B: p50 %.2f us, p99 %.2f us "
                       "(%" PRIu64 " samples)\n",
                       ModeName(mode), size, r.p50, r.p99, r.requests);
        } else {
          std::fprintf(stderr,
                       "rdmaplane_perf: %s %u B: %.3f GB/s, %.3f Mops "
                       "(%" PRIu64 " requests in %.2f s)\n",
                       ModeName(mode), size, r.gbps, r.mops, r.requests,
                       r.seconds);
        }
        PrintRow(o, r);
        results.push_back(std::move(r));
      }
      if (!error.empty()) break;
    }
  }
  if (!error.empty()) {
    std::fprintf(stderr, "rdmaplane_perf: FAILED: %s\n", error.c_str());
  }
  bool written = true;
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    written = WriteJson(path, o, bench, results, error) && written;
  }
  if (const std::string path = absl::GetFlag(FLAGS_samples); !path.empty()) {
    written = WriteSamples(path, results) && written;
  }
  bench.Teardown();
  return error.empty() && written ? 0 : 1;
}
