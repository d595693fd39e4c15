// The setup protocol on the daemon's Unix socket: a client says hello with
// its session region, then hands over arenas; file descriptors travel with
// SCM_RIGHTS. Everything after setup (registrations, connections, work
// requests) goes through the shared-memory rings of layout.h.
//
// Fixed-size little-endian messages; each side validates magic, version and
// type, and closes the socket on anything malformed.
// Thread-compatible functions.
#ifndef RDMAPLANE_API_SHM_SETUP_H_
#define RDMAPLANE_API_SHM_SETUP_H_

#include <cstdint>
#include <string>

namespace rdmaplane::shm {

inline constexpr uint32_t kSetupMagic = 0x53504452;  // "RDPS"
inline constexpr uint16_t kSetupVersion = 1;

enum SetupType : uint16_t {
  kSetupHello = 1,       // client -> daemon; fd: session region (memfd)
  kSetupHelloReply = 2,  // daemon -> client; fds: control and engine doorbells
  kSetupArena = 3,       // client -> daemon; fd: arena memfd
  kSetupArenaReply = 4,  // daemon -> client
  kSetupArenaFree = 5,   // client -> daemon
  kSetupArenaFreeReply = 6,
  // An operator's query instead of a hello (rdmaplanectl, control/admin.h):
  // text = topic, id = format (0 text, 1 JSON).
  kSetupAdmin = 7,
  // status, text = reason, length = bytes of the answer that follow on the
  // stream; then the daemon closes the socket.
  kSetupAdminReply = 8,
  // client -> daemon, no fd: a SysV shared memory segment of the client's,
  // id = its shmid, attached at address, length bytes from its start;
  // answered with kSetupArenaReply (the daemon attaches it itself).
  kSetupSegment = 9,
  // client -> daemon; fd: a file the client maps shared (a memfd, POSIX
  // shared memory, a hugetlbfs or disk file), open for reading and writing.
  // address = where the client maps the file's byte id * 4096, length
  // bytes from there; answered with kSetupArenaReply (the daemon maps the
  // same part of the file).
  kSetupFile = 10,
};

struct SetupMessage {
  uint32_t magic;
  uint16_t version;
  uint16_t type;
  int32_t status;  // rdp_status in replies
  uint32_t id;     // session id or arena id
  uint64_t address;  // arena: client virtual address it is mapped at
  uint64_t length;   // region or arena bytes
  char text[64];     // NUL-terminated error explanation in replies
};
static_assert(sizeof(SetupMessage) == 96);

// Sends `msg` with up to two descriptors (-1: none). Returns false on error.
// With `dont_wait`, a full socket buffer is an error too (the daemon never
// waits for a client that does not read its answers).
bool SendSetup(int sock, const SetupMessage& msg, int fd0 = -1, int fd1 = -1,
               bool dont_wait = false);
// Receives one message and up to two descriptors (-1 when absent). Returns
// false on error, short read, bad magic or version, or end of stream; any
// descriptor received with a message that is rejected is closed.
bool RecvSetup(int sock, SetupMessage* msg, int* fd0, int* fd1);

SetupMessage MakeSetup(SetupType type);

// Reads setup messages from a non-blocking socket without ever waiting:
// bytes (and descriptors) are kept across calls until a whole message is
// there, so a peer that sends half a message stalls nobody.
class SetupReader {
 public:
  enum class Result { kMessage, kPartial, kClosed };
  SetupReader() = default;
  SetupReader(const SetupReader&) = delete;
  SetupReader& operator=(const SetupReader&) = delete;
  ~SetupReader();

  // kMessage: *msg and up to two descriptors are handed over (-1 when
  // absent). kClosed: end of stream, an error, or a malformed message.
  Result Read(int sock, SetupMessage* msg, int* fd0, int* fd1);
  // After kClosed: descriptors sent with the message did not all arrive
  // (MSG_CTRUNC: more than fit, or the reader is out of descriptors).
  bool descriptors_lost() const { return descriptors_lost_; }

 private:
  void DropFds();

  uint8_t buffer_[sizeof(SetupMessage)];
  size_t have_ = 0;
  int fds_[2] = {-1, -1};
  int nfds_ = 0;
  bool descriptors_lost_ = false;
};

// The default socket path: /run/rdmaplane/rdmaplane.sock for root, else
// $XDG_RUNTIME_DIR/rdmaplane.sock, else /tmp/rdmaplane-<uid>.sock.
std::string DefaultSocketPath();

}  // namespace rdmaplane::shm

#endif  // RDMAPLANE_API_SHM_SETUP_H_
