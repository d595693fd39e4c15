// Split mode of rdmaplane_transfer: a server on one host and a client on
// another, each with a session on its own host's daemon. They meet twice:
// over RDMA (the client connects to the server's service at the data-port
// address of the server's daemon) and over an out-of-band TCP connection
// (rdmaplane_transfer_oob.h), which carries the server's buffer descriptor
// and both verdicts.
//
//   server: rdmaplane_transfer --listen=transfer [--socket=PATH]
//               [--oob_port=18515] [--bytes=8388608] [--once]
//   client: rdmaplane_transfer --connect=transfer --peer=198.51.100.2
//               [--socket=PATH] [--oob=HOST:PORT] [--bytes=N]
//               [--sizes=...] [--depth=4]
//
// The server serves one client at a time:
//   1. client: TCP connect to the server's out-of-band port.
//   2. server: TCP accept; sends HELLO (its service name).
//   3. client: RDMA connect. Only after HELLO, so that the connection the
//      server accepts next is this client's.
//   4. server: RDMA accept; fills its buffer with the pattern SEED, registers
//      it for the connection and sends OFFER (descriptor, address, size,
//      SEED).
//   5. client, for each size, smallest first: READs the first half and
//      checks it; WRITEs a pattern of its own into the second half and READs
//      it back; sends PROGRESS.
//   6. client: sends DONE (the seed of its last pattern, bytes written).
//   7. server: checks the whole buffer; sends VERDICT.
// Either side that fails says why (DONE or VERDICT) before it closes. Every
// wait is bounded by --timeout_s, except the server's wait for clients
// (without --once).
#include "api/example/rdmaplane_transfer_split.h"

#include <arpa/inet.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "api/client.h"
#include "api/example/rdmaplane_transfer_oob.h"
#include "api/status.h"

ABSL_FLAG(std::string, listen, "",
          "split mode, server: serve this service name to clients");
ABSL_FLAG(std::string, connect, "",
          "split mode, client: connect to this service at --peer");
ABSL_FLAG(std::string, socket, "",
          "split mode: socket of this host's daemon (default: the library's, "
          "/run/rdmaplane/rdmaplane.sock for root)");
ABSL_FLAG(int32_t, oob_port, 18515,
          "split mode: the server's out-of-band TCP port (server: 0 picks a "
          "free one and prints it)");
ABSL_FLAG(std::string, oob, "",
          "split mode, client: the server's out-of-band HOST:PORT (default: "
          "the --peer address, or 127.0.0.1 with --local, and --oob_port)");
ABSL_FLAG(uint64_t, bytes, 0,
          "split mode: server: size of the buffer it offers (default 8 MiB); "
          "client: bytes to move each way per size (default: half the "
          "server's buffer)");
ABSL_FLAG(bool, once, false, "split mode, server: exit after one client");
ABSL_FLAG(bool, local, false,
          "split mode, client: the server uses this host's daemon (instead "
          "of --peer)");

