// rdmaplane_transfer: moves bytes with RDMA WRITE and READ between clients of
// two daemons (or of one) and checks every byte.
//
// One process opens sessions with both daemons: on the listening daemon it
// listens and accepts, on the connecting daemon it connects to the
// listener's data-port address. For every message size it then writes each
// way and reads each way, `depth` requests outstanding per connection,
// `connections` connections per pair of sessions and `clients` pairs of
// sessions in parallel threads.
//
//   rdmaplane_transfer --listen_socket=/tmp/a.sock --connect_socket=/tmp/b.sock
//       --peer=10.0.0.1 --sizes=1,4096,1048576 --depth=4 --connections=2
//
// Without --peer (and with one socket for both) the connection stays inside
// one daemon. Progress goes to stderr; the last line on stdout is
// "transfer: ok ..." or "transfer: FAILED ...", and the exit status says the
// same (2: a usage error).
//
// Split mode (--listen on one host, --connect on another, one session each;
// see rdmaplane_transfer_split.cc) reaches across hosts:
//
//   rdmaplane_transfer --listen=transfer
//   rdmaplane_transfer --connect=transfer --peer=10.0.0.1 --sizes=4096,65536
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
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
#include "api/example/rdmaplane_transfer_split.h"
#include "api/shm/layout.h"

ABSL_FLAG(std::string, listen_socket, "", "socket of the listening daemon");
ABSL_FLAG(std::string, connect_socket, "",
          "socket of the connecting daemon (default: the listening one)");
ABSL_FLAG(std::string, peer, "",
          "data-port IPv4 address of the listening daemon (split mode: of "
          "the server's daemon); empty: a connection inside one daemon");
ABSL_FLAG(std::string, service, "transfer", "service name");
ABSL_FLAG(std::string, sizes, "1,4096,65536,1048576,4194304",
          "message sizes in bytes, comma-separated (up to 4 MiB)");
ABSL_FLAG(uint32_t, depth, 4,
          "requests outstanding per connection (up to 256, the send queue)");
ABSL_FLAG(uint32_t, connections, 1, "connections per pair of sessions");
ABSL_FLAG(uint32_t, clients, 1, "pairs of sessions, each in its own thread");
ABSL_FLAG(int32_t, timeout_s, 60,
          "give up on a request (split mode: or a message) after this long");

namespace {

using rdmaplane::Client;
using rdmaplane_transfer::Pattern;

constexpr uint32_t kMaxSize = 4u << 20;
// Up to a connection's whole send queue may be outstanding.
constexpr uint32_t kMaxDepth = rdmaplane::shm::kSendRingEntries;

struct Options {
  std::string listen_socket, connect_socket, peer, service;
  std::vector<uint32_t> sizes;
  uint32_t depth, connections, clients;
  absl::Duration timeout;
};

// One end of a connection: its buffer, registered locally and for the peer.
struct End {
  Client* client = nullptr;
  rdp_conn conn = 0;
  uint8_t* buf = nullptr;
  uint64_t bytes = 0;
  uint32_t lkey = 0;
  uint8_t descriptor[RDP_DESCRIPTOR_BYTES];
  uint32_t descriptor_length = sizeof(descriptor);
};

std::string Describe(int status) { return rdp_status_name(status); }

class Failure {
 public:
  void Set(const std::string& what) {
    std::lock_guard<std::mutex> l(mu_);
    if (what_.empty()) what_ = what;
  }
  bool failed() {
    std::lock_guard<std::mutex> l(mu_);
    return !what_.empty();
  }
  std::string what() {
    std::lock_guard<std::mutex> l(mu_);
    return what_;
  }

