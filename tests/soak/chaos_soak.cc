// The chaos soak's driver: good client pairs move verified data through one
// daemon and across two (over their data port) while hostile clients, chosen
// at random and run several at a time, do their worst; it checks the soak's
// invariants as it goes and prints one summary line:
//
//   chaos_soak: ok: 60 s, seed N, operations N, bytes verified B,
//   hostile kill9_target=.. kill9_writer=.. ..., violations 0
//
// Every block a hostile writer sends carries its writer, request and block
// number (Stamp), so a late, lost, torn or misplaced write shows wherever it
// lands. Invariants checked here, each reported as "VIOLATION: <kind>: ...":
//  - good pairs: every request completes exactly once, status OK, every
//    byte verified (written, then read back);
//  - every post's return value is checked, and a completion slot starts at
//    kUnsetStatus, which no completion produces;
//  - kill9_target: requests end (none stays pending), none posted after the
//    kill succeeds, and once the connection ended a post is refused with
//    RDP_ERR_CONN_RESET or RDP_ERR_CONN_ABORTED;
//  - kill9_writer / punch_source: once the writer is reaped and its
//    connection ended no byte changes; every block holds the writer's stamp
//    for that very block (or nothing); the writer's punch was refused;
//  - close / disconnect mid-transfer: the call succeeds, every request ends
//    OK or RDP_ERR_ABORTED, a request that ended OK landed whole, nothing
//    is misplaced, nothing lands after the call returned;
//  - punch_target: the target's punches are refused (its arena is sealed)
//    and writes into it still end OK;
//  - scribble_rings: the broken connection ends;
//  - forged_descriptors: a forged rkey or access inside the region's range
//    is refused by the responder's access check (NAK remote access error),
//    the memory untouched; an altered descriptor is not released;
//  - exhaust_sessions: sessions end at RDP_ERR_LIMIT within the allowance,
//    arenas run out before 4096, and all of it comes back;
//  - flood_doorbells: the good pairs keep completing during the flood;
//  - at the end: every hostile kind ran at least kMinRunsPerKind times, and
//    the good pairs completed operations.
// The daemons staying up and giving everything back (sessions, mbufs,
// arenas, hugepages, descriptors, mappings, threads, RSS, a clean log) is
// checked by the script around it (chaos_soak_test.sh).
//
//   chaos_soak --socket_a=A --socket_b=B --peer_a=IP --peer_b=IP --seconds=60
//
// The seed comes from RDP_FUZZ_SEED (decimal or 0x hex) when set, else is
// new; it is printed at the start. --inject=NAME breaks the soak on purpose
// (kInjections), so that chaos_soak_test.sh --faults can show that each
// invariant is seen. The same binary plays the hostile client processes
// (--role=...), which the driver starts and kills.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
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
#include "tests/testing/fuzz.h"
#include "tests/testing/hostile_client.h"

ABSL_FLAG(std::string, role, "driver",
          "driver, or a hostile child: target, puncher, writer, writer_punch, "
          "leaker");
ABSL_FLAG(std::string, socket_a, "", "daemon A's socket");
ABSL_FLAG(std::string, socket_b, "", "daemon B's socket (empty: one daemon)");
ABSL_FLAG(std::string, peer_b, "", "daemon B's data-port address");
ABSL_FLAG(std::string, peer_a, "", "daemon A's data-port address");
ABSL_FLAG(int32_t, seconds, 60, "how long the soak runs");
ABSL_FLAG(int32_t, workers, 3, "hostile actions running at once");
ABSL_FLAG(int32_t, progress_seconds, 60,
          "how long a doorbell flood waits for the good pairs' progress "
          "before it calls their stall a violation");
ABSL_FLAG(std::string, inject, "",
          "test only: a fault to inject, which the soak must report (one of "
          "kInjections); empty: none");
ABSL_FLAG(std::string, socket, "", "child roles: the daemon's socket");
ABSL_FLAG(std::string, service, "", "child roles: the service");
ABSL_FLAG(std::string, peer, "", "child roles: the peer daemon to connect to");
ABSL_FLAG(uint32_t, bytes, 1u << 20, "child roles: the memory offered");
ABSL_FLAG(uint32_t, writer, 0, "child roles: the writer's stamp");

