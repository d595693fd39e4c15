// The chaos soak's driver: good client pairs move verified data through one
// daemon and across two (over their data port) while hostile clients, chosen
// at random, do their worst; it checks the soak's invariants as it goes and
// prints one summary line:
//
//   chaos_soak: ok: 60 s, seed 0x..., operations N, bytes verified B,
//   hostile kill9_target=.. kill9_writer=.. ..., violations 0
//
// Invariants checked here: every good request completes exactly once, with
// status OK and every byte verified; every hostile request ends within its
// bound (none stays RDP_PENDING); a request posted after its peer was killed
// never succeeds; no byte lands after rdp_close or rdp_disconnect returned.
// The daemons staying up and giving everything back is checked by the
// script around it (chaos_soak_test.sh).
//
//   chaos_soak --socket_a=A --socket_b=B --peer_b=IP --seconds=60 [--seed=N]
//
// The same binary plays the hostile client processes (--role=...), which the
// driver starts and kills.
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "api/client.h"
#include "api/rdmaplane.h"
#include "api/shm/layout.h"
#include "api/status.h"
#include "tests/testing/child_process.h"
#include "tests/testing/hostile_client.h"

ABSL_FLAG(std::string, role, "driver",
          "driver, or a hostile child: target, writer, puncher");
ABSL_FLAG(std::string, socket_a, "", "daemon A's socket");
ABSL_FLAG(std::string, socket_b, "", "daemon B's socket (empty: one daemon)");
ABSL_FLAG(std::string, peer_b, "", "daemon B's data-port address");
ABSL_FLAG(std::string, peer_a, "", "daemon A's data-port address");
ABSL_FLAG(int32_t, seconds, 60, "how long the soak runs");
ABSL_FLAG(uint64_t, seed, 0, "seed of the random choices (0: a new one)");
ABSL_FLAG(std::string, socket, "", "child roles: the daemon's socket");
ABSL_FLAG(std::string, service, "", "child roles: the service");
ABSL_FLAG(std::string, peer, "", "child roles: the peer daemon to connect to");
ABSL_FLAG(uint32_t, bytes, 1u << 20, "child roles: the memory offered");

