// A regcached on the sim device in its own temp socket dir (a separate process, started with
// fork/exec of the built binary, REGCACHED_PATH), stopped with SIGTERM; every wait is bounded.
#ifndef REGCACHE_TESTS_E2E_REGCACHED_PROCESS_H_
#define REGCACHE_TESTS_E2E_REGCACHED_PROCESS_H_

#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace regcache::testing {

// The device the tests' daemons run on: REGCACHE_TEST_DEVICE (the VM tier sets "verbs" to run
// the same suites on Soft-RoCE), else the sim.
inline std::string TestDevice() {
  const char* d = std::getenv("REGCACHE_TEST_DEVICE");
  return d != nullptr && *d != '\0' ? d : "sim";
}

// Whether this is a ThreadSanitizer build: under it, on an emulated ConnectX in a TCG guest, a
// UMR takes seconds to complete and a first key over new memory longer than a client's default
// 10 s deadline.
inline constexpr bool kThreadSanitizer =
#if defined(__SANITIZE_THREAD__)
    true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
    true;
#else
    false;
#endif
#else
    false;
#endif

// Flags every test daemon gets: under TSan a UMR may wait longer than the daemon's 2 s default
// (the bound only says how soon a broken queue is noticed).
inline std::vector<std::string> BaseFlags() {
  if (kThreadSanitizer) return {"--umr_timeout_ms=60000"};
  return {};
}

// The deadline of a test client's calls: the library's 10 s default, 60 s under TSan.
inline absl::Duration TestCallTimeout() {
  return kThreadSanitizer ? absl::Seconds(60) : absl::Seconds(10);
}

// The flag that makes the test's own uid admin: no session is admin unless regcached is told
// whose (root included).
inline std::string AdminSelfFlag() { return "--admin_uids=" + std::to_string(getuid()); }

// A regcached on the test device in its own temp socket dir, stopped with SIGTERM.
class Regcached {
 public:
  explicit Regcached(std::vector<std::string> extra_flags = {}) {
    char tmpl[] = "/tmp/regcache-e2e-XXXXXX";
    dir_ = mkdtemp(tmpl);
    std::vector<std::string> args = {REGCACHED_PATH, "--device=" + TestDevice(),
                                     "--socket_dir=" + dir_, "--log_level=warning"};
    for (std::string& f : BaseFlags()) args.push_back(std::move(f));
    args.insert(args.end(), extra_flags.begin(), extra_flags.end());
    // Ready is the daemon's own word: READY=1 on $NOTIFY_SOCKET (server/internal/sd_notify.h),
    // sent once both sockets listen. Their files exist a moment earlier (bound, not yet
    // listening), and a gRPC channel whose first attempt is refused backs off.
    const int ready = ReadySocket(dir_ + "/notify.sock");
    // The child's argv and environment, made before the fork: the child only execs.
    std::vector<std::string> env = {"NOTIFY_SOCKET=" + dir_ + "/notify.sock"};
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::strncmp(*e, "NOTIFY_SOCKET=", 14) != 0) env.emplace_back(*e);
    }
    std::vector<char*> argv, envp;
    for (std::string& a : args) argv.push_back(a.data());
    for (std::string& e : env) envp.push_back(e.data());
    argv.push_back(nullptr);
    envp.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // dies with the test, even when the test aborts
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    // Generous: a sanitizer build on an emulated ConnectX in a TCG guest takes over 10 s to
    // start. A daemon that exits stops the wait at once (the test's Connect then says why).
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (absl::Now() < deadline && !Ready(ready)) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
    }
    close(ready);
  }
  ~Regcached() {
    if (pid_ > 0) {  // -1: it exited at start (and kill(-1) would signal every process)
      kill(pid_, SIGTERM);
      const absl::Time deadline = absl::Now() + absl::Seconds(10);
      while (absl::Now() < deadline && waitpid(pid_, nullptr, WNOHANG) == 0) {
        absl::SleepFor(absl::Milliseconds(5));
      }
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, WNOHANG);
    }
    std::filesystem::remove_all(dir_);
  }
  const std::string& dir() const { return dir_; }
  pid_t pid() const { return pid_; }

 private:
  // A datagram socket bound at `path` (-1 when that fails: Ready then waits out the deadline).
  static int ReadySocket(const std::string& path) {
    const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      close(fd);
      return -1;
    }
    return fd;
  }
  // Whether READY=1 arrived on `fd` within 10 ms.
  static bool Ready(int fd) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 10) != 1) return false;
    char buf[512];
    const ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
    if (n <= 0) return false;
    buf[n] = '\0';
    return std::strstr(buf, "READY=1") != nullptr;
  }

  std::string dir_;
  pid_t pid_ = -1;
};

}  // namespace regcache::testing
#endif  // REGCACHE_TESTS_E2E_REGCACHED_PROCESS_H_
