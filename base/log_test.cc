#include "base/log.h"

#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "gtest/gtest.h"

namespace regcache::base {
namespace {

class LogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetLogSinkForTest([this](LogSeverity s, absl::string_view line) {
      MutexLock lock(&mu_);
      lines_.emplace_back(line);
      severities_.push_back(s);
    });
  }
  void TearDown() override {
    SetLogSinkForTest(nullptr);
    SetMinLogSeverity(LogSeverity::kInfo);
  }
  std::vector<std::string> Lines() {
    MutexLock lock(&mu_);
    return lines_;
  }

  Mutex mu_;
  std::vector<std::string> lines_;
  std::vector<LogSeverity> severities_;
};

TEST_F(LogTest, FormatsSeverityLocationAndMessage) {
  RC_LOG(WARNING) << "pool low class=" << 16;
  auto lines = Lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0][0], 'W');
  EXPECT_NE(lines[0].find("log_test.cc:"), std::string::npos);
  EXPECT_NE(lines[0].find("] pool low class=16"), std::string::npos);
}

TEST(JournalTest, AStreamIsTheJournalsOnlyWhenJournalStreamNamesIt) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  struct stat st;
  ASSERT_EQ(::fstat(fds[1], &st), 0);
  const std::string mine = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
  EXPECT_TRUE(IsJournalStream(mine.c_str(), fds[1]));
  EXPECT_FALSE(IsJournalStream(nullptr, fds[1]));
  EXPECT_FALSE(IsJournalStream("", fds[1]));
  EXPECT_FALSE(IsJournalStream("garbage", fds[1]));
  EXPECT_FALSE(IsJournalStream((std::to_string(st.st_dev) + ":1").c_str(), fds[1]));
  ::close(fds[0]);
  ::close(fds[1]);
  EXPECT_EQ(SyslogPriority(LogSeverity::kDebug), 7);
  EXPECT_EQ(SyslogPriority(LogSeverity::kInfo), 6);
  EXPECT_EQ(SyslogPriority(LogSeverity::kWarning), 4);
  EXPECT_EQ(SyslogPriority(LogSeverity::kError), 3);
  EXPECT_EQ(SyslogPriority(LogSeverity::kFatal), 2);
}

TEST_F(LogTest, BelowMinimumIsDroppedWithoutEvaluating) {
  SetMinLogSeverity(LogSeverity::kWarning);
  int evaluated = 0;
  auto count = [&evaluated] { return ++evaluated; };
  RC_LOG(INFO) << count();
  RC_LOG(DEBUG) << count();
  EXPECT_EQ(evaluated, 0);
  EXPECT_TRUE(Lines().empty());
  RC_LOG(ERROR) << count();
  EXPECT_EQ(evaluated, 1);
  EXPECT_EQ(Lines().size(), 1u);
}

TEST_F(LogTest, ParsesSeverityNames) {
  LogSeverity s;
  EXPECT_TRUE(ParseLogSeverity("Warning", &s));
  EXPECT_EQ(s, LogSeverity::kWarning);
  EXPECT_TRUE(ParseLogSeverity("debug", &s));
  EXPECT_EQ(s, LogSeverity::kDebug);
  EXPECT_FALSE(ParseLogSeverity("loud", &s));
}

TEST_F(LogTest, ConcurrentLinesStayWhole) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < 100; ++i) RC_LOG(INFO) << "thread=" << t << " i=" << i << " end";
    });
  }
  for (auto& th : threads) th.join();
  auto lines = Lines();
  ASSERT_EQ(lines.size(), 400u);
  for (const auto& l : lines) EXPECT_EQ(l.substr(l.size() - 3), "end");
}

TEST(LogDeathTest, CheckFailureAbortsWithMessage) {
  EXPECT_DEATH({ RC_CHECK(1 + 1 == 3) << "arithmetic"; }, "Check failed: 1 \\+ 1 == 3 arithmetic");
}

}  // namespace
}  // namespace regcache::base