// A regcached on the sim device in its own temp socket dir (a separate process, started with
// fork/exec of the built binary, REGCACHED_PATH), stopped with SIGTERM; every wait is bounded.
#ifndef REGCACHE_TESTS_E2E_REGCACHED_PROCESS_H_
#define REGCACHE_TESTS_E2E_REGCACHED_PROCESS_H_

#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
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
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // dies with the test, even when the test aborts
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    // Generous: a sanitizer build on an emulated ConnectX in a TCG guest takes over 10 s to
    // start. A daemon that exits stops the wait at once (the test's Connect then says why).
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (absl::Now() < deadline && !(std::filesystem::exists(dir_ + "/control.sock") &&
                                       std::filesystem::exists(dir_ + "/grpc.sock"))) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
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
  std::string dir_;
  pid_t pid_ = -1;
};

}  // namespace regcache::testing
#endif  // REGCACHE_TESTS_E2E_REGCACHED_PROCESS_H_
