#include "dataplane/port/burst_guard.h"

#include <mutex>

namespace rdmaplane::port {
namespace {

struct sigaction g_previous_segv;
struct sigaction g_previous_bus;

void Forward(int sig, siginfo_t* info, void* context) {
  const struct sigaction& prev =
      sig == SIGSEGV ? g_previous_segv : g_previous_bus;
  if ((prev.sa_flags & SA_SIGINFO) != 0 && prev.sa_sigaction != nullptr) {
    prev.sa_sigaction(sig, info, context);
    return;
  }
  if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN &&
      prev.sa_handler != nullptr) {
    prev.sa_handler(sig);
    return;
  }
  // Default action: die with this signal (re-raised once the handler
  // returns, since the faulting instruction runs again).
  signal(sig, SIG_DFL);
}

void Handler(int sig, siginfo_t* info, void* context) {
  BurstGuard& guard = ThisThreadBurstGuard();
  if (guard.active != 0) {
    guard.active = 0;
    siglongjmp(guard.env, 1);
  }
  Forward(sig, info, context);
}

}  // namespace

BurstGuard& ThisThreadBurstGuard() {
  static thread_local BurstGuard guard
      __attribute__((tls_model("initial-exec")));
  return guard;
}

void InstallBurstGuard() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = &Handler;
    // SA_NODEFER: the handler jumps out without restoring the signal mask,
    // so the signal must not be blocked while it runs.
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_previous_segv);
    sigaction(SIGBUS, &sa, &g_previous_bus);
  });
}

}  // namespace rdmaplane::port