namespace rdmaplane::soak {
namespace {

using testing::ChildProcess;

constexpr absl::Duration kRequestBound = absl::Seconds(20);

// --- Shared
// -------------------------------------------------------------------

struct Desc {
  alignas(8) uint8_t bytes[RDP_DESCRIPTOR_BYTES] = {};
  uint32_t len = sizeof(bytes);
  const shm::RdmaDescriptor* d() const {
    return reinterpret_cast<const shm::RdmaDescriptor*>(bytes);
  }
};

std::string Hex(const Desc& d) {
  std::string s;
  char b[3];
  for (uint32_t i = 0; i < d.len; ++i) {
    std::snprintf(b, sizeof(b), "%02x", d.bytes[i]);
    s += b;
  }
  return s;
}

bool FromHex(const std::string& hex, Desc* d) {
  if (hex.size() != 2 * RDP_DESCRIPTOR_BYTES) return false;
  for (uint32_t i = 0; i < RDP_DESCRIPTOR_BYTES; ++i) {
    d->bytes[i] =
        static_cast<uint8_t>(std::stoul(hex.substr(2 * i, 2), nullptr, 16));
  }
  d->len = RDP_DESCRIPTOR_BYTES;
  return true;
}

std::unique_ptr<Client> Open(const std::string& socket,
                             size_t arena_bytes = 8u << 20) {
  ClientOptions o;
  o.socket_path = socket;
  o.arena_bytes = arena_bytes;
  auto c = Client::Open(o);
  return c.ok() ? std::move(*c) : nullptr;
}

// Connects `client` to `service`, at the daemon with address `peer` when
// one is given.
absl::StatusOr<rdp_conn> ConnectTo(Client& client, const std::string& service,
                                   const std::string& peer) {
  const absl::Time end = absl::Now() + absl::Seconds(10);
  while (true) {
    auto c = client.Connect(service, peer);
    // A listener in another process may not listen yet.
    if (c.ok() || RdpCode(c.status()) != RDP_ERR_REFUSED || absl::Now() > end) {
      return c;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
}

// Waits for `ov` (polling, so that a bound holds); RDP_PENDING when the
// bound passed.
int WaitBounded(Client& c, rdp_conn conn, rdp_overlapped* ov,
                absl::Duration bound = kRequestBound) {
  const absl::Time end = absl::Now() + bound;
  while (true) {
    const int s = c.GetOverlappedResult(conn, ov, false, nullptr);
    if (s != RDP_PENDING) return s;
    if (absl::Now() > end) return RDP_PENDING;
    absl::SleepFor(absl::Microseconds(50));
  }
}

// --- Child roles
// -----------------------------------------------------------------

[[noreturn]] void ChildFail(const char* stage, int status) {
  std::printf("error %s %s %s\n", stage, rdp_status_name(status),
              rdp_last_error());
  std::fflush(stdout);
  std::_Exit(2);
}

// The arena memfds of this process, as /proc/self/fd shows them.
std::vector<int> ArenaFds() {
  std::vector<int> fds;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return fds;
  while (dirent* e = readdir(dir)) {
    char link[256];
    const std::string path = std::string("/proc/self/fd/") + e->d_name;
    const ssize_t n = readlink(path.c_str(), link, sizeof(link) - 1);
    if (n <= 0) continue;
    link[n] = '\0';
    if (std::strstr(link, "memfd:rdmaplane-arena") != nullptr) {
      fds.push_back(std::atoi(e->d_name));
    }
  }
  closedir(dir);
  return fds;
}

// Takes every free hugepage with a mapping of our own (held until the
// process ends), so that a page punched out of an arena cannot come back.
void TakeFreeHugepages() {
  FILE* f = std::fopen("/proc/meminfo", "r");
  if (f == nullptr) return;
  char line[256];
  long free_pages = 0;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    std::sscanf(line, "HugePages_Free: %ld", &free_pages);
  }
  std::fclose(f);
  for (long n = free_pages; n > 0; n /= 2) {
    void* m =
        mmap(nullptr, static_cast<size_t>(n) << 21, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_POPULATE, -1, 0);
    if (m != MAP_FAILED) break;
  }
}

// Punches holes in every arena and drops the pages of `p` (both refused on
// an arena the daemon sealed), then takes the hugepages that freed; prints
// what the kernel said.
void Punch(void* p, size_t bytes) {
  int refused = 0, done = 0;
  for (int fd : ArenaFds()) {
    struct stat st {};
    fstat(fd, &st);
    if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
                  st.st_size) == 0) {
      ++done;
    } else {
      ++refused;
    }
  }
  const int removed = madvise(p, bytes, MADV_REMOVE) == 0 ? 1 : 0;
  TakeFreeHugepages();
  std::printf("punched done=%d refused=%d madv_remove=%d\n", done, refused,
              removed);
  std::fflush(stdout);
}

// Offers `bytes` of memory on `service`; "punch" on stdin punches holes in
// it. Waits until killed or stdin closes.
int RunTarget(bool punch) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  std::unique_ptr<Client> c = Open(absl::GetFlag(FLAGS_socket), 16u << 20);
  if (c == nullptr) ChildFail("open", RDP_ERR_NET_DOWN);
  const std::string service = absl::GetFlag(FLAGS_service);
  if (absl::Status s = c->Listen(service); !s.ok()) {
    ChildFail("listen", RdpCode(s));
  }
  std::printf("listening\n");
  std::fflush(stdout);
  auto conn = c->Accept(service, absl::Seconds(20));
  if (!conn.ok()) ChildFail("accept", RdpCode(conn.status()));
  const uint32_t bytes = absl::GetFlag(FLAGS_bytes);
  void* buf = c->Alloc(bytes);
  if (buf == nullptr) ChildFail("alloc", RDP_ERR_NO_BUFFERS);
  Desc d;
  if (int r = c->RegisterRdmaMemory(*conn, buf, bytes, RDP_MEM_READWRITE,
                                    d.bytes, &d.len);
      r != RDP_OK) {
    ChildFail("register", r);
  }
  std::printf("descriptor %s\n", Hex(d).c_str());
  std::fflush(stdout);
  char line[64];
  while (std::fgets(line, sizeof(line), stdin) != nullptr) {
    if (punch && std::strncmp(line, "punch", 5) == 0) Punch(buf, bytes);
  }
  return 0;
}

