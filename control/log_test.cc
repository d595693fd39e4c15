#include "control/log.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace rdmaplane::control {
namespace {

// Sends stderr to a file for the life of the object; Take() returns what was
// written so far.
class CapturedStderr {
 public:
  CapturedStderr() {
    const char* dir = std::getenv("TEST_TMPDIR");
    path_ = std::string(dir != nullptr ? dir : "/tmp") + "/log_test." +
            std::to_string(getpid()) + "." + std::to_string(counter_++);
    const int fd =
        open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0600);
    EXPECT_GE(fd, 0);
    saved_ = dup(STDERR_FILENO);
    dup2(fd, STDERR_FILENO);
    close(fd);
  }
  ~CapturedStderr() {
    Restore();
    unlink(path_.c_str());
  }
  std::string Take() {
    Restore();
    std::ifstream in(path_);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

 private:
  void Restore() {
    if (saved_ >= 0) {
      dup2(saved_, STDERR_FILENO);
      close(saved_);
      saved_ = -1;
    }
  }
  static inline int counter_ = 0;
  std::string path_;
  int saved_ = -1;
};

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

class LogTest : public ::testing::Test {
 protected:
  void SetUp() override { saved_ = GetLogLevel(); }
  void TearDown() override { SetLogLevel(saved_); }
  LogLevel saved_ = LogLevel::kInfo;
};

const std::regex& LineFormat() {
  static const std::regex format(
      R"(rdmaplaned\[([0-9]+)\] ([DIWE]) )"
      R"(20[0-9]{2}-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-6][0-9]\.[0-9]{6}Z )"
      R"(log_test\.cc:([0-9]+)\] (.*))");
  return format;
}

TEST_F(LogTest, FormatsOneLinePerRecord) {
  SetLogLevel(LogLevel::kDebug);
  CapturedStderr captured;
  const int line = __LINE__ + 1;
  RDP_LOG(kInfo, "session %u from pid %d", 7u, 1234);
  RDP_LOG(kDebug, "debug %s", "text");
  RDP_LOG(kWarning, "no arguments");
  RDP_LOG(kError, "error\n");
  const std::vector<std::string> lines = Lines(captured.Take());
  ASSERT_EQ(lines.size(), 4u);
  std::smatch m;
  ASSERT_TRUE(std::regex_match(lines[0], m, LineFormat())) << lines[0];
  EXPECT_EQ(m[1], std::to_string(getpid()));
  EXPECT_EQ(m[2], "I");
  EXPECT_EQ(m[3], std::to_string(line));
  EXPECT_EQ(m[4], "session 7 from pid 1234");
  ASSERT_TRUE(std::regex_match(lines[1], m, LineFormat())) << lines[1];
  EXPECT_EQ(m[2], "D");
  EXPECT_EQ(m[4], "debug text");
  ASSERT_TRUE(std::regex_match(lines[2], m, LineFormat())) << lines[2];
  EXPECT_EQ(m[2], "W");
  EXPECT_EQ(m[4], "no arguments");
  ASSERT_TRUE(std::regex_match(lines[3], m, LineFormat())) << lines[3];
  EXPECT_EQ(m[2], "E");
  EXPECT_EQ(m[4], "error");  // the trailing newline is not doubled
}

TEST_F(LogTest, TimestampIsNowInUtc) {
  CapturedStderr captured;
  const time_t before = time(nullptr);
  RDP_LOG(kInfo, "tick");
  const time_t after = time(nullptr);
  const std::string text = captured.Take();
  std::smatch m;
  const std::regex stamp(
      R"(([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})\.)");
  ASSERT_TRUE(std::regex_search(text, m, stamp)) << text;
  tm t{};
  t.tm_year = std::stoi(m[1]) - 1900;
  t.tm_mon = std::stoi(m[2]) - 1;
  t.tm_mday = std::stoi(m[3]);
  t.tm_hour = std::stoi(m[4]);
  t.tm_min = std::stoi(m[5]);
  t.tm_sec = std::stoi(m[6]);
  const time_t logged = timegm(&t);
  EXPECT_GE(logged, before);
  EXPECT_LE(logged, after);
}

TEST_F(LogTest, DisabledRecordsAreDroppedWithoutEvaluatingArguments) {
  SetLogLevel(LogLevel::kWarning);
  CapturedStderr captured;
  int evaluated = 0;
  auto count = [&] { return ++evaluated; };
  RDP_LOG(kDebug, "%d", count());
  RDP_LOG(kInfo, "%d", count());
  RDP_LOG(kWarning, "warning %d", count());
  RDP_LOG_AT(LogLevel::kInfo, "%d", count());
  const std::vector<std::string> lines = Lines(captured.Take());
  EXPECT_EQ(evaluated, 1);
  ASSERT_EQ(lines.size(), 1u);
  std::smatch m;
  ASSERT_TRUE(std::regex_match(lines[0], m, LineFormat())) << lines[0];
  EXPECT_EQ(m[4], "warning 1");
}

TEST_F(LogTest, InnerNewlinesKeepTheRecordOnOneLine) {
  CapturedStderr captured;
  RDP_LOG(kInfo, "first\nsecond\r\nthird");
  const std::vector<std::string> lines = Lines(captured.Take());
  ASSERT_EQ(lines.size(), 1u);
  std::smatch m;
  ASSERT_TRUE(std::regex_match(lines[0], m, LineFormat())) << lines[0];
  EXPECT_EQ(m[4], "first second  third");
}

TEST_F(LogTest, LongMessagesAreWrittenWhole) {
  CapturedStderr captured;
  const std::string big(20000, 'x');
  RDP_LOG(kInfo, "<%s>", big.c_str());
  const std::vector<std::string> lines = Lines(captured.Take());
  ASSERT_EQ(lines.size(), 1u);
  std::smatch m;
  ASSERT_TRUE(std::regex_match(lines[0], m, LineFormat()));
  EXPECT_EQ(m[4], "<" + big + ">");
}

TEST_F(LogTest, KeepsErrno) {
  CapturedStderr captured;
  errno = EACCES;
  RDP_LOG(kInfo, "x");
  EXPECT_EQ(errno, EACCES);
}

TEST_F(LogTest, ThreadsNeverInterleave) {
  constexpr int kThreads = 8;
  constexpr int kRecords = 500;
  CapturedStderr captured;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t] {
      // Long enough that a split write would show.
      const std::string pad(300, static_cast<char>('a' + t));
      for (int i = 0; i < kRecords; ++i) {
        RDP_LOG(kInfo, "thread %d record %d %s", t, i, pad.c_str());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const std::vector<std::string> lines = Lines(captured.Take());
  ASSERT_EQ(lines.size(), static_cast<size_t>(kThreads * kRecords));
  std::set<std::pair<int, int>> seen;
  const std::regex body(R"(thread ([0-9]) record ([0-9]+) ([a-h]{300}))");
  for (const std::string& line : lines) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, LineFormat())) << line;
    const std::string message = m[4];
    std::smatch b;
    ASSERT_TRUE(std::regex_match(message, b, body)) << message;
    const int t = std::stoi(b[1]);
    EXPECT_EQ(b[3], std::string(300, static_cast<char>('a' + t)));
    seen.insert({t, std::stoi(b[2])});
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(kThreads * kRecords));
}

