#include "base/unique_fd.h"

#include <fcntl.h>
#include <sys/eventfd.h>

#include <cerrno>
#include <utility>

#include "gtest/gtest.h"

namespace regcache::base {
namespace {

bool IsOpen(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

TEST(UniqueFd, ClosesWhatItOwnsOnceWhenItGoes) {
  const int raw = ::eventfd(0, EFD_CLOEXEC);
  ASSERT_GE(raw, 0);
  {
    UniqueFd fd(raw);
    EXPECT_TRUE(fd);
    EXPECT_EQ(fd.get(), raw);
    UniqueFd moved(std::move(fd));
    EXPECT_FALSE(fd);  // NOLINT(bugprone-use-after-move): the moved-from state is defined
    EXPECT_EQ(moved.get(), raw);
    EXPECT_TRUE(IsOpen(raw));
  }
  EXPECT_FALSE(IsOpen(raw));
}

TEST(UniqueFd, ReleaseGivesItUpAndResetReplacesIt) {
  const int a = ::eventfd(0, EFD_CLOEXEC);
  const int b = ::eventfd(0, EFD_CLOEXEC);
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  UniqueFd fd(a);
  fd.reset(b);
  EXPECT_FALSE(IsOpen(a));
  EXPECT_EQ(fd.release(), b);
  EXPECT_FALSE(fd);
  EXPECT_TRUE(IsOpen(b));
  ::close(b);
}

TEST(UniqueFd, AssignmentClosesTheOldOneAndErrnoSurvivesAClose) {
  const int a = ::eventfd(0, EFD_CLOEXEC);
  ASSERT_GE(a, 0);
  UniqueFd fd(a);
  errno = EADDRINUSE;
  fd = UniqueFd();
  EXPECT_EQ(errno, EADDRINUSE);
  EXPECT_FALSE(IsOpen(a));
  EXPECT_FALSE(UniqueFd(-5));
}

}  // namespace
}  // namespace regcache::base