// Connects to `service` (at --peer when given), takes the descriptor from
// stdin and writes into it, 8 requests in flight, until killed. With
// `punch`, punches holes in its own source after a while.
int RunWriter(bool punch) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  std::unique_ptr<Client> c = Open(absl::GetFlag(FLAGS_socket), 16u << 20);
  if (c == nullptr) ChildFail("open", RDP_ERR_NET_DOWN);
  auto conn =
      ConnectTo(*c, absl::GetFlag(FLAGS_service), absl::GetFlag(FLAGS_peer));
  if (!conn.ok()) ChildFail("connect", RdpCode(conn.status()));
  std::printf("connected\n");
  std::fflush(stdout);
  char line[256];
  Desc d;
  if (std::fgets(line, sizeof(line), stdin) == nullptr ||
      !FromHex(std::string(line, strcspn(line, "\n")), &d)) {
    ChildFail("descriptor", RDP_ERR_INVALID);
  }
  constexpr uint32_t kBlock = 64u << 10;
  auto* src = static_cast<uint8_t*>(c->Alloc(kBlock));
  if (src == nullptr) ChildFail("alloc", RDP_ERR_NO_BUFFERS);
  std::memset(src, 0xE7, kBlock);
  auto lkey = c->RegisterMemory(src, kBlock, RDP_MEM_READ);
  if (!lkey.ok()) ChildFail("register", RdpCode(lkey.status()));
  std::printf("writing\n");
  std::fflush(stdout);
  rdp_overlapped ov[8] = {};
  const uint32_t blocks = std::max<uint32_t>(d.d()->length / kBlock, 1);
  for (uint64_t i = 0;; ++i) {
    rdp_overlapped& o = ov[i % 8];
    if (i >= 8) {
      const int r = c->GetOverlappedResult(*conn, &o, true, nullptr);
      if (r != RDP_OK) ChildFail("complete", r);
    }
    if (punch && i == 64) Punch(src, kBlock);
    rdp_sge sge{src, kBlock, *lkey};
    const int r = c->Write(*conn, &sge, 1, d.bytes, d.len,
                           static_cast<uint32_t>((i % blocks) * kBlock), 0, &o);
    if (r != RDP_PENDING) ChildFail("post", r);
  }
}

// --- The driver
// -----------------------------------------------------------------

class Soak {
 public:
  explicit Soak(uint64_t seed) : rng_(seed), seed_(seed) {}

  int Run();

 private:
  // One violation of an invariant: printed, counted, the soak fails.
  void Violation(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    ++violations_;
    std::fprintf(stderr, "chaos_soak: VIOLATION: %s\n", what.c_str());
  }
  void GoodPairLoop(const std::string& name, const std::string& server_socket,
                    const std::string& client_socket, const std::string& peer);
  void Hostile(int kind);
  std::string Service(const std::string& what) {
    return what + "-" + std::to_string(next_service_++);
  }
  uint64_t Below(uint64_t n) {
    return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng_);
  }

  // Hostile actions.
  void KillTarget();
  void KillWriter(bool punch);
  void CloseOrDisconnectMidTransfer(bool disconnect);
  void PunchTarget();
  void ScribbleRings();
  void ForgeDescriptors();
  void ExhaustSessions();
  void FloodDoorbells();

  std::mt19937_64 rng_;
  uint64_t seed_;
  std::string self_;
  std::string socket_a_, socket_b_, peer_b_, peer_a_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  uint64_t violations_ = 0;
  std::atomic<uint64_t> operations_{0};
  std::atomic<uint64_t> bytes_verified_{0};
  std::map<std::string, uint64_t> hostile_;
  uint64_t next_service_ = 1;
};

const char* const kKinds[] = {"kill9_target",       "kill9_writer",
                              "close_mid_transfer", "disconnect_mid_transfer",
                              "punch_target",       "punch_source",
                              "scribble_rings",     "forged_descriptors",
                              "exhaust_sessions",   "flood_doorbells"};
constexpr int kKindCount = sizeof(kKinds) / sizeof(kKinds[0]);

