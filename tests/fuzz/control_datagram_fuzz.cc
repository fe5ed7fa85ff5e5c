// Fuzz target: the control protocol's datagram validation and decoding (api/control_protocol.h)
// — what the daemon does with a datagram before any session logic sees it — both on the bytes
// directly and through a real SOCK_SEQPACKET pair (ReceiveControlMessage's size and truncation
// handling).
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "api/control_protocol.h"

namespace rc = ::regcache::api;

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

// A validated message decodes, and what it says stays within its struct.
void Decode(rc::ControlType type, const std::vector<uint8_t>& bytes) {
  rc::ControlMessage m;
  m.type = type;
  m.bytes = bytes;
  switch (type) {
    case rc::ControlType::kError: {
      absl::Status s = rc::StatusFromErrorMessage(m.As<rc::ErrorMsg>());
      Check(!s.ok());
      Check(s.message().size() <= sizeof(rc::ErrorMsg::message));
      break;
    }
    case rc::ControlType::kWelcome:
      (void)m.As<rc::WelcomeMsg>();
      break;
    case rc::ControlType::kImportFd:
      (void)m.As<rc::ImportFdMsg>();
      break;
    default:
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  rc::ControlType type;
  absl::Status s = rc::ValidateControlDatagram(data, size, /*truncated=*/false, &type);
  if (s.ok()) {
    Check(size == rc::ControlMessageSize(static_cast<uint16_t>(type)));
    Decode(type, std::vector<uint8_t>(data, data + size));
  } else {
    Check(s.code() == absl::StatusCode::kInvalidArgument);
  }

  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return 0;
  if (size > 0 && ::send(sv[0], data, size, MSG_DONTWAIT) == static_cast<ssize_t>(size)) {
    absl::StatusOr<rc::ControlMessage> m = rc::ReceiveControlMessage(sv[1], absl::Seconds(1));
    if (m.ok()) {
      Check(m->bytes.size() == rc::ControlMessageSize(static_cast<uint16_t>(m->type)));
      Check(size == m->bytes.size());
      Check(m->fds.empty());
      Decode(m->type, m->bytes);
    } else {
      Check(m.status().code() == absl::StatusCode::kInvalidArgument);
    }
  }
  ::close(sv[0]);
  ::close(sv[1]);
  return 0;
}
