// Split mode of rdmaplane_transfer (rdmaplane_transfer_split.cc): a server
// and a client in two processes, usually on two hosts, each with a session
// on its own host's daemon.
#ifndef RDMAPLANE_API_EXAMPLE_RDMAPLANE_TRANSFER_SPLIT_H_
#define RDMAPLANE_API_EXAMPLE_RDMAPLANE_TRANSFER_SPLIT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace rdmaplane_transfer {

// Byte `i` of the pattern `seed`; both modes fill and check buffers with it.
inline uint8_t Pattern(uint64_t seed, uint64_t i) {
  uint64_t x = (seed + i) * 0x9E3779B97F4A7C15ull;
  return static_cast<uint8_t>(x >> 56);
}

// The flags split mode shares with the one-process mode, already checked.
struct SharedOptions {
  std::string peer;
  std::vector<uint32_t> sizes;
  uint32_t depth = 4;
  absl::Duration timeout;
};

// Whether --listen or --connect chose split mode.
bool SplitModeRequested();
// The name of a split-mode-only flag that is set, or "" (for the one-process
// mode, which rejects them).
std::string SplitOnlyFlagInUse();
// Runs the server (--listen) or the client (--connect); returns the exit
// status: 0 ok, 1 failed, 2 usage error.
int RunSplit(const SharedOptions& shared);

}  // namespace rdmaplane_transfer

#endif  // RDMAPLANE_API_EXAMPLE_RDMAPLANE_TRANSFER_SPLIT_H_