void Soak::GoodPairLoop(const std::string& name,
                        const std::string& server_socket,
                        const std::string& client_socket,
                        const std::string& peer) {
  constexpr uint32_t kTarget = 4u << 20;
  constexpr int kDepth = 4;
  std::unique_ptr<Client> server = Open(server_socket, 16u << 20);
  std::unique_ptr<Client> client = Open(client_socket, 16u << 20);
  if (server == nullptr || client == nullptr) {
    return Violation(name + ": cannot open sessions");
  }
  const std::string service = "good-" + name;
  if (!server->Listen(service).ok()) return Violation(name + ": listen");
  auto cconn = ConnectTo(*client, service, peer);
  auto sconn = server->Accept(service, absl::Seconds(10));
  if (!cconn.ok() || !sconn.ok()) return Violation(name + ": connect");
  auto* target = static_cast<uint8_t*>(server->Alloc(kTarget));
  auto* source = static_cast<uint8_t*>(client->Alloc(kTarget));
  auto* back = static_cast<uint8_t*>(client->Alloc(kTarget));
  Desc d;
  if (target == nullptr || source == nullptr || back == nullptr ||
      server->RegisterRdmaMemory(*sconn, target, kTarget, RDP_MEM_READWRITE,
                                 d.bytes, &d.len) != RDP_OK) {
    return Violation(name + ": memory");
  }
  auto lsrc = client->RegisterMemory(source, kTarget, RDP_MEM_READ);
  auto lback = client->RegisterMemory(back, kTarget, RDP_MEM_WRITE);
  if (!lsrc.ok() || !lback.ok()) return Violation(name + ": local keys");
  std::mt19937_64 rng(seed_ ^ std::hash<std::string>()(name));
  uint64_t round = 0;
  while (!stop_.load()) {
    ++round;
    // kDepth writes to disjoint pieces, then reads of the same pieces.
    const uint32_t piece = kTarget / kDepth;
    uint32_t size[kDepth], offset[kDepth];
    for (int i = 0; i < kDepth; ++i) {
      size[i] = 1 + static_cast<uint32_t>(rng() % (256u << 10));
      offset[i] = i * piece + static_cast<uint32_t>(rng() % (piece - size[i]));
      for (uint32_t j = 0; j < size[i]; ++j) {
        source[offset[i] + j] = static_cast<uint8_t>(round * 131 + j * 7 + i);
      }
    }
    for (int phase = 0; phase < 2; ++phase) {
      rdp_overlapped ov[kDepth] = {};
      for (int i = 0; i < kDepth; ++i) {
        ov[i].context = static_cast<uint64_t>(i);
        int r;
        if (phase == 0) {
          rdp_sge sge{source + offset[i], size[i], *lsrc};
          r = client->Write(*cconn, &sge, 1, d.bytes, d.len, offset[i], 0,
                            &ov[i]);
        } else {
          rdp_sge sge{back + offset[i], size[i], *lback};
          r = client->Read(*cconn, &sge, 1, d.d()->address + offset[i], d.bytes,
                           d.len, 0, &ov[i]);
        }
        if (r != RDP_PENDING) {
          return Violation(name + ": post refused: " + rdp_status_name(r));
        }
      }
      // Every request listed exactly once by rdp_poll, with status OK.
      int seen[kDepth] = {};
      int left = kDepth;
      const absl::Time end = absl::Now() + kRequestBound;
      while (left > 0) {
        rdp_overlapped* done[kDepth];
        const int n = client->Poll(*cconn, done, kDepth);
        if (n < 0) return Violation(name + ": poll " + rdp_status_name(n));
        for (int k = 0; k < n; ++k) {
          const uint64_t i = done[k]->context;
          if (i >= kDepth || ++seen[i] > 1) {
            return Violation(name + ": a request completed twice");
          }
          if (done[k]->status != RDP_OK) {
            return Violation(name + ": a good request failed: " +
                             rdp_status_name(done[k]->status));
          }
          --left;
        }
        if (left > 0 && absl::Now() > end) {
          return Violation(name + ": a good request never completed");
        }
        if (n == 0) absl::SleepFor(absl::Microseconds(20));
      }
      operations_ += kDepth;
    }
    for (int i = 0; i < kDepth; ++i) {
      if (std::memcmp(target + offset[i], source + offset[i], size[i]) != 0 ||
          std::memcmp(back + offset[i], source + offset[i], size[i]) != 0) {
        return Violation(name + ": bytes differ after round " +
                         std::to_string(round));
      }
      bytes_verified_ += 2ull * size[i];
    }
  }
  if (!client->Disconnect(*cconn).ok()) Violation(name + ": disconnect");
}

