// tcp_bench: kernel TCP over loopback (127.0.0.1), the baseline users pick
// when they have no RDMA: stream throughput with sends of one size or of
// each of several (by default 64 KiB), and the round-trip time of an 8-byte
// ping-pong.
//
//   tcp_bench --seconds=3 --pingpong_seconds=2 --samples=/tmp/tcp.txt
//   tcp_bench --send_bytes=65536,1048576 --seconds=1 --pingpong_seconds=0
//       --busy_pingpong_seconds=0
//
// Two threads of one process: the server end (receiver, echoer) and the
// client end (sender, pinger). Both sockets have TCP_NODELAY. --client_cpu
// and --server_cpu pin the two ends to CPUs of their own (by default the
// scheduler places them), as bench/compare places rdmaplane_perf and the
// daemon.
//
//  * throughput: for each size of --send_bytes in turn, on a connection of
//    its own, the sender sends that many bytes per send() for --seconds; the
//    receiver counts what arrives with recv() of up to 256 KiB or the send
//    size, whichever is larger (as iperf3 reads what it writes). GB/s is the
//    receiver's bytes over the time from its first to its last byte
//    (1e9 bytes per second). Kernel TCP moves more with larger sends (fewer
//    system calls per byte), so a fair comparison takes its best size.
//  * ping-pong: the client sends 8 bytes and waits for the 8-byte echo; each
//    sample is one round trip (send to echo received), the same span as an
//    rdmaplane WRITE from post to completion (request and acknowledgment).
//    With blocking sockets (what applications use), and again with both
//    sides spinning on non-blocking recv() (--busy_pingpong_seconds; 0 skips
//    it), which costs both cores.
//
// A phase whose seconds are 0 is skipped (at least one runs), so that
// bench/compare can run each next to the rdmaplane figure it is compared
// with. Each phase also reports its CPU cost: the user + system time of its
// two threads (getrusage RUSAGE_THREAD, from each thread's start in the
// phase to its end), cpu_s (their sum) and cpu_s_by_thread ("client":
// sender or pinger, "server": receiver or echoer), cpu_s_per_gb (CPU
// seconds per 1e9 payload bytes: the bytes received when streaming, one
// message per round trip in a ping-pong, as an RDMA WRITE carries its
// payload one way) and cpu_us_per_op (CPU microseconds per send when
// streaming, per round trip in a ping-pong). A
// ping-pong's CPU time and operations include its 1000 warm-up round
// trips.
//
// Progress on stderr, a table on stdout, --json FILE with every figure (the
// streams as a list, one member per send size, in the order given),
// --samples FILE with one blocking ping-pong round trip (microseconds) per
// line, in the order taken.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"

ABSL_FLAG(double, seconds, 3.0,
          "how long to stream at each send size (0: skip streaming)");
ABSL_FLAG(std::vector<std::string>, send_bytes, {"65536"},
          "bytes per send() when streaming, comma-separated: one stream per "
          "size, in turn");
ABSL_FLAG(double, pingpong_seconds, 2.0,
          "how long to ping-pong with blocking sockets (0: skip)");
ABSL_FLAG(double, busy_pingpong_seconds, 1.0,
          "how long to ping-pong with both sides spinning (0: skip)");
ABSL_FLAG(uint32_t, message_bytes, 8, "ping-pong message size");
ABSL_FLAG(std::string, json, "", "also write the figures as JSON here");
ABSL_FLAG(std::string, samples, "",
          "write every blocking ping-pong round trip (us) here");
ABSL_FLAG(int32_t, client_cpu, -1,
          "CPU of the sending / pinging end (-1: not pinned)");
ABSL_FLAG(int32_t, server_cpu, -1,
          "CPU of the receiving / echoing end (-1: not pinned)");

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

