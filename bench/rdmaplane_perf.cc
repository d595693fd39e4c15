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
//  * write_pingpong: perftest's ib_write_lat on the native API, for
//    comparing the two front ends: both sessions write to each other in
//    turn, each from a thread of its own that, like perftest, waits for
//    its WRITE's completion and then spins on the last byte of its buffer
//    until the other's WRITE has landed there (reading memory, no yield);
//    a sample is half of one exchange's round trip, as perftest reports
//    it. Connection 0 only.
//
// Polling never sleeps, but after --yield_after empty polls in a row the
// tool yields its CPU once (sched_yield): where the engine has no core of
// its own (2 CPUs shared with other work) it would otherwise wait for the
// scheduler's next time slice, milliseconds, while the tool spins. The
// default, 64 polls (a few microseconds), matters between two daemons on
// two CPUs, where the tool shares a CPU with one of them: against 1000,
// 8 B WRITE p50 over memif was 5 us against 17 us and 64 B WRITEs 2.0
// against 0.8 Mops; inside one daemon, with a CPU each, it made no
// difference (docs/performance.md).
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
// CPU cost: for every result, the CPU time every process involved spent
// in exactly its measurement window (from the clock's start to its stop):
// this process (getrusage, user + system), and each daemon it talks to
// (user + system of /proc/PID/stat, in clock ticks, "clk_tck" a second;
// the daemon's pid is the peer of a connection to its socket, SO_PEERCRED,
// which holds across PID namespaces as the daemon's own getpid() would
// not; the daemon counts that connection as a session reclaimed before
// its hello). cpu_s is their
// sum, cpu_s_by_process each ("client", and "daemon" for one daemon or
// "daemon_a" (--listen_socket) and "daemon_b" (--connect_socket));
// cpu_us_per_op is cpu_s in microseconds per request (per sample for
// latency modes) and, for bandwidth modes, cpu_s_per_gb CPU seconds per 1e9
// payload bytes. engine_busy_s is the time the daemons' engines spent in
// turns that did work, from their counters (sum of engine<N>_busy_cycles
// over tsc_hz, asked over the socket as `rdmaplanectl counters` does) at
// both ends of the window. The JSON lists the daemons ("daemons": label,
// socket, pid and path MTU from their status); an adaptive engine's idle
// spinning and sleeping is in cpu_s but not in engine_busy_s. The daemons'
// figures have the resolution of a clock tick (usually 10 ms); each reading
// costs the daemon's control thread one short answer.
//
// Progress goes to stderr, a table to stdout, every figure to --json FILE.
// Exit status: 0 ok, 1 a run failed (or a daemon could not be reached), 2
// usage.
//
// Single-threaded but for write_pingpong: one thread posts and polls every
// connection.
#include <sched.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "api/client.h"
#include "control/admin.h"

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
          "comma-separated: write_bw, read_bw, write_lat, read_lat, "
          "write_pingpong");
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
ABSL_FLAG(uint32_t, yield_after, 64,
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

enum class Mode { kWriteBw, kReadBw, kWriteLat, kReadLat, kWritePingpong };

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
    case Mode::kWritePingpong:
      return "write_pingpong";
  }
  return "?";
}

bool IsWrite(Mode m) {
  return m == Mode::kWriteBw || m == Mode::kWriteLat ||
         m == Mode::kWritePingpong;
}
bool IsLatency(Mode m) { return !(m == Mode::kWriteBw || m == Mode::kReadBw); }

struct Options {
  std::string listen_socket, connect_socket, peer, service;
  std::vector<Mode> modes;
  std::vector<uint32_t> sizes;
  uint32_t depth = 16, connections = 1;
  uint64_t region_bytes = 0;  // 0: depth messages
  uint64_t iterations = 0, warmup = 64;
  double duration_s = 1.0;
  bool verify = true;
  uint32_t yield_after = 64;
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
  // write_pingpong only: the way back, the target writing into `local`.
  uint32_t remote_lkey = 0;
  uint8_t back_descriptor[RDP_DESCRIPTOR_BYTES];
  uint32_t back_descriptor_length = sizeof(back_descriptor);
  std::vector<rdp_overlapped> ovs;
  uint64_t next_slot = 0;
};

// One daemon this process talks to, for its CPU time.
struct Daemon {
  std::string label;  // "daemon", "daemon_a", "daemon_b"
  std::string socket;
  pid_t pid = 0;
  uint32_t mtu = 0;  // its path MTU ("status": mtu)
};

