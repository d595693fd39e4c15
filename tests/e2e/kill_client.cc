// kill_client: one end of a connection between clients of two daemons, for
// the tests that kill a daemon or a client in the middle of a transfer and
// watch what the other processes see.
//
// The listening end (no --peer) listens on --service and accepts; the
// connecting end connects to --service at --peer (start it once the
// listener printed "listening"). Each end registers a buffer of 2 x depth x
// size bytes for its peer and publishes its descriptor and address in
// DIR/NAME.desc; it reads the peer's from DIR/PEER_NAME.desc. Then, with
// --mode=stream, it keeps --depth requests of --size bytes outstanding,
// RDMA WRITEs and READs in turn, and prints every completion, until a
// request or a post fails; the remaining requests are then waited for (each
// must complete too). With --mode=idle it posts nothing. With --hold (and
// always in idle mode) it then keeps its session until the file
// DIR/NAME.release appears, so that a test can look at the daemons while it
// still holds it; finally it disconnects and exits.
//
//   kill_client --socket=/tmp/a.sock --service=kill --dir=/tmp/x --name=a
//       --peer_name=b
//   kill_client --socket=/tmp/b.sock --service=kill --peer=10.0.0.1
//       --dir=/tmp/x --name=b --peer_name=a
//
// Lines on stdout (flushed one by one; times are Unix seconds):
//   kill_client: listening
//   kill_client: connected
//   kill_client: ready t=T
//   c N write|read CODE                         one per completion
//   kill_client: first_error stage=complete|post op=write|read status=CODE
//       t=T ok=N                                 (one line)
//   kill_client: drained status=CODE            one per outstanding request
//   kill_client: holding
//   kill_client: disconnect status=CODE
//   kill_client: exit
//   kill_client: FAILED WHAT                    setup failed (exit status 2)
//   kill_client: stalled stage=STAGE           no progress for --stall_s
//                                               (exit status 3)
// CODE is an rdp_status name (RDP_OK, RDP_ERR_CONN_ABORTED, ...). Exit
// status: 0 after a failure it observed and survived (stream) or after its
// release (idle, hold); 2 setup failed; 3 stalled; 4 no failure within
// --max_s.
//
// The process dies with its parent, so a test that crashes leaves none.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "api/client.h"
#include "api/rdmaplane.h"
#include "api/status.h"

ABSL_FLAG(std::string, socket, "", "socket of this end's daemon");
ABSL_FLAG(std::string, service, "kill", "service name");
ABSL_FLAG(std::string, peer, "",
          "data-port address of the listener's daemon; empty: listen");
ABSL_FLAG(std::string, dir, "", "folder where the ends swap descriptors");
ABSL_FLAG(std::string, name, "", "this end's name (DIR/NAME.desc)");
ABSL_FLAG(std::string, peer_name, "", "the other end's name");
ABSL_FLAG(std::string, mode, "stream", "stream: post until failure; idle");
ABSL_FLAG(uint32_t, size, 1u << 20, "bytes per request");
ABSL_FLAG(uint32_t, depth, 8, "requests outstanding");
ABSL_FLAG(bool, hold, false,
          "after the failure, keep the session until DIR/NAME.release "
          "exists");
ABSL_FLAG(int32_t, setup_timeout_s, 30,
          "bound on accepting and on waiting for the peer's descriptor");
ABSL_FLAG(int32_t, stall_s, 30, "exit with status 3 after this long without "
                                "progress (not while holding)");
ABSL_FLAG(int32_t, max_s, 300, "exit with status 4 when no failure came "
                               "within this long");

