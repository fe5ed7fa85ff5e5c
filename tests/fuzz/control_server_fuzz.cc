// Fuzz target: the control socket as a client process sees it. A real daemon on the simulated
// device and its control server run in this process (socket in a private temp dir); each input
// is one connection's conversation:
//
//   input := chunk*      chunk := flags:u8 length:u8 bytes[length]
//   flags & 1: attach a descriptor to the datagram — flags & 2 ? a sealable 8 KiB memfd
//              : /dev/null (a file the daemon must refuse to map)
//   flags & 4: the chunk's bytes follow a valid header for type (flags >> 4) (so the
//              body, not the header, gets fuzzed)
//
// Properties checked: the daemon answers every datagram with exactly one valid message (or
// closes the connection) within a few seconds, never crashes, and every session closes when
// its connection does.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/log.h"
#include "hca/sim/sim_device.h"
#include "protocol/control_protocol.h"
#include "server/control_server.h"
#include "service/daemon.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "control_server_fuzz: %s\n", what);
    std::abort();
  }
}

struct Server {
  std::string dir;
  std::unique_ptr<regcache::service::Daemon> daemon;
  std::unique_ptr<regcache::server::ControlServer> control;
};

Server& TheServer() {
  static Server* s = [] {
    regcache::base::SetMinLogSeverity(regcache::base::LogSeverity::kError);
    regcache::hca::sim::RegisterBackend();
    auto* srv = new Server;
    char tmpl[] = "/tmp/regcache-fuzz-XXXXXX";
    Check(::mkdtemp(tmpl) != nullptr, "mkdtemp");
    srv->dir = tmpl;
    regcache::service::DaemonConfig config;
    config.cache.pool.low_watermark = 1;
    config.cache.pool.high_watermark = 2;
    auto d = regcache::service::Daemon::Create(config, nullptr);
    Check(d.ok(), "daemon");
    srv->daemon = std::move(*d);
    auto c = regcache::server::ControlServer::Start(srv->daemon.get(), srv->dir);
    Check(c.ok(), "control server");
    srv->control = std::move(*c);
    return srv;
  }();
  return *s;
}

int Connect(const std::string& dir) {
  int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  Check(fd >= 0, "socket");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::string path = dir + "/" + regcache::protocol::kControlSocketName;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  Check(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0, "connect");
  return fd;
}

int MakeFd(bool memfd) {
  if (!memfd) return ::open("/dev/null", O_RDWR | O_CLOEXEC);
  int fd = ::memfd_create("fuzz", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd >= 0 && ::ftruncate(fd, 8192) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Server& srv = TheServer();
  // The previous input's session must be gone before the next opens (bounded wait).
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (srv.control->connections() > 0 && absl::Now() < deadline)
    absl::SleepFor(absl::Microseconds(50));
  Check(srv.control->connections() == 0, "a closed connection's session never closed");

  int sock = Connect(srv.dir);
  regcache::protocol::OpenMsg open =
      regcache::protocol::MakeControlMessage<regcache::protocol::OpenMsg>(
          regcache::protocol::ControlType::kOpen);
  Check(regcache::protocol::SendControlMessage(sock, &open, sizeof(open), -1).ok(),
        "Open not sent");
  absl::StatusOr<regcache::protocol::ControlMessage> welcome =
      regcache::protocol::ReceiveControlMessage(sock, absl::Seconds(5));
  Check(welcome.ok() && welcome->type == regcache::protocol::ControlType::kWelcome, "no Welcome");
  regcache::protocol::CloseFds(&welcome->fds);

  size_t pos = 0;
  while (pos + 2 <= size) {
    uint8_t flags = data[pos];
    size_t len = data[pos + 1];
    pos += 2;
    len = std::min(len, size - pos);
    std::vector<uint8_t> dgram;
    if (flags & 4) {
      regcache::protocol::ControlHeader h;
      h.type = flags >> 4;
      h.length = static_cast<uint32_t>(sizeof(h) + len);
      dgram.resize(sizeof(h));
      std::memcpy(dgram.data(), &h, sizeof(h));
    }
    dgram.insert(dgram.end(), data + pos, data + pos + len);
    pos += len;
    if (dgram.empty()) continue;  // a zero-length datagram reads as EOF: not a message
    int fd = (flags & 1) ? MakeFd(flags & 2) : -1;
    absl::Status sent =
        regcache::protocol::SendControlMessage(sock, dgram.data(), dgram.size(), fd);
    if (fd >= 0) ::close(fd);
    if (!sent.ok()) break;  // the daemon dropped us
    absl::StatusOr<regcache::protocol::ControlMessage> reply =
        regcache::protocol::ReceiveControlMessage(sock, absl::Seconds(5));
    if (!reply.ok()) {
      Check(reply.status().code() == absl::StatusCode::kUnavailable,
            "the daemon neither answered nor closed the connection");
      break;
    }
    regcache::protocol::CloseFds(&reply->fds);
  }
  ::close(sock);
  return 0;
}
