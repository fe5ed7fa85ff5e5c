#include "protocol/control_protocol.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>

#include "absl/strings/str_cat.h"
#include "base/errno_status.h"
#include "base/error_reason.h"
#include "base/status_code.h"
#include "protocol/reason_numbers.h"

namespace regcache::protocol {

size_t ControlMessageSize(uint16_t type) {
  switch (static_cast<ControlType>(type)) {
    case ControlType::kHello:
      return sizeof(HelloMsg);
    case ControlType::kWelcome:
      return sizeof(WelcomeMsg);
    case ControlType::kError:
      return sizeof(ErrorMsg);
    case ControlType::kMemoryFd:
      return sizeof(MemoryFdMsg);
    case ControlType::kImportFd:
      return sizeof(ImportFdMsg);
    case ControlType::kImported:
      return sizeof(ImportedMsg);
    case ControlType::kExportPd:
      return sizeof(ExportPdMsg);
    case ControlType::kPdExport:
      return sizeof(PdExportMsg);
    case ControlType::kAttachRegion:
      return sizeof(AttachRegionMsg);
    case ControlType::kOpen:
      return sizeof(OpenMsg);
  }
  return 0;
}

absl::StatusOr<std::string> DeviceNameOf(const char (&field)[kDeviceNameBytes]) {
  size_t n = 0;
  while (n < kDeviceNameBytes && field[n] != '\0') ++n;
  for (size_t i = 0; i < n; ++i) {
    if (field[i] < 0x21 || field[i] > 0x7e) {
      return absl::InvalidArgumentError(
          absl::StrCat("device name: byte ", i, " is not printable ASCII"));
    }
  }
  return std::string(field, n);
}

absl::Status SetDeviceName(absl::string_view name, char (&field)[kDeviceNameBytes]) {
  if (name.size() > kDeviceNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("device name '", name, "' is longer than ", kDeviceNameBytes, " bytes"));
  }
  std::memset(field, 0, kDeviceNameBytes);
  std::memcpy(field, name.data(), name.size());
  return absl::OkStatus();
}

ErrorMsg MakeErrorMessage(const absl::Status& status, uint64_t nonce, uint16_t in_reply_to) {
  ErrorMsg m = MakeControlMessage<ErrorMsg>(ControlType::kError);
  m.nonce = nonce;
  m.code = static_cast<uint32_t>(status.code());
  m.in_reply_to = in_reply_to;
  if (std::optional<base::ErrorReason> r = base::GetErrorReason(status)) {
    m.reason = ReasonNumber(r->reason);
  }
  absl::string_view text = status.message();
  size_t n = std::min(text.size(), sizeof(m.message));
  std::memcpy(m.message, text.data(), n);
  m.message_length = static_cast<uint16_t>(n);
  return m;
}

absl::Status StatusFromErrorMessage(const ErrorMsg& m) {
  // An Error always carries an error: a code of 0 is as unknown as one out of range.
  const absl::StatusCode code =
      m.code == 0 ? absl::StatusCode::kUnknown : base::CanonicalCode(m.code);
  size_t n = std::min<size_t>(m.message_length, sizeof(m.message));
  absl::Status s(code, absl::string_view(m.message, n));
  const absl::string_view reason = NumberedReason(m.reason);
  return reason.empty() ? s : base::WithReason(std::move(s), reason);
}

absl::Status ValidateControlDatagram(const uint8_t* data, size_t size, bool truncated,
                                     ControlType* type) {
  if (truncated || size > kMaxControlMessage) {
    return absl::InvalidArgumentError(
        absl::StrCat("control message larger than ", kMaxControlMessage, " bytes"));
  }
  ControlHeader h;
  if (size < sizeof(h)) {
    return absl::InvalidArgumentError(absl::StrCat("control message of ", size, " bytes"));
  }
  std::memcpy(&h, data, sizeof(h));
  if (h.magic != kControlMagic) return absl::InvalidArgumentError("control message: bad magic");
  if (h.version != kControlVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("control message: version ", h.version, ", want ", kControlVersion));
  }
  size_t want = ControlMessageSize(h.type);
  if (want == 0) {
    return absl::InvalidArgumentError(absl::StrCat("control message: unknown type ", h.type));
  }
  if (h.length != size || size != want || h.reserved != 0) {
    return absl::InvalidArgumentError(absl::StrCat("control message type ", h.type, ": length ",
                                                   h.length, " in ", size, " bytes, want ", want));
  }
  *type = static_cast<ControlType>(h.type);
  return absl::OkStatus();
}

absl::Status SendControlMessage(int sock, const void* msg, size_t size, absl::Span<const int> fds) {
  if (fds.size() > kMaxControlFds) {
    return absl::InvalidArgumentError(absl::StrCat("control message with ", fds.size(), " fds"));
  }
  iovec iov{const_cast<void*>(msg), size};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxControlFds)] = {};
  if (!fds.empty()) {
    mh.msg_control = control;
    mh.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  ssize_t n;
  do {
    n = sendmsg(sock, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    int err = errno;
    if (err == EAGAIN || err == EWOULDBLOCK || err == EPIPE || err == ECONNRESET) {
      return absl::UnavailableError(absl::StrCat("control socket send: ", base::ErrnoName(err)));
    }
    return base::ErrnoToStatus(err, "control socket sendmsg");
  }
  if (static_cast<size_t>(n) != size) {
    return absl::UnavailableError("control socket send: short datagram");
  }
  return absl::OkStatus();
}

void CloseFds(std::vector<int>* fds) {
  for (int fd : *fds) close(fd);
  fds->clear();
}

absl::StatusOr<ControlMessage> ReceiveControlMessage(int sock, absl::Duration timeout) {
  if (timeout != absl::InfiniteDuration()) {
    pollfd p{sock, POLLIN, 0};
    int ms = static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(timeout)));
    int r;
    do {
      r = poll(&p, 1, ms);
    } while (r < 0 && errno == EINTR);
    if (r < 0) return base::ErrnoToStatus(errno, "control socket poll");
    if (r == 0) return absl::DeadlineExceededError("control socket: no message in time");
  }
  uint8_t buf[kMaxControlMessage + 1];
  iovec iov{buf, sizeof(buf)};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxControlFds)];
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = control;
  mh.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    int err = errno;
    if (err == ECONNRESET) return absl::UnavailableError("control socket: connection reset");
    return base::ErrnoToStatus(err, "control socket recvmsg");
  }
  ControlMessage out;
  for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c != nullptr; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        out.fds.push_back(fd);
      }
    }
  }
  if (n == 0) {
    CloseFds(&out.fds);
    return absl::UnavailableError("control socket: end of file");
  }
  const bool truncated =
      (mh.msg_flags & MSG_TRUNC) != 0 || static_cast<size_t>(n) > kMaxControlMessage;
  if (!truncated && (mh.msg_flags & MSG_CTRUNC) != 0) {
    // More descriptors than `control` has room for: the kernel installed the first ones (in
    // out.fds) and closed the rest. The datagram itself fit, so its size is not the problem.
    CloseFds(&out.fds);
    return absl::InvalidArgumentError(
        absl::StrCat("control message carries more than ", kMaxControlFds, " descriptors"));
  }
  ControlType type;
  absl::Status valid = ValidateControlDatagram(buf, static_cast<size_t>(n), truncated, &type);
  if (!valid.ok()) {
    CloseFds(&out.fds);
    return valid;
  }
  out.type = type;
  out.bytes.assign(buf, buf + n);
  return out;
}

}  // namespace regcache::protocol