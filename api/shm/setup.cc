#include "api/shm/setup.h"

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace rdmaplane::shm {

SetupMessage MakeSetup(SetupType type) {
  SetupMessage msg;
  std::memset(&msg, 0, sizeof(msg));
  msg.magic = kSetupMagic;
  msg.version = kSetupVersion;
  msg.type = type;
  return msg;
}

bool SendSetup(int sock, const SetupMessage& msg, int fd0, int fd1,
               bool dont_wait) {
  iovec iov{const_cast<SetupMessage*>(&msg), sizeof(msg)};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))];
  const int fds[2] = {fd0, fd1};
  const int nfds = (fd0 >= 0) + (fd1 >= 0);
  if (nfds > 0) {
    std::memset(control, 0, sizeof(control));
    mh.msg_control = control;
    mh.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
    cmsghdr* cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(nfds * sizeof(int));
    int* out = reinterpret_cast<int*>(CMSG_DATA(cm));
    int n = 0;
    for (int fd : fds) {
      if (fd >= 0) out[n++] = fd;
    }
  }
  ssize_t sent;
  do {
    sent = sendmsg(sock, &mh, MSG_NOSIGNAL | (dont_wait ? MSG_DONTWAIT : 0));
  } while (sent < 0 && errno == EINTR);
  return sent == static_cast<ssize_t>(sizeof(msg));
}

bool RecvSetup(int sock, SetupMessage* msg, int* fd0, int* fd1) {
  *fd0 = *fd1 = -1;
  iovec iov{msg, sizeof(*msg)};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))];
  mh.msg_control = control;
  mh.msg_controllen = sizeof(control);
  ssize_t got;
  do {
    got = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | MSG_WAITALL);
  } while (got < 0 && errno == EINTR);
  // A failed recvmsg received nothing and leaves the control buffer as it
  // was: what it holds must not be taken for descriptors.
  if (got < 0) return false;
  int fds[4];
  int nfds = 0;
  for (cmsghdr* cm = CMSG_FIRSTHDR(&mh); cm != nullptr;
       cm = CMSG_NXTHDR(&mh, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
    const int n = static_cast<int>((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    const int* in = reinterpret_cast<const int*>(CMSG_DATA(cm));
    for (int i = 0; i < n && nfds < 4; ++i) fds[nfds++] = in[i];
  }
  const bool ok = got == static_cast<ssize_t>(sizeof(*msg)) &&
                  (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) == 0 &&
                  msg->magic == kSetupMagic && msg->version == kSetupVersion &&
                  nfds <= 2;
  if (!ok) {
    for (int i = 0; i < nfds; ++i) close(fds[i]);
    return false;
  }
  msg->text[sizeof(msg->text) - 1] = '\0';
  if (nfds > 0) *fd0 = fds[0];
  if (nfds > 1) *fd1 = fds[1];
  return true;
}

SetupReader::~SetupReader() { DropFds(); }

void SetupReader::DropFds() {
  for (int i = 0; i < nfds_; ++i) close(fds_[i]);
  nfds_ = 0;
}

SetupReader::Result SetupReader::Read(int sock, SetupMessage* msg, int* fd0,
                                      int* fd1) {
  *fd0 = *fd1 = -1;
  while (have_ < sizeof(buffer_)) {
    iovec iov{buffer_ + have_, sizeof(buffer_) - have_};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))];
    mh.msg_control = control;
    mh.msg_controllen = sizeof(control);
    const ssize_t got = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return Result::kPartial;
    }
    if (got < 0 && errno == EINTR) continue;
    // A failed recvmsg (a reset) received nothing and leaves the control
    // buffer as the last one filled it: those descriptors are taken already.
    if (got < 0) {
      DropFds();
      return Result::kClosed;
    }
    bool too_many = (mh.msg_flags & MSG_CTRUNC) != 0;
    for (cmsghdr* cm = CMSG_FIRSTHDR(&mh); cm != nullptr;
         cm = CMSG_NXTHDR(&mh, cm)) {
      if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
      const int n = static_cast<int>((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
      const int* in = reinterpret_cast<const int*>(CMSG_DATA(cm));
      for (int i = 0; i < n; ++i) {
        if (nfds_ < 2) {
          fds_[nfds_++] = in[i];
        } else {
          close(in[i]);
          too_many = true;
        }
      }
    }
    if (got <= 0 || too_many) {
      descriptors_lost_ = (mh.msg_flags & MSG_CTRUNC) != 0;
      DropFds();
      return Result::kClosed;
    }
    have_ += static_cast<size_t>(got);
  }
  std::memcpy(msg, buffer_, sizeof(*msg));
  have_ = 0;
  if (msg->magic != kSetupMagic || msg->version != kSetupVersion) {
    DropFds();
    return Result::kClosed;
  }
  msg->text[sizeof(msg->text) - 1] = '\0';
  *fd0 = fds_[0];
  *fd1 = fds_[1];
  fds_[0] = fds_[1] = -1;
  nfds_ = 0;
  return Result::kMessage;
}

std::string DefaultSocketPath() {
  if (geteuid() == 0) return "/run/rdmaplane/rdmaplane.sock";
  if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg && *xdg) {
    return std::string(xdg) + "/rdmaplane.sock";
  }
  return "/tmp/rdmaplane-" + std::to_string(geteuid()) + ".sock";
}

}  // namespace rdmaplane::shm
