// The control-socket codec: every malformed datagram is refused with kInvalidArgument and
// never accepted, and descriptors travel with their message.
#include "protocol/control_protocol.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "base/error_reason.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "protocol/reason_numbers.h"

using ::regcache::base::StatusIs;

namespace regcache::protocol {
namespace {

class SocketPair : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds_), 0);
  }
  void TearDown() override {
    close(fds_[0]);
    close(fds_[1]);
  }
  int fds_[2];
};

TEST_F(SocketPair, HelloRoundTrip) {
  HelloMsg h = MakeControlMessage<HelloMsg>(ControlType::kHello);
  ASSERT_TRUE(SendControlMessage(fds_[0], &h, sizeof(h), -1).ok());
  auto m = ReceiveControlMessage(fds_[1], absl::Seconds(1));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->type, ControlType::kHello);
  EXPECT_TRUE(m->fds.empty());
}

TEST_F(SocketPair, OpenNamesTheDevice) {
  OpenMsg o = MakeControlMessage<OpenMsg>(ControlType::kOpen);
  ASSERT_TRUE(SetDeviceName("sim1", o.device).ok());
  ASSERT_TRUE(SendControlMessage(fds_[0], &o, sizeof(o), -1).ok());
  auto m = ReceiveControlMessage(fds_[1], absl::Seconds(1));
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->type, ControlType::kOpen);
  EXPECT_EQ(DeviceNameOf(m->As<OpenMsg>().device).value_or("?"), "sim1");
}

TEST(DeviceName, EmptyFullAndBadNames) {
  char field[kDeviceNameBytes];
  ASSERT_TRUE(SetDeviceName("", field).ok());
  EXPECT_EQ(DeviceNameOf(field).value_or("?"), "") << "all zero: the daemon's first device";
  const std::string full(kDeviceNameBytes, 'x');
  ASSERT_TRUE(SetDeviceName(full, field).ok());
  EXPECT_EQ(DeviceNameOf(field).value_or("?"), full) << "a full field needs no NUL";
  EXPECT_THAT(SetDeviceName(full + "x", field), StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_TRUE(SetDeviceName("ab", field).ok());
  field[1] = '\n';
  EXPECT_THAT(DeviceNameOf(field), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(SocketPair, FdTravelsWithItsMessage) {
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  ImportFdMsg msg = MakeControlMessage<ImportFdMsg>(ControlType::kImportFd);
  msg.nonce = 42;
  ASSERT_TRUE(SendControlMessage(fds_[0], &msg, sizeof(msg), pipefd[1]).ok());
  auto m = ReceiveControlMessage(fds_[1], absl::Seconds(1));
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->fds.size(), 1u);
  EXPECT_EQ(m->As<ImportFdMsg>().nonce, 42u);
  ASSERT_EQ(write(m->fds[0], "x", 1), 1);
  char c;
  ASSERT_EQ(read(pipefd[0], &c, 1), 1);
  CloseFds(&m->fds);
  close(pipefd[0]);
  close(pipefd[1]);
}

TEST_F(SocketPair, WelcomeCarriesTheGeometryAndBothFastPathFiles) {
  int a[2], b[2];
  ASSERT_EQ(pipe(a), 0);
  ASSERT_EQ(pipe(b), 0);
  WelcomeMsg w = MakeControlMessage<WelcomeMsg>(ControlType::kWelcome);
  EXPECT_EQ(w.header.version, 5) << "version 5: Errors carry reasons (4: observers)";
  w.session_id = 9;
  w.device_index = 1;
  w.node_guid = 0x0002c90300abcdefull;
  w.gid[15] = 7;
  ASSERT_TRUE(SetDeviceName("mlx5_1", w.device).ok());
  w.ring_channels = 16;
  w.grant_slots = 65536;
  const int send[2] = {a[1], b[1]};
  ASSERT_TRUE(SendControlMessage(fds_[0], &w, sizeof(w), absl::MakeConstSpan(send)).ok());
  auto m = ReceiveControlMessage(fds_[1], absl::Seconds(1));
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->type, ControlType::kWelcome);
  ASSERT_EQ(m->fds.size(), 2u);
  WelcomeMsg got = m->As<WelcomeMsg>();
  EXPECT_EQ(got.session_id, 9u);
  EXPECT_EQ(got.ring_channels, 16u);
  EXPECT_EQ(got.grant_slots, 65536u);
  EXPECT_EQ(got.device_index, 1u);
  EXPECT_EQ(got.node_guid, 0x0002c90300abcdefull);
  EXPECT_EQ(got.gid[15], 7);
  EXPECT_EQ(DeviceNameOf(got.device).value_or("?"), "mlx5_1");
  // In order: the first fd is the first sent.
  ASSERT_EQ(write(m->fds[0], "a", 1), 1);
  ASSERT_EQ(write(m->fds[1], "b", 1), 1);
  char c;
  ASSERT_EQ(read(a[0], &c, 1), 1);
  EXPECT_EQ(c, 'a');
  ASSERT_EQ(read(b[0], &c, 1), 1);
  EXPECT_EQ(c, 'b');
  CloseFds(&m->fds);
  for (int fd : {a[0], a[1], b[0], b[1]}) close(fd);
}

TEST_F(SocketPair, TooManyFdsAreRefusedBeforeSending) {
  HelloMsg h = MakeControlMessage<HelloMsg>(ControlType::kHello);
  const int many[kMaxControlFds + 1] = {0, 0, 0, 0, 0};
  EXPECT_EQ(SendControlMessage(fds_[0], &h, sizeof(h), absl::MakeConstSpan(many)).code(),
            absl::StatusCode::kInvalidArgument);
}

// Descriptors open in this process.
size_t OpenFdCount() {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    (void)e;
    ++n;
  }
  return n;
}

