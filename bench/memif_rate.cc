// memif_rate: the raw packet rate of a memif link between two processes,
// the ceiling for anything rdmaplane sends over memif. One process sends
// frames of --frame bytes as fast as the link takes them, the other counts
// what arrives; both report frames per second and bytes per second.
//
//   memif_rate --role=server --socket=/tmp/m.sock --seconds=3 &
//   memif_rate --role=client --socket=/tmp/m.sock --seconds=3
//
// The server receives, the client sends. The last stdout line is
// "memif_rate: <role> <frames/s> <Gb/s> (<frames> frames of <bytes> bytes in
// <seconds> s)".
//
// Frames up to 9000 bytes: a RoCEv2 WRITE with path MTU 4096 is 4170 bytes
// (Ethernet 14, IPv4 20, UDP 8, BTH 12, RETH 16, payload 4096, ICRC 4).
// Like rdmaplaned, the client asks memif for buffers (bsize) that hold a
// whole frame, since DPDK 22.11's memif does not carry frames chained over
// several buffers reliably, and both roles size their packet buffers to
// hold one.
#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "dataplane/port/dpdk_env.h"
#include "dataplane/port/eth_port.h"

ABSL_FLAG(std::string, role, "server", "server (receives) or client (sends)");
ABSL_FLAG(std::string, socket, "/tmp/memif_rate.sock", "memif socket");
ABSL_FLAG(int32_t, seconds, 3, "how long to send or count");
ABSL_FLAG(int32_t, frame, 1098,
          "frame bytes, 60..9000 (a RoCE WRITE with 1 KiB of payload is 1098, "
          "with 4 KiB 4170)");
ABSL_FLAG(int32_t, lcore, -1, "CPU to pin to (-1: none)");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string role = absl::GetFlag(FLAGS_role);
  if (role != "server" && role != "client") {
    std::fprintf(stderr, "memif_rate: --role is server or client\n");
    return 2;
  }
  const int frame = absl::GetFlag(FLAGS_frame);
  if (frame < 60 || frame > 9000) {
    std::fprintf(stderr, "memif_rate: --frame is 60..9000\n");
    return 2;
  }
  // memif's buffers are the client's: one holds a whole frame (as
  // rdmaplaned asks).
  const uint32_t bsize =
      rdmaplane::port::MemifBufferBytes(static_cast<uint32_t>(frame));
  rdmaplane::port::EalOptions eal;
  eal.file_prefix = absl::StrCat("memif_rate_", role, "_", getpid());
  eal.args.push_back(absl::StrCat(
      "--vdev=net_memif0,role=", role, ",socket=", absl::GetFlag(FLAGS_socket),
      role == "client" && bsize != 2048 ? absl::StrCat(",bsize=", bsize)
                                        : std::string()));
  if (int l = absl::GetFlag(FLAGS_lcore); l >= 0) {
    eal.args.push_back(absl::StrCat("-l", l));
  }
  if (absl::Status s = rdmaplane::port::InitDpdk(eal); !s.ok()) {
    std::fprintf(stderr, "memif_rate: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  int rc = 0;
  {
    rdmaplane::port::PortConfig pc;
    pc.port_id = 0;
    pc.rx_interrupts = false;
    pc.max_frame = static_cast<uint32_t>(frame);
    pc.mbuf_data_room = static_cast<uint16_t>(
        rdmaplane::port::PacketBufferRoom(static_cast<uint32_t>(frame)));
    auto port = rdmaplane::port::EthPort::Open(pc);
    if (!port.ok()) {
      std::fprintf(stderr, "memif_rate: %s\n",
                   std::string(port.status().message()).c_str());
      rdmaplane::port::ShutdownDpdk();
      return 1;
    }
    // Wait for the link (the peer attaches; a client whose server was not
    // there yet connects again while it asks).
    const absl::Time link_deadline = absl::Now() + absl::Seconds(10);
    bool up = false;
    while (!up && absl::Now() < link_deadline) {
      up = (*port)->CheckLink();
      if (!up) absl::SleepFor(absl::Milliseconds(10));
    }
    if (!up) {
      std::fprintf(stderr, "memif_rate: link did not come up\n");
      rc = 1;
    } else {
      uint64_t frames = 0;
      std::vector<uint8_t> payload(frame, 0xAB);
      const absl::Time start = absl::Now();
      const absl::Time end =
          start + absl::Seconds(absl::GetFlag(FLAGS_seconds));
      absl::Time last_frame = start;
      uint64_t turns = 0;
      while (true) {
        if ((++turns & 1023) == 0) {
          const absl::Time now = absl::Now();
          if (now > end) break;
          // The server stops once the sender has gone quiet.
          if (role == "server" && frames > 0 &&
              now - last_frame > absl::Milliseconds(500)) {
            break;
          }
        }
        if (role == "client") {
          for (int i = 0; i < 32; ++i) {
            if (!(*port)->Send(payload)) break;
          }
          (*port)->Flush();
        } else {
          const uint16_t n = (*port)->Receive([](std::span<const uint8_t>) {});
          if (n > 0) {
            frames += n;
            last_frame = absl::Now();
          }
        }
      }
      if (role == "client") frames = (*port)->counters().tx_frames;
      const double secs = absl::ToDoubleSeconds(
          (role == "server" ? last_frame : absl::Now()) - start);
      const double fps = secs > 0 ? frames / secs : 0;
      std::printf("memif_rate: %s %.0f frames/s %.2f Gb/s (%" PRIu64
                  " frames of %d bytes in %.2f s; %" PRIu64
                  " tries to connect again)\n",
                  role.c_str(), fps, fps * frame * 8 / 1e9, frames, frame,
                  secs,
                  static_cast<uint64_t>((*port)->counters().reconnect_tries));
    }
  }
  rdmaplane::port::ShutdownDpdk();
  return rc;
}
