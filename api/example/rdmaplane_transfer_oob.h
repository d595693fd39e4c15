// The out-of-band TCP side of rdmaplane_transfer's split mode: the fixed
// binary messages the server and the client exchange, and the sockets that
// carry them. The server's RDMA buffer descriptor travels here, the way
// perftest exchanges queue pair details.
//
// Messages are 128 bytes, integers little-endian:
//    0 u32 magic "RDPT"   4 u16 version   6 u16 type   8 u32 status (0: ok)
//   12 u32 descriptor length   16 descriptor (32 bytes)   48 u64 address
//   56 u64 size   64 u64 seed   72 text (56 bytes, NUL-padded)
#ifndef RDMAPLANE_API_EXAMPLE_RDMAPLANE_TRANSFER_OOB_H_
#define RDMAPLANE_API_EXAMPLE_RDMAPLANE_TRANSFER_OOB_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "api/rdmaplane.h"

namespace rdmaplane_transfer {

enum Type : uint16_t {
  kHello = 1,     // server: ready for the RDMA connect; text: the service
  kOffer = 2,     // server: descriptor, address, size, seed of its pattern
  kProgress = 3,  // client: one size done; size: its request size
  kDone = 4,      // client: seed of its last pattern, size: bytes written
  kVerdict = 5,   // server: whether the buffer held what it should
};

struct Message {
  uint16_t type = 0;
  uint32_t status = 0;  // 0: ok; else text says why not
  uint32_t descriptor_length = 0;
  uint8_t descriptor[RDP_DESCRIPTOR_BYTES] = {};
  uint64_t address = 0, size = 0, seed = 0;
  std::string text;  // sent as at most 55 bytes
};

// "N s", for messages.
std::string Seconds(absl::Duration d);

// Waits until `fd` has `events`: 1, or 0 at `deadline`, or -1 on error.
int WaitFd(int fd, short events, absl::Time deadline);

// One end of an out-of-band TCP connection; closes it when destroyed.
class Channel {
 public:
  // `fd` is a non-blocking socket; `name` names the other end in errors.
  Channel(int fd, std::string name) : fd_(fd), name_(std::move(name)) {}
  ~Channel();
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  const std::string& name() const { return name_; }

  bool Send(const Message& m, absl::Duration timeout, std::string* error);
  // Receives the next message, waiting at most `timeout` for it; `what`
  // names it in the error.
  bool Receive(Message* m, absl::Duration timeout, const char* what,
               std::string* error);
  // Whether a message, or the end of the connection, is waiting.
  bool Readable();

 private:
  int fd_;
  std::string name_;
};

// "host:port", or "[host]:port" for IPv6.
std::string HostPort(const std::string& host, uint16_t port);
// Parses "HOST:PORT", "[IPV6]:PORT" or "HOST" (leaving *port as it is).
bool ParseHostPort(const std::string& text, std::string* host, uint16_t* port);

// Connects to HOST:PORT within `timeout`: a non-blocking socket, or -1 and
// `error` ("no rdmaplane_transfer server at HOST:PORT (connection refused)").
int ConnectTcp(const std::string& host, uint16_t port, absl::Duration timeout,
               std::string* error);
// Listens on TCP `port` (0: any free one) of every address, IPv6 and IPv4
// (or IPv4 alone); sets `*bound` to the port it got.
int ListenTcp(uint16_t port, uint16_t* bound, std::string* error);
// Takes a connection waiting on `listen_fd`: a non-blocking socket and the
// peer's "HOST:PORT", or -1.
int AcceptTcp(int listen_fd, std::string* peer);

}  // namespace rdmaplane_transfer

#endif  // RDMAPLANE_API_EXAMPLE_RDMAPLANE_TRANSFER_OOB_H_
