// Fuzz target: the control protocol's datagram validation and decoding
// (protocol/control_protocol.h) — what the daemon does with a datagram before any session logic
// sees it — both on the bytes directly and through a real SOCK_SEQPACKET pair
// (ReceiveControlMessage's size and truncation handling).
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "protocol/control_protocol.h"

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

// A validated message decodes, and what it says stays within its struct.
void Decode(regcache::protocol::ControlType type, const std::vector<uint8_t>& bytes) {
  regcache::protocol::ControlMessage m;
  m.type = type;
  m.bytes = bytes;
  switch (type) {
    case regcache::protocol::ControlType::kError: {
      absl::Status s =
          regcache::protocol::StatusFromErrorMessage(m.As<regcache::protocol::ErrorMsg>());
      Check(!s.ok());
      Check(s.message().size() <= sizeof(regcache::protocol::ErrorMsg::message));
      break;
    }
    case regcache::protocol::ControlType::kWelcome:
      (void)m.As<regcache::protocol::WelcomeMsg>();
      break;
    case regcache::protocol::ControlType::kImportFd:
      (void)m.As<regcache::protocol::ImportFdMsg>();
      break;
    default:
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  regcache::protocol::ControlType type;
  absl::Status s =
      regcache::protocol::ValidateControlDatagram(data, size, /*truncated=*/false, &type);
  if (s.ok()) {
    Check(size == regcache::protocol::ControlMessageSize(static_cast<uint16_t>(type)));
    Decode(type, std::vector<uint8_t>(data, data + size));
  } else {
    Check(s.code() == absl::StatusCode::kInvalidArgument);
  }

  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return 0;
  if (size > 0 && ::send(sv[0], data, size, MSG_DONTWAIT) == static_cast<ssize_t>(size)) {
    absl::StatusOr<regcache::protocol::ControlMessage> m =
        regcache::protocol::ReceiveControlMessage(sv[1], absl::Seconds(1));
    if (m.ok()) {
      Check(m->bytes.size() ==
            regcache::protocol::ControlMessageSize(static_cast<uint16_t>(m->type)));
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