void Soak::KillTarget() {
  // A peer offering memory is killed while we write into it.
  const bool cross = !peer_b_.empty() && Below(2) == 0;
  const std::string service = Service("victim");
  auto target = ChildProcess::Spawn(
      {self_, "--role=target", "--socket=" + (cross ? socket_b_ : socket_a_),
       "--service=" + service, "--bytes=" + std::to_string(4u << 20)});
  if (target == nullptr) return Violation("kill9_target: spawn");
  if (target->ReadLine().value_or("") != "listening") {
    return Violation("kill9_target: the target did not listen");
  }
  std::unique_ptr<Client> c = Open(socket_a_);
  if (c == nullptr) return Violation("kill9_target: open");
  auto conn = ConnectTo(*c, service, cross ? peer_b_ : "");
  if (!conn.ok()) return Violation("kill9_target: connect");
  auto line = target->ReadLineStartingWith("descriptor ");
  Desc d;
  if (!line || !FromHex(line->substr(11), &d)) {
    return Violation("kill9_target: no descriptor");
  }
  constexpr uint32_t kBlock = 64u << 10;
  auto* src = static_cast<uint8_t*>(c->Alloc(kBlock));
  auto lkey = c->RegisterMemory(src, kBlock, RDP_MEM_READ);
  if (src == nullptr || !lkey.ok()) return Violation("kill9_target: memory");
  std::vector<rdp_overlapped> ov(512);
  size_t posted = 0;
  auto post = [&] {
    rdp_sge sge{src, kBlock, *lkey};
    const size_t i = posted++;
    return c->Write(*conn, &sge, 1, d.bytes, d.len,
                    static_cast<uint32_t>((i % 64) * kBlock), 0, &ov[i]);
  };
  for (int i = 0; i < 8; ++i) post();
  const uint64_t before = Below(40);
  for (uint64_t i = 0; i < before && posted < 200; ++i) {
    WaitBounded(*c, *conn, &ov[posted - 8]);
    post();
  }
  target->Kill();
  // Up to 16 more, until the library refuses one (it knows of the reset).
  const size_t first_after = posted;
  size_t refused = ov.size();
  while (posted < first_after + 16) {
    if (post() != RDP_PENDING) {
      refused = posted - 1;  // refused at once: its status is that error
      break;
    }
  }
  for (size_t i = 0; i < posted; ++i) {
    if (i == refused) continue;
    const int s = WaitBounded(*c, *conn, &ov[i]);
    if (s == RDP_PENDING)
      return Violation("kill9_target: a request never ended");
    if (i >= first_after && s == RDP_OK) {
      return Violation("kill9_target: a write posted after the kill succeeded");
    }
    if (s != RDP_OK && s != RDP_ERR_CONN_RESET && s != RDP_ERR_CONN_ABORTED) {
      return Violation(std::string("kill9_target: status ") +
                       rdp_status_name(s));
    }
  }
  (void)c->Disconnect(*conn);
}

void Soak::KillWriter(bool punch) {
  // A writer into our memory is killed mid-transfer (after punching holes in
  // its own source, with `punch`): once it is reaped, no byte of it lands.
  const bool cross = !peer_a_.empty() && !socket_b_.empty() && Below(2) == 0;
  const std::string service = Service("writer");
  std::unique_ptr<Client> c = Open(socket_a_);
  if (c == nullptr) return Violation("kill9_writer: open");
  if (!c->Listen(service).ok()) return Violation("kill9_writer: listen");
  std::vector<std::string> args = {
      self_, punch ? "--role=writer_punch" : "--role=writer",
      "--socket=" + (cross ? socket_b_ : socket_a_), "--service=" + service};
  if (cross) args.push_back("--peer=" + peer_a_);
  auto writer = ChildProcess::Spawn(args);
  if (writer == nullptr) return Violation("kill9_writer: spawn");
  auto conn = c->Accept(service, absl::Seconds(20));
  if (!conn.ok()) return Violation("kill9_writer: accept");
  constexpr uint32_t kBytes = 4u << 20;
  auto* target = static_cast<uint8_t*>(c->Alloc(kBytes));
  Desc d;
  if (target == nullptr ||
      c->RegisterRdmaMemory(*conn, target, kBytes, RDP_MEM_WRITE, d.bytes,
                            &d.len) != RDP_OK) {
    return Violation("kill9_writer: register");
  }
  std::memset(target, 0, kBytes);
  writer->WriteLine(Hex(d));
  if (!writer->ReadLineStartingWith("writing")) {
    return Violation("kill9_writer: the writer did not start");
  }
  absl::SleepFor(absl::Milliseconds(Below(30)));
  if (punch) writer->ReadLineStartingWith("punched", absl::Seconds(5));
  writer->Kill();
  // The engine stops at its next request; give the control plane a moment,
  // then nothing may change any more.
  absl::SleepFor(absl::Milliseconds(20));
  std::vector<uint8_t> snapshot(target, target + kBytes);
  absl::SleepFor(absl::Milliseconds(30));
  if (std::memcmp(snapshot.data(), target, kBytes) != 0) {
    Violation("kill9_writer: bytes landed after the writer was reaped");
  }
  (void)c->Disconnect(*conn);
}