[[noreturn]] void Die(const char* what) {
  std::fprintf(stderr, "tcp_bench: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

// Pins the calling thread to `cpu` (-1: leaves it where it is).
void PinTo(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  const int e = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
  if (e != 0) {
    std::fprintf(stderr, "tcp_bench: cannot run on CPU %d: %s\n", cpu,
                 std::strerror(e));
    std::exit(1);
  }
}

// User + system CPU seconds of the calling thread.
double ThreadCpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_THREAD, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

// The CPU cost of one phase: each end's thread.
struct Cpu {
  double client_s = 0, server_s = 0;
  uint64_t ops = 0;  // sends, or round trips
  uint64_t payload_bytes = 0;
  double Total() const { return client_s + server_s; }
  double PerOpUs() const {
    return ops > 0 ? Total() * 1e6 / static_cast<double>(ops) : 0;
  }
  double PerGb() const {
    return payload_bytes > 0
               ? Total() / (static_cast<double>(payload_bytes) / 1e9)
               : 0;
  }
};

void NoDelay(int fd) {
  const int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
    Die("TCP_NODELAY");
  }
}

// A connected pair of TCP sockets over 127.0.0.1: {accepted, connected}.
std::pair<int, int> ConnectedPair() {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  if (listener < 0) Die("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;  // any free port
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    Die("bind");
  }
  if (listen(listener, 1) != 0) Die("listen");
  socklen_t len = sizeof(addr);
  if (getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    Die("getsockname");
  }
  const int client = socket(AF_INET, SOCK_STREAM, 0);
  if (client < 0) Die("socket");
  if (connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    Die("connect");
  }
  const int server = accept(listener, nullptr, nullptr);
  if (server < 0) Die("accept");
  close(listener);
  NoDelay(client);
  NoDelay(server);
  return {server, client};
}

// Sends or receives exactly n bytes; spins on EAGAIN when busy.
bool SendAll(int fd, const uint8_t* p, size_t n, int flags) {
  while (n > 0) {
    const ssize_t r = send(fd, p, n, flags | MSG_NOSIGNAL);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool RecvAll(int fd, uint8_t* p, size_t n, int flags) {
  while (n > 0) {
    const ssize_t r = recv(fd, p, n, flags);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

struct Throughput {
  uint64_t bytes = 0;
  double seconds = 0;
  double gbps = 0;
  Cpu cpu;
};

Throughput Stream(double seconds, uint32_t send_bytes, int server_cpu) {
  auto [server, client] = ConnectedPair();
  Throughput t;
  std::thread receiver([&, fd = server] {
    PinTo(server_cpu);
    const double cpu0 = ThreadCpuSeconds();
    std::vector<uint8_t> buf(std::max<size_t>(256 << 10, send_bytes));
    Clock::time_point first{}, last{};
    while (true) {
      const ssize_t r = recv(fd, buf.data(), buf.size(), 0);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      last = Clock::now();
      if (t.bytes == 0) first = last;
      t.bytes += static_cast<uint64_t>(r);
    }
    t.seconds = Seconds(last - first);
    t.cpu.server_s = ThreadCpuSeconds() - cpu0;
  });
  std::vector<uint8_t> buf(send_bytes, 0x5A);
  const double cpu0 = ThreadCpuSeconds();
  const Clock::time_point end =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(seconds));
  while (Clock::now() < end) {
    if (!SendAll(client, buf.data(), buf.size(), 0)) Die("send");
    ++t.cpu.ops;
  }
  shutdown(client, SHUT_WR);
  t.cpu.client_s = ThreadCpuSeconds() - cpu0;
  receiver.join();
  t.cpu.payload_bytes = t.bytes;
  close(client);
  close(server);
  t.gbps = t.seconds > 0 ? static_cast<double>(t.bytes) / t.seconds / 1e9 : 0;
  return t;
}

struct Latency {
  std::vector<double> us;  // round trips in the order taken
  double p50 = 0, p90 = 0, p99 = 0, max = 0, mean = 0;
  Cpu cpu;  // warm-up included
};

double Percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const size_t i = static_cast<size_t>(q * static_cast<double>(sorted.size()));
  return sorted[std::min(i, sorted.size() - 1)];
}

Latency PingPong(double seconds, uint32_t message, bool busy, int server_cpu) {
  auto [server, client] = ConnectedPair();
  const int flags = busy ? MSG_DONTWAIT : 0;
  Latency l;
  std::thread echoer([&, fd = server] {
    PinTo(server_cpu);
    const double cpu0 = ThreadCpuSeconds();
    std::vector<uint8_t> buf(message);
    while (RecvAll(fd, buf.data(), buf.size(), flags)) {
      if (!SendAll(fd, buf.data(), buf.size(), 0)) break;
    }
    l.cpu.server_s = ThreadCpuSeconds() - cpu0;
  });
  std::vector<uint8_t> buf(message, 0x5A);
  const double cpu0 = ThreadCpuSeconds();
  l.us.reserve(1 << 20);
  auto one = [&]() {
    const Clock::time_point t0 = Clock::now();
    if (!SendAll(client, buf.data(), buf.size(), 0) ||
        !RecvAll(client, buf.data(), buf.size(), flags)) {
      Die("ping-pong");
    }
    return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  };
  constexpr int kWarmup = 1000;
  for (int i = 0; i < kWarmup; ++i) one();
  const Clock::time_point end =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(seconds));
  while (Clock::now() < end) l.us.push_back(one());
  shutdown(client, SHUT_WR);
  l.cpu.client_s = ThreadCpuSeconds() - cpu0;
  echoer.join();
  l.cpu.ops = kWarmup + l.us.size();
  l.cpu.payload_bytes = l.cpu.ops * message;
  close(client);
  close(server);
  std::vector<double> sorted = l.us;
  std::sort(sorted.begin(), sorted.end());
  l.p50 = Percentile(sorted, 0.50);
  l.p90 = Percentile(sorted, 0.90);
  l.p99 = Percentile(sorted, 0.99);
  l.max = sorted.empty() ? 0 : sorted.back();
  double sum = 0;
  for (double v : sorted) sum += v;
  l.mean = sorted.empty() ? 0 : sum / static_cast<double>(sorted.size());
  return l;
}

// Parses --send_bytes into *sizes (each 1..64 MiB); false when a part is
// not such a size or there is none.
bool ParseSendSizes(const std::vector<std::string>& parts,
                    std::vector<uint32_t>* sizes) {
  for (const std::string& part : parts) {
    uint32_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v == 0 || v > (64u << 20)) return false;
    sizes->push_back(v);
  }
  return !sizes->empty();
}

// "64 KiB", "1 MiB" or "1000 B": a send size for the table.
std::string SizeName(uint32_t bytes) {
  if (bytes % (1u << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes % (1u << 10) == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

// The CPU fields of a phase's JSON object, each after ", ".
void PrintCpu(FILE* f, const Cpu& c) {
  std::fprintf(f,
               ", \"ops\": %llu, \"cpu_s\": %.6f, \"cpu_s_by_thread\": "
               "{\"client\": %.6f, \"server\": %.6f}, \"cpu_s_per_gb\": %.6g, "
               "\"cpu_us_per_op\": %.6g",
               static_cast<unsigned long long>(c.ops), c.Total(), c.client_s,
               c.server_s, c.PerGb(), c.PerOpUs());
}

// The JSON member of a ping-pong, behind a comma.
void PrintLatency(FILE* f, const char* name, const Latency& l) {
  std::fprintf(f,
               ", \"%s\": {\"samples\": %zu, \"p50_us\": %.3f, \"p90_us\": "
               "%.3f, \"p99_us\": %.3f, \"max_us\": %.3f, \"mean_us\": %.3f",
               name, l.us.size(), l.p50, l.p90, l.p99, l.max, l.mean);
  PrintCpu(f, l.cpu);
  std::fprintf(f, "}");
}

// The table row of a ping-pong.
void PrintLatencyRow(const char* title, const Latency& l) {
  std::printf("%-36s %9.2f us %9.2f us/op (p90 %.2f, p99 %.2f, %zu samples)\n",
              title, l.p50, l.cpu.PerOpUs(), l.p90, l.p99, l.us.size());
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "kernel TCP over loopback: stream throughput and ping-pong round trips");
  absl::ParseCommandLine(argc, argv);
  const double seconds = absl::GetFlag(FLAGS_seconds);
  std::vector<uint32_t> send_sizes;
  const bool sizes_ok =
      ParseSendSizes(absl::GetFlag(FLAGS_send_bytes), &send_sizes);
  const double pp_seconds = absl::GetFlag(FLAGS_pingpong_seconds);
  const double busy_seconds = absl::GetFlag(FLAGS_busy_pingpong_seconds);
  const uint32_t message = absl::GetFlag(FLAGS_message_bytes);
  const int client_cpu = absl::GetFlag(FLAGS_client_cpu);
  const int server_cpu = absl::GetFlag(FLAGS_server_cpu);
  if (seconds < 0 || pp_seconds < 0 || busy_seconds < 0 ||
      !(seconds > 0 || pp_seconds > 0 || busy_seconds > 0) || !sizes_ok ||
      message == 0 || message > (1u << 20) ||
      client_cpu < -1 || client_cpu >= CPU_SETSIZE || server_cpu < -1 ||
      server_cpu >= CPU_SETSIZE) {
    std::fprintf(stderr,
                 "tcp_bench: need seconds >= 0 (some positive), send_bytes "
                 "a list of sizes of 1..64 MiB, message_bytes 1..1 MiB, CPUs "
                 "-1..%d\n",
                 CPU_SETSIZE - 1);
    return 2;
  }
  // The main thread is the client end; each server end pins itself.
  PinTo(client_cpu);
  std::vector<Throughput> streams;
  if (seconds > 0) {
    for (uint32_t send_bytes : send_sizes) {
      std::fprintf(stderr, "tcp_bench: streaming %u-byte sends for %.1f s\n",
                   send_bytes, seconds);
      streams.push_back(Stream(seconds, send_bytes, server_cpu));
    }
  }
  Latency blocking;
  if (pp_seconds > 0) {
    std::fprintf(stderr,
                 "tcp_bench: %u-byte ping-pong, blocking sockets, %.1f s\n",
                 message, pp_seconds);
    blocking = PingPong(pp_seconds, message, /*busy=*/false, server_cpu);
  }
  Latency busy;
  if (busy_seconds > 0) {
    std::fprintf(stderr,
                 "tcp_bench: %u-byte ping-pong, both sides spinning, %.1f s\n",
                 message, busy_seconds);
    busy = PingPong(busy_seconds, message, /*busy=*/true, server_cpu);
  }
  std::printf("%-36s %12s %14s\n", "tcp loopback", "value", "CPU");
  for (size_t i = 0; i < streams.size(); ++i) {
    const std::string title = "stream, " + SizeName(send_sizes[i]) + " sends";
    std::printf("%-36s %9.3f GB/s %9.3f s/GB\n", title.c_str(),
                streams[i].gbps, streams[i].cpu.PerGb());
  }
  if (pp_seconds > 0) {
    PrintLatencyRow("ping-pong round trip p50, blocking", blocking);
  }
  if (busy_seconds > 0) {
    PrintLatencyRow("ping-pong round trip p50, spinning", busy);
  }
  if (const std::string path = absl::GetFlag(FLAGS_samples); !path.empty()) {
    FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr) Die(path.c_str());
    for (double v : blocking.us) std::fprintf(f, "%.3f\n", v);
    if (std::fclose(f) != 0) Die(path.c_str());
  }
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr) Die(path.c_str());
    std::fprintf(f,
                 "{\"tool\": \"tcp_bench\", \"units\": {\"gbps\": \"GB/s (1e9 "
                 "bytes per second)\", \"us\": \"microseconds, round trip\", "
                 "\"cpu_s\": \"user + system CPU seconds of both ends' "
                 "threads\", \"cpu_s_per_gb\": \"CPU seconds per 1e9 payload "
                 "bytes\", \"cpu_us_per_op\": \"CPU microseconds per send "
                 "(stream) or round trip (ping-pong)\"}, \"message_bytes\": "
                 "%u, \"client_cpu\": %d, \"server_cpu\": %d",
                 message, client_cpu, server_cpu);
    if (seconds > 0) {
      std::fprintf(f, ", \"streams\": [");
      for (size_t i = 0; i < streams.size(); ++i) {
        const Throughput& t = streams[i];
        std::fprintf(f,
                     "%s{\"send_bytes\": %u, \"bytes\": %llu, \"seconds\": "
                     "%.4f, \"gbps\": %.4f",
                     i > 0 ? ", " : "", send_sizes[i],
                     static_cast<unsigned long long>(t.bytes), t.seconds,
                     t.gbps);
        PrintCpu(f, t.cpu);
        std::fprintf(f, "}");
      }
      std::fprintf(f, "]");
    }
    if (pp_seconds > 0) PrintLatency(f, "pingpong", blocking);
    if (busy_seconds > 0) PrintLatency(f, "pingpong_busy", busy);
    std::fprintf(f, "}\n");
    if (std::fclose(f) != 0) Die(path.c_str());
  }
  return 0;
}
