// A guard around a port's bursts against a known hazard of DPDK 22.11's
// memif PMD: when the peer leaves, DPDK's interrupt thread unmaps the shared
// rings while the engine may be inside rx_burst or tx_burst on them, and the
// engine faults (SIGSEGV). Under the guard such a fault ends the burst
// instead of the process: the port is then treated as down until its link
// comes back, and it frees what the burst held (EthPort keeps a reference
// on every frame it hands to a transmit burst for that, see
// PortConfig::bursts_may_fault).
//
// Only faults raised while a guarded burst is running on this thread are
// taken; any other fault goes to the handler that was installed before (or
// the default one), so real bugs still crash.
//
// Thread-safety: InstallBurstGuard is thread-safe (first call installs);
// the guard itself is per thread.
#ifndef RDMAPLANE_DATAPLANE_PORT_BURST_GUARD_H_
#define RDMAPLANE_DATAPLANE_PORT_BURST_GUARD_H_

#include <csetjmp>
#include <csignal>

namespace rdmaplane::port {

struct BurstGuard {
  sigjmp_buf env;
  volatile sig_atomic_t active = 0;
};

// This thread's guard (initial-exec TLS: safe to touch in a signal handler).
BurstGuard& ThisThreadBurstGuard();

// Installs the SIGSEGV/SIGBUS handler once per process.
void InstallBurstGuard();

}  // namespace rdmaplane::port

// Runs `burst` (an expression) under the guard; on a fault, runs
// `on_fault` (a statement) instead of crashing. Must be used inside a
// function that stays active for the whole burst.
#define RDP_GUARDED_BURST(burst, on_fault)         \
  do {                                             \
    ::rdmaplane::port::BurstGuard& rdp_guard_ =    \
        ::rdmaplane::port::ThisThreadBurstGuard(); \
    if (sigsetjmp(rdp_guard_.env, 0) != 0) {       \
      rdp_guard_.active = 0;                       \
      on_fault;                                    \
    } else {                                       \
      rdp_guard_.active = 1;                       \
      burst;                                       \
      rdp_guard_.active = 0;                       \
    }                                              \
  } while (0)

#endif  // RDMAPLANE_DATAPLANE_PORT_BURST_GUARD_H_