// CPU time and engine work per process: at one instant, or what one
// measurement window cost (the difference of two instants).
struct CpuTimes {
  double client_s = 0;
  std::vector<double> daemon_s;  // per Daemon
  std::vector<double> busy_s;    // engines' busy seconds, per Daemon
  double Total() const {
    double t = client_s;
    for (double d : daemon_s) t += d;
    return t;
  }
  double EngineBusy() const {
    double t = 0;
    for (double b : busy_s) t += b;
    return t;
  }
};

struct Result {
  Mode mode;
  uint32_t size = 0;
  CpuTimes cpu;
  // Bandwidth.
  uint64_t requests = 0;
  double seconds = 0;
  double gbps = 0;
  double mops = 0;
  // Latency, microseconds.
  std::vector<double> samples;
  double p50 = 0, p90 = 0, p99 = 0, max = 0, min = 0, mean = 0;
};

// CPU microseconds (every process) per request or sample.
double CpuMicrosPerOp(const Result& r) {
  return r.requests > 0 ? r.cpu.Total() * 1e6 / static_cast<double>(r.requests)
                        : 0;
}

// CPU seconds (every process) per 1e9 payload bytes.
double CpuSecondsPerGb(const Result& r) {
  const double bytes = static_cast<double>(r.requests) * r.size;
  return bytes > 0 ? r.cpu.Total() / (bytes / 1e9) : 0;
}

double Micros(Clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

double Percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const size_t i = static_cast<size_t>(q * static_cast<double>(sorted.size()));
  return sorted[std::min(i, sorted.size() - 1)];
}

// The pid of the process that listens on the Unix socket `path`: the peer
// of a connection made only to ask (SO_PEERCRED); the daemon sees a
// connection closed before its hello.
absl::StatusOr<pid_t> SocketPeerPid(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError("socket path too long");
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(std::strerror(errno));
  ucred peer{};
  socklen_t len = sizeof(peer);
  const bool ok =
      connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len) == 0;
  const int err = errno;
  close(fd);
  if (!ok) return absl::UnavailableError(std::strerror(err));
  if (peer.pid <= 0) return absl::UnavailableError("no peer pid");
  return peer.pid;
}

// User + system CPU seconds of this process (every thread).
double OwnCpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

// User + system CPU seconds of process `pid` (every thread), from
// /proc/PID/stat (fields 14 and 15, clock ticks); -1 when unreadable.
double ProcessCpuSeconds(pid_t pid) {
  std::ifstream f(absl::StrCat("/proc/", pid, "/stat"));
  std::stringstream text;
  text << f.rdbuf();
  const std::string s = text.str();
  // The command name (field 2) is in parentheses and may hold spaces.
  const size_t close_paren = s.rfind(')');
  if (!f || close_paren == std::string::npos) return -1;
  std::istringstream rest(s.substr(close_paren + 1));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  // Fields 3..13, then utime (14) and stime (15).
  for (int i = 3; i <= 13; ++i) rest >> field;
  if (!(rest >> utime >> stime)) return -1;
  static const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  return static_cast<double>(utime + stime) / ticks;
}

// The value of "key" in a flat JSON object of numbers, as rdmaplanectl
// counters --json renders it; false when absent.
bool JsonCounter(const std::string& json, const std::string& key,
                 double* value) {
  const std::string quoted = absl::StrCat("\"", key, "\":");
  const size_t at = json.find(quoted);
  if (at == std::string::npos) return false;
  const std::string number(json.substr(at + quoted.size(), 24));
  char* end = nullptr;
  *value = std::strtod(number.c_str(), &end);
  return end != number.c_str();
}

