// Leveled logging for the daemon: one line per record on stderr,
//
//   rdmaplaned[4242] I 2026-11-22T04:20:01.123456Z daemon.cc:123] message
//
// written with a single write(2), so records from different threads never
// interleave (stderr is unbuffered; a pipe keeps writes up to PIPE_BUF whole).
// A disabled record costs one relaxed atomic load: the arguments are not
// evaluated. Not for the engines' poll loop: formatting allocates nothing
// below 4 KiB, but it does make a system call.
//
//   RDP_LOG(kInfo, "session %u from pid %d", id, pid);
//   RDP_LOG_AT(ok ? LogLevel::kDebug : LogLevel::kWarning, "...");
//   RDP_LOG_EVERY(kWarning, 10, "out of %s", what);  // at most every 10 s
//                                                    // from this line
//
// Thread-safe.
#ifndef RDMAPLANE_CONTROL_LOG_H_
#define RDMAPLANE_CONTROL_LOG_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

namespace rdmaplane::control {

enum class LogLevel { kDebug, kInfo, kWarning, kError };

// Records below `level` are dropped. The default is kInfo.
void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();

// "debug", "info", "warning" (or "warn"), "error", any case. False, and
// *level untouched, for anything else.
bool ParseLogLevel(std::string_view text, LogLevel* level);

namespace log_internal {

extern std::atomic<int> min_level;

inline bool Enabled(LogLevel level) {
  return static_cast<int>(level) >= min_level.load(std::memory_order_relaxed);
}

// Formats and writes one record; `file` may be a path (only its last
// component is printed). Newlines in the message become spaces.
void Write(LogLevel level, const char* file, int line, const char* format, ...)
    __attribute__((format(printf, 4, 5)));

// One call site's allowance: a record every `interval_ns` at most.
class RateLimit {
 public:
  // True when a record may go out now; then *held_back is how many were
  // refused since the last one.
  bool Allow(int64_t interval_ns, uint64_t* held_back);

 private:
  std::atomic<int64_t> next_ns_{0};
  std::atomic<uint64_t> held_back_{0};
};

// " (N more like it since the last)" or "".
std::string HeldBackNote(uint64_t held_back);

}  // namespace log_internal
}  // namespace rdmaplane::control

// `level_expr` is a LogLevel expression.
#define RDP_LOG_AT(level_expr, format, ...)                             \
  do {                                                                  \
    const ::rdmaplane::control::LogLevel rdp_log_level_ = (level_expr); \
    if (::rdmaplane::control::log_internal::Enabled(rdp_log_level_)) {  \
      ::rdmaplane::control::log_internal::Write(                        \
          rdp_log_level_, __FILE__, __LINE__,                           \
          format __VA_OPT__(, ) __VA_ARGS__);                           \
    }                                                                   \
  } while (0)

// `level` is one of kDebug, kInfo, kWarning, kError.
#define RDP_LOG(level, format, ...)                 \
  RDP_LOG_AT(::rdmaplane::control::LogLevel::level, \
             format __VA_OPT__(, ) __VA_ARGS__)

// At most one record every `seconds` from this line (the ones held back are
// counted in the next).
#define RDP_LOG_EVERY(level, seconds, format, ...)                          \
  do {                                                                      \
    static ::rdmaplane::control::log_internal::RateLimit rdp_log_rate_;     \
    constexpr ::rdmaplane::control::LogLevel rdp_log_level_ =               \
        ::rdmaplane::control::LogLevel::level;                              \
    uint64_t rdp_held_back_ = 0;                                            \
    if (::rdmaplane::control::log_internal::Enabled(rdp_log_level_) &&      \
        rdp_log_rate_.Allow(int64_t{seconds} * 1'000'000'000,               \
                            &rdp_held_back_)) {                             \
      ::rdmaplane::control::log_internal::Write(                            \
          rdp_log_level_, __FILE__, __LINE__, format "%s" __VA_OPT__(, )    \
          __VA_ARGS__,                                                      \
          ::rdmaplane::control::log_internal::HeldBackNote(rdp_held_back_)  \
              .c_str());                                                    \
    }                                                                       \
  } while (0)

#endif  // RDMAPLANE_CONTROL_LOG_H_
