// Fuzz target for the setup protocol as the daemon reads it: SetupReader on
// a non-blocking Unix stream socket whose peer sends fuzzed bytes in fuzzed
// pieces, some with descriptors attached (SCM_RIGHTS). Checked: a message
// handed over has the right magic and version and a terminated text; no
// descriptor is handed over that was not sent with the message's bytes;
// and whatever arrives, every descriptor received is either handed over
// (and closed here) or closed by the reader: none leaks.
//
// Input: pieces, each one header byte (its top two bits: descriptors to
// attach, 0..3), one length byte, then that many bytes to send.
//
// Runs under libFuzzer (--config=fuzz) or, as setup_fuzzer under gcc,
// replaying api/shm/corpus/setup (see dataplane/wire/fuzz.bzl).
#include <dirent.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "api/shm/setup.h"
#include "dataplane/wire/fuzz_driver.h"

namespace rdmaplane::shm {
namespace {

int OpenDescriptors() {
  DIR* d = opendir("/proc/self/fd");
  FUZZ_CHECK(d != nullptr);
  int n = 0;
  while (readdir(d) != nullptr) ++n;
  closedir(d);
  return n;
}

// Sends `bytes` with `nfds` descriptors (copies of `fd`). Returns false when
// the socket takes nothing more.
bool SendPiece(int sock, std::span<const uint8_t> bytes, int nfds, int fd) {
  iovec iov{const_cast<uint8_t*>(bytes.data()), bytes.size()};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(3 * sizeof(int))];
  if (nfds > 0) {
    mh.msg_control = control;
    mh.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
    cmsghdr* cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(nfds * sizeof(int));
    int fds[3] = {fd, fd, fd};
    std::memcpy(CMSG_DATA(cm), fds, nfds * sizeof(int));
  }
  return sendmsg(sock, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0;
}

void Run(std::span<const uint8_t> input) {
  const int before = OpenDescriptors();
  int sv[2];
  FUZZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
                        0, sv) == 0);
  const int payload_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  FUZZ_CHECK(payload_fd >= 0);
  {
    SetupReader reader;
    bool open = true;
    size_t at = 0;
    while (open && input.size() - at >= 2) {
      const int nfds = input[at] >> 6;
      const size_t len = std::min<size_t>(input[at + 1], input.size() - at - 2);
      const std::span<const uint8_t> bytes = input.subspan(at + 2, len);
      at += 2 + len;
      // Bytes always: descriptors travel with at least one.
      if (bytes.empty() || !SendPiece(sv[1], bytes, nfds, payload_fd)) {
        continue;
      }
      for (;;) {
        SetupMessage msg;
        int fd0 = -1;
        int fd1 = -1;
        const SetupReader::Result r = reader.Read(sv[0], &msg, &fd0, &fd1);
        if (r == SetupReader::Result::kPartial) break;
        if (r == SetupReader::Result::kClosed) {
          FUZZ_CHECK(fd0 == -1 && fd1 == -1);
          open = false;
          break;
        }
        FUZZ_CHECK(msg.magic == kSetupMagic && msg.version == kSetupVersion);
        FUZZ_CHECK(std::memchr(msg.text, '\0', sizeof(msg.text)) != nullptr);
        FUZZ_CHECK(fd1 == -1 || fd0 != -1);
        if (fd0 >= 0) FUZZ_CHECK(close(fd0) == 0);
        if (fd1 >= 0) FUZZ_CHECK(close(fd1) == 0);
      }
    }
    // The reader's destructor closes what it kept; the socket drops what
    // nobody read (closing it below).
  }
  close(sv[1]);
  close(sv[0]);
  close(payload_fd);
  FUZZ_CHECK(OpenDescriptors() == before);
}

}  // namespace
}  // namespace rdmaplane::shm

namespace rdmaplane::wire {

// For the fuzz_driver's mutation mode: a hello in two pieces, the first
// with the region's descriptor.
std::vector<std::vector<uint8_t>> FuzzSeedCorpus() {
  shm::SetupMessage hello = shm::MakeSetup(shm::kSetupHello);
  hello.length = 1 << 20;
  const auto* p = reinterpret_cast<const uint8_t*>(&hello);
  std::vector<uint8_t> seed = {0x40, 40};
  seed.insert(seed.end(), p, p + 40);
  seed.push_back(0);
  seed.push_back(sizeof(hello) - 40);
  seed.insert(seed.end(), p + 40, p + sizeof(hello));
  return {seed};
}

}  // namespace rdmaplane::wire

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  rdmaplane::shm::Run({data, size});
  return 0;
}
