// The daemon a two-process benchmark runs against: the built regcached started on the device
// named (or one already serving a socket folder), and the anchor's device, the same ibv device
// opened in the benchmark's own process. Shared by regmr_bench and revoke_bench.
//
// The daemon runs on the last CPU and the benchmark off it (with two CPUs or more), so that the
// two spinning ends of a ring round trip never take turns on one CPU (bench/cpu_pinning.h).
#ifndef REGCACHE_BENCH_REGCACHED_PROCESS_H_
#define REGCACHE_BENCH_REGCACHED_PROCESS_H_

#include <infiniband/verbs.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/cpu_pinning.h"
#include "regcache/client.h"

namespace regcache::bench {

namespace rc = ::regcache::api;

// The socket folder this run created, removed however the run ends (the daemon in it dies with
// this process: PR_SET_PDEATHSIG).
inline std::string& OwnedDir() {
  static std::string* dir = new std::string;
  return *dir;
}

[[noreturn]] inline void Die(const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", program_invocation_short_name, what.c_str());
  if (!OwnedDir().empty()) std::filesystem::remove_all(OwnedDir());
  std::exit(1);
}

struct DaemonOptions {
  std::string device = "sim";
  std::string regcached = REGCACHED_PATH;
  std::vector<std::string> regcached_flags;
  std::string socket_dir;  // empty: start a daemon
};

// Takes the daemon's flags out of argv (the rest goes to Google Benchmark); each also from the
// environment, as <env_prefix>_DEVICE, _REGCACHED and _FLAGS.
inline DaemonOptions ParseDaemonOptions(int* argc, char** argv, const std::string& env_prefix) {
  DaemonOptions o;
  const auto env = [&](const char* name) { return std::getenv((env_prefix + name).c_str()); };
  if (const char* e = env("_DEVICE")) o.device = e;
  if (const char* e = env("_REGCACHED")) o.regcached = e;
  std::string flags = env("_FLAGS") != nullptr ? env("_FLAGS") : "";
  int out = 1;
  for (int i = 1; i < *argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* name) -> const char* {
      return absl::StartsWith(a, name) ? argv[i] + std::strlen(name) : nullptr;
    };
    if (const char* v = value("--device=")) {
      o.device = v;
    } else if (const char* v = value("--regcached=")) {
      o.regcached = v;
    } else if (const char* v = value("--regcached_flags=")) {
      flags = v;
    } else if (const char* v = value("--socket_dir=")) {
      o.socket_dir = v;
    } else {
      argv[out++] = argv[i];
    }
  }
  *argc = out;
  for (absl::string_view f : absl::StrSplit(flags, ',', absl::SkipEmpty())) {
    o.regcached_flags.emplace_back(f);
  }
  return o;
}

// The regcached this run started (or none, with --socket_dir), stopped with SIGTERM.
class Daemon {
 public:
  explicit Daemon(const DaemonOptions& o) {
    if (!o.socket_dir.empty()) {
      dir_ = o.socket_dir;
      return;
    }
    std::string tmpl = std::string("/tmp/regcache-") + program_invocation_short_name + "-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) Die("mkdtemp");
    dir_ = tmpl;
    OwnedDir() = dir_;
    std::vector<std::string> args = {o.regcached, "--device=" + o.device, "--socket_dir=" + dir_,
                                     "--log_level=warning", "--max_keys_per_session=0"};
    args.insert(args.end(), o.regcached_flags.begin(), o.regcached_flags.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // dies with the benchmark, however it ends
      PinToLastCpu();                      // the daemon's side of a ring round trip on the last CPU
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      std::fprintf(stderr, "%s: exec %s: %s\n", program_invocation_short_name, argv[0],
                   std::strerror(errno));
      ::_exit(127);
    }
    KeepOffLastCpu();
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (!(std::filesystem::exists(dir_ + "/control.sock") &&
             std::filesystem::exists(dir_ + "/grpc.sock"))) {
      int status;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        Die(WIFEXITED(status)
                ? "regcached exited before serving, status " + std::to_string(WEXITSTATUS(status))
                : "regcached died before serving");
      }
      if (absl::Now() > deadline) Die("regcached did not start serving within 30 s");
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
  ~Daemon() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
    if (!OwnedDir().empty()) std::filesystem::remove_all(OwnedDir());
  }

  std::unique_ptr<rc::Client> Connect(bool client_cache) const {
    rc::ClientOptions o;
    o.client_cache = client_cache;
    return Connect(o);
  }
  std::unique_ptr<rc::Client> Connect(const rc::ClientOptions& o) const {
    for (int attempt = 0;; ++attempt) {
      absl::StatusOr<std::unique_ptr<rc::Client>> c = rc::Client::Connect(dir_, o);
      if (c.ok()) return std::move(*c);
      if (attempt == 100) Die("connect: " + c.status().ToString());
      absl::SleepFor(absl::Milliseconds(50));
    }
  }

  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  pid_t pid_ = -1;
};

// The anchor's device: the ibv device the spec names, opened in this process. Null on the sim.
class IbvAnchor {
 public:
  // "verbs[:name]" / "mlx5[:name]" (parameters after the name, if any, are the daemon's).
  static std::unique_ptr<IbvAnchor> Open(const std::string& spec) {
    std::vector<std::string> parts = absl::StrSplit(spec, absl::MaxSplits(':', 1));
    if (parts[0] != "verbs" && parts[0] != "mlx5") return nullptr;
    std::string name = parts.size() > 1 ? parts[1] : "";
    name = name.substr(0, name.find_first_of(":,"));
    int n = 0;
    ibv_device** list = ::ibv_get_device_list(&n);
    if (list == nullptr || n == 0) Die("no ibv device (" + spec + ")");
    ibv_device* dev = nullptr;
    std::string names;
    for (int i = 0; i < n; ++i) {
      const char* d = ::ibv_get_device_name(list[i]);
      names += std::string(names.empty() ? "" : ", ") + d;
      if (dev == nullptr && (name.empty() || name == d)) dev = list[i];
    }
    if (dev == nullptr) Die("no ibv device named '" + name + "' (there are: " + names + ")");
    auto a = std::make_unique<IbvAnchor>();
    a->name_ = ::ibv_get_device_name(dev);
    a->context_ = ::ibv_open_device(dev);
    ::ibv_free_device_list(list);
    if (a->context_ == nullptr) Die("ibv_open_device " + a->name_ + ": " + std::strerror(errno));
    a->pd_ = ::ibv_alloc_pd(a->context_);
    if (a->pd_ == nullptr) Die("ibv_alloc_pd " + a->name_ + ": " + std::strerror(errno));
    return a;
  }
  ~IbvAnchor() {
    if (pd_ != nullptr) ::ibv_dealloc_pd(pd_);
    if (context_ != nullptr) ::ibv_close_device(context_);
  }
  ibv_pd* pd() const { return pd_; }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  ibv_context* context_ = nullptr;
  ibv_pd* pd_ = nullptr;
};

}  // namespace regcache::bench
#endif  // REGCACHE_BENCH_REGCACHED_PROCESS_H_