void Soak::CloseOrDisconnectMidTransfer(bool disconnect) {
  const char* kind =
      disconnect ? "disconnect_mid_transfer" : "close_mid_transfer";
  const std::string service = Service("close");
  std::unique_ptr<Client> server = Open(socket_a_, 16u << 20);
  std::unique_ptr<Client> client = Open(socket_a_, 16u << 20);
  if (server == nullptr || client == nullptr) {
    return Violation(std::string(kind) + ": open");
  }
  if (!server->Listen(service).ok())
    return Violation(std::string(kind) + ": listen");
  auto cconn = client->Connect(service);
  auto sconn = server->Accept(service, absl::Seconds(10));
  if (!cconn.ok() || !sconn.ok())
    return Violation(std::string(kind) + ": connect");
  constexpr uint32_t kBytes = 8u << 20;
  auto* target = static_cast<uint8_t*>(server->Alloc(kBytes));
  auto* src = static_cast<uint8_t*>(client->Alloc(kBytes));
  Desc d;
  if (target == nullptr || src == nullptr ||
      server->RegisterRdmaMemory(*sconn, target, kBytes, RDP_MEM_WRITE, d.bytes,
                                 &d.len) != RDP_OK) {
    return Violation(std::string(kind) + ": memory");
  }
  std::memset(target, 0, kBytes);
  std::memset(src, 0x3C, kBytes);
  auto lkey = client->RegisterMemory(src, kBytes, RDP_MEM_READ);
  if (!lkey.ok()) return Violation(std::string(kind) + ": local key");
  rdp_overlapped ov[8] = {};
  for (rdp_overlapped& o : ov) {
    rdp_sge sge{src, kBytes, *lkey};
    client->Write(*cconn, &sge, 1, d.bytes, d.len, 0, 0, &o);
  }
  absl::SleepFor(absl::Microseconds(Below(2000)));
  if (disconnect) {
    (void)client->Disconnect(*cconn);
  } else {
    client.reset();
  }
  for (const rdp_overlapped& o : ov) {
    const int s = __atomic_load_n(&o.status, __ATOMIC_ACQUIRE);
    if (s != RDP_OK && s != RDP_ERR_ABORTED) {
      return Violation(std::string(kind) + ": a request ended " +
                       rdp_status_name(s));
    }
  }
  std::vector<uint8_t> snapshot(target, target + kBytes);
  absl::SleepFor(absl::Milliseconds(20));
  if (std::memcmp(snapshot.data(), target, kBytes) != 0) {
    Violation(std::string(kind) + ": bytes landed after it returned");
  }
}

void Soak::PunchTarget() {
  // The target punches holes in its registered memory while we write into
  // it: the daemon must not die of it.
  const std::string service = Service("punch");
  auto target = ChildProcess::Spawn(
      {self_, "--role=puncher", "--socket=" + socket_a_, "--service=" + service,
       "--bytes=" + std::to_string(4u << 20)});
  if (target == nullptr) return Violation("punch_target: spawn");
  if (target->ReadLine().value_or("") != "listening") {
    return Violation("punch_target: the target did not listen");
  }
  std::unique_ptr<Client> c = Open(socket_a_);
  if (c == nullptr) return Violation("punch_target: open");
  auto conn = ConnectTo(*c, service, "");
  auto line = target->ReadLineStartingWith("descriptor ");
  Desc d;
  if (!conn.ok() || !line || !FromHex(line->substr(11), &d)) {
    return Violation("punch_target: setup");
  }
  constexpr uint32_t kBlock = 64u << 10;
  auto* src = static_cast<uint8_t*>(c->Alloc(kBlock));
  auto lkey = c->RegisterMemory(src, kBlock, RDP_MEM_READ);
  if (src == nullptr || !lkey.ok()) return Violation("punch_target: memory");
  target->WriteLine("punch");
  target->ReadLineStartingWith("punched", absl::Seconds(5));
  for (int i = 0; i < 64; ++i) {
    rdp_overlapped ov{};
    rdp_sge sge{src, kBlock, *lkey};
    if (c->Write(*conn, &sge, 1, d.bytes, d.len,
                 static_cast<uint32_t>(i * kBlock), 0, &ov) != RDP_PENDING) {
      break;
    }
    if (WaitBounded(*c, *conn, &ov) == RDP_PENDING) {
      return Violation("punch_target: a write never ended");
    }
  }
  (void)c->Disconnect(*conn);
}