// Sends `msg` with `fds` however many there are (SendControlMessage refuses more than
// kMaxControlFds, as a hostile client would not).
void SendWithFds(int sock, const ImportFdMsg& msg, const std::vector<int>& fds) {
  iovec iov{const_cast<ImportFdMsg*>(&msg), sizeof(msg)};
  std::vector<char> control(CMSG_SPACE(sizeof(int) * fds.size()));
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = control.data();
  mh.msg_controllen = control.size();
  cmsghdr* c = CMSG_FIRSTHDR(&mh);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
  std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  ASSERT_EQ(sendmsg(sock, &mh, 0), static_cast<ssize_t>(sizeof(msg)));
}

// Up to kMaxControlFds descriptors arrive with their message; more are refused as such (not as
// an oversized datagram), and every descriptor that arrived is closed.
TEST_F(SocketPair, TooManyReceivedFdsAreRefusedAndClosed) {
  static_assert(kMaxControlFds == 4 && kMaxControlMessage == 264, "the messages below");
  const size_t before = OpenFdCount();
  for (size_t count : {2u, 4u, 5u, 8u}) {
    std::vector<int> fds;
    for (size_t i = 0; i < count; ++i) fds.push_back(open("/dev/null", O_RDONLY | O_CLOEXEC));
    ImportFdMsg msg = MakeControlMessage<ImportFdMsg>(ControlType::kImportFd);
    msg.nonce = count;
    SendWithFds(fds_[0], msg, fds);
    CloseFds(&fds);
    auto m = ReceiveControlMessage(fds_[1], absl::Seconds(1));
    if (count <= kMaxControlFds) {
      ASSERT_TRUE(m.ok()) << count << ": " << m.status();
      EXPECT_EQ(m->fds.size(), count);
      EXPECT_EQ(m->As<ImportFdMsg>().nonce, count);
      CloseFds(&m->fds);
    } else {
      EXPECT_THAT(m, StatusIs(absl::StatusCode::kInvalidArgument)) << count;
      EXPECT_EQ(std::string(m.status().message()),
                "control message carries more than 4 descriptors")
          << count;
    }
  }
  EXPECT_EQ(OpenFdCount(), before) << "a descriptor leaked";
  // A datagram that really is too large keeps its own message.
  std::vector<uint8_t> big(kMaxControlMessage + 1);
  ASSERT_EQ(send(fds_[0], big.data(), big.size(), 0), static_cast<ssize_t>(big.size()));
  auto m = ReceiveControlMessage(fds_[1], absl::Seconds(1));
  EXPECT_EQ(std::string(m.status().message()), "control message larger than 264 bytes");
}

