// Process-wide DPDK environment: initializes the EAL once with arguments the
// daemon (or a test) chose, always including --no-pci unless PCI devices were
// configured, and tears it down at exit.
//
// Thread-safe: Init may be called from any thread; only the first call
// initializes.
#ifndef RDMAPLANE_DATAPLANE_PORT_DPDK_ENV_H_
#define RDMAPLANE_DATAPLANE_PORT_DPDK_ENV_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace rdmaplane::port {

struct EalOptions {
  std::vector<std::string> args;  // extra EAL arguments (vdevs, cores, ...)
  bool hugepages = false;         // false: --no-huge with plain memory
  bool allow_pci = false;         // false: --no-pci
  size_t memory_mb = 256;         // with --no-huge
  std::string file_prefix;        // unique per process; default from pid
};

// The EAL argument vector for `options` (exposed for tests and logging).
std::vector<std::string> EalArguments(const EalOptions& options);

// Initializes the EAL on first call; later calls return the first result.
// Unless the arguments choose lcores, the calling thread keeps the CPUs it
// had (the EAL would pin it, and every thread it starts later, to one).
absl::Status InitDpdk(const EalOptions& options);

// Releases the EAL and removes its runtime folder (under /var/run/dpdk for
// root) and, after --single-file-segments with hugepages, its hugepage
// files, so that a process leaves nothing behind.
void ShutdownDpdk();

// The value of argument `key` in a DPDK device string or its arguments
// ("net_af_packet0,iface=veth0,framesz=4352": "iface" gives "veth0"), or
// nullopt when it has none.
std::optional<std::string_view> DeviceArg(std::string_view device,
                                          std::string_view key);

}  // namespace rdmaplane::port

#endif  // RDMAPLANE_DATAPLANE_PORT_DPDK_ENV_H_