void Soak::ScribbleRings() {
  // A raw client breaks its own rings: its connection is aborted, nobody
  // else is.
  const std::string service = Service("scribble");
  std::unique_ptr<Client> server = Open(socket_a_);
  testing::RawClient raw(socket_a_);
  if (server == nullptr || !raw.Open() || !server->Listen(service).ok()) {
    return Violation("scribble_rings: setup");
  }
  const auto slot = raw.ConnectTo(service);
  auto sconn = server->Accept(service, absl::Seconds(10));
  if (!slot || !sconn.ok()) return Violation("scribble_rings: connect");
  // A producer index far beyond the consumer: a corrupted send ring.
  auto& producer = testing::RawClient::Producer(raw.send_ring(*slot));
  producer.store(producer.load() + 100000 + static_cast<uint32_t>(Below(1000)));
  raw.KickEngine(*slot);
  const absl::Time end = absl::Now() + kRequestBound;
  while (raw.state(*slot) == shm::kConnUp && absl::Now() < end) {
    absl::SleepFor(absl::Microseconds(100));
  }
  if (raw.state(*slot) == shm::kConnUp) {
    Violation("scribble_rings: a corrupted ring did not end its connection");
  }
  raw.Close();
}

void Soak::ForgeDescriptors() {
  // Writes through descriptors that name memory we were never given; and
  // deregistrations with altered copies of a real one.
  const std::string service = Service("forge");
  std::unique_ptr<Client> server = Open(socket_a_);
  std::unique_ptr<Client> client = Open(socket_a_);
  if (server == nullptr || client == nullptr || !server->Listen(service).ok()) {
    return Violation("forged_descriptors: setup");
  }
  auto cconn = client->Connect(service);
  auto sconn = server->Accept(service, absl::Seconds(10));
  if (!cconn.ok() || !sconn.ok())
    return Violation("forged_descriptors: connect");
  auto* buf = static_cast<uint8_t*>(server->Alloc(65536));
  Desc real;
  if (buf == nullptr ||
      server->RegisterRdmaMemory(*sconn, buf, 65536, RDP_MEM_READ, real.bytes,
                                 &real.len) != RDP_OK) {
    return Violation("forged_descriptors: register");
  }
  Desc altered = real;
  auto* a = reinterpret_cast<shm::RdmaDescriptor*>(altered.bytes);
  a->length += 4096 * (1 + Below(16));
  if (server->DeregisterRdmaMemory(*sconn, altered.bytes, altered.len) !=
      RDP_ERR_INVALID) {
    Violation("forged_descriptors: an altered descriptor was released");
  }
  auto* src = static_cast<uint8_t*>(client->Alloc(4096));
  auto lkey = client->RegisterMemory(src, 4096, RDP_MEM_READ);
  if (src == nullptr || !lkey.ok())
    return Violation("forged_descriptors: memory");
  // A write into read-only memory, or past it, or under a made-up key: each
  // ends with an error (and breaks the connection), none succeeds.
  Desc forged = real;
  auto* f = reinterpret_cast<shm::RdmaDescriptor*>(forged.bytes);
  switch (Below(3)) {
    case 0:
      break;  // read-only memory
    case 1:
      f->length = 1u << 30;
      f->access = RDP_MEM_READWRITE;
      break;
    default:
      f->rkey = static_cast<uint32_t>(rng_());
      break;
  }
  rdp_overlapped ov{};
  rdp_sge sge{src, 4096, *lkey};
  const int r = client->Write(*cconn, &sge, 1, forged.bytes, forged.len,
                              static_cast<uint32_t>(Below(1u << 20)), 0, &ov);
  if (r == RDP_PENDING) {
    const int s = WaitBounded(*client, *cconn, &ov);
    if (s == RDP_PENDING) return Violation("forged_descriptors: never ended");
    if (s == RDP_OK) Violation("forged_descriptors: a forged write succeeded");
  }
}

void Soak::ExhaustSessions() {
  // Sessions and arenas up to the user's allowance: refused with
  // RDP_ERR_LIMIT beyond it, and all given back.
  std::vector<std::unique_ptr<Client>> held;
  int limit_status = RDP_OK;
  for (int i = 0; i < 1024; ++i) {
    ClientOptions o;
    o.socket_path = socket_a_;
    o.arena_bytes = 2u << 20;
    o.hugepages = ClientOptions::Hugepages::kOff;
    auto c = Client::Open(o);
    if (!c.ok()) {
      limit_status = RdpCode(c.status());
      break;
    }
    held.push_back(std::move(*c));
  }
  if (limit_status != RDP_ERR_LIMIT) {
    Violation(std::string("exhaust_sessions: ended with ") +
              rdp_status_name(limit_status) + " after " +
              std::to_string(held.size()) + " sessions");
  }
  int arenas = 0;
  for (auto& c : held) {
    while (c->Alloc(2u << 20) != nullptr && arenas < 4096) ++arenas;
  }
}

void Soak::FloodDoorbells() {
  testing::RawClient raw(socket_a_);
  if (!raw.Open()) return Violation("flood_doorbells: open");
  const absl::Time end = absl::Now() + absl::Milliseconds(200);
  while (absl::Now() < end) {
    testing::RawClient::Ring(raw.engine_bell());
    testing::RawClient::Ring(raw.control_bell());
  }
  raw.Close();
}

