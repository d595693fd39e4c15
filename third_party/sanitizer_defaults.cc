// What ThreadSanitizer and AddressSanitizer should know about this code,
// linked into every test and tool (harmless without a sanitizer: nothing
// calls these then). The environment (TSAN_OPTIONS, ASAN_OPTIONS) still
// overrides the options.

// TSan keeps a table of file descriptors and reports a race when a number
// one thread closed is created again by another (socket, dup, accept4,
// recvmsg with SCM_RIGHTS, memfd_create) without synchronization it can
// see. That is how descriptor numbers are reused, not a race on memory:
// tests with an in-process daemon pass descriptors to it all the time.
// (Descriptors closed twice are caught by setup_fuzz_test's close(2)
// interposition instead.)
// The patterns name the interceptors' functions, anchored at the end only
// (their symbols carry a prefix); our own functions are CamelCase, so none
// ends like these.
extern "C" const char* __tsan_default_suppressions() {
  return "race:socket$\n"
         "race:socketpair$\n"
         "race:accept4$\n"
         "race:recvmsg$\n"
         "race:dup$\n"
         "race:memfd_create$\n"
         "race:open$\n"
         "race:closedir$\n"
         "race:close$\n"
         "race:pipe2$\n"
         "race:eventfd$\n"
         "race:epoll_create1$\n"
         // DPDK is not instrumented: what its own threads (the interrupt
         // thread that runs memif's control channel) do with its memory is
         // invisible to TSan but for the libc calls they make, which it
         // reports as races with the port's teardown. Any race with a frame
         // in a DPDK library is left to DPDK.
         "race:librte_\n";
}

// Every client session holds its liveness mutex for its whole life, so a
// thread with many sessions holds more mutexes than TSan's deadlock
// detector tracks: it is off.
extern "C" const char* __tsan_default_options() {
  return "halt_on_error=1:detect_deadlocks=0:second_deadlock_stack=1";
}

extern "C" const char* __asan_default_options() {
  return "detect_leaks=1:halt_on_error=1:abort_on_error=1";
}

extern "C" const char* __ubsan_default_options() {
  return "print_stacktrace=1:halt_on_error=1";
}