TEST_F(SocketPair, GarbageIsRefused) {
  struct Case {
    const char* name;
    std::vector<uint8_t> bytes;
  };
  HelloMsg good = MakeControlMessage<HelloMsg>(ControlType::kHello);
  auto bytes_of = [](auto m) {
    std::vector<uint8_t> b(sizeof(m));
    std::memcpy(b.data(), &m, sizeof(m));
    return b;
  };
  HelloMsg bad_magic = good;
  bad_magic.header.magic = 1;
  HelloMsg bad_version = good;
  bad_version.header.version = 9;
  HelloMsg bad_type = good;
  bad_type.header.type = 77;
  HelloMsg bad_length = good;
  bad_length.header.length = 1000;
  HelloMsg reserved = good;
  reserved.header.reserved = 1;
  std::vector<uint8_t> too_long = bytes_of(good);
  too_long.resize(kMaxControlMessage + 100);
  std::vector<Case> cases = {
      {"short", {1, 2, 3}},
      {"bad magic", bytes_of(bad_magic)},
      {"bad version", bytes_of(bad_version)},
      {"unknown type", bytes_of(bad_type)},
      {"length mismatch", bytes_of(bad_length)},
      {"reserved set", bytes_of(reserved)},
      {"too long", too_long},
  };
  for (const Case& c : cases) {
    ASSERT_EQ(send(fds_[0], c.bytes.data(), c.bytes.size(), 0),
              static_cast<ssize_t>(c.bytes.size()));
    auto m = ReceiveControlMessage(fds_[1], absl::Seconds(1));
    EXPECT_THAT(m, StatusIs(absl::StatusCode::kInvalidArgument)) << c.name;
  }
}

TEST_F(SocketPair, EofAndTimeout) {
  auto m = ReceiveControlMessage(fds_[1], absl::Milliseconds(10));
  EXPECT_THAT(m, StatusIs(absl::StatusCode::kDeadlineExceeded));
  shutdown(fds_[0], SHUT_WR);
  m = ReceiveControlMessage(fds_[1], absl::Seconds(1));
  EXPECT_THAT(m, StatusIs(absl::StatusCode::kUnavailable));
}

TEST(ErrorMessage, RoundTripsCodeAndMessage) {
  ErrorMsg e = MakeErrorMessage(absl::PermissionDeniedError("uid 65534 not allowed"), 7, 5);
  absl::Status s = StatusFromErrorMessage(e);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_EQ(s.message(), "uid 65534 not allowed");
  e.code = 999;
  EXPECT_THAT(StatusFromErrorMessage(e), StatusIs(absl::StatusCode::kUnknown));
  e.message_length = 60000;  // clamped to the buffer
  EXPECT_LE(StatusFromErrorMessage(e).message().size(), sizeof(e.message));
}

TEST(ErrorMessage, CarriesTheReasonByNumber) {
  ErrorMsg e = MakeErrorMessage(base::WithReason(absl::PermissionDeniedError("not allowed"),
                                                 base::reason::kPeerNotAllowed, {{"uid", "7"}}),
                                0, 1);
  EXPECT_EQ(e.reason, ReasonNumber(base::reason::kPeerNotAllowed));
  std::optional<base::ErrorReason> r = base::GetErrorReason(StatusFromErrorMessage(e));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->reason, base::reason::kPeerNotAllowed);
  EXPECT_TRUE(r->metadata.empty()) << "the numbers stay with gRPC";
  e.reason = 0;
  EXPECT_FALSE(base::GetErrorReason(StatusFromErrorMessage(e)).has_value());
  e.reason = 60000;  // from a newer daemon: unknown here, so none
  EXPECT_FALSE(base::GetErrorReason(StatusFromErrorMessage(e)).has_value());
  EXPECT_EQ(MakeErrorMessage(absl::InternalError("x"), 0, 0).reason, 0u);
}

}  // namespace
}  // namespace regcache::protocol