namespace {

std::atomic<int64_t> g_progress_ns{0};
std::atomic<const char*> g_stage{"open"};
std::atomic<bool> g_watch{true};

int64_t MonoNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

void Progress(const char* stage) {
  g_stage.store(stage);
  g_progress_ns.store(MonoNs());
}

double UnixSeconds() { return absl::ToUnixMicros(absl::Now()) / 1e6; }

void Say(const std::string& line) {
  std::fputs(line.c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

[[noreturn]] void Fail(const std::string& what) {
  Say("kill_client: FAILED " + what);
  std::_Exit(2);
}

// Exits with status 3, naming the stage, when nothing moved for `stall`.
void Watchdog(int64_t stall_ns) {
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!g_watch.load()) continue;
    if (MonoNs() - g_progress_ns.load() > stall_ns) {
      Say(absl::StrCat("kill_client: stalled stage=", g_stage.load()));
      std::_Exit(3);
    }
  }
}

std::string Hex(const uint8_t* p, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += kDigits[p[i] >> 4];
    s += kDigits[p[i] & 15];
  }
  return s;
}

bool Unhex(const std::string& s, uint8_t* out, size_t n) {
  auto value = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  if (s.size() != 2 * n) return false;
  for (size_t i = 0; i < n; ++i) {
    const int hi = value(s[2 * i]), lo = value(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

// What one end tells the other: its descriptor, and the address and length
// of the registered buffer (for READs).
struct Remote {
  uint8_t descriptor[RDP_DESCRIPTOR_BYTES] = {};
  uint32_t descriptor_length = 0;
  uint64_t address = 0;
  uint64_t length = 0;
};

void Publish(const std::string& dir, const std::string& name,
             const Remote& r) {
  const std::string path = dir + "/" + name + ".desc";
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << Hex(r.descriptor, r.descriptor_length) << " " << r.address << " "
        << r.length << "\n";
    if (!out) Fail("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) Fail("cannot rename " + tmp);
}

Remote WaitForPeer(const std::string& dir, const std::string& name,
                   absl::Duration timeout) {
  const std::string path = dir + "/" + name + ".desc";
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    std::ifstream in(path);
    if (in) {
      std::string hex;
      Remote r;
      in >> hex >> r.address >> r.length;
      r.descriptor_length = static_cast<uint32_t>(hex.size() / 2);
      if (!in || r.descriptor_length > sizeof(r.descriptor) ||
          !Unhex(hex, r.descriptor, r.descriptor_length)) {
        Fail("malformed " + path);
      }
      return r;
    }
    if (absl::Now() > deadline) Fail("no " + path + " in time");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// Waits until `path` exists (the test lets go of us).
void WaitForFile(const std::string& path) {
  while (access(path.c_str(), F_OK) != 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

const char* CodeName(int code) {
  switch (code) {
    case RDP_OK: return "RDP_OK";
    case RDP_PENDING: return "RDP_PENDING";
    case RDP_ERR_INVALID: return "RDP_ERR_INVALID";
    case RDP_ERR_FAULT: return "RDP_ERR_FAULT";
    case RDP_ERR_NO_BUFFERS: return "RDP_ERR_NO_BUFFERS";
    case RDP_ERR_NOT_CONNECTED: return "RDP_ERR_NOT_CONNECTED";
    case RDP_ERR_CONN_RESET: return "RDP_ERR_CONN_RESET";
    case RDP_ERR_CONN_ABORTED: return "RDP_ERR_CONN_ABORTED";
    case RDP_ERR_ABORTED: return "RDP_ERR_ABORTED";
    case RDP_ERR_REMOTE_RESOURCES: return "RDP_ERR_REMOTE_RESOURCES";
    case RDP_ERR_NET_DOWN: return "RDP_ERR_NET_DOWN";
    case RDP_ERR_REFUSED: return "RDP_ERR_REFUSED";
    case RDP_ERR_PERMISSION: return "RDP_ERR_PERMISSION";
    case RDP_ERR_TIMEOUT: return "RDP_ERR_TIMEOUT";
    case RDP_ERR_AGAIN: return "RDP_ERR_AGAIN";
  }
  return "RDP_UNKNOWN";
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "one end of a connection between clients of two daemons, for tests "
      "that kill things");
  absl::ParseCommandLine(argc, argv);
  const std::string socket = absl::GetFlag(FLAGS_socket);
  const std::string service = absl::GetFlag(FLAGS_service);
  const std::string peer = absl::GetFlag(FLAGS_peer);
  const std::string dir = absl::GetFlag(FLAGS_dir);
  const std::string name = absl::GetFlag(FLAGS_name);
  const std::string peer_name = absl::GetFlag(FLAGS_peer_name);
  const std::string mode = absl::GetFlag(FLAGS_mode);
  const uint32_t size = absl::GetFlag(FLAGS_size);
  const uint32_t depth = absl::GetFlag(FLAGS_depth);
  const bool hold = absl::GetFlag(FLAGS_hold) || mode == "idle";
  const std::string release = dir + "/" + name + ".release";
  const absl::Duration setup_timeout =
      absl::Seconds(absl::GetFlag(FLAGS_setup_timeout_s));
  if (socket.empty() || dir.empty() || name.empty() || peer_name.empty() ||
      (mode != "stream" && mode != "idle") || size == 0 ||
      size > (64u << 20) || depth == 0 || depth > 64 ||
      absl::GetFlag(FLAGS_stall_s) <= 0 || absl::GetFlag(FLAGS_max_s) <= 0) {
    std::fprintf(stderr,
                 "kill_client: need --socket, --dir, --name, --peer_name, "
                 "--mode=stream|idle, --size 1..64 MiB, --depth 1..64\n");
    return 2;
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() == 1) return 2;
  Progress("open");
  std::thread(Watchdog, int64_t{absl::GetFlag(FLAGS_stall_s)} * 1'000'000'000)
      .detach();

  const uint64_t bytes = uint64_t{2} * depth * size;
  rdmaplane::ClientOptions options;
  options.socket_path = socket;
  options.arena_bytes = bytes + (2u << 20);
  absl::StatusOr<std::unique_ptr<rdmaplane::Client>> opened =
      rdmaplane::Client::Open(options);
  if (!opened.ok()) Fail("open: " + std::string(opened.status().message()));
  rdmaplane::Client& client = **opened;

  rdp_conn conn = 0;
  if (peer.empty()) {
    if (absl::Status s = client.Listen(service); !s.ok()) {
      Fail("listen: " + std::string(s.message()));
    }
    Say("kill_client: listening");
    Progress("accept");
    absl::StatusOr<rdp_conn> c = client.Accept(service, setup_timeout);
    if (!c.ok()) Fail("accept: " + std::string(c.status().message()));
    conn = *c;
  } else {
    Progress("connect");
    absl::StatusOr<rdp_conn> c = client.Connect(service, peer);
    if (!c.ok()) Fail("connect: " + std::string(c.status().message()));
    conn = *c;
  }
  Say("kill_client: connected");

  Progress("register");
  auto* buf = static_cast<uint8_t*>(client.Alloc(bytes));
  if (buf == nullptr) Fail("alloc: out of arena memory");
  std::memset(buf, name.empty() ? 1 : name[0], bytes);
  absl::StatusOr<uint32_t> lkey =
      client.RegisterMemory(buf, bytes, RDP_MEM_READWRITE);
  if (!lkey.ok()) Fail("register: " + std::string(lkey.status().message()));
  Remote mine;
  mine.descriptor_length = sizeof(mine.descriptor);
  mine.address = reinterpret_cast<uint64_t>(buf);
  mine.length = bytes;
  if (int st = client.RegisterRdmaMemory(conn, buf, static_cast<uint32_t>(bytes),
                                         RDP_MEM_READWRITE, mine.descriptor,
                                         &mine.descriptor_length);
      st != RDP_OK) {
    Fail(absl::StrCat("register RDMA memory: ", CodeName(st)));
  }
  Publish(dir, name, mine);
  Progress("peer descriptor");
  const Remote theirs = WaitForPeer(dir, peer_name, setup_timeout);
  if (theirs.length < bytes) Fail("the peer's buffer is too small");
  Say(absl::StrFormat("kill_client: ready t=%.6f", UnixSeconds()));

  if (mode == "idle") {
    g_watch.store(false);
    Say("kill_client: holding");
    WaitForFile(release);
    Progress("disconnect");
    g_watch.store(true);
    const absl::Status s = client.Disconnect(conn);
    Say(absl::StrCat("kill_client: disconnect status=",
                     CodeName(rdmaplane::RdpCode(s))));
    Say("kill_client: exit");
    return 0;
  }

  // Writes take their bytes from the first half of our buffer and land in
  // the first half of the peer's; reads fetch the peer's second half into
  // our second half.
  std::vector<rdp_overlapped> ovs(depth);
  std::vector<bool> is_write(depth);
  const absl::Time give_up = absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_max_s));
  uint64_t ok = 0;
  uint64_t posted = 0;
  uint64_t completed = 0;
  bool failed = false;
  Progress("stream");
  for (uint64_t i = 0; !failed; ++i) {
    const uint32_t k = static_cast<uint32_t>(i % depth);
    if (i >= depth) {
      uint32_t got = 0;
      const int st = client.GetOverlappedResult(conn, &ovs[k], true, &got);
      ++completed;
      const char* op = is_write[k] ? "write" : "read";
      Say(absl::StrCat("c ", i - depth, " ", op, " ", CodeName(st)));
      if (st == RDP_OK && got != size) {
        Fail(absl::StrCat("a ", op, " moved ", got, " bytes, not ", size));
      }
      if (st != RDP_OK) {
        Say(absl::StrFormat(
            "kill_client: first_error stage=complete op=%s status=%s t=%.6f "
            "ok=%d",
            op, CodeName(st), UnixSeconds(), static_cast<int>(ok)));
        failed = true;
        break;
      }
      ++ok;
      Progress("stream");
    }
    if (absl::Now() > give_up) {
      Say("kill_client: no failure within --max_s");
      return 4;
    }
    const bool write = i % 2 == 0;
    const uint64_t slot_offset = uint64_t{k} * size;
    ovs[k] = rdp_overlapped{};
    ovs[k].context = i;
    is_write[k] = write;
    int st;
    if (write) {
      rdp_sge sge{buf + slot_offset, size, *lkey};
      st = client.Write(conn, &sge, 1, theirs.descriptor,
                        theirs.descriptor_length,
                        static_cast<uint32_t>(slot_offset), 0, &ovs[k]);
    } else {
      const uint64_t half = uint64_t{depth} * size;
      rdp_sge sge{buf + half + slot_offset, size, *lkey};
      st = client.Read(conn, &sge, 1, theirs.address + half + slot_offset,
                       theirs.descriptor, theirs.descriptor_length, 0,
                       &ovs[k]);
    }
    if (st != RDP_PENDING && st != RDP_OK) {
      Say(absl::StrFormat(
          "kill_client: first_error stage=post op=%s status=%s t=%.6f ok=%d",
          write ? "write" : "read", CodeName(st), UnixSeconds(),
          static_cast<int>(ok)));
      failed = true;
      break;
    }
    ++posted;
  }
  // Everything still outstanding must complete as well (with an error).
  Progress("drain");
  while (completed < posted) {
    const uint32_t k = static_cast<uint32_t>(completed % depth);
    const int st = client.GetOverlappedResult(conn, &ovs[k], true, nullptr);
    ++completed;
    Say(absl::StrCat("kill_client: drained status=", CodeName(st)));
    Progress("drain");
  }
  if (hold) {
    g_watch.store(false);
    Say("kill_client: holding");
    WaitForFile(release);
    g_watch.store(true);
  }
  Progress("disconnect");
  const absl::Status s = client.Disconnect(conn);
  Say(absl::StrCat("kill_client: disconnect status=",
                   CodeName(rdmaplane::RdpCode(s))));
  Say("kill_client: exit");
  return 0;
}