namespace rdmaplane_transfer {
namespace {

using rdmaplane::Client;

constexpr uint64_t kDefaultServerBytes = 8ull << 20;
constexpr uint64_t kMaxBytes = 1ull << 30;
// Each size moves --bytes, or this many requests' worth if that is less.
constexpr uint64_t kMaxRequestsPerSize = 4096;

uint64_t RandomSeed() {
  std::random_device rd;
  return (uint64_t{rd()} << 32 | rd()) ^
         static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
}

// splitmix64: well-spread seeds from consecutive numbers.
uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Checks p[0, n) against the pattern `seed` from byte `base` on.
bool Check(const uint8_t* p, uint64_t n, uint64_t seed, uint64_t base,
           const std::string& what, std::string* error) {
  for (uint64_t i = 0; i < n; ++i) {
    if (p[i] != Pattern(seed, base + i)) {
      *error = absl::StrCat(what, ": byte ", base + i, " differs");
      return false;
    }
  }
  return true;
}

// --- Server -------------------------------------------------------------

struct Server {
  Client* rdma;
  std::string service;
  uint8_t* buf;
  uint64_t bytes;
  absl::Duration timeout;
};

// After RDMA accept: offer the buffer, follow the client, check the buffer.
std::string Exchange(const Server& s, Channel& ch, rdp_conn conn,
                     std::string* summary) {
  const uint64_t seed = RandomSeed();
  for (uint64_t i = 0; i < s.bytes; ++i) s.buf[i] = Pattern(seed, i);
  Message offer;
  offer.type = kOffer;
  offer.descriptor_length = sizeof(offer.descriptor);
  int st = s.rdma->RegisterRdmaMemory(
      conn, s.buf, static_cast<uint32_t>(s.bytes), RDP_MEM_READWRITE,
      offer.descriptor, &offer.descriptor_length);
  if (st != RDP_OK) {
    return absl::StrCat("register RDMA memory: ", rdp_status_name(st));
  }
  offer.address = reinterpret_cast<uint64_t>(s.buf);
  offer.size = s.bytes;
  offer.seed = seed;
  std::string error;
  Message m;
  if (!ch.Send(offer, s.timeout, &error)) return error;
  while (true) {
    if (!ch.Receive(&m, s.timeout, "progress", &error)) return error;
    if (m.type == kDone) break;
    if (m.type != kProgress) return "the client broke the protocol";
    std::fprintf(stderr, "transfer: %s: %" PRIu64 "-byte requests ok\n",
                 ch.name().c_str(), m.size);
  }
  (void)s.rdma->DeregisterRdmaMemory(conn, offer.descriptor,
                                     offer.descriptor_length);
  if (m.status != 0) return absl::StrCat("the client failed: ", m.text);
  const uint64_t half = s.bytes / 2, written = m.size;
  if (written > half) return "the client wrote beyond the buffer";
  if (!Check(s.buf, half, seed, 0, "first half", &error) ||
      !Check(s.buf + half, written, m.seed, 0, "second half", &error) ||
      !Check(s.buf + half + written, s.bytes - half - written, seed,
             half + written, "after the written bytes", &error)) {
    return error;
  }
  *summary = absl::StrCat("its ", written,
                          " written bytes landed, the rest is unchanged");
  return "";
}

// Serves the client at the other end of `ch`; "" when all went well.
// Sets `*fatal` when the server cannot go on (the daemon is gone).
std::string ServeClient(const Server& s, Channel& ch, std::string* summary,
                        bool* fatal) {
  // A connection still queued is left over from a client that gave up.
  for (absl::StatusOr<rdp_conn> c;
       (c = s.rdma->Accept(s.service, absl::ZeroDuration())).ok();) {
    std::fprintf(stderr, "transfer: dropping a stale RDMA connection\n");
    (void)s.rdma->Disconnect(*c);
  }
  Message hello;
  hello.type = kHello;
  hello.text = s.service;
  std::string error;
  if (!ch.Send(hello, s.timeout, &error)) return error;
  const absl::Time deadline = absl::Now() + s.timeout;
  rdp_conn conn;
  while (true) {
    absl::StatusOr<rdp_conn> c =
        s.rdma->Accept(s.service, absl::Milliseconds(100));
    if (c.ok()) {
      conn = *c;
      break;
    }
    const int code = rdmaplane::RdpCode(c.status());
    if (code != RDP_ERR_TIMEOUT) {
      *fatal = code == RDP_ERR_NET_DOWN;
      return absl::StrCat("accept: ", c.status().message());
    }
    if (ch.Readable()) {  // the client gave up, or went away
      Message m;
      if (!ch.Receive(&m, s.timeout, "message", &error)) return error;
      return absl::StrCat("the client failed: ", m.text);
    }
    if (absl::Now() > deadline) {
      return absl::StrCat("no RDMA connection from the client within ",
                          Seconds(s.timeout));
    }
  }
  error = Exchange(s, ch, conn, summary);
  (void)s.rdma->Disconnect(conn);
  return error;
}

int RunServer(const SharedOptions& o, const std::string& service,
              uint64_t bytes, uint16_t port, bool once) {
  auto failed = [](const std::string& why) {
    std::printf("transfer: FAILED: %s\n", why.c_str());
    return 1;
  };
  rdmaplane::ClientOptions co;
  co.socket_path = absl::GetFlag(FLAGS_socket);
  co.arena_bytes = std::max<uint64_t>(co.arena_bytes, bytes + (1 << 20));
  auto rdma = Client::Open(co);
  if (!rdma.ok())
    return failed(absl::StrCat("open: ", rdma.status().message()));
  if (absl::Status st = (*rdma)->Listen(service); !st.ok()) {
    return failed(absl::StrCat("listen on '", service, "': ", st.message()));
  }
  std::string error;
  uint16_t bound = 0;
  const int lfd = ListenTcp(port, &bound, &error);
  if (lfd < 0) return failed(error);
  Server s{rdma->get(), service, nullptr, bytes, o.timeout};
  s.buf = static_cast<uint8_t*>((*rdma)->Alloc(bytes));
  if (s.buf == nullptr) return failed("out of arena memory");
  std::fprintf(stderr,
               "transfer: serving '%s' (a buffer of %" PRIu64
               " bytes) on out-of-band TCP port %u\n",
               service.c_str(), bytes, bound);
  while (true) {
    const absl::Time deadline =
        once ? absl::Now() + o.timeout : absl::InfiniteFuture();
    if (const int w = WaitFd(lfd, POLLIN, deadline); w != 1) {
      return failed(w == 0
                        ? absl::StrCat("no client within ", Seconds(o.timeout))
                        : absl::StrCat("poll: ", std::strerror(errno)));
    }
    std::string peer;
    const int fd = AcceptTcp(lfd, &peer);
    if (fd < 0) continue;  // gone before we took it
    Channel ch(fd, absl::StrCat("client ", peer));
    std::fprintf(stderr, "transfer: %s connected\n", ch.name().c_str());
    std::string summary;
    bool fatal = false;
    error = ServeClient(s, ch, &summary, &fatal);
    Message verdict;
    verdict.type = kVerdict;
    verdict.status = error.empty() ? 0 : 1;
    verdict.text = error;
    std::string ignored;
    (void)ch.Send(verdict, o.timeout, &ignored);
    if (error.empty()) {
      std::printf("transfer: ok: %s: %s\n", ch.name().c_str(), summary.c_str());
    } else {
      std::printf("transfer: FAILED: %s: %s\n", ch.name().c_str(),
                  error.c_str());
    }
    std::fflush(stdout);
    if (once || fatal) return error.empty() ? 0 : 1;
  }
}

// --- Client -------------------------------------------------------------

struct Totals {
  uint64_t requests = 0, bytes = 0, written = 0;
  size_t sizes = 0;
};

// Reads (or writes) [0, span) of `local` from (to) the server's buffer at
// `remote_offset`, in requests of `request` bytes, `depth` outstanding.
bool Stream(Client& rdma, rdp_conn conn, std::vector<rdp_overlapped>& ovs,
            bool write, uint8_t* local, uint32_t lkey, const Message& offer,
            uint64_t remote_offset, uint64_t span, uint32_t request,
            const SharedOptions& o, Totals* totals, std::string* error) {
  const char* op = write ? "write" : "read";
  std::vector<bool> busy(o.depth, false);
  auto wait = [&](uint32_t slot) {
    const absl::Time deadline = absl::Now() + o.timeout;
    uint32_t bytes = 0;
    int st;
    while ((st = rdma.GetOverlappedResult(conn, &ovs[slot], false, &bytes)) ==
           RDP_PENDING) {
      if (absl::Now() > deadline) {
        *error = absl::StrCat("a ", op, " did not complete within ",
                              Seconds(o.timeout));
        return false;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    busy[slot] = false;
    if (st != RDP_OK) {
      *error = absl::StrCat("a ", op, " completed with ", rdp_status_name(st));
      return false;
    }
    return true;
  };
  uint64_t n = 0;
  for (uint64_t off = 0; off < span; off += request, ++n) {
    const uint32_t slot = static_cast<uint32_t>(n % o.depth);
    if (busy[slot] && !wait(slot)) return false;
    const uint32_t length =
        static_cast<uint32_t>(std::min<uint64_t>(request, span - off));
    ovs[slot] = rdp_overlapped{};
    rdp_sge sge{local + off, length, lkey};
    const int st =
        write ? rdma.Write(
                    conn, &sge, 1, offer.descriptor, offer.descriptor_length,
                    static_cast<uint32_t>(remote_offset + off), 0, &ovs[slot])
              : rdma.Read(conn, &sge, 1, offer.address + remote_offset + off,
                          offer.descriptor, offer.descriptor_length, 0,
                          &ovs[slot]);
    if (st != RDP_PENDING && st != RDP_OK) {
      *error = absl::StrCat("a ", op, " of ", length,
                            " bytes was refused: ", rdp_status_name(st));
      return false;
    }
    busy[slot] = true;
    ++totals->requests;
  }
  for (uint32_t slot = 0; slot < o.depth; ++slot) {
    if (busy[slot] && !wait(slot)) return false;
  }
  return true;
}

// Waits for a message of `type`; a VERDICT instead says why the server
// gave up.
bool Expect(Channel& ch, uint16_t type, const char* what, absl::Duration t,
            Message* m, std::string* error) {
  if (!ch.Receive(m, t, what, error)) return false;
  if (m->type == type) return true;
  *error = m->type == kVerdict ? absl::StrCat("the server failed: ", m->text)
                               : "the server broke the protocol";
  return false;
}

// The client's part after the TCP connection; "" when all went well.
std::string Transfer(Client& rdma, Channel& ch,
                     std::vector<rdp_overlapped>& ovs, const SharedOptions& o,
                     const std::string& service, uint64_t bytes,
                     Totals* totals) {
  std::string error;
  Message m, offer;
  if (!Expect(ch, kHello, "hello (busy with another client?)", o.timeout, &m,
              &error)) {
    return error;
  }
  if (m.text != service) {
    return absl::StrCat("the server serves '", m.text, "', not '", service,
                        "'");
  }
  absl::StatusOr<rdp_conn> conn = rdma.Connect(service, o.peer);
  if (!conn.ok()) {
    return absl::StrCat("connect to '", service, "'",
                        o.peer.empty() ? "" : " at ", o.peer, ": ",
                        conn.status().message());
  }
  if (!Expect(ch, kOffer, "offer", o.timeout, &offer, &error)) return error;
  const uint64_t half = offer.size / 2;
  if (half == 0) return "the server offered an empty buffer";
  if (bytes == 0) bytes = half;
  if (bytes > half) {
    return absl::StrCat("--bytes=", bytes, " is more than half the server's ",
                        offer.size, "-byte buffer");
  }
  // [0, bytes): where reads land; [bytes, 2 * bytes): what writes send.
  auto* local = static_cast<uint8_t*>(rdma.Alloc(2 * bytes));
  if (local == nullptr) return "out of arena memory";
  absl::StatusOr<uint32_t> lkey =
      rdma.RegisterMemory(local, 2 * bytes, RDP_MEM_READWRITE);
  if (!lkey.ok()) {
    return absl::StrCat("register memory: ", lkey.status().message());
  }
  uint8_t* source = local + bytes;
  // Sizes above --bytes move --bytes in one request.
  std::vector<uint32_t> sizes;
  for (uint32_t size : o.sizes) {
    sizes.push_back(static_cast<uint32_t>(std::min<uint64_t>(size, bytes)));
  }
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  const uint64_t base = RandomSeed();
  Message done;
  done.type = kDone;
  for (size_t k = 0; k < sizes.size(); ++k) {
    const uint32_t request = sizes[k];
    const uint64_t span = std::min(bytes, request * kMaxRequestsPerSize);
    const std::string name = absl::StrCat(request, "-byte ");
    // The server's pattern, from the first half.
    std::memset(local, 0, span);
    if (!Stream(rdma, *conn, ovs, false, local, *lkey, offer, 0, span, request,
                o, totals, &error) ||
        !Check(local, span, offer.seed, 0, name + "reads", &error)) {
      return error;
    }
    // A pattern of this size's own into the second half, and back.
    const uint64_t seed = Mix(base + k);
    for (uint64_t i = 0; i < span; ++i) source[i] = Pattern(seed, i);
    std::memset(local, 0, span);
    if (!Stream(rdma, *conn, ovs, true, source, *lkey, offer, half, span,
                request, o, totals, &error) ||
        !Stream(rdma, *conn, ovs, false, local, *lkey, offer, half, span,
                request, o, totals, &error) ||
        !Check(local, span, seed, 0, name + "writes, read back", &error)) {
      return error;
    }
    totals->bytes += 2 * span;
    ++totals->sizes;
    Message progress;
    progress.type = kProgress;
    progress.size = request;
    if (!ch.Send(progress, o.timeout, &error)) return error;
    std::fprintf(stderr,
                 "transfer: %u-byte requests, depth %u: read %" PRIu64
                 ", wrote and read back %" PRIu64 " bytes ok\n",
                 request, o.depth, span, span);
    // Sizes go smallest first, so the last one covers all the others wrote.
    done.seed = seed;
    done.size = totals->written = span;
  }
  if (!ch.Send(done, o.timeout, &error) ||
      !Expect(ch, kVerdict, "verdict", o.timeout, &m, &error)) {
    return error;
  }
  (void)rdma.Disconnect(*conn);
  if (m.status != 0) return absl::StrCat("the server found: ", m.text);
  return "";
}

int RunClient(const SharedOptions& o, const std::string& service,
              const std::string& host, uint16_t port, uint64_t bytes) {
  // Outlives the session: requests still outstanding after a failure
  // complete into it.
  std::vector<rdp_overlapped> ovs(o.depth);
  const absl::Time start = absl::Now();
  auto failed = [](const std::string& why) {
    std::printf("transfer: FAILED: %s\n", why.c_str());
    return 1;
  };
  rdmaplane::ClientOptions co;
  co.socket_path = absl::GetFlag(FLAGS_socket);
  auto rdma = Client::Open(co);
  if (!rdma.ok())
    return failed(absl::StrCat("open: ", rdma.status().message()));
  std::string error;
  const int fd = ConnectTcp(host, port, o.timeout, &error);
  if (fd < 0) return failed(error);
  Channel ch(fd, absl::StrCat("the server at ", HostPort(host, port)));
  std::fprintf(stderr, "transfer: connected to %s\n", ch.name().c_str());
  Totals totals;
  error = Transfer(**rdma, ch, ovs, o, service, bytes, &totals);
  if (!error.empty()) {
    Message done;  // tell the server why, if it still listens
    done.type = kDone;
    done.status = 1;
    done.text = error;
    std::string ignored;
    (void)ch.Send(done, absl::Seconds(1), &ignored);
    return failed(error);
  }
  std::printf("transfer: ok: %" PRIu64 " requests, %" PRIu64
              " bytes verified (%zu size%s, depth %u) in %.2f s; the server "
              "found all %" PRIu64 " written bytes in place\n",
              totals.requests, totals.bytes, totals.sizes,
              totals.sizes == 1 ? "" : "s", o.depth,
              absl::ToDoubleSeconds(absl::Now() - start), totals.written);
  return 0;
}

int Usage(const std::string& message) {
  std::fprintf(stderr, "transfer: %s\n", message.c_str());
  return 2;
}

}  // namespace

bool SplitModeRequested() {
  return !absl::GetFlag(FLAGS_listen).empty() ||
         !absl::GetFlag(FLAGS_connect).empty();
}

std::string SplitOnlyFlagInUse() {
  if (!absl::GetFlag(FLAGS_socket).empty()) return "socket";
  if (absl::GetFlag(FLAGS_oob_port) != 18515) return "oob_port";
  if (!absl::GetFlag(FLAGS_oob).empty()) return "oob";
  if (absl::GetFlag(FLAGS_bytes) != 0) return "bytes";
  if (absl::GetFlag(FLAGS_once)) return "once";
  if (absl::GetFlag(FLAGS_local)) return "local";
  return "";
}

int RunSplit(const SharedOptions& o) {
  const std::string serve = absl::GetFlag(FLAGS_listen);
  const std::string reach = absl::GetFlag(FLAGS_connect);
  if (!serve.empty() && !reach.empty()) {
    return Usage("--listen (server) and --connect (client) exclude each other");
  }
  const std::string& service = serve.empty() ? reach : serve;
  if (service.size() > 63) return Usage("service names are 1..63 bytes");
  const uint64_t bytes = absl::GetFlag(FLAGS_bytes);
  if (bytes > kMaxBytes) {
    return Usage(absl::StrCat("--bytes is at most ", kMaxBytes));
  }
  const int32_t oob_port = absl::GetFlag(FLAGS_oob_port);
  if (oob_port < 0 || oob_port > 65535) {
    return Usage("--oob_port is a TCP port, 0..65535");
  }
  const std::string oob = absl::GetFlag(FLAGS_oob);
  const bool local = absl::GetFlag(FLAGS_local);
  if (!serve.empty()) {
    if (!o.peer.empty() || local || !oob.empty()) {
      return Usage("--peer, --local and --oob are for the client (--connect)");
    }
    if (bytes == 1)
      return Usage("--bytes: the server's buffer needs 2 or more");
    return RunServer(o, service, bytes == 0 ? kDefaultServerBytes : bytes,
                     static_cast<uint16_t>(oob_port),
                     absl::GetFlag(FLAGS_once));
  }
  if (absl::GetFlag(FLAGS_once))
    return Usage("--once is for the server (--listen)");
  if (local == !o.peer.empty()) {
    return Usage(
        "the client needs --peer=IP (data-port address of the server's "
        "daemon) or --local (the server uses this host's daemon)");
  }
  in_addr a{};
  if (!local &&
      (inet_pton(AF_INET, o.peer.c_str(), &a) != 1 || a.s_addr == 0)) {
    return Usage("--peer is an IPv4 address like 198.51.100.2");
  }
  std::string host = local ? "127.0.0.1" : o.peer;
  uint16_t port = static_cast<uint16_t>(oob_port);
  if (!oob.empty() && !ParseHostPort(oob, &host, &port)) {
    return Usage("--oob is HOST:PORT, [IPV6]:PORT or HOST");
  }
  if (port == 0) return Usage("the client needs the server's --oob_port");
  return RunClient(o, service, host, port, bytes);
}

}  // namespace rdmaplane_transfer