 private:
  std::mutex mu_;
  std::string what_;
};

std::atomic<uint64_t> g_bytes{0};
std::atomic<uint64_t> g_requests{0};

// Waits for every overlapped result, bounded.
bool WaitAll(End& e, std::vector<rdp_overlapped>& ovs, absl::Duration timeout,
             std::string* error) {
  const absl::Time deadline = absl::Now() + timeout;
  for (rdp_overlapped& ov : ovs) {
    uint32_t bytes = 0;
    int st;
    while ((st = e.client->GetOverlappedResult(e.conn, &ov, false, &bytes)) ==
           RDP_PENDING) {
      if (absl::Now() > deadline) {
        *error = "a request did not complete in time";
        return false;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    if (st != RDP_OK) {
      *error = absl::StrCat("a request completed with ", Describe(st));
      return false;
    }
  }
  return true;
}

// `from` writes `size` bytes at each of `depth` offsets into `to`'s buffer
// (write), or reads them from `to`'s buffer into its own (read); the bytes
// are then compared.
bool Move(End& from, End& to, bool write, uint32_t size, uint32_t depth,
          uint64_t seed, const Options& o, std::string* error) {
  End& source = write ? from : to;
  End& sink = write ? to : from;
  for (uint32_t d = 0; d < depth; ++d) {
    uint8_t* p = source.buf + uint64_t{d} * size;
    for (uint32_t i = 0; i < size; ++i) p[i] = Pattern(seed + d, i);
    std::memset(sink.buf + uint64_t{d} * size, 0, size);
  }
  std::vector<rdp_overlapped> ovs(depth);
  for (uint32_t d = 0; d < depth; ++d) {
    ovs[d] = rdp_overlapped{};
    rdp_sge sge{from.buf + uint64_t{d} * size, size, from.lkey};
    const uint32_t offset = d * size;
    int st;
    if (write) {
      st = from.client->Write(from.conn, &sge, 1, to.descriptor,
                              to.descriptor_length, offset, 0, &ovs[d]);
    } else {
      const uint64_t address =
          reinterpret_cast<uint64_t>(to.buf) + uint64_t{offset};
      st = from.client->Read(from.conn, &sge, 1, address, to.descriptor,
                             to.descriptor_length, 0, &ovs[d]);
    }
    if (st != RDP_PENDING && st != RDP_OK) {
      *error = absl::StrCat(write ? "write" : "read", " of ", size,
                            " bytes refused: ", Describe(st));
      return false;
    }
  }
  if (!WaitAll(from, ovs, o.timeout, error)) return false;
  for (uint32_t d = 0; d < depth; ++d) {
    const uint8_t* p = sink.buf + uint64_t{d} * size;
    for (uint32_t i = 0; i < size; ++i) {
      if (p[i] != Pattern(seed + d, i)) {
        *error = absl::StrCat(write ? "write" : "read", " of ", size,
                              " bytes: byte ", i, " of request ", d,
                              " differs");
        return false;
      }
    }
  }
  g_bytes.fetch_add(uint64_t{size} * depth, std::memory_order_relaxed);
  g_requests.fetch_add(depth, std::memory_order_relaxed);
  return true;
}

bool Prepare(End& e, uint64_t bytes, std::string* error) {
  e.bytes = bytes;
  e.buf = static_cast<uint8_t*>(e.client->Alloc(bytes));
  if (e.buf == nullptr) {
    *error = "out of arena memory";
    return false;
  }
  absl::StatusOr<uint32_t> lkey =
      e.client->RegisterMemory(e.buf, bytes, RDP_MEM_READWRITE);
  if (!lkey.ok()) {
    *error = absl::StrCat("register memory: ", lkey.status().message());
    return false;
  }
  e.lkey = *lkey;
  const int st = e.client->RegisterRdmaMemory(
      e.conn, e.buf, static_cast<uint32_t>(bytes), RDP_MEM_READWRITE,
      e.descriptor, &e.descriptor_length);
  if (st != RDP_OK) {
    *error = absl::StrCat("register RDMA memory: ", Describe(st));
    return false;
  }
  return true;
}

void RunPair(const Options& o, uint32_t index, Failure* failure) {
  rdmaplane::ClientOptions lo, co;
  lo.socket_path = o.listen_socket;
  co.socket_path = o.connect_socket;
  const uint32_t biggest = *std::max_element(o.sizes.begin(), o.sizes.end());
  const uint64_t region = uint64_t{biggest} * o.depth;
  lo.arena_bytes = co.arena_bytes =
      std::max<uint64_t>(64ull << 20, (region + (1 << 20)) * o.connections);
  auto listener = Client::Open(lo);
  auto connector = Client::Open(co);
  if (!listener.ok() || !connector.ok()) {
    failure->Set(absl::StrCat(
        "open: ", (!listener.ok() ? listener.status() : connector.status())
                      .message()));
    return;
  }
  const std::string service = absl::StrCat(o.service, "-", index);
  if (absl::Status s = (*listener)->Listen(service); !s.ok()) {
    failure->Set(absl::StrCat("listen: ", s.message()));
    return;
  }
  std::vector<std::pair<End, End>> conns(o.connections);
  std::string error;
  for (auto& [l, c] : conns) {
    l.client = listener->get();
    c.client = connector->get();
    absl::StatusOr<rdp_conn> cc = c.client->Connect(service, o.peer);
    if (!cc.ok()) {
      failure->Set(absl::StrCat("connect to ", service,
                                o.peer.empty() ? "" : " at ", o.peer, ": ",
                                cc.status().message()));
      return;
    }
    c.conn = *cc;
    absl::StatusOr<rdp_conn> lc = l.client->Accept(service, o.timeout);
    if (!lc.ok()) {
      failure->Set(absl::StrCat("accept: ", lc.status().message()));
      return;
    }
    l.conn = *lc;
    if (!Prepare(l, region, &error) || !Prepare(c, region, &error)) {
      failure->Set(error);
      return;
    }
  }
  uint64_t seed = uint64_t{index} << 40;
  for (uint32_t size : o.sizes) {
    for (auto& [l, c] : conns) {
      // Each way by WRITE, then each way by READ.
      const bool ok = Move(c, l, true, size, o.depth, ++seed, o, &error) &&
                      Move(l, c, true, size, o.depth, ++seed, o, &error) &&
                      Move(c, l, false, size, o.depth, ++seed, o, &error) &&
                      Move(l, c, false, size, o.depth, ++seed, o, &error);
      if (!ok) {
        failure->Set(absl::StrCat("client ", index, ": ", error));
        return;
      }
      if (failure->failed()) return;
    }
    std::fprintf(stderr, "transfer: client %u: %u bytes x %u x %u ok\n",
                 index, size, o.depth, o.connections);
  }
  for (auto& [l, c] : conns) {
    (void)c.client->Disconnect(c.conn);
    (void)l.client->Disconnect(l.conn);
  }
}

bool ParseSizes(std::vector<uint32_t>* sizes) {
  for (absl::string_view part :
       absl::StrSplit(absl::GetFlag(FLAGS_sizes), ',', absl::SkipEmpty())) {
    uint32_t v;
    if (!absl::SimpleAtoi(part, &v) || v == 0 || v > kMaxSize) {
      std::fprintf(stderr, "transfer: sizes are 1..%u bytes\n", kMaxSize);
      return false;
    }
    sizes->push_back(v);
  }
  return true;
}

bool ParseOptions(Options* o) {
  o->listen_socket = absl::GetFlag(FLAGS_listen_socket);
  o->connect_socket = absl::GetFlag(FLAGS_connect_socket);
  if (o->connect_socket.empty()) o->connect_socket = o->listen_socket;
  o->peer = absl::GetFlag(FLAGS_peer);
  o->service = absl::GetFlag(FLAGS_service);
  o->depth = absl::GetFlag(FLAGS_depth);
  o->connections = absl::GetFlag(FLAGS_connections);
  o->clients = absl::GetFlag(FLAGS_clients);
  o->timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  if (!ParseSizes(&o->sizes)) return false;
  if (o->sizes.empty() || o->depth == 0 || o->depth > kMaxDepth ||
      o->connections == 0 || o->connections > 16 || o->clients == 0 ||
      o->clients > 16) {
    std::fprintf(stderr,
                 "transfer: need sizes, depth 1..%u, connections 1..16, "
                 "clients 1..16\n",
                 kMaxDepth);
    return false;
  }
  if (o->listen_socket.empty()) {
    std::fprintf(stderr, "transfer: --listen_socket is required\n");
    return false;
  }
  return true;
}

// Split mode: checks the flags it shares with this mode and rejects this
// mode's own; returns the exit status.
int RunSplitMode() {
  const char* own =
      !absl::GetFlag(FLAGS_listen_socket).empty()    ? "listen_socket"
      : !absl::GetFlag(FLAGS_connect_socket).empty() ? "connect_socket"
      : absl::GetFlag(FLAGS_service) != "transfer"   ? "service"
      : absl::GetFlag(FLAGS_connections) != 1        ? "connections"
      : absl::GetFlag(FLAGS_clients) != 1            ? "clients"
                                                     : nullptr;
  if (own != nullptr) {
    std::fprintf(stderr,
                 "transfer: --%s is not for split mode (--listen, --connect)\n",
                 own);
    return 2;
  }
  rdmaplane_transfer::SharedOptions s;
  s.peer = absl::GetFlag(FLAGS_peer);
  s.depth = absl::GetFlag(FLAGS_depth);
  s.timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  if (!ParseSizes(&s.sizes)) return 2;
  if (s.sizes.empty() || s.depth == 0 || s.depth > kMaxDepth ||
      absl::GetFlag(FLAGS_timeout_s) <= 0) {
    std::fprintf(stderr,
                 "transfer: need sizes, depth 1..%u and a positive "
                 "timeout_s\n",
                 kMaxDepth);
    return 2;
  }
  return rdmaplane_transfer::RunSplit(s);
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "RDMA WRITE and READ between clients of two daemons, every byte "
      "checked: in one process (--listen_socket, --connect_socket, --peer), "
      "or split across hosts (server: --listen=SERVICE; client: "
      "--connect=SERVICE --peer=IP)");
  absl::ParseCommandLine(argc, argv);
  if (rdmaplane_transfer::SplitModeRequested()) return RunSplitMode();
  if (const std::string flag = rdmaplane_transfer::SplitOnlyFlagInUse();
      !flag.empty()) {
    std::fprintf(stderr,
                 "transfer: --%s is for split mode (--listen or --connect)\n",
                 flag.c_str());
    return 2;
  }
  Options o;
  if (!ParseOptions(&o)) return 2;
  Failure failure;
  const absl::Time start = absl::Now();
  std::vector<std::thread> threads;
  for (uint32_t i = 0; i < o.clients; ++i) {
    threads.emplace_back(RunPair, std::cref(o), i, &failure);
  }
  for (std::thread& t : threads) t.join();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (failure.failed()) {
    std::printf("transfer: FAILED: %s\n", failure.what().c_str());
    return 1;
  }
  const uint64_t bytes = g_bytes.load();
  std::printf(
      "transfer: ok: %" PRIu64 " requests, %" PRIu64
      " bytes verified (%u clients x %u connections x %u sizes, depth %u) "
      "in %.2f s\n",
      g_requests.load(), bytes, o.clients, o.connections,
      static_cast<uint32_t>(o.sizes.size()), o.depth, seconds);
  return 0;
}
