#include "control/log.h"

#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>

namespace rdmaplane::control {
namespace log_internal {

std::atomic<int> min_level{static_cast<int>(LogLevel::kInfo)};

namespace {

constexpr char kLevelLetters[] = {'D', 'I', 'W', 'E'};

const char* BaseName(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash != nullptr ? slash + 1 : path;
}

// Writes all of [data, data + size) to stderr; one write(2) unless the
// kernel takes less (a full pipe), which is then finished in order.
void WriteAll(const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = write(STDERR_FILENO, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // nowhere to report a failing stderr
    data += n;
    size -= static_cast<size_t>(n);
  }
}

}  // namespace

void Write(LogLevel level, const char* file, int line, const char* format,
           ...) {
  const int saved_errno = errno;  // callers may log and then look at errno
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  tm utc{};
  gmtime_r(&now.tv_sec, &utc);
  const int index = static_cast<int>(level);
  const char letter = index >= 0 && index < 4 ? kLevelLetters[index] : '?';

  char stack[4096];
  int prefix = std::snprintf(
      stack, sizeof(stack),
      "rdmaplaned[%d] %c %04d-%02d-%02dT%02d:%02d:%02d.%06ldZ %s:%d] ",
      static_cast<int>(getpid()), letter, utc.tm_year + 1900, utc.tm_mon + 1,
      utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, now.tv_nsec / 1000,
      BaseName(file), line);
  if (prefix < 0) prefix = 0;
  if (static_cast<size_t>(prefix) >= sizeof(stack) / 2) {
    prefix = sizeof(stack) / 2;  // an absurd file name; keep room for text
  }

  va_list args;
  va_start(args, format);
  va_list again;
  va_copy(again, args);
  // Leave one byte for the newline after the terminating NUL's position.
  const size_t room = sizeof(stack) - static_cast<size_t>(prefix) - 1;
  int body = std::vsnprintf(stack + prefix, room, format, args);
  va_end(args);
  if (body < 0) body = 0;

  char* out = stack;
  std::unique_ptr<char[]> heap;
  if (static_cast<size_t>(body) >= room) {
    const size_t total = static_cast<size_t>(prefix) + body + 2;
    heap = std::make_unique<char[]>(total);
    std::memcpy(heap.get(), stack, static_cast<size_t>(prefix));
    std::vsnprintf(heap.get() + prefix, static_cast<size_t>(body) + 1, format,
                   again);
    out = heap.get();
  }
  va_end(again);

  size_t size = static_cast<size_t>(prefix) + static_cast<size_t>(body);
  // One record, one line: trailing newlines go, inner ones become spaces.
  while (size > static_cast<size_t>(prefix) &&
         (out[size - 1] == '\n' || out[size - 1] == '\r')) {
    --size;
  }
  for (size_t i = static_cast<size_t>(prefix); i < size; ++i) {
    if (out[i] == '\n' || out[i] == '\r') out[i] = ' ';
  }
  out[size++] = '\n';
  WriteAll(out, size);
  errno = saved_errno;
}

bool RateLimit::Allow(int64_t interval_ns, uint64_t* held_back) {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  const int64_t now = int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
  int64_t next = next_ns_.load(std::memory_order_relaxed);
  if (now < next || !next_ns_.compare_exchange_strong(
                        next, now + interval_ns, std::memory_order_relaxed)) {
    held_back_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  *held_back = held_back_.exchange(0, std::memory_order_relaxed);
  return true;
}

std::string HeldBackNote(uint64_t held_back) {
  if (held_back == 0) return "";
  return " (" + std::to_string(held_back) + " more like it since the last)";
}

}  // namespace log_internal

void SetLogLevel(LogLevel level) {
  log_internal::min_level.store(static_cast<int>(level),
                                std::memory_order_relaxed);
}

LogLevel GetLogLevel() {
  return static_cast<LogLevel>(
      log_internal::min_level.load(std::memory_order_relaxed));
}

bool ParseLogLevel(std::string_view text, LogLevel* level) {
  std::string lower(text);
  for (char& c : lower) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  if (lower == "debug") {
    *level = LogLevel::kDebug;
  } else if (lower == "info") {
    *level = LogLevel::kInfo;
  } else if (lower == "warning" || lower == "warn") {
    *level = LogLevel::kWarning;
  } else if (lower == "error") {
    *level = LogLevel::kError;
  } else {
    return false;
  }
  return true;
}

}  // namespace rdmaplane::control