namespace rdmaplane::soak {
namespace {

using testing::ChildProcess;

constexpr absl::Duration kRequestBound = absl::Seconds(20);
// A generous bound that only turns a hang into a failure (a busy machine
// under ThreadSanitizer takes seconds where a plain build takes
// milliseconds).
constexpr absl::Duration kHangBound = absl::Seconds(60);
// Every hostile kind runs at least this often, however short the soak.
constexpr int kMinRunsPerKind = 3;
// A completion slot's status before the post: no completion produces it.
constexpr int32_t kUnsetStatus = 0x5eed5eed;

// The faults --inject can apply, each with the invariant that must see it.
const char* const kInjections[] = {
    "corrupt_good",     // good pairs: a byte of the target flipped
    "post_refused",     // close case: a post refused (bad flags)
    "late_write",       // close case: a block lands after rdp_close returned
    "lost_write",       // close case: a request ended OK, a block missing
    "misplaced_write",  // close case: a block lands at another block
    "forge_range",      // forged descriptors: refused for range, not access
    "punch_unsealed",   // punch_target: the target's punch is not refused
    "exhaust_short",    // exhaust_sessions: stops before the limit
    "flood_stall",      // flood_doorbells: good pairs stall during the flood
    "skip_kind",        // coverage: scribble_rings never runs
    "no_operations",    // coverage: good pairs never complete anything
    "leak_session",     // script: a session (and its memory) left behind
};

bool Injected(const char* name) {
  static const std::string inject = absl::GetFlag(FLAGS_inject);
  return inject == name;
}

// --- Shared
// -------------------------------------------------------------------

struct Desc {
  alignas(8) uint8_t bytes[RDP_DESCRIPTOR_BYTES] = {};
  uint32_t len = sizeof(bytes);
  const shm::RdmaDescriptor* d() const {
    return reinterpret_cast<const shm::RdmaDescriptor*>(bytes);
  }
  shm::RdmaDescriptor* d() {
    return reinterpret_cast<shm::RdmaDescriptor*>(bytes);
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

// --- Stamps: what every hostile block carries
// ---------------------------------------------

constexpr uint32_t kStampBlock = 4096;
constexpr uint32_t kStampMagic = 0x53504452;  // "RDPS"

struct StampHeader {
  uint32_t magic;
  uint32_t writer;
  uint64_t request;
  uint64_t block;  // the block of the target it belongs at
};

// Block `block` as request `request` of writer `writer` writes it.
void StampBlock(uint8_t* p, uint32_t writer, uint64_t request,
                uint64_t block) {
  const StampHeader h{kStampMagic, writer, request, block};
  std::memcpy(p, &h, sizeof(h));
  const uint64_t key =
      testing::IterationSeed((uint64_t{writer} << 40) ^ request, block);
  for (uint32_t j = sizeof(h); j < kStampBlock; ++j) {
    p[j] = static_cast<uint8_t>(key >> (8 * (j & 7))) ^
           static_cast<uint8_t>(j >> 3);
  }
}

bool IsZero(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

enum class Landed { kNone, kWhole, kPart, kForeign };

// How much of `expected` the block `p` holds: none of it (zeros), all of it,
// a part (every byte either the expected one or zero, as a request cut
// short leaves it), or something else.
Landed Compare(const uint8_t* p, const uint8_t* expected) {
  if (std::memcmp(p, expected, kStampBlock) == 0) return Landed::kWhole;
  if (IsZero(p, kStampBlock)) return Landed::kNone;
  for (uint32_t j = 0; j < kStampBlock; ++j) {
    if (p[j] != 0 && p[j] != expected[j]) return Landed::kForeign;
  }
  return Landed::kPart;
}

// What block `block` holds instead, for a message.
std::string Describe(const uint8_t* p, uint64_t block) {
  StampHeader h;
  std::memcpy(&h, p, sizeof(h));
  if (h.magic != kStampMagic) {
    return "block " + std::to_string(block) + " holds bytes of no stamp";
  }
  return "block " + std::to_string(block) + " holds writer " +
         std::to_string(h.writer) + " request " + std::to_string(h.request) +
         " block " + std::to_string(h.block) +
         (h.block != block ? " (misplaced)" : "");
}

std::unique_ptr<Client> OpenOnce(const std::string& socket, size_t arena_bytes,
                                 int* code) {
  ClientOptions o;
  o.socket_path = socket;
  o.arena_bytes = arena_bytes;
  auto c = Client::Open(o);
  *code = c.ok() ? RDP_OK : RdpCode(c.status());
  return c.ok() ? std::move(*c) : nullptr;
}

// A session; while exhaust_sessions holds the user's allowance (at most
// kHangBound), tries again.
std::unique_ptr<Client> Open(const std::string& socket,
                             size_t arena_bytes = 8u << 20) {
  const absl::Time end = absl::Now() + kHangBound;
  while (true) {
    int code = RDP_OK;
    std::unique_ptr<Client> c = OpenOnce(socket, arena_bytes, &code);
    if (c != nullptr || code != RDP_ERR_LIMIT || absl::Now() > end) return c;
    absl::SleepFor(absl::Milliseconds(2));
  }
}

// Memory of `c`; while exhaust_sessions holds the user's arenas, tries again.
void* Alloc(Client& c, size_t bytes) {
  const absl::Time end = absl::Now() + kHangBound;
  while (true) {
    void* p = c.Alloc(bytes);
    if (p != nullptr || absl::Now() > end) return p;
    absl::SleepFor(absl::Milliseconds(2));
  }
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

// Waits until the daemon is done with `conn` (at most kHangBound).
bool WaitEnded(Client& c, rdp_conn conn) {
  const absl::Time end = absl::Now() + kHangBound;
  while (!c.ConnectionEnded(conn)) {
    if (absl::Now() > end) return false;
    absl::SleepFor(absl::Microseconds(200));
  }
  return true;
}

rdp_overlapped Unset() {
  rdp_overlapped ov{};
  ov.status = kUnsetStatus;
  return ov;
}

std::string Name(int status) {
  if (status == kUnsetStatus) return "never set";
  return rdp_status_name(status);
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
// what the kernel said. With --inject=punch_unsealed, one more "arena" of
// our own that nobody sealed is among them.
void Punch(void* p, size_t bytes) {
  int refused = 0, done = 0;
  std::vector<int> fds = ArenaFds();
  if (Injected("punch_unsealed")) {
    const int fd = memfd_create("rdmaplane-arena-unsealed", MFD_CLOEXEC);
    if (fd >= 0 && ftruncate(fd, 1u << 20) == 0) fds.push_back(fd);
  }
  for (int fd : fds) {
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
// it, "check W N" checks that writer W's requests 0..N-1 (one block each,
// block i at block i) landed whole. Waits until killed or stdin closes.
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
  auto* buf = static_cast<uint8_t*>(Alloc(*c, bytes));
  if (buf == nullptr) ChildFail("alloc", RDP_ERR_NO_BUFFERS);
  std::memset(buf, 0, bytes);
  Desc d;
  if (int r = c->RegisterRdmaMemory(*conn, buf, bytes, RDP_MEM_READWRITE,
                                    d.bytes, &d.len);
      r != RDP_OK) {
    ChildFail("register", r);
  }
  std::printf("descriptor %s\n", Hex(d).c_str());
  std::fflush(stdout);
  char line[64];
  std::vector<uint8_t> expected(kStampBlock);
  while (std::fgets(line, sizeof(line), stdin) != nullptr) {
    unsigned writer = 0, n = 0;
    if (punch && std::strncmp(line, "punch", 5) == 0) {
      Punch(buf, bytes);
    } else if (std::sscanf(line, "check %u %u", &writer, &n) == 2) {
      std::string bad;
      for (uint32_t i = 0; i < n && i < bytes / kStampBlock; ++i) {
        StampBlock(expected.data(), writer, i, i);
        if (std::memcmp(buf + uint64_t{i} * kStampBlock, expected.data(),
                        kStampBlock) != 0) {
          bad = Describe(buf + uint64_t{i} * kStampBlock, i);
          break;
        }
      }
      std::printf("checked %s\n", bad.empty() ? "ok" : bad.c_str());
      std::fflush(stdout);
    }
  }
  return 0;
}

// Connects to `service` (at --peer when given), takes the descriptor from
// stdin and writes into it, 8 requests of 64 KiB in flight, each stamped
// with its writer, request and blocks, until killed. With `punch`, punches
// holes in its own source after a while.
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
  const uint32_t writer = absl::GetFlag(FLAGS_writer);
  constexpr uint32_t kDepth = 8;
  constexpr uint32_t kChunk = 64u << 10;
  constexpr uint32_t kBlocks = kChunk / kStampBlock;
  auto* src = static_cast<uint8_t*>(Alloc(*c, kDepth * kChunk));
  if (src == nullptr) ChildFail("alloc", RDP_ERR_NO_BUFFERS);
  auto lkey = c->RegisterMemory(src, kDepth * kChunk, RDP_MEM_READ);
  if (!lkey.ok()) ChildFail("register", RdpCode(lkey.status()));
  std::printf("writing\n");
  std::fflush(stdout);
  rdp_overlapped ov[kDepth];
  const uint32_t chunks = std::max<uint32_t>(d.d()->length / kChunk, 1);
  for (uint64_t i = 0;; ++i) {
    rdp_overlapped& o = ov[i % kDepth];
    if (i >= kDepth) {
      const int r = c->GetOverlappedResult(*conn, &o, true, nullptr);
      if (r != RDP_OK) ChildFail("complete", r);
    }
    if (punch && i == 64) Punch(src, kDepth * kChunk);
    uint8_t* s = src + (i % kDepth) * kChunk;
    const uint64_t chunk = i % chunks;
    for (uint32_t b = 0; b < kBlocks; ++b) {
      StampBlock(s + b * kStampBlock, writer, i, chunk * kBlocks + b);
    }
    o = Unset();
    rdp_sge sge{s, kChunk, *lkey};
    const int r = c->Write(*conn, &sge, 1, d.bytes, d.len,
                           static_cast<uint32_t>(chunk * kChunk), 0, &o);
    if (r != RDP_PENDING) ChildFail("post", r);
  }
}

// Holds a session with 64 MiB registered and written through the daemon,
// and never ends by itself (--inject=leak_session: the script must see it).
int RunLeaker() {
  const std::string socket = absl::GetFlag(FLAGS_socket);
  // The target in regular pages (resident in the daemon once it wrote
  // them: RSS), the source in hugepages where there are any.
  ClientOptions o;
  o.socket_path = socket;
  o.arena_bytes = 16u << 20;
  o.hugepages = ClientOptions::Hugepages::kOff;
  auto opened = Client::Open(o);
  std::unique_ptr<Client> server = opened.ok() ? std::move(*opened) : nullptr;
  std::unique_ptr<Client> client = Open(socket, 16u << 20);
  if (server == nullptr || client == nullptr) ChildFail("open", RDP_ERR_LIMIT);
  const std::string service = absl::GetFlag(FLAGS_service);
  if (!server->Listen(service).ok()) ChildFail("listen", RDP_ERR_INVALID);
  auto cconn = client->Connect(service);
  auto sconn = server->Accept(service, absl::Seconds(20));
  if (!cconn.ok() || !sconn.ok()) ChildFail("connect", RDP_ERR_REFUSED);
  constexpr uint32_t kBytes = 64u << 20, kChunk = 1u << 20;
  void* target = Alloc(*server, kBytes);
  void* src = Alloc(*client, kChunk);
  Desc d;
  if (target == nullptr || src == nullptr ||
      server->RegisterRdmaMemory(*sconn, target, kBytes, RDP_MEM_WRITE,
                                 d.bytes, &d.len) != RDP_OK) {
    ChildFail("memory", RDP_ERR_NO_BUFFERS);
  }
  auto lkey = client->RegisterMemory(src, kChunk, RDP_MEM_READ);
  if (!lkey.ok()) ChildFail("local key", RdpCode(lkey.status()));
  std::memset(src, 0x5A, kChunk);
  for (uint32_t off = 0; off < kBytes; off += kChunk) {
    rdp_overlapped ov = Unset();
    rdp_sge sge{src, kChunk, *lkey};
    const int r = client->Write(*cconn, &sge, 1, d.bytes, d.len, off, 0, &ov);
    if (r != RDP_PENDING) ChildFail("post", r);
    if (const int s = WaitBounded(*client, *cconn, &ov); s != RDP_OK) {
      ChildFail("write", s);
    }
  }
  std::printf("leaking\n");
  std::fflush(stdout);
  while (true) pause();
}

// --- The driver
// -----------------------------------------------------------------

const char* const kKinds[] = {"kill9_target",       "kill9_writer",
                              "close_mid_transfer", "disconnect_mid_transfer",
                              "punch_target",       "punch_source",
                              "scribble_rings",     "forged_descriptors",
                              "exhaust_sessions",   "flood_doorbells"};
constexpr int kKindCount = sizeof(kKinds) / sizeof(kKinds[0]);

// One hostile action's random choices.
class Rng {
 public:
  explicit Rng(uint64_t seed) : rng_(seed) {}
  uint64_t Below(uint64_t n) {
    return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng_);
  }
  uint64_t operator()() { return rng_(); }

 private:
  std::mt19937_64 rng_;
};

class Soak {
 public:
  explicit Soak(uint64_t seed) : seed_(seed) {}

  int Run();

 private:
  // One violation of an invariant: printed, counted, the soak fails.
  void Violation(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    ++violations_;
    std::fprintf(stderr, "chaos_soak: VIOLATION: %s\n", what.c_str());
    std::fflush(stderr);
  }
  void GoodPairLoop(const std::string& name, const std::string& server_socket,
                    const std::string& client_socket, const std::string& peer);
  void Worker(uint64_t seed);
  int NextKind(Rng& rng);
  void Hostile(int kind, Rng& rng);
  std::string Service(const std::string& what) {
    return what + "-" + std::to_string(next_service_.fetch_add(1));
  }
  uint32_t NewWriter() { return next_writer_.fetch_add(1); }
  // Checks the "punched ..." line of a child that punched its arenas.
  void CheckPunch(const char* kind, const std::optional<std::string>& line);

  // Hostile actions.
  void KillTarget(Rng& rng);
  void KillWriter(bool punch, Rng& rng);
  void CloseOrDisconnectMidTransfer(bool disconnect, Rng& rng);
  void PunchTarget(Rng& rng);
  void ScribbleRings(Rng& rng);
  void ForgeDescriptors(Rng& rng);
  void ExhaustSessions(Rng& rng);
  void FloodDoorbells(Rng& rng);

  const uint64_t seed_;
  std::string self_;
  std::string socket_a_, socket_b_, peer_b_, peer_a_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> hostile_stop_{false};
  std::atomic<bool> pause_good_{false};
  std::atomic<int> good_ready_{0};
  std::mutex mu_;
  uint64_t violations_ = 0;
  int started_[kKindCount] = {};
  int finished_[kKindCount] = {};
  std::atomic<uint64_t> operations_{0};
  std::atomic<uint64_t> bytes_verified_{0};
  std::atomic<uint64_t> next_service_{1};
  std::atomic<uint32_t> next_writer_{1};
};

void Soak::GoodPairLoop(const std::string& name,
                        const std::string& server_socket,
                        const std::string& client_socket,
                        const std::string& peer) {
  constexpr uint32_t kTarget = 4u << 20;
  constexpr int kDepth = 4;
  const std::string what = "good pair " + name;
  struct Ready {  // counts this pair as set up on every way out
    explicit Ready(std::atomic<int>& n) : n_(n) {}
    ~Ready() { Done(); }
    void Done() {
      if (!done_) n_.fetch_add(1);
      done_ = true;
    }
    std::atomic<int>& n_;
    bool done_ = false;
  } ready(good_ready_);
  std::unique_ptr<Client> server = Open(server_socket, 16u << 20);
  std::unique_ptr<Client> client = Open(client_socket, 16u << 20);
  if (server == nullptr || client == nullptr) {
    return Violation(what + ": cannot open sessions");
  }
  const std::string service = "good-" + name;
  if (!server->Listen(service).ok()) return Violation(what + ": listen");
  auto cconn = ConnectTo(*client, service, peer);
  auto sconn = server->Accept(service, absl::Seconds(10));
  if (!cconn.ok() || !sconn.ok()) return Violation(what + ": connect");
  auto* target = static_cast<uint8_t*>(server->Alloc(kTarget));
  auto* source = static_cast<uint8_t*>(client->Alloc(kTarget));
  auto* back = static_cast<uint8_t*>(client->Alloc(kTarget));
  Desc d;
  if (target == nullptr || source == nullptr || back == nullptr ||
      server->RegisterRdmaMemory(*sconn, target, kTarget, RDP_MEM_READWRITE,
                                 d.bytes, &d.len) != RDP_OK) {
    return Violation(what + ": memory");
  }
  auto lsrc = client->RegisterMemory(source, kTarget, RDP_MEM_READ);
  auto lback = client->RegisterMemory(back, kTarget, RDP_MEM_WRITE);
  if (!lsrc.ok() || !lback.ok()) return Violation(what + ": local keys");
  ready.Done();
  std::mt19937_64 rng(seed_ ^ std::hash<std::string>()(name));
  uint64_t round = 0;
  while (!stop_.load()) {
    if (pause_good_.load() || Injected("no_operations")) {
      absl::SleepFor(absl::Milliseconds(1));  // held back on purpose
      continue;
    }
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
      rdp_overlapped ov[kDepth];
      for (int i = 0; i < kDepth; ++i) {
        ov[i] = Unset();
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
          return Violation(what + ": post refused: " + Name(r));
        }
      }
      // Every request listed exactly once by rdp_poll, with status OK.
      int seen[kDepth] = {};
      int left = kDepth;
      const absl::Time end = absl::Now() + kRequestBound;
      while (left > 0) {
        rdp_overlapped* done[kDepth];
        const int n = client->Poll(*cconn, done, kDepth);
        if (n < 0) return Violation(what + ": poll " + Name(n));
        for (int k = 0; k < n; ++k) {
          const uint64_t i = done[k]->context;
          if (i >= kDepth || ++seen[i] > 1) {
            return Violation(what + ": a request completed twice");
          }
          if (done[k]->status != RDP_OK) {
            return Violation(what + ": a good request failed: " +
                             Name(done[k]->status));
          }
          --left;
        }
        if (left > 0 && absl::Now() > end) {
          return Violation(what + ": a good request never completed");
        }
        if (n == 0) absl::SleepFor(absl::Microseconds(20));
      }
      if (phase == 0 && Injected("corrupt_good") && round % 8 == 0) {
        target[offset[0]] ^= 0x01;  // as a lost or torn byte would
      }
      operations_ += kDepth;
    }
    for (int i = 0; i < kDepth; ++i) {
      if (std::memcmp(target + offset[i], source + offset[i], size[i]) != 0 ||
          std::memcmp(back + offset[i], source + offset[i], size[i]) != 0) {
        return Violation(what + ": bytes differ after round " +
                         std::to_string(round));
      }
      bytes_verified_ += 2ull * size[i];
    }
  }
  if (!client->Disconnect(*cconn).ok()) Violation(what + ": disconnect");
}

void Soak::CheckPunch(const char* kind,
                      const std::optional<std::string>& line) {
  int done = -1, refused = -1, removed = -1;
  if (!line || std::sscanf(line->c_str(), "punched done=%d refused=%d "
                                          "madv_remove=%d",
                           &done, &refused, &removed) != 3) {
    return Violation(std::string(kind) + ": no punch report from the child");
  }
  // The daemon seals every arena (F_SEAL_FUTURE_WRITE): no hole can be
  // punched in one, neither by fallocate nor by MADV_REMOVE.
  if (done != 0 || refused < 1 || removed != 0) {
    Violation(std::string(kind) + ": a punch was not refused (" + *line + ")");
  }
}

void Soak::KillTarget(Rng& rng) {
  // A peer offering memory is killed while we write into it.
  const bool cross = !peer_b_.empty() && rng.Below(2) == 0;
  const std::string service = Service("victim");
  auto target = ChildProcess::Spawn(
      {self_, "--role=target", "--socket=" + (cross ? socket_b_ : socket_a_),
       "--service=" + service, "--bytes=" + std::to_string(4u << 20)});
  if (target == nullptr) return Violation("kill9_target: spawn");
  if (target->ReadLine(kHangBound).value_or("") != "listening") {
    return Violation("kill9_target: the target did not listen");
  }
  std::unique_ptr<Client> c = Open(socket_a_);
  if (c == nullptr) return Violation("kill9_target: open");
  auto conn = ConnectTo(*c, service, cross ? peer_b_ : "");
  if (!conn.ok()) return Violation("kill9_target: connect");
  auto line = target->ReadLineStartingWith("descriptor ", kHangBound);
  Desc d;
  if (!line || !FromHex(line->substr(11), &d)) {
    return Violation("kill9_target: no descriptor");
  }
  constexpr uint32_t kBlock = 64u << 10;
  auto* src = static_cast<uint8_t*>(Alloc(*c, kBlock));
  if (src == nullptr) return Violation("kill9_target: memory");
  auto lkey = c->RegisterMemory(src, kBlock, RDP_MEM_READ);
  if (!lkey.ok()) return Violation("kill9_target: local key");
  std::vector<rdp_overlapped> ov(512, Unset());
  size_t posted = 0;
  auto post = [&] {
    rdp_sge sge{src, kBlock, *lkey};
    const size_t i = posted++;
    return c->Write(*conn, &sge, 1, d.bytes, d.len,
                    static_cast<uint32_t>((i % 64) * kBlock), 0, &ov[i]);
  };
  for (int i = 0; i < 8; ++i) {
    if (const int r = post(); r != RDP_PENDING) {
      return Violation("kill9_target: a post before the kill refused: " +
                       Name(r));
    }
  }
  const uint64_t before = rng.Below(40);
  for (uint64_t i = 0; i < before && posted < 200; ++i) {
    if (const int s = WaitBounded(*c, *conn, &ov[posted - 8]); s != RDP_OK) {
      return Violation("kill9_target: a write before the kill ended " +
                       Name(s));
    }
    if (const int r = post(); r != RDP_PENDING) {
      return Violation("kill9_target: a post before the kill refused: " +
                       Name(r));
    }
  }
  target->Kill();
  // Up to 16 more, until the library refuses one (it knows of the reset).
  const size_t first_after = posted;
  size_t refused = ov.size();
  while (posted < first_after + 16) {
    const int r = post();
    if (r != RDP_PENDING) {
      refused = posted - 1;
      if (ov[refused].status != r) {
        return Violation("kill9_target: a refused post's slot says " +
                         Name(ov[refused].status) + ", not " + Name(r));
      }
      break;
    }
  }
  for (size_t i = 0; i < posted; ++i) {
    if (i == refused) continue;
    const int s = WaitBounded(*c, *conn, &ov[i]);
    if (s == RDP_PENDING) {
      return Violation("kill9_target: a request never ended");
    }
    if (i >= first_after && s == RDP_OK) {
      return Violation("kill9_target: a write posted after the kill succeeded");
    }
    if (s != RDP_OK && s != RDP_ERR_CONN_RESET && s != RDP_ERR_CONN_ABORTED) {
      return Violation("kill9_target: status " + Name(s));
    }
  }
  // Once the daemon is done with the connection, a post is refused at once,
  // with the reason.
  if (!WaitEnded(*c, *conn)) {
    return Violation("kill9_target: the connection never ended");
  }
  rdp_overlapped late = Unset();
  rdp_sge sge{src, kBlock, *lkey};
  const int r = c->Write(*conn, &sge, 1, d.bytes, d.len, 0, 0, &late);
  if (r != RDP_ERR_CONN_RESET && r != RDP_ERR_CONN_ABORTED) {
    return Violation("kill9_target: a post after the connection ended: " +
                     Name(r) + ", not a reset or abort");
  }
  if (late.status != r) {
    return Violation("kill9_target: a refused post's slot says " +
                     Name(late.status));
  }
  if (const absl::Status s = c->Disconnect(*conn); !s.ok()) {
    Violation("kill9_target: disconnect after the reset: " + s.ToString());
  }
}

void Soak::KillWriter(bool punch, Rng& rng) {
  // A writer into our memory is killed mid-transfer (after punching holes in
  // its own source, with `punch`): once it is reaped and its connection
  // ended, no byte of it lands; what landed is its own, each block where it
  // belongs.
  const char* kind = punch ? "punch_source" : "kill9_writer";
  const bool cross = !peer_a_.empty() && !socket_b_.empty() && rng.Below(2);
  const std::string service = Service("writer");
  const uint32_t writer_id = NewWriter();
  std::unique_ptr<Client> c = Open(socket_a_);
  if (c == nullptr) return Violation(std::string(kind) + ": open");
  if (!c->Listen(service).ok()) {
    return Violation(std::string(kind) + ": listen");
  }
  std::vector<std::string> args = {
      self_, punch ? "--role=writer_punch" : "--role=writer",
      "--socket=" + (cross ? socket_b_ : socket_a_), "--service=" + service,
      "--writer=" + std::to_string(writer_id)};
  if (cross) args.push_back("--peer=" + peer_a_);
  auto writer = ChildProcess::Spawn(args);
  if (writer == nullptr) return Violation(std::string(kind) + ": spawn");
  auto conn = c->Accept(service, kHangBound);
  if (!conn.ok()) return Violation(std::string(kind) + ": accept");
  constexpr uint32_t kBytes = 4u << 20;
  constexpr uint32_t kBlocks = kBytes / kStampBlock;
  constexpr uint32_t kChunkBlocks = (64u << 10) / kStampBlock;
  constexpr uint32_t kChunks = kBlocks / kChunkBlocks;
  auto* target = static_cast<uint8_t*>(Alloc(*c, kBytes));
  if (target == nullptr) return Violation(std::string(kind) + ": memory");
  std::memset(target, 0, kBytes);
  Desc d;
  if (c->RegisterRdmaMemory(*conn, target, kBytes, RDP_MEM_WRITE, d.bytes,
                            &d.len) != RDP_OK) {
    return Violation(std::string(kind) + ": register");
  }
  writer->WriteLine(Hex(d));
  if (!writer->ReadLineStartingWith("writing", kHangBound)) {
    return Violation(std::string(kind) + ": the writer did not start");
  }
  if (punch) {
    CheckPunch(kind, writer->ReadLineStartingWith("punched", kHangBound));
  } else {
    absl::SleepFor(absl::Milliseconds(rng.Below(30)));  // mid-transfer
  }
  writer->Kill();
  if (!WaitEnded(*c, *conn)) {
    return Violation(std::string(kind) + ": the connection never ended");
  }
  // Nothing changes any more: watched for a while.
  std::vector<uint8_t> snapshot(target, target + kBytes);
  absl::SleepFor(absl::Milliseconds(30));
  if (std::memcmp(snapshot.data(), target, kBytes) != 0) {
    Violation(std::string(kind) +
              ": bytes landed after the writer was reaped");
  }
  // Each block holds nothing, or the stamp of a request of this writer
  // made for this block (a request cut short may have left a prefix of its
  // own over an older request's block to the same place).
  std::vector<uint8_t> expected(kStampBlock), older(kStampBlock);
  for (uint64_t b = 0; b < kBlocks; ++b) {
    const uint8_t* p = target + b * kStampBlock;
    if (IsZero(p, kStampBlock)) continue;
    StampHeader h;
    std::memcpy(&h, p, sizeof(h));
    if (h.magic != kStampMagic || h.writer != writer_id || h.block != b ||
        h.request % kChunks != b / kChunkBlocks) {
      return Violation(std::string(kind) + ": " + Describe(p, b) +
                       ", not writer " + std::to_string(writer_id) +
                       "'s request for it (misplaced)");
    }
    StampBlock(expected.data(), writer_id, h.request, b);
    const Landed l = Compare(p, expected.data());
    if (l == Landed::kWhole || l == Landed::kPart) continue;
    uint32_t same = 0;
    while (p[same] == expected[same]) ++same;
    bool found = false;
    for (uint64_t r = h.request; r >= kChunks && !found;) {
      r -= kChunks;
      StampBlock(older.data(), writer_id, r, b);
      found = std::memcmp(p + same, older.data() + same, kStampBlock - same) ==
              0;
    }
    if (!found) {
      return Violation(std::string(kind) + ": block " + std::to_string(b) +
                       " torn: request " + std::to_string(h.request) +
                       " over bytes of no request of this writer");
    }
  }
  if (const absl::Status s = c->Disconnect(*conn); !s.ok()) {
    Violation(std::string(kind) + ": disconnect: " + s.ToString());
  }
}

void Soak::CloseOrDisconnectMidTransfer(bool disconnect, Rng& rng) {
  // Eight 1 MiB writes to eight places, each block stamped; the first ends,
  // the others are in flight when the client closes or disconnects. Each
  // ends OK (then it landed whole) or aborted; nothing lands elsewhere or
  // after the call returned.
  const std::string kind =
      disconnect ? "disconnect_mid_transfer" : "close_mid_transfer";
  const std::string service = Service("close");
  const uint32_t writer_id = NewWriter();
  std::unique_ptr<Client> server = Open(socket_a_, 16u << 20);
  std::unique_ptr<Client> client = Open(socket_a_, 16u << 20);
  if (server == nullptr || client == nullptr) return Violation(kind + ": open");
  if (!server->Listen(service).ok()) return Violation(kind + ": listen");
  auto cconn = client->Connect(service);
  auto sconn = server->Accept(service, absl::Seconds(10));
  if (!cconn.ok() || !sconn.ok()) return Violation(kind + ": connect");
  constexpr int kRequests = 8;
  constexpr uint32_t kPiece = 1u << 20;
  constexpr uint32_t kBytes = kRequests * kPiece;
  constexpr uint32_t kBlocks = kBytes / kStampBlock;
  constexpr uint32_t kPieceBlocks = kPiece / kStampBlock;
  auto* target = static_cast<uint8_t*>(Alloc(*server, kBytes));
  auto* src = static_cast<uint8_t*>(Alloc(*client, kBytes));
  Desc d;
  if (target == nullptr || src == nullptr) return Violation(kind + ": memory");
  std::memset(target, 0, kBytes);
  if (server->RegisterRdmaMemory(*sconn, target, kBytes, RDP_MEM_WRITE, d.bytes,
                                 &d.len) != RDP_OK) {
    return Violation(kind + ": register");
  }
  for (uint64_t b = 0; b < kBlocks; ++b) {
    StampBlock(src + b * kStampBlock, writer_id, b / kPieceBlocks, b);
  }
  auto lkey = client->RegisterMemory(src, kBytes, RDP_MEM_READ);
  if (!lkey.ok()) return Violation(kind + ": local key");
  rdp_overlapped ov[kRequests];
  for (int i = 0; i < kRequests; ++i) {
    ov[i] = Unset();
    rdp_sge sge{src + i * kPiece, kPiece, *lkey};
    const uint32_t flags =
        (i == 3 && Injected("post_refused")) ? 0x40000000u : 0u;
    const int r = client->Write(*cconn, &sge, 1, d.bytes, d.len, i * kPiece,
                                flags, &ov[i]);
    if (r != RDP_PENDING) {
      return Violation(kind + ": post " + std::to_string(i) + " refused: " +
                       Name(r));
    }
  }
  // The first one completes (so that there is a landed request to check).
  if (const int s = WaitBounded(*client, *cconn, &ov[0]); s != RDP_OK) {
    return Violation(kind + ": the first write ended " + Name(s));
  }
  absl::SleepFor(absl::Microseconds(rng.Below(2000)));
  if (disconnect) {
    if (const absl::Status s = client->Disconnect(*cconn); !s.ok()) {
      return Violation(kind + ": rdp_disconnect: " + s.ToString());
    }
  } else {
    client.reset();
  }
  // Returned: every request ended, and nothing moves any more.
  int status[kRequests];
  for (int i = 0; i < kRequests; ++i) {
    status[i] = __atomic_load_n(&ov[i].status, __ATOMIC_ACQUIRE);
    if (status[i] != RDP_OK && status[i] != RDP_ERR_ABORTED) {
      return Violation(kind + ": request " + std::to_string(i) + " ended " +
                       Name(status[i]) + " once the call returned");
    }
  }
  std::vector<uint8_t> snapshot(target, target + kBytes);
  if (Injected("late_write")) {
    StampBlock(target + (kBlocks - 1) * uint64_t{kStampBlock}, writer_id,
               kRequests, kBlocks - 1);  // a ninth request, landing late
  }
  absl::SleepFor(absl::Milliseconds(20));
  if (std::memcmp(snapshot.data(), target, kBytes) != 0) {
    Violation(kind + ": bytes landed after it returned");
  }
  if (Injected("lost_write")) {
    std::memset(target + (kPieceBlocks - 1) * kStampBlock, 0, kStampBlock);
  }
  if (Injected("misplaced_write")) {
    std::memcpy(target + kStampBlock, target, kStampBlock);
  }
  std::vector<uint8_t> expected(kStampBlock);
  for (uint64_t b = 0; b < kBlocks; ++b) {
    const int i = static_cast<int>(b / kPieceBlocks);
    const uint8_t* p = target + b * kStampBlock;
    StampBlock(expected.data(), writer_id, i, b);
    const Landed l = Compare(p, expected.data());
    if (l == Landed::kForeign) {
      return Violation(kind + ": " + Describe(p, b) + ", not writer " +
                       std::to_string(writer_id) + " request " +
                       std::to_string(i) + " block " + std::to_string(b) +
                       " (misplaced or torn)");
    }
    if (status[i] == RDP_OK && l != Landed::kWhole) {
      return Violation(kind + ": lost write: request " + std::to_string(i) +
                       " ended OK but block " + std::to_string(b) +
                       (l == Landed::kNone ? " is empty" : " is torn"));
    }
  }
}

void Soak::PunchTarget(Rng& rng) {
  // The target punches holes in its registered memory, then we write into
  // it: the punch is refused (the arena is sealed), the writes end OK and
  // land whole, and the daemon does not die of it.
  const std::string service = Service("punch");
  const uint32_t writer_id = NewWriter();
  std::vector<std::string> args = {self_, "--role=puncher",
                                   "--socket=" + socket_a_,
                                   "--service=" + service,
                                   "--bytes=" + std::to_string(4u << 20)};
  if (Injected("punch_unsealed")) args.push_back("--inject=punch_unsealed");
  auto target = ChildProcess::Spawn(args);
  if (target == nullptr) return Violation("punch_target: spawn");
  if (target->ReadLine(kHangBound).value_or("") != "listening") {
    return Violation("punch_target: the target did not listen");
  }
  std::unique_ptr<Client> c = Open(socket_a_);
  if (c == nullptr) return Violation("punch_target: open");
  auto conn = ConnectTo(*c, service, "");
  auto line = target->ReadLineStartingWith("descriptor ", kHangBound);
  Desc d;
  if (!conn.ok() || !line || !FromHex(line->substr(11), &d)) {
    return Violation("punch_target: setup");
  }
  constexpr int kWrites = 64;
  auto* src = static_cast<uint8_t*>(Alloc(*c, kWrites * kStampBlock));
  if (src == nullptr) return Violation("punch_target: memory");
  auto lkey = c->RegisterMemory(src, kWrites * kStampBlock, RDP_MEM_READ);
  if (!lkey.ok()) return Violation("punch_target: local key");
  target->WriteLine("punch");
  CheckPunch("punch_target",
             target->ReadLineStartingWith("punched", kHangBound));
  const int writes = 1 + static_cast<int>(rng.Below(kWrites));
  for (int i = 0; i < writes; ++i) {
    StampBlock(src + i * kStampBlock, writer_id, i, i);
    rdp_overlapped ov = Unset();
    rdp_sge sge{src + i * kStampBlock, kStampBlock, *lkey};
    const int r = c->Write(*conn, &sge, 1, d.bytes, d.len,
                           static_cast<uint32_t>(i * kStampBlock), 0, &ov);
    if (r != RDP_PENDING) {
      return Violation("punch_target: a post refused: " + Name(r));
    }
    if (const int s = WaitBounded(*c, *conn, &ov); s != RDP_OK) {
      return Violation("punch_target: a write ended " + Name(s));
    }
  }
  target->WriteLine("check " + std::to_string(writer_id) + " " +
                    std::to_string(writes));
  auto checked = target->ReadLineStartingWith("checked ", kHangBound);
  if (checked.value_or("") != "checked ok") {
    Violation("punch_target: the target's memory after the writes: " +
              checked.value_or("no answer"));
  }
  if (const absl::Status s = c->Disconnect(*conn); !s.ok()) {
    Violation("punch_target: disconnect: " + s.ToString());
  }
}

void Soak::ScribbleRings(Rng& rng) {
  // A raw client breaks its own rings: its connection is aborted, nobody
  // else's is (the good pairs check theirs).
  const std::string service = Service("scribble");
  std::unique_ptr<Client> server = Open(socket_a_);
  if (server == nullptr) return Violation("scribble_rings: open");
  testing::RawClient raw(socket_a_);
  const absl::Time open_end = absl::Now() + kHangBound;
  while (!raw.Open()) {  // refused while exhaust_sessions holds the allowance
    raw.Close();
    if (absl::Now() > open_end) return Violation("scribble_rings: raw open");
    absl::SleepFor(absl::Milliseconds(2));
  }
  if (!server->Listen(service).ok()) {
    return Violation("scribble_rings: listen");
  }
  const auto slot = raw.ConnectTo(service);
  auto sconn = server->Accept(service, absl::Seconds(10));
  if (!slot || !sconn.ok()) return Violation("scribble_rings: connect");
  // A producer index far beyond the consumer: a corrupted send ring.
  auto& producer = testing::RawClient::Producer(raw.send_ring(*slot));
  producer.store(producer.load() + 100000 +
                 static_cast<uint32_t>(rng.Below(1000)));
  raw.KickEngine(*slot);
  const absl::Time end = absl::Now() + kHangBound;
  while (raw.state(*slot) == shm::kConnUp && absl::Now() < end) {
    absl::SleepFor(absl::Microseconds(100));
  }
  if (raw.state(*slot) == shm::kConnUp) {
    Violation("scribble_rings: a corrupted ring did not end its connection");
  }
  raw.Close();
}

void Soak::ForgeDescriptors(Rng& rng) {
  // Writes through forged descriptors whose range lies inside a real
  // region, so that the library's range check passes and the responder's
  // access check is what refuses: the real rkey with the access changed
  // (the memory is read-only), or a wrong rkey. And deregistrations of
  // altered copies of the real descriptor.
  // Across the daemons the refusal travels as a NAK (detail: remote access
  // error); within one the engine makes the same checks directly.
  const bool cross = !socket_b_.empty() && !peer_b_.empty() && rng.Below(2);
  const std::string service = Service("forge");
  std::unique_ptr<Client> server = Open(cross ? socket_b_ : socket_a_);
  std::unique_ptr<Client> client = Open(socket_a_);
  if (server == nullptr || client == nullptr || !server->Listen(service).ok()) {
    return Violation("forged_descriptors: setup");
  }
  auto cconn = ConnectTo(*client, service, cross ? peer_b_ : "");
  auto sconn = server->Accept(service, absl::Seconds(10));
  if (!cconn.ok() || !sconn.ok()) {
    return Violation("forged_descriptors: connect");
  }
  constexpr uint32_t kRegion = 65536, kWrite = 4096;
  auto* buf = static_cast<uint8_t*>(Alloc(*server, kRegion));
  if (buf == nullptr) return Violation("forged_descriptors: memory");
  std::memset(buf, 0xA5, kRegion);
  Desc real;
  if (server->RegisterRdmaMemory(*sconn, buf, kRegion, RDP_MEM_READ,
                                 real.bytes, &real.len) != RDP_OK) {
    return Violation("forged_descriptors: register");
  }
  Desc altered = real;
  altered.d()->length += 4096 * (1 + rng.Below(16));
  if (const int r =
          server->DeregisterRdmaMemory(*sconn, altered.bytes, altered.len);
      r != RDP_ERR_INVALID) {
    Violation("forged_descriptors: an altered descriptor's deregistration: " +
              Name(r) + ", not RDP_ERR_INVALID");
  }
  auto* src = static_cast<uint8_t*>(Alloc(*client, kWrite));
  if (src == nullptr) return Violation("forged_descriptors: memory");
  std::memset(src, 0x3C, kWrite);
  auto lkey = client->RegisterMemory(src, kWrite, RDP_MEM_READ);
  if (!lkey.ok()) return Violation("forged_descriptors: local key");
  Desc forged = real;
  std::string how;
  if (rng.Below(2) == 0) {
    forged.d()->access = RDP_MEM_READWRITE;  // the memory is read-only
    how = "access forged";
  } else {
    forged.d()->rkey ^= static_cast<uint32_t>(1 + rng.Below(0xffff));
    how = "rkey forged";
  }
  uint32_t offset =
      static_cast<uint32_t>(rng.Below((kRegion - kWrite) / 64 + 1) * 64);
  if (Injected("forge_range")) offset = kRegion;  // past the region
  rdp_overlapped ov = Unset();
  rdp_sge sge{src, kWrite, *lkey};
  const int r = client->Write(*cconn, &sge, 1, forged.bytes, forged.len,
                              offset, 0, &ov);
  if (r != RDP_PENDING) {
    return Violation("forged_descriptors: " + how + ": refused at post with " +
                     Name(r) +
                     ": the range check, not the responder's access check");
  }
  const int s = WaitBounded(*client, *cconn, &ov);
  if (s == RDP_PENDING) return Violation("forged_descriptors: never ended");
  if (s == RDP_OK) {
    return Violation("forged_descriptors: " + how + ": the write succeeded");
  }
  // A refused write ends RDP_ERR_FAULT, its detail naming the NAK "remote
  // access error" (the engine's direct path within one daemon says the
  // same).
  const uint32_t detail = ov.internal[0];
  if (s != RDP_ERR_FAULT || detail != shm::kDetailRemoteAccess) {
    Violation("forged_descriptors: " + how + (cross ? " across" : " within") +
              " daemons: ended " + Name(s) + " with detail " +
              std::to_string(detail) + ", not a remote access error");
  }
  for (uint32_t i = 0; i < kRegion; ++i) {
    if (buf[i] != 0xA5) {
      return Violation("forged_descriptors: " + how + ": byte " +
                       std::to_string(i) + " of the region changed");
    }
  }
}

void Soak::ExhaustSessions(Rng& rng) {
  // Sessions up to the user's allowance: refused with RDP_ERR_LIMIT beyond
  // it; then arenas until refused; all of it given back.
  constexpr int kAllowance = 48;  // --max_sessions_per_user in the script
  const int cap = Injected("exhaust_short") ? 4 : 1024;
  std::vector<std::unique_ptr<Client>> held;
  int limit_status = RDP_OK;
  for (int i = 0; i < cap; ++i) {
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
  if (limit_status != RDP_ERR_LIMIT || held.size() >= kAllowance) {
    return Violation("exhaust_sessions: ended with " + Name(limit_status) +
                     " after " + std::to_string(held.size()) +
                     " sessions, not RDP_ERR_LIMIT within the allowance of " +
                     std::to_string(kAllowance));
  }
  int arenas = 0;
  bool refused = false;
  for (size_t i = 0; i < held.size() && !refused && arenas < 4096; ++i) {
    while (arenas < 4096) {
      if (held[i]->Alloc(2u << 20) == nullptr) {
        refused = true;
        break;
      }
      ++arenas;
    }
  }
  // With no session of its own (another exhaust_sessions held the whole
  // allowance), there was no arena to ask for.
  if (!refused && !held.empty()) {
    Violation("exhaust_sessions: " + std::to_string(arenas) +
              " arenas and never refused");
  }
  held.clear();
  (void)rng;
}

void Soak::FloodDoorbells(Rng& rng) {
  // Both doorbells rung as fast as we can: the good pairs keep completing
  // while it lasts.
  testing::RawClient raw(socket_a_);
  const absl::Time open_end = absl::Now() + kHangBound;
  while (!raw.Open()) {  // refused while exhaust_sessions holds the allowance
    raw.Close();
    if (absl::Now() > open_end) return Violation("flood_doorbells: open");
    absl::SleepFor(absl::Milliseconds(2));
  }
  if (Injected("flood_stall")) pause_good_.store(true);
  const uint64_t start = operations_.load();
  const uint64_t want = 16 + 8 * rng.Below(4);
  const absl::Time end =
      absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_progress_seconds));
  uint64_t rings = 0;
  while (operations_.load() < start + want && absl::Now() < end) {
    testing::RawClient::Ring(raw.engine_bell());
    testing::RawClient::Ring(raw.control_bell());
    ++rings;
  }
  pause_good_.store(false);
  if (operations_.load() < start + want) {
    Violation("flood_doorbells: the good pairs made " +
              std::to_string(operations_.load() - start) +
              " operations during " + std::to_string(rings) +
              " rings, fewer than " + std::to_string(want));
  }
  raw.Close();
}

void Soak::Hostile(int kind, Rng& rng) {
  switch (kind) {
    case 0:
      return KillTarget(rng);
    case 1:
      return KillWriter(/*punch=*/false, rng);
    case 2:
      return CloseOrDisconnectMidTransfer(/*disconnect=*/false, rng);
    case 3:
      return CloseOrDisconnectMidTransfer(/*disconnect=*/true, rng);
    case 4:
      return PunchTarget(rng);
    case 5:
      return KillWriter(/*punch=*/true, rng);
    case 6:
      return ScribbleRings(rng);
    case 7:
      return ForgeDescriptors(rng);
    case 8:
      return ExhaustSessions(rng);
    case 9:
      return FloodDoorbells(rng);
  }
}

// The next kind to run: at random among those started least often, so that
// every kind runs about as often as the others, in a random mix.
int Soak::NextKind(Rng& rng) {
  std::lock_guard<std::mutex> lock(mu_);
  int fewest = INT32_MAX;
  std::vector<int> kinds;
  for (int k = 0; k < kKindCount; ++k) {
    if (Injected("skip_kind") && k == 6) continue;
    if (started_[k] < fewest) {
      fewest = started_[k];
      kinds.clear();
    }
    if (started_[k] == fewest) kinds.push_back(k);
  }
  const int kind = kinds[rng.Below(kinds.size())];
  ++started_[kind];
  return kind;
}

void Soak::Worker(uint64_t seed) {
  Rng rng(seed);
  while (!hostile_stop_.load()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (violations_ >= 20) return;  // a dead daemon fails everything
    }
    const int kind = NextKind(rng);
    Hostile(kind, rng);
    std::lock_guard<std::mutex> lock(mu_);
    ++finished_[kind];
  }
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
  const std::string inject = absl::GetFlag(FLAGS_inject);
  if (!inject.empty() &&
      std::find_if(std::begin(kInjections), std::end(kInjections),
                   [&](const char* k) { return inject == k; }) ==
          std::end(kInjections)) {
    std::fprintf(stderr, "chaos_soak: unknown --inject=%s\n", inject.c_str());
    return 2;
  }
  const int seconds = absl::GetFlag(FLAGS_seconds);
  const int workers = std::max(1, absl::GetFlag(FLAGS_workers));
  std::printf("chaos_soak: seed %" PRIu64 " (replay with RDP_FUZZ_SEED=%" PRIu64
              "), %d s, %d hostile workers%s%s\n",
              seed_, seed_, seconds, workers,
              inject.empty() ? "" : ", injected fault: ", inject.c_str());
  std::fflush(stdout);
  std::vector<std::thread> good;
  good.emplace_back(
      [this] { GoodPairLoop("local", socket_a_, socket_a_, ""); });
  if (!socket_b_.empty() && !peer_b_.empty()) {
    good.emplace_back(
        [this] { GoodPairLoop("cross", socket_b_, socket_a_, peer_b_); });
  }
  // The good pairs hold their sessions before exhaust_sessions may run.
  const absl::Time ready_end = absl::Now() + kHangBound;
  while (good_ready_.load() < static_cast<int>(good.size()) &&
         absl::Now() < ready_end) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  const absl::Time start = absl::Now();
  const absl::Time end = start + absl::Seconds(seconds);
  std::vector<std::thread> hostile;
  for (int w = 0; w < workers; ++w) {
    hostile.emplace_back(
        [this, w] { Worker(testing::IterationSeed(seed_, 1000 + w)); });
  }
  // Until the time is up and every kind ran its minimum (bounded: a kind
  // that cannot finish is reported below).
  absl::Time next_progress = start + absl::Seconds(10);
  const absl::Time last = end + absl::Seconds(180);
  while (true) {
    absl::SleepFor(absl::Milliseconds(20));
    bool covered = true;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (violations_ >= 20) break;
      for (int k = 0; k < kKindCount; ++k) {
        covered = covered && finished_[k] >= kMinRunsPerKind;
      }
    }
    // A kind never started while the others ran their minimum never will
    // (the least started kind goes first): no use waiting for it.
    bool stuck = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      int total = 0;
      for (int k = 0; k < kKindCount; ++k) total += started_[k];
      for (int k = 0; k < kKindCount; ++k) {
        stuck = stuck || (started_[k] == 0 &&
                          total >= (kKindCount - 1) * kMinRunsPerKind);
      }
    }
    const absl::Time now = absl::Now();
    if ((now >= end && (covered || stuck)) || now >= last) break;
    if (now > next_progress) {
      next_progress += absl::Seconds(10);
      std::printf("chaos_soak: %.0f s, operations %" PRIu64
                  ", bytes verified %" PRIu64 "\n",
                  absl::ToDoubleSeconds(now - start), operations_.load(),
                  bytes_verified_.load());
      std::fflush(stdout);
    }
  }
  hostile_stop_.store(true);
  for (std::thread& t : hostile) t.join();
  stop_.store(true);
  for (std::thread& t : good) t.join();
  std::string hostile_counts;
  for (int k = 0; k < kKindCount; ++k) {
    hostile_counts +=
        std::string(" ") + kKinds[k] + "=" + std::to_string(finished_[k]);
    if (finished_[k] < kMinRunsPerKind) {
      Violation(std::string("coverage: ") + kKinds[k] + " ran " +
                std::to_string(finished_[k]) + " times, fewer than " +
                std::to_string(kMinRunsPerKind));
    }
  }
  if (operations_.load() == 0) {
    Violation("coverage: the good pairs completed no operations");
  }
  std::unique_ptr<ChildProcess> leaker;
  if (Injected("leak_session")) {
    leaker = ChildProcess::Spawn({self_, "--role=leaker",
                                  "--socket=" + socket_a_,
                                  "--service=" + Service("leak")});
    if (leaker == nullptr ||
        leaker->ReadLine(kHangBound).value_or("") != "leaking") {
      Violation("leak_session: the leaker did not start");
    } else {
      // Left running for the script to find; it ends it.
      std::printf("chaos_soak: injected: leaker pid %d\n",
                  static_cast<int>(leaker->pid()));
    }
  }
  const double took = absl::ToDoubleSeconds(absl::Now() - start);
  std::printf(
      "chaos_soak: %s: %.0f s, seed %" PRIu64 ", operations %" PRIu64
      ", bytes verified %" PRIu64 ", hostile%s, violations %" PRIu64 "\n",
      violations_ == 0 ? "ok" : "FAILED", took, seed_, operations_.load(),
      bytes_verified_.load(), hostile_counts.c_str(), violations_);
  std::fflush(stdout);
  const int status = violations_ == 0 ? 0 : 1;
  if (leaker != nullptr) {
    (void)leaker.release();  // not killed: the script must see it
    std::_Exit(status);
  }
  return status;
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
  if (role == "leaker") return rdmaplane::soak::RunLeaker();
  if (role != "driver") {
    std::fprintf(stderr, "chaos_soak: unknown --role=%s\n", role.c_str());
    return 2;
  }
  rdmaplane::soak::Soak soak(rdmaplane::testing::FuzzSeed());
  return soak.Run();
}