// A call site logs once per interval; what it held back is counted in the
// next record it lets out.
TEST_F(LogTest, RateLimitedRecordsCountWhatWasHeldBack) {
  CapturedStderr captured;
  for (int i = 0; i < 5; ++i) {
    RDP_LOG_EVERY(kWarning, 3600, "out of %s", "descriptors");
  }
  const std::vector<std::string> lines = Lines(captured.Take());
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("out of descriptors"), std::string::npos);
  EXPECT_EQ(lines[0].find("more like it"), std::string::npos);
  log_internal::RateLimit limit;
  uint64_t held_back = 0;
  ASSERT_TRUE(limit.Allow(0, &held_back));
  EXPECT_EQ(held_back, 0u);
  ASSERT_TRUE(limit.Allow(3'600'000'000'000, &held_back));
  EXPECT_FALSE(limit.Allow(1, &held_back));
  EXPECT_FALSE(limit.Allow(1, &held_back));
  EXPECT_EQ(log_internal::HeldBackNote(2),
            " (2 more like it since the last)");
  EXPECT_EQ(log_internal::HeldBackNote(0), "");
}

TEST(ParseLogLevelTest, KnownNamesInAnyCase) {
  LogLevel level = LogLevel::kError;
  ASSERT_TRUE(ParseLogLevel("debug", &level));
  EXPECT_EQ(level, LogLevel::kDebug);
  ASSERT_TRUE(ParseLogLevel("INFO", &level));
  EXPECT_EQ(level, LogLevel::kInfo);
  ASSERT_TRUE(ParseLogLevel("Warning", &level));
  EXPECT_EQ(level, LogLevel::kWarning);
  ASSERT_TRUE(ParseLogLevel("warn", &level));
  EXPECT_EQ(level, LogLevel::kWarning);
  ASSERT_TRUE(ParseLogLevel("error", &level));
  EXPECT_EQ(level, LogLevel::kError);
}

TEST(ParseLogLevelTest, RejectsOthersAndLeavesTheLevel) {
  LogLevel level = LogLevel::kWarning;
  EXPECT_FALSE(ParseLogLevel("", &level));
  EXPECT_FALSE(ParseLogLevel("verbose", &level));
  EXPECT_FALSE(ParseLogLevel("info ", &level));
  EXPECT_FALSE(ParseLogLevel("3", &level));
  EXPECT_EQ(level, LogLevel::kWarning);
}

}  // namespace
}  // namespace rdmaplane::control