void Soak::Hostile(int kind) {
  switch (kind) {
    case 0:
      KillTarget();
      break;
    case 1:
      KillWriter(/*punch=*/false);
      break;
    case 2:
      CloseOrDisconnectMidTransfer(/*disconnect=*/false);
      break;
    case 3:
      CloseOrDisconnectMidTransfer(/*disconnect=*/true);
      break;
    case 4:
      PunchTarget();
      break;
    case 5:
      KillWriter(/*punch=*/true);
      break;
    case 6:
      ScribbleRings();
      break;
    case 7:
      ForgeDescriptors();
      break;
    case 8:
      ExhaustSessions();
      break;
    case 9:
      FloodDoorbells();
      break;
  }
  ++hostile_[kKinds[kind]];
}

int Soak::Run() {
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return 2;
  self_.assign(path, static_cast<size_t>(n));
  socket_a_ = absl::GetFlag(FLAGS_socket_a);
  socket_b_ = absl::GetFlag(FLAGS_socket_b);
  peer_b_ = absl::GetFlag(FLAGS_peer_b);
  peer_a_ = absl::GetFlag(FLAGS_peer_a);
  if (socket_a_.empty()) {
    std::fprintf(stderr, "chaos_soak: --socket_a is required\n");
    return 2;
  }
  const int seconds = absl::GetFlag(FLAGS_seconds);
  std::printf("chaos_soak: seed 0x%" PRIx64 " (replay with --seed=%" PRIu64
              "), %d s\n",
              seed_, seed_, seconds);
  std::fflush(stdout);
  std::vector<std::thread> good;
  good.emplace_back(
      [this] { GoodPairLoop("local", socket_a_, socket_a_, ""); });
  if (!socket_b_.empty() && !peer_b_.empty()) {
    good.emplace_back(
        [this] { GoodPairLoop("cross", socket_b_, socket_a_, peer_b_); });
  }
  const absl::Time end = absl::Now() + absl::Seconds(seconds);
  absl::Time next_progress = absl::Now() + absl::Seconds(10);
  while (absl::Now() < end) {
    {
      // A daemon that died fails everything from then on: stop early.
      std::lock_guard<std::mutex> lock(mu_);
      if (violations_ >= 20) break;
    }
    Hostile(static_cast<int>(Below(kKindCount)));
    if (absl::Now() > next_progress) {
      next_progress += absl::Seconds(10);
      std::printf("chaos_soak: %.0f s left, operations %" PRIu64
                  ", bytes verified %" PRIu64 "\n",
                  absl::ToDoubleSeconds(end - absl::Now()), operations_.load(),
                  bytes_verified_.load());
      std::fflush(stdout);
    }
  }
  stop_.store(true);
  for (std::thread& t : good) t.join();
  std::string hostile;
  for (int k = 0; k < kKindCount; ++k) {
    hostile += std::string(" ") + kKinds[k] + "=" +
               std::to_string(hostile_[kKinds[k]]);
  }
  std::printf(
      "chaos_soak: %s: %d s, seed 0x%" PRIx64 ", operations %" PRIu64
      ", bytes verified %" PRIu64 ", hostile%s, violations %" PRIu64 "\n",
      violations_ == 0 ? "ok" : "FAILED", seconds, seed_, operations_.load(),
      bytes_verified_.load(), hostile.c_str(), violations_);
  std::fflush(stdout);
  return violations_ == 0 ? 0 : 1;
}

}  // namespace
}  // namespace rdmaplane::soak

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  signal(SIGPIPE, SIG_IGN);
  const std::string role = absl::GetFlag(FLAGS_role);
  if (role == "target") return rdmaplane::soak::RunTarget(false);
  if (role == "puncher") return rdmaplane::soak::RunTarget(true);
  if (role == "writer") return rdmaplane::soak::RunWriter(false);
  if (role == "writer_punch") return rdmaplane::soak::RunWriter(true);
  if (role != "driver") {
    std::fprintf(stderr, "chaos_soak: unknown --role=%s\n", role.c_str());
    return 2;
  }
  uint64_t seed = absl::GetFlag(FLAGS_seed);
  if (seed == 0) {
    seed = static_cast<uint64_t>(absl::GetCurrentTimeNanos()) ^
           (static_cast<uint64_t>(getpid()) << 32);
  }
  rdmaplane::soak::Soak soak(seed);
  return soak.Run();
}
