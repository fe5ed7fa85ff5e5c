// The readiness protocol against datagram sockets this test binds itself: a path and an
// abstract name, through $NOTIFY_SOCKET as systemd sets it, and the refusals.
#include "server/internal/sd_notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

using ::regcache::base::StatusIs;

namespace regcache::server::internal {
namespace {

// A datagram socket bound to `name` (a path, or "@abstract"), as the service manager's.
class Listener {
 public:
  explicit Listener(const std::string& name) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, name.data(), name.size());
    const bool abstract = name[0] == '@';
    if (abstract) addr.sun_path[0] = '\0';
    const socklen_t len =
        static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size() + (abstract ? 0 : 1));
    bound_ = fd_ >= 0 && bind(fd_, reinterpret_cast<const sockaddr*>(&addr), len) == 0;
  }
  ~Listener() {
    if (fd_ >= 0) close(fd_);
  }
  bool bound() const { return bound_; }
  // The next datagram; "" when none is queued (the sends under test are synchronous).
  std::string Receive() {
    char buf[4096];
    ssize_t n = recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
    return n < 0 ? std::string() : std::string(buf, static_cast<size_t>(n));
  }

 private:
  int fd_ = -1;
  bool bound_ = false;
};

class SdNotifyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/regcache-sdnotify-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    unlink(Path().c_str());
    rmdir(dir_.c_str());
    unsetenv("NOTIFY_SOCKET");
  }
  std::string Path() const { return dir_ + "/notify"; }

  std::string dir_;
};

TEST_F(SdNotifyTest, PathSocketReceivesTheState) {
  Listener listener(Path());
  ASSERT_TRUE(listener.bound());
  ASSERT_TRUE(SdNotifyTo(Path(), "READY=1\nSTATUS=serving").ok());
  EXPECT_EQ(listener.Receive(), "READY=1\nSTATUS=serving");
}

TEST_F(SdNotifyTest, AbstractSocketReceivesTheState) {
  const std::string name = absl::StrCat("@regcache-sdnotify-test-", getpid());
  Listener listener(name);
  ASSERT_TRUE(listener.bound());
  ASSERT_TRUE(SdNotifyTo(name, "STOPPING=1").ok());
  EXPECT_EQ(listener.Receive(), "STOPPING=1");
}

TEST_F(SdNotifyTest, SdNotifyUsesNotifySocketAndIsANoOpWithoutIt) {
  Listener listener(Path());
  ASSERT_TRUE(listener.bound());
  unsetenv("NOTIFY_SOCKET");
  EXPECT_TRUE(SdNotify("READY=1").ok());
  EXPECT_EQ(listener.Receive(), "");
  setenv("NOTIFY_SOCKET", "", 1);
  EXPECT_TRUE(SdNotify("READY=1").ok());
  EXPECT_EQ(listener.Receive(), "");
  setenv("NOTIFY_SOCKET", Path().c_str(), 1);
  ASSERT_TRUE(SdNotify("READY=1").ok());
  EXPECT_EQ(listener.Receive(), "READY=1");
  NotifyServiceManager("STOPPING=1");
  EXPECT_EQ(listener.Receive(), "STOPPING=1");
}

TEST_F(SdNotifyTest, RefusesBadSocketsAndStates) {
  EXPECT_THAT(SdNotifyTo("relative/notify", "READY=1"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(SdNotifyTo("", "READY=1"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(SdNotifyTo("@", "READY=1"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(SdNotifyTo("/" + std::string(200, 'x'), "READY=1").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(SdNotifyTo(Path(), ""), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(SdNotifyTest, NothingListeningIsAnError) {
  absl::Status s = SdNotifyTo(Path(), "READY=1");  // no socket bound there
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr(Path()));
  // The daemon serves anyway: only a warning.
  setenv("NOTIFY_SOCKET", Path().c_str(), 1);
  NotifyServiceManager("READY=1");
}

}  // namespace
}  // namespace regcache::server::internal