// Seconds the engines of the daemon at `socket` spent in busy turns: the sum
// of engine<N>_busy_cycles over tsc_hz.
absl::StatusOr<double> EngineBusySeconds(const std::string& socket) {
  absl::StatusOr<std::string> json = rdmaplane::control::QueryDaemon(
      socket, "counters", /*json=*/true, absl::Seconds(5));
  if (!json.ok()) return json.status();
  double tsc_hz = 0;
  if (!JsonCounter(*json, "tsc_hz", &tsc_hz) || !(tsc_hz > 0)) {
    return absl::DataLossError("its counters have no tsc_hz");
  }
  double cycles = 0;
  int engines = 0;
  for (;; ++engines) {
    double c = 0;
    if (!JsonCounter(*json, absl::StrCat("engine", engines, "_busy_cycles"),
                     &c)) {
      break;
    }
    cycles += c;
  }
  if (engines == 0) {
    return absl::DataLossError("its counters have no engine0_busy_cycles");
  }
  return cycles / tsc_hz;
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
    if (std::string e = FindDaemons(); !e.empty()) return e;
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
      if (std::count(o_.modes.begin(), o_.modes.end(), Mode::kWritePingpong)) {
        if (std::string e = SetupWayBack(c); !e.empty()) return e;
      }
    }
    return "";
  }

  // write_pingpong: the target also posts, from its buffer into the
  // poster's.
  std::string SetupWayBack(Connection& c) {
    absl::StatusOr<uint32_t> lkey =
        target_->RegisterMemory(c.remote, region_, RDP_MEM_READWRITE);
    if (!lkey.ok()) {
      return absl::StrCat("register the target's memory: ",
                          lkey.status().message());
    }
    c.remote_lkey = *lkey;
    const int st = poster_->RegisterRdmaMemory(
        c.conn, c.local, static_cast<uint32_t>(region_), RDP_MEM_READWRITE,
        c.back_descriptor, &c.back_descriptor_length);
    if (st != RDP_OK) {
      return absl::StrCat("register the poster's memory for RDMA: ",
                          rdp_status_name(st));
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

  const std::vector<Daemon>& daemons() const { return daemons_; }

  bool hugepages() const {
    return poster_ != nullptr && poster_->hugepages() && target_->hugepages();
  }
  uint64_t region_bytes() const { return region_; }

  std::string Run(Mode mode, uint32_t size, Result* r) {
    r->mode = mode;
    r->size = size;
    if (mode == Mode::kWritePingpong) return RunPingpong(size, r);
    return IsLatency(mode) ? RunLatency(mode, size, r)
                           : RunBandwidth(mode, size, r);
  }

 private:
  // The daemons behind the two sockets, by their pids (one when both
  // sockets are the same daemon's).
  std::string FindDaemons() {
    const bool two = o_.connect_socket != o_.listen_socket;
    if (std::string e = AddDaemon(two ? "daemon_a" : "daemon", o_.listen_socket);
        !e.empty() || !two) {
      return e;
    }
    return AddDaemon("daemon_b", o_.connect_socket);
  }

  // Adds the daemon at `socket`, unless it is daemons_[0] again; "" or
  // what could not be read.
  std::string AddDaemon(const std::string& label, const std::string& socket) {
    absl::StatusOr<pid_t> pid = SocketPeerPid(socket);
    if (!pid.ok()) {
      return absl::StrCat("the pid of the daemon at ", socket, ": ",
                          pid.status().message());
    }
    if (!daemons_.empty() && daemons_[0].pid == *pid) return "";
    absl::StatusOr<std::string> status = rdmaplane::control::QueryDaemon(
        socket, "status", /*json=*/true, absl::Seconds(5));
    double mtu = 0;
    if (!status.ok() || !JsonCounter(*status, "mtu", &mtu)) {
      return absl::StrCat("the status of the daemon at ", socket, ": ",
                          status.ok() ? "no mtu" : status.status().message());
    }
    daemons_.push_back(Daemon{label, socket, *pid, static_cast<uint32_t>(mtu)});
    return "";
  }

  // CPU time and engine work now; "" or what could not be read.
  std::string ReadCpu(CpuTimes* c) {
    c->daemon_s.clear();
    c->busy_s.clear();
    for (const Daemon& d : daemons_) {
      absl::StatusOr<double> busy = EngineBusySeconds(d.socket);
      if (!busy.ok()) {
        return absl::StrCat("engine counters of the daemon at ", d.socket, ": ",
                            busy.status().message());
      }
      c->busy_s.push_back(*busy);
    }
    for (const Daemon& d : daemons_) {
      const double s = ProcessCpuSeconds(d.pid);
      if (s < 0) {
        return absl::StrCat("cannot read /proc/", d.pid,
                            "/stat (the daemon at ", d.socket, ")");
      }
      c->daemon_s.push_back(s);
    }
    c->client_s = OwnCpuSeconds();
    return "";
  }

  static CpuTimes Cost(const CpuTimes& a, const CpuTimes& b) {
    CpuTimes cost;
    cost.client_s = b.client_s - a.client_s;
    for (size_t i = 0; i < a.daemon_s.size(); ++i) {
      cost.daemon_s.push_back(b.daemon_s[i] - a.daemon_s[i]);
      cost.busy_s.push_back(b.busy_s[i] - a.busy_s[i]);
    }
    return cost;
  }

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
    CpuTimes cpu_start, cpu_stop;
    if (timing) {
      if (std::string e = ReadCpu(&cpu_start); !e.empty()) return e;
    }
    Clock::time_point start = Clock::now(), stop{};
    Clock::time_point last_progress = start;
    // The measurement window ends: no more posts, the clock and CPU stop.
    auto end_window = [&](Clock::time_point now) {
      posting = false;
      stop = now;
      return ReadCpu(&cpu_stop);
    };
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
              if (std::string e = end_window(now); !e.empty()) return e;
            }
          } else if (!timing && completed >= warmup_total) {
            timing = true;
            if (std::string e = ReadCpu(&cpu_start); !e.empty()) return e;
            start = Clock::now();
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
          if (std::string e = end_window(now); !e.empty()) return e;
        }
      }
    }
    if (o_.verify) {
      if (std::string e = Verify(mode, size); !e.empty()) return e;
    }
    r->requests = measured;
    r->cpu = Cost(cpu_start, cpu_stop);
    r->seconds = std::chrono::duration<double>(stop - start).count();
    if (r->seconds > 0) {
      r->gbps = static_cast<double>(measured) * size / r->seconds / 1e9;
      r->mops = static_cast<double>(measured) / r->seconds / 1e6;
    }
    return "";
  }

  // Whether a latency window that started at `start` is over after `taken`
  // samples: `total` of them, or --duration_s when `total` is 0.
  bool WindowOver(uint64_t taken, uint64_t total,
                  Clock::time_point start) const {
    return total > 0 ? taken >= total
                     : Clock::now() - start >=
                           std::chrono::duration<double>(o_.duration_s);
  }

  // Waits, polling `conn` on `client`, for the completion of the one
  // request `ov` that was posted with status `posted`; "" or what failed.
  std::string Await(Client& client, rdp_conn conn, Mode mode, uint32_t size,
                    int posted, const rdp_overlapped& ov) {
    if (posted != RDP_PENDING) {
      return absl::StrCat(ModeName(mode), " of ", size,
                          " bytes refused: ", rdp_status_name(posted));
    }
    const Clock::time_point t0 = Clock::now();
    const auto timeout = absl::ToChronoNanoseconds(o_.timeout);
    rdp_overlapped* done[1];
    int got;
    uint32_t spins = 0;
    while ((got = client.Poll(conn, done, 1)) == 0) {
      if ((++spins & 4095) == 0 && Clock::now() - t0 > timeout) {
        return absl::StrCat(ModeName(mode), " of ", size,
                            " bytes did not complete in ",
                            absl::FormatDuration(o_.timeout));
      }
      YieldEvery(spins);
    }
    if (got < 0) return absl::StrCat("poll: ", rdp_status_name(got));
    if (done[0] != &ov) return "a completion for a request never posted";
    if (ov.status != RDP_OK) {
      return absl::StrCat(ModeName(mode), " of ", size,
                          " bytes completed with ", rdp_status_name(ov.status));
    }
    return "";
  }

  // Gives the CPU away on every --yield_after-th turn of a wait that spins
  // (`spins` counts its turns), so that the engine sharing the CPU runs.
  void YieldEvery(uint32_t spins) const {
    if (o_.yield_after > 0 && spins % o_.yield_after == 0) sched_yield();
  }

  std::string RunLatency(Mode mode, uint32_t size, Result* r) {
    const uint64_t measured_total = o_.iterations * conns_.size();
    const uint64_t warmup_total = o_.warmup * conns_.size();
    r->samples.reserve(measured_total > 0 ? measured_total : 1 << 20);
    Clock::time_point start{};
    CpuTimes cpu_start, cpu_stop;
    for (uint64_t i = 0;; ++i) {
      if (i == warmup_total) {
        if (std::string e = ReadCpu(&cpu_start); !e.empty()) return e;
        start = Clock::now();
      }
      if (i >= warmup_total &&
          WindowOver(i - warmup_total, measured_total, start)) {
        if (std::string e = ReadCpu(&cpu_stop); !e.empty()) return e;
        break;
      }
      Connection& c = conns_[i % conns_.size()];
      rdp_overlapped ov{};
      const Clock::time_point t0 = Clock::now();
      if (std::string e = Await(*poster_, c.conn, mode, size,
                                Post(c, mode, size, 0, &ov), ov);
          !e.empty()) {
        return e;
      }
      if (i >= warmup_total) r->samples.push_back(Micros(Clock::now() - t0));
    }
    r->cpu = Cost(cpu_start, cpu_stop);
    Summarize(r);
    return "";
  }

  // perftest's ib_write_lat on the native API: the two sessions, each with a
  // thread of its own, write to each other in turn. Each side's buffer has
  // two message slots: it sends from slot 0, whose last byte it sets to the
  // exchange's number first, and the peer's WRITE lands in slot 1. As in
  // perftest, each side waits for its own WRITE's completion after posting
  // (polling, and yielding after --yield_after empty polls as the other
  // modes do), then spins on the last byte of slot 1 until the other side's
  // WRITE has landed there (reading memory: no library call), yielding
  // after --yield_after reads as well: both threads run on the CPU the
  // tool is given, beside an engine, and a thread that spun without
  // yielding kept that engine off the CPU until the scheduler's next time
  // slice (bench/compare's memif windows then measured 2 ms exchanges in 2
  // rounds of 5). A sample is half of one exchange's round trip,
  // perftest's convention for ib_write_lat. Connection 0 only.
  std::string RunPingpong(uint32_t size, Result* r) {
    if (Slots(size) < 2) {
      return absl::StrCat("write_pingpong of ", size,
                          " bytes needs two message slots: use --depth=2 "
                          "or more");
    }
    Connection& c = conns_[0];
    PingpongEnd poster{poster_.get(), c.conn, c.local, c.lkey, c.descriptor,
                       c.descriptor_length};
    PingpongEnd target{target_.get(), c.target_conn, c.remote, c.remote_lkey,
                       c.back_descriptor, c.back_descriptor_length};
    // No number left by an earlier run may pass for this one's.
    for (const PingpongEnd& end : {poster, target}) {
      end.buffer[size - 1] = 0;
      end.buffer[2 * size - 1] = 0;
    }
    Pingpong p;
    p.size = size;
    std::string responder_error;
    std::thread responder([&] {
      responder_error = PingpongSide(target, &p, nullptr, nullptr);
      if (!responder_error.empty()) p.abort = true;
    });
    CpuTimes cpu_start, cpu_stop;
    r->samples.reserve(o_.iterations > 0 ? o_.iterations : 1 << 20);
    std::string error = PingpongSide(poster, &p, &cpu_start, &r->samples);
    if (!error.empty()) p.abort = true;
    responder.join();
    if (error.empty()) error = responder_error;
    if (error.empty()) error = ReadCpu(&cpu_stop);
    if (!error.empty()) return error;
    r->cpu = Cost(cpu_start, cpu_stop);
    for (double& v : r->samples) v /= 2;
    Summarize(r);
    return "";
  }

  // One end of write_pingpong: its session, connection and buffer, and the
  // key and descriptor its WRITEs use.
  struct PingpongEnd {
    Client* client;
    rdp_conn conn;
    uint8_t* buffer;
    uint32_t lkey;
    const uint8_t* descriptor;
    uint32_t descriptor_length;
  };

  // What the two ends of one write_pingpong run share.
  struct Pingpong {
    uint32_t size = 0;
    // The final exchange's number: known only when the poster's window
    // ends; it is published before that exchange's WRITE.
    std::atomic<uint64_t> last{UINT64_MAX};
    std::atomic<bool> abort{false};  // the other end failed
  };

  // One end of write_pingpong; "" or what failed. The first end (given
  // `samples`) posts exchange 1, reads the CPU times into `cpu_start` as
  // the clock starts after the warm-up and times each exchange from then
  // on; the other answers each exchange as it arrives.
  std::string PingpongSide(const PingpongEnd& end, Pingpong* p,
                           CpuTimes* cpu_start, std::vector<double>* samples) {
    const bool first = samples != nullptr;
    const uint32_t size = p->size;
    uint8_t* const send_last = end.buffer + size - 1;
    const uint8_t* const recv_last = end.buffer + 2 * size - 1;
    const auto timeout = absl::ToChronoNanoseconds(o_.timeout);
    // Posts exchange n's WRITE and waits for its completion.
    auto write = [&](uint64_t n) -> std::string {
      *send_last = static_cast<uint8_t>(n);
      rdp_overlapped ov{};
      rdp_sge sge{end.buffer, size, end.lkey};
      return Await(*end.client, end.conn, Mode::kWritePingpong, size,
                   end.client->Write(end.conn, &sge, 1, end.descriptor,
                                     end.descriptor_length, size, 0, &ov),
                   ov);
    };
    // Spins until exchange n's WRITE from the other end has landed.
    auto arrive = [&](uint64_t n) -> std::string {
      const Clock::time_point t0 = Clock::now();
      for (uint32_t spins = 1; __atomic_load_n(recv_last, __ATOMIC_ACQUIRE) !=
                               static_cast<uint8_t>(n);
           ++spins) {
        YieldEvery(spins);
        if ((spins & 4095) != 0) continue;
        if (p->abort.load(std::memory_order_relaxed)) {
          return "the other end failed";
        }
        if (Clock::now() - t0 > timeout) {
          return absl::StrCat("write_pingpong of ", size, " bytes: exchange ",
                              n, " did not arrive in ",
                              absl::FormatDuration(o_.timeout));
        }
      }
      return "";
    };
    Clock::time_point start{};
    for (uint64_t n = 1;; ++n) {
      bool final;
      if (first) {
        if (n == o_.warmup + 1) {
          if (std::string e = ReadCpu(cpu_start); !e.empty()) return e;
          start = Clock::now();
        }
        final = n > o_.warmup && WindowOver(n - o_.warmup, o_.iterations, start);
        if (final) p->last.store(n, std::memory_order_release);
        const Clock::time_point t0 = Clock::now();
        if (std::string e = write(n); !e.empty()) return e;
        if (std::string e = arrive(n); !e.empty()) return e;
        if (n > o_.warmup) samples->push_back(Micros(Clock::now() - t0));
      } else {
        if (std::string e = arrive(n); !e.empty()) return e;
        if (std::string e = write(n); !e.empty()) return e;
        final = n == p->last.load(std::memory_order_acquire);
      }
      if (final) return "";
    }
  }

  // Sorts a latency result's samples into its percentiles.
  static void Summarize(Result* r) {
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
  }

  const Options& o_;
  std::unique_ptr<Client> target_, poster_;
  std::vector<Connection> conns_;
  std::vector<Daemon> daemons_;
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
    } else if (m == "write_pingpong") {
      o->modes.push_back(Mode::kWritePingpong);
    } else {
      std::fprintf(stderr,
                   "rdmaplane_perf: unknown mode '%s' (write_bw, read_bw, "
                   "write_lat, read_lat, write_pingpong)\n",
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
      "trip; write_pingpong: half of an exchange's round trip)\", \"cpu_s\": \"user + system CPU seconds in the measurement "
      "window, every process\", \"cpu_us_per_op\": \"CPU microseconds per "
      "request\", \"cpu_s_per_gb\": \"CPU seconds per 1e9 payload bytes\", "
      "\"engine_busy_s\": \"seconds the daemons' engines spent in turns "
      "that did work\"},\n  \"config\": {\"listen_socket\": %s, "
      "\"connect_socket\": "
      "%s, \"peer\": %s, \"depth\": %u, \"connections\": %u, \"iterations\": "
      "%" PRIu64 ", \"duration_s\": %g, \"warmup\": %" PRIu64
      ", \"region_bytes\": %" PRIu64
      ", \"verified\": %s, \"yield_after\": %u, \"hugepages\": %s},\n  \"ok\": "
      "%s,\n  \"error\": "
      "%s,\n  \"clk_tck\": %ld,\n  \"daemons\": [",
      JsonString(o.listen_socket).c_str(), JsonString(o.connect_socket).c_str(),
      JsonString(o.peer).c_str(), o.depth, o.connections, o.iterations,
      o.duration_s, o.warmup, bench.region_bytes(), o.verify ? "true" : "false",
      o.yield_after, bench.hugepages() ? "true" : "false",
      error.empty() ? "true" : "false", JsonString(error).c_str(),
      sysconf(_SC_CLK_TCK));
  const std::vector<Daemon>& daemons = bench.daemons();
  for (size_t i = 0; i < daemons.size(); ++i) {
    std::fprintf(f,
                 "%s{\"label\": \"%s\", \"socket\": %s, \"pid\": %d, "
                 "\"mtu\": %u}",
                 i ? ", " : "", daemons[i].label.c_str(),
                 JsonString(daemons[i].socket).c_str(),
                 static_cast<int>(daemons[i].pid), daemons[i].mtu);
  }
  std::fprintf(f, "],\n  \"results\": [");
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    std::fprintf(f, "%s\n    {\"mode\": \"%s\", \"bytes\": %u, ", i ? "," : "",
                 ModeName(r.mode), r.size);
    if (IsLatency(r.mode)) {
      std::fprintf(f,
                   "\"samples\": %" PRIu64
                   ", \"p50_us\": %.3f, \"p90_us\": %.3f, \"p99_us\": %.3f, "
                   "\"max_us\": %.3f, \"min_us\": %.3f, \"mean_us\": %.3f",
                   r.requests, r.p50, r.p90, r.p99, r.max, r.min, r.mean);
    } else {
      std::fprintf(f,
                   "\"depth\": %u, \"connections\": %u, \"requests\": %" PRIu64
                   ", \"seconds\": %.6f, \"gbps\": %.6f, \"mops\": %.6f, "
                   "\"cpu_s_per_gb\": %.9g",
                   o.depth, o.connections, r.requests, r.seconds, r.gbps,
                   r.mops, CpuSecondsPerGb(r));
    }
    std::fprintf(f, ", \"cpu_s\": %.9f, \"cpu_us_per_op\": %.9g", r.cpu.Total(),
                 CpuMicrosPerOp(r));
    std::fprintf(f, ", \"cpu_s_by_process\": {\"client\": %.9f",
                 r.cpu.client_s);
    for (size_t d = 0; d < r.cpu.daemon_s.size() && d < daemons.size(); ++d) {
      std::fprintf(f, ", \"%s\": %.9f", daemons[d].label.c_str(),
                   r.cpu.daemon_s[d]);
    }
    std::fprintf(f,
                 "}, \"engine_busy_s\": %.9f, \"engine_busy_s_by_process\": {",
                 r.cpu.EngineBusy());
    for (size_t d = 0; d < r.cpu.busy_s.size() && d < daemons.size(); ++d) {
      std::fprintf(f, "%s\"%s\": %.9f", d ? ", " : "", daemons[d].label.c_str(),
                   r.cpu.busy_s[d]);
    }
    std::fprintf(f, "}}");
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
                " %9s %9s %8.2f %8.2f %8.2f %9.2f %10.3f\n",
                ModeName(r.mode), r.size, "1", o.connections, r.requests, "-",
                "-", r.p50, r.p90, r.p99, r.max, CpuMicrosPerOp(r));
  } else {
    std::printf("%-9s %8u %5u %5u %10" PRIu64
                " %9.3f %9.3f %8s %8s %8s %9s %10.3f\n",
                ModeName(r.mode), r.size, o.depth, o.connections, r.requests,
                r.gbps, r.mops, "-", "-", "-", "-", CpuMicrosPerOp(r));
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
    std::printf("%-9s %8s %5s %5s %10s %9s %9s %8s %8s %8s %9s %10s\n", "mode",
                "bytes", "depth", "conns", "requests", "GB/s", "Mops", "p50_us",
                "p90_us", "p99_us", "max_us", "cpu_us/op");
    for (Mode mode : o.modes) {
      for (uint32_t size : o.sizes) {
        Result r;
        error = bench.Run(mode, size, &r);
        if (!error.empty()) break;
        if (IsLatency(mode)) {
          std::fprintf(stderr,
                       "rdmaplane_perf: %s %u B: p50 %.2f us, p99 %.2f us "
                       "(%" PRIu64 " samples), %.3f CPU s\n",
                       ModeName(mode), size, r.p50, r.p99, r.requests,
                       r.cpu.Total());
        } else {
          std::fprintf(stderr,
                       "rdmaplane_perf: %s %u B: %.3f GB/s, %.3f Mops "
                       "(%" PRIu64
                       " requests in %.2f s), %.3f CPU s, %.3g "
                       "CPU s per GB\n",
                       ModeName(mode), size, r.gbps, r.mops, r.requests,
                       r.seconds, r.cpu.Total(), CpuSecondsPerGb(r));
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
