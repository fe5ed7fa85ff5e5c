// Multi-process end-to-end tests of regcached: the daemon and every client are separate
// processes (fork/exec of the built binaries); sockets live in a temp dir, TCP only on
// 127.0.0.1. Every wait is bounded.
//
//   PeerWriteLandsInTheClientsOwnMapping   register -> peer write (another process) -> bytes in
//                                          the client's mapping; invalidate -> refused
//   ClientFdMemory                         a memfd the client passes over the control socket
//   BadInputTable                          each bad request's specific code; daemon keeps serving
//   CredentialNotOnTheAllowList            uid 65533 refused (root only: needs setuid)
//   NonAdminCannotReachOtherSessions       allowed non-admin uid: Sessions / other's peer denied
//   KillNineMidTraffic                     kill -9 -> session gone, counters balanced, < 1 s
//   RegcachectlCommands                    status, sessions, keys --all, stats, peer write
//   MetricsEndpoint                        GET /metrics on 127.0.0.1
//   LoopbackTcp                            gRPC over 127.0.0.1:<port> (--grpc_tcp_port)
//   RegcachectlDrainStopsTheDaemon         regcachectl drain -> the daemon drains, exits 0
//   SigtermDrains                          SIGTERM with live keys and traffic -> exit 0
//   DrainLingersForConnectedClients        after the drain: DRAINING while a client stays
//                                          connected; exit when it leaves, or at a 2nd SIGTERM
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace {

constexpr absl::Duration kReplyTimeout = absl::Seconds(10);
constexpr uint32_t kRw = 1 | 2 | 4 | 8;  // lr|lw|rr|rw

// A child process with its stdin/stdout on pipes (stderr inherited, for the test log).
class Process {
 public:
  Process(std::vector<std::string> argv, int uid = -1) {
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) std::abort();
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // dies with the test, even when the test aborts
      dup2(in[0], 0);
      dup2(out[1], 1);
      std::vector<char*> args;
      for (auto& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      (void)uid;
      execv(args[0], args.data());
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    stdin_ = in[1];
    stdout_ = out[0];
  }
  ~Process() {
    if (stdin_ >= 0) close(stdin_);
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    close(stdout_);
  }
  pid_t pid() const { return pid_; }

  // One line of output, or "" after the timeout or at EOF.
  std::string ReadLine(absl::Duration timeout = kReplyTimeout) {
    absl::Time deadline = absl::Now() + timeout;
    while (true) {
      size_t nl = buf_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      int ms = static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
      if (ms <= 0) return "";
      pollfd p{stdout_, POLLIN, 0};
      if (poll(&p, 1, ms) <= 0) continue;
      char tmp[4096];
      ssize_t n = read(stdout_, tmp, sizeof(tmp));
      if (n <= 0) return "";
      buf_.append(tmp, static_cast<size_t>(n));
    }
  }
  // Sends one command and returns its one-line reply.
  std::string Do(const std::string& command) {
    std::string line = command + "\n";
    if (write(stdin_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) return "";
    return ReadLine();
  }
  void CloseStdin() {
    close(stdin_);
    stdin_ = -1;
  }
  // The exit status (or -signal), or -1000 after the timeout.
  int Wait(absl::Duration timeout) {
    absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      int status;
      pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    return -1000;
  }
  bool Alive() { return !exited_ && waitpid(pid_, nullptr, WNOHANG) == 0; }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1;
  int stdout_ = -1;
  bool exited_ = false;
  std::string buf_;
};

// "ok handle=0x1 rkey=0x2" -> {"handle": "0x1", ...}; "_" holds the first word.
std::map<std::string, std::string> Fields(const std::string& line) {
  std::map<std::string, std::string> out;
  bool first = true;
  for (absl::string_view w : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
    if (first) {
      out["_"] = std::string(w);
      first = false;
      continue;
    }
    size_t eq = w.find('=');
    if (eq != absl::string_view::npos)
      out[std::string(w.substr(0, eq))] = std::string(w.substr(eq + 1));
  }
  return out;
}

std::string Code(const std::string& reply) {
  std::vector<std::string> w = absl::StrSplit(reply, ' ');
  return w.size() >= 2 && w[0] == "err" ? w[1] : (w.empty() ? "" : w[0]);
}

uint64_t Hex(const std::string& s) {
  uint64_t v = 0;
  EXPECT_TRUE(absl::SimpleHexAtoi(s.rfind("0x", 0) == 0 ? s.substr(2) : s, &v)) << s;
  return v;
}

int FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// A regcached in its own temp socket dir.
class Daemon {
 public:
  explicit Daemon(std::vector<std::string> extra = {}) {
    char tmpl[] = "/tmp/regcache-e2e-XXXXXX";
    dir_ = mkdtemp(tmpl);
    chmod(dir_.c_str(), 0755);  // other uids must reach the sockets (the allow-list decides)
    std::vector<std::string> argv = {REGCACHED_PATH, "--device=sim", "--socket_dir=" + dir_,
                                     "--log_level=warning"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    proc_ = std::make_unique<Process>(argv);
    absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline && !(std::filesystem::exists(dir_ + "/control.sock") &&
                                       std::filesystem::exists(dir_ + "/grpc.sock"))) {
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
  ~Daemon() {
    if (proc_->Alive()) {
      kill(proc_->pid(), SIGTERM);
      proc_->Wait(absl::Seconds(10));
    }
    proc_.reset();
    std::filesystem::remove_all(dir_);
  }
  const std::string& dir() const { return dir_; }
  Process& process() { return *proc_; }
  bool ready() const { return std::filesystem::exists(dir_ + "/grpc.sock"); }

  std::unique_ptr<Process> Client(int uid = -1, int tcp_port = 0) {
    std::vector<std::string> argv = {E2E_CLIENT_PATH, "--socket_dir=" + dir_};
    if (uid >= 0) argv.push_back(absl::StrCat("--uid=", uid));
    if (tcp_port != 0) argv.push_back(absl::StrCat("--tcp_port=", tcp_port));
    return std::make_unique<Process>(argv);
  }
  // Runs regcachectl to completion: {exit code, stdout}.
  std::pair<int, std::string> Ctl(std::vector<std::string> args) {
    std::vector<std::string> argv = {REGCACHECTL_PATH, "--socket_dir=" + dir_};
    argv.insert(argv.end(), args.begin(), args.end());
    Process p(argv);
    std::string out;
    for (std::string line; !(line = p.ReadLine(absl::Seconds(10))).empty();) out += line + "\n";
    return {p.Wait(absl::Seconds(10)), out};
  }

 private:
  std::string dir_;
  std::unique_ptr<Process> proc_;
};

// A connected client with one 4 MiB daemon-allocated arena.
struct Session {
  std::unique_ptr<Process> proc;
  uint64_t id = 0;
  uint64_t ptr = 0;
};

Session Open(Daemon& d) {
  Session s;
  s.proc = d.Client();
  auto hello = Fields(s.proc->ReadLine());
  EXPECT_EQ(hello["_"], "ok");
  EXPECT_TRUE(absl::SimpleAtoi(hello["session"], &s.id)) << hello["session"];
  auto mem = Fields(s.proc->Do("alloc 4194304"));
  EXPECT_EQ(mem["_"], "ok");
  s.ptr = Hex(mem["ptr"]);
  return s;
}

std::string Addr(uint64_t a) { return absl::StrCat("0x", absl::Hex(a)); }

// The flag that makes the test's own uid admin (root is admin only when listed).
std::string AdminSelf() { return absl::StrCat("--admin_uids=", getuid()); }

TEST(E2E, PeerWriteLandsInTheClientsOwnMapping) {
  Daemon d({AdminSelf()});
  ASSERT_TRUE(d.ready());
  Session a = Open(d);
  uint64_t buf = a.ptr + 3 * 4096;
  auto key = Fields(a.proc->Do(absl::StrCat("reg ", Addr(buf), " 65536 ", kRw)));
  ASSERT_EQ(key["_"], "ok");

  // Another process (a separate admin session acting as the remote peer of `a`) writes.
  std::unique_ptr<Process> peer = d.Client();
  ASSERT_EQ(Fields(peer->ReadLine())["_"], "ok");
  std::string target = Addr(buf + 100);
  EXPECT_EQ(peer->Do(absl::StrCat("pwrite ", key["rkey"], " ", target, " hello-peer ", a.id)),
            "ok");
  EXPECT_EQ(a.proc->Do(absl::StrCat("check ", target, " hello-peer")), "ok");

  // Invalidate: the same write is refused and the memory is untouched.
  EXPECT_EQ(a.proc->Do("inval " + key["handle"]), "ok");
  std::string refused =
      peer->Do(absl::StrCat("pwrite ", key["rkey"], " ", target, " SECOND-ONE ", a.id));
  EXPECT_EQ(Code(refused), "PERMISSION_DENIED") << refused;  // REMOTE_ACCESS syndrome
  EXPECT_EQ(a.proc->Do(absl::StrCat("check ", target, " hello-peer")), "ok");
  EXPECT_EQ(Fields(a.proc->Do("query " + key["handle"]))["revoked"], "1")
      << "a revoked handle stays queryable until released";
}

TEST(E2E, ClientFdMemory) {
  Daemon d;
  ASSERT_TRUE(d.ready());
  std::unique_ptr<Process> c = d.Client();
  ASSERT_EQ(Fields(c->ReadLine())["_"], "ok");
  auto mem = Fields(c->Do("allocfd 1048576"));
  ASSERT_EQ(mem["_"], "ok");
  uint64_t p = Hex(mem["ptr"]);
  auto key = Fields(c->Do(absl::StrCat("reg ", Addr(p), " 8192 ", kRw)));
  ASSERT_EQ(key["_"], "ok");
  EXPECT_EQ(c->Do(absl::StrCat("pwrite ", key["rkey"], " ", Addr(p + 8), " via-own-memfd")), "ok");
  EXPECT_EQ(c->Do(absl::StrCat("check ", Addr(p + 8), " via-own-memfd")), "ok");
}

TEST(E2E, OnDemandMemoryFaultsAndPrefetchesAcrossProcesses) {
  Daemon d;
  ASSERT_TRUE(d.ready());
  std::unique_ptr<Process> c = d.Client();
  ASSERT_EQ(Fields(c->ReadLine())["_"], "ok");
  auto mem = Fields(c->Do("allocodp 1048576"));
  ASSERT_EQ(mem["_"], "ok");
  const uint64_t p = Hex(mem["ptr"]);
  auto stat = [&](const char* name) {
    return Fields(c->Do(absl::StrCat("stat odp ", name)))["value"];
  };
  // Cold: the peer's write faults and the daemon's servicer brings the page in.
  auto cold = Fields(c->Do(absl::StrCat("reg ", Addr(p), " 65536 ", kRw)));
  ASSERT_EQ(cold["_"], "ok");
  EXPECT_EQ(c->Do(absl::StrCat("pwrite ", cold["rkey"], " ", Addr(p + 64), " faulted-in")), "ok");
  EXPECT_EQ(c->Do(absl::StrCat("check ", Addr(p + 64), " faulted-in")), "ok");
  const std::string faults = stat("faults");
  EXPECT_NE(faults, "0");
  // Warm: registered with a synchronous prefetch, the write needs no fault.
  auto warm = Fields(c->Do(absl::StrCat("regp ", Addr(p + 65536), " 65536 ", kRw, " 1")));
  ASSERT_EQ(warm["_"], "ok");
  EXPECT_EQ(c->Do(absl::StrCat("pwrite ", warm["rkey"], " ", Addr(p + 65536), " prefetched")),
            "ok");
  EXPECT_EQ(stat("faults"), faults);
  EXPECT_EQ(c->Do(absl::StrCat("prefetch ", Addr(p + 131072), " 4096 1 1")), "ok");
  EXPECT_EQ(Fields(c->Do(absl::StrCat("prefetch ", Addr(p + 4 * 1048576), " 4096 1 1")))["_"],
            "err")
      << "outside the attached memory";
}

TEST(E2E, BadInputTable) {
  Daemon d;
  ASSERT_TRUE(d.ready());
  Session a = Open(d);
  Session b = Open(d);
  const uint64_t p = a.ptr;
  auto parent = Fields(a.proc->Do(absl::StrCat("reg ", Addr(p), " 8192 ", kRw)));
  ASSERT_EQ(parent["_"], "ok");
  auto victim = Fields(a.proc->Do(absl::StrCat("reg ", Addr(p + 65536), " 4096 ", kRw)));
  ASSERT_EQ(victim["_"], "ok");

  struct Case {
    const char* what;
    Process* who;
    std::string command;
    std::vector<std::string> codes;  // any of these
  };
  std::vector<Case> cases = {
      {"zero length",
       a.proc.get(),
       absl::StrCat("reg ", Addr(p), " 0 ", kRw),
       {"INVALID_ARGUMENT"}},
      {"overflowing length",
       a.proc.get(),
       absl::StrCat("reg ", Addr(p), " 0xfffffffffffff000 ", kRw),
       {"INVALID_ARGUMENT"}},
      {"range outside the attached memory",
       a.proc.get(),
       absl::StrCat("reg ", Addr(p + (4 << 20)), " 4096 ", kRw),
       {"OUT_OF_RANGE"}},
      {"unknown access bits",
       a.proc.get(),
       absl::StrCat("reg ", Addr(p), " 4096 0x40"),
       {"INVALID_ARGUMENT"}},
      {"remote write without local write",
       a.proc.get(),
       absl::StrCat("reg ", Addr(p), " 4096 9"),
       {"INVALID_ARGUMENT"}},
      {"window beyond its parent",
       a.proc.get(),
       absl::StrCat("window ", parent["handle"], " 4096 8192 ", kRw),
       {"INVALID_ARGUMENT"}},
      // A made-up handle and another session's answer alike: NOT_FOUND, HANDLE_NOT_OWNED.
      {"unknown handle", a.proc.get(), "query 0x12345", {"NOT_FOUND"}},
      {"another tenant's handle: invalidate",
       b.proc.get(),
       "inval " + victim["handle"],
       {"NOT_FOUND"}},
      {"another tenant's handle: query", b.proc.get(), "query " + victim["handle"], {"NOT_FOUND"}},
      {"another tenant's handle: window",
       b.proc.get(),
       absl::StrCat("window ", victim["handle"], " 0 4096 ", kRw),
       {"NOT_FOUND"}},
      {"another tenant's rkey through its own peer",
       b.proc.get(),
       absl::StrCat("pwrite ", victim["rkey"], " ", Addr(p + 65536), " x"),
       {"PERMISSION_DENIED"}},
      {"oversized request (> 64 KiB)",
       a.proc.get(),
       absl::StrCat("pwrite_big ", parent["rkey"], " ", Addr(p), " 100000"),
       {"RESOURCE_EXHAUSTED"}},
      {"malformed request bytes",
       a.proc.get(),
       "raw /regcache.v1.RegCacheService/Register ffffffffff",
       {"INTERNAL", "INVALID_ARGUMENT"}},
      {"unknown method",
       a.proc.get(),
       "raw /regcache.v1.RegCacheService/Nope 00",
       {"UNIMPLEMENTED"}},
      {"garbage on the control socket", a.proc.get(), "ctlgarbage", {"ok"}},
  };
  for (const Case& c : cases) {
    std::string reply = c.who->Do(c.command);
    std::string code = Code(reply);
    bool match = false;
    for (const std::string& want : c.codes) match |= code == want;
    EXPECT_TRUE(match) << c.what << ": " << c.command << " -> " << reply;
    ASSERT_TRUE(d.process().Alive()) << c.what << " killed the daemon";
  }
  EXPECT_EQ(a.proc->Do("ctlgarbage"), "ok reply=INVALID_ARGUMENT");

  // Double invalidate.
  EXPECT_EQ(a.proc->Do("inval " + victim["handle"]), "ok");
  EXPECT_EQ(Code(a.proc->Do("inval " + victim["handle"])), "FAILED_PRECONDITION");

  // Session tokens: missing, garbage, well-formed but unknown. The token guards the gRPC calls
  // (AllocateMemory here); the key calls travel over the session's rings, whose files are the
  // session's own capability and need no token.
  for (const char* t : {"none", "garbage", "wrong"}) {
    ASSERT_EQ(b.proc->Do(absl::StrCat("token ", t)), "ok");
    EXPECT_EQ(Code(b.proc->Do("alloc 65536")), "UNAUTHENTICATED") << t;
    EXPECT_EQ(b.proc->Do("ping"), "ok") << "Ping needs no session";
  }

  // Still serving everyone: a's session works after all of the above.
  EXPECT_EQ(Fields(a.proc->Do(absl::StrCat("reg ", Addr(p + 8192), " 4096 ", kRw)))["_"], "ok");
  Session c = Open(d);
  EXPECT_NE(c.id, 0u);
}

TEST(E2E, CredentialNotOnTheAllowList) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a client under another uid (setuid)";
  Daemon d;  // default allow-list: root and the daemon's uid
  ASSERT_TRUE(d.ready());
  std::unique_ptr<Process> c = d.Client(65533);
  std::string hello = c->ReadLine();
  EXPECT_EQ(Code(hello), "PERMISSION_DENIED") << hello;
  EXPECT_EQ(c->Wait(absl::Seconds(10)), 1);
  Session ok = Open(d);
  EXPECT_NE(ok.id, 0u) << "the daemon keeps serving";
}

TEST(E2E, NonAdminCannotReachOtherSessions) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a client under another uid (setuid)";
  Daemon d({"--allow_uids=0,65534", "--admin_uids=0"});
  ASSERT_TRUE(d.ready());
  Session a = Open(d);
  auto key = Fields(a.proc->Do(absl::StrCat("reg ", Addr(a.ptr), " 4096 ", kRw)));
  ASSERT_EQ(key["_"], "ok");
  std::unique_ptr<Process> user = d.Client(65534);
  auto hello = Fields(user->ReadLine());
  ASSERT_EQ(hello["_"], "ok");
  EXPECT_EQ(hello["admin"], "0");
  EXPECT_EQ(Code(user->Do("sessions")), "PERMISSION_DENIED");
  EXPECT_EQ(Code(user->Do(absl::StrCat("pwrite ", key["rkey"], " ", Addr(a.ptr), " x ", a.id))),
            "PERMISSION_DENIED");
  EXPECT_EQ(Fields(user->Do("alloc 1048576"))["_"], "ok") << "a non-admin user works normally";
}

// Admin comes from --admin_uids / --admin_gids only: root (or whoever runs the test) is not
// admin by default, is with its uid listed, and is with its gid listed.
TEST(E2E, AdminOnlyFromTheAllowList) {
  for (const std::string& flag :
       {std::string(), AdminSelf(), absl::StrCat("--admin_gids=", getgid())}) {
    Daemon d(flag.empty() ? std::vector<std::string>{} : std::vector<std::string>{flag});
    ASSERT_TRUE(d.ready());
    std::unique_ptr<Process> c = d.Client();
    auto hello = Fields(c->ReadLine());
    ASSERT_EQ(hello["_"], "ok");
    EXPECT_EQ(hello["admin"], flag.empty() ? "0" : "1") << flag;
    EXPECT_EQ(Code(c->Do("sessions")), flag.empty() ? "PERMISSION_DENIED" : "ok") << flag;
    auto [rc, out] = d.Ctl({"drain"});
    EXPECT_EQ(rc, flag.empty() ? 1 : 0) << flag << ": " << out;
  }
}

TEST(E2E, KillNineMidTraffic) {
  Daemon d({AdminSelf()});
  ASSERT_TRUE(d.ready());
  std::unique_ptr<Process> observer = d.Client();
  ASSERT_EQ(Fields(observer->ReadLine())["_"], "ok");
  auto stat = [&](const char* component, const char* name) {
    auto f = Fields(observer->Do(absl::StrCat("stat ", component, " ", name)));
    int64_t v = -1;
    EXPECT_TRUE(absl::SimpleAtoi(f["value"], &v)) << f["value"];
    return v;
  };
  const int64_t live0 = stat("cache", "live_registrations");
  const int64_t in_use0 = stat("cache", "keys_in_use");
  const int64_t bytes0 = stat("cache", "backed_bytes");
  const int64_t tenants0 = stat("cache", "tenants");

  Session victim = Open(d);
  std::vector<std::map<std::string, std::string>> keys;
  for (int i = 0; i < 8; ++i) {
    keys.push_back(Fields(
        victim.proc->Do(absl::StrCat("reg ", Addr(victim.ptr + i * 65536), " 65536 ", kRw))));
    ASSERT_EQ(keys.back()["_"], "ok");
  }
  ASSERT_EQ(victim.proc->Do(absl::StrCat("traffic ", Addr(victim.ptr + (2 << 20)))), "ok");
  absl::SleepFor(absl::Milliseconds(200));  // traffic in flight
  EXPECT_GT(stat("cache", "live_registrations"), live0);
  EXPECT_EQ(observer->Do(absl::StrCat("pwrite ", keys[0]["rkey"], " ", Addr(victim.ptr), " before ",
                                      victim.id)),
            "ok");

  kill(victim.proc->pid(), SIGKILL);
  absl::Time killed = absl::Now();
  bool gone = false, balanced = false;
  while (absl::Now() - killed < absl::Seconds(5) && !(gone && balanced)) {
    std::string ids = Fields(observer->Do("sessions"))["ids"];
    gone = true;
    for (absl::string_view id : absl::StrSplit(ids, ',')) gone &= id != absl::StrCat(victim.id);
    balanced = stat("cache", "live_registrations") == live0 &&
               stat("cache", "keys_in_use") == in_use0 && stat("cache", "backed_bytes") == bytes0 &&
               stat("cache", "tenants") == tenants0;
    if (!(gone && balanced)) absl::SleepFor(absl::Milliseconds(10));
  }
  absl::Duration took = absl::Now() - killed;
  EXPECT_TRUE(gone) << "the dead client's session is still listed";
  EXPECT_TRUE(balanced) << "live=" << stat("cache", "live_registrations") << "/" << live0
                        << " in_use=" << stat("cache", "keys_in_use") << "/" << in_use0
                        << " bytes=" << stat("cache", "backed_bytes") << "/" << bytes0;
  EXPECT_LT(took, absl::Seconds(1)) << "cleanup took " << took;
  for (auto& k : keys) {
    std::string r = observer->Do(
        absl::StrCat("pwrite ", k["rkey"], " ", Addr(victim.ptr), " after ", victim.id));
    EXPECT_NE(Code(r), "ok") << "old rkey " << k["rkey"] << " still writable: " << r;
  }
  EXPECT_TRUE(d.process().Alive());
  Session next = Open(d);
  EXPECT_NE(next.id, 0u) << "the daemon keeps serving";
}

TEST(E2E, RegcachectlCommands) {
  Daemon d({AdminSelf()});
  ASSERT_TRUE(d.ready());
  Session a = Open(d);
  auto key = Fields(a.proc->Do(absl::StrCat("reg ", Addr(a.ptr), " 4096 ", kRw)));
  ASSERT_EQ(key["_"], "ok");
  auto [rc, out] = d.Ctl({"status"});
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("backend=sim"), std::string::npos) << out;
  std::tie(rc, out) = d.Ctl({"sessions"});
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find(absl::StrCat("session=", a.id, " ")), std::string::npos) << out;
  std::tie(rc, out) = d.Ctl({"keys", "--all"});
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("handle=" + key["handle"]), std::string::npos) << out;
  std::tie(rc, out) = d.Ctl({"stats"});
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("cache{device=\"sim0\"}.live_registrations"), std::string::npos) << out;
  std::tie(rc, out) = d.Ctl({"peer", "write", "--rkey=" + key["rkey"], "--addr=" + Addr(a.ptr),
                             "--data=from-regcachectl", absl::StrCat("--session=", a.id)});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(a.proc->Do(absl::StrCat("check ", Addr(a.ptr), " from-regcachectl")), "ok");
  std::tie(rc, out) = d.Ctl({"bogus"});
  EXPECT_EQ(rc, 2);
}

// GET /metrics on 127.0.0.1:`port`, retried while the endpoint comes up: the whole answer.
std::string Scrape(int port) {
  std::string answer;
  for (int attempt = 0; attempt < 50 && answer.find("200 OK") == std::string::npos; ++attempt) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(port));
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval tv{2, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    answer.clear();
    if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0) {
      std::string req = "GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
      (void)!write(fd, req.data(), req.size());
      char buf[65536];
      for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) answer.append(buf, n);
    }
    close(fd);
    if (answer.find("200 OK") == std::string::npos) absl::SleepFor(absl::Milliseconds(20));
  }
  return answer;
}

// `promtool check metrics` over `body`: {exit code, what it printed}.
std::pair<int, std::string> Promtool(const std::string& body) {
  char path[] = "/tmp/regcache-metrics-XXXXXX";
  const int fd = mkstemp(path);
  (void)!write(fd, body.data(), body.size());
  close(fd);
  std::string out;
  FILE* p = popen(absl::StrCat("promtool check metrics < ", path, " 2>&1").c_str(), "r");
  char buf[4096];
  for (size_t n; p != nullptr && (n = fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
  const int status = p != nullptr ? pclose(p) : -1;
  unlink(path);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// Two tenants (root, and uid 65534 where the test may setuid) register; the scrape has a series
// of each, and promtool finds nothing to say about it.
TEST(E2E, MetricsOfTwoTenantsPassPromtool) {
  if (std::system("command -v promtool > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "promtool is not installed (Debian package prometheus; deploy/install-deps.sh)";
  }
  const bool other_uid = geteuid() == 0;
  int port = FreeLoopbackPort();
  Daemon d({absl::StrCat("--metrics_address=127.0.0.1:", port),
            absl::StrCat("--allow_uids=0,65534,", getuid())});
  ASSERT_TRUE(d.ready());
  Session a = Open(d);
  ASSERT_EQ(Fields(a.proc->Do(absl::StrCat("reg ", Addr(a.ptr), " 4096 ", kRw)))["_"], "ok");
  std::unique_ptr<Process> b = d.Client(other_uid ? 65534 : -1);
  ASSERT_EQ(Fields(b->ReadLine())["_"], "ok");
  auto mem = Fields(b->Do("alloc 1048576"));
  ASSERT_EQ(mem["_"], "ok");
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(
        Fields(b->Do(absl::StrCat("reg ", Addr(Hex(mem["ptr"]) + i * 4096), " 4096 ", kRw)))["_"],
        "ok");
  }
  const std::string answer = Scrape(port);
  ASSERT_NE(answer.find("200 OK"), std::string::npos) << answer.substr(0, 200);
  const std::string body = answer.substr(answer.find("\r\n\r\n") + 4);
  // Every series of a device carries its name, with one device as with several.
  EXPECT_NE(body.find("\nregcache_cache_live_registrations{device=\"sim0\"} "), std::string::npos)
      << body;
  EXPECT_EQ(body.find("\nregcache_cache_live_registrations "), std::string::npos) << body;
  EXPECT_NE(body.find("\nregcache_device_info{device=\"sim0\",backend=\"sim\",index=\"0\","
                      "node_guid=\"0x"),
            std::string::npos)
      << body;
  EXPECT_NE(body.find("\nregcache_daemon_sessions_opened_total 2\n"), std::string::npos) << body;
  EXPECT_NE(body.find("\nregcache_build_info{version=\""), std::string::npos);
  EXPECT_NE(body.find("\nregcache_device_key_range_enforced{device=\""), std::string::npos) << body;
  const size_t up = body.find("\nregcache_device_up{device=\"");
  ASSERT_NE(up, std::string::npos) << body;
  EXPECT_EQ(body.substr(body.find('\n', up + 1) - 2, 2), " 1") << "the device works: " << body;
  EXPECT_NE(body.find("\nprocess_resident_memory_bytes "), std::string::npos);
  if (other_uid) {
    EXPECT_NE(body.find("\nregcache_tenant_mapped_bytes{tenant=\"0\"} 4194304\n"),
              std::string::npos)
        << body;
    EXPECT_NE(body.find("\nregcache_tenant_mapped_bytes{tenant=\"65534\"} 1048576\n"),
              std::string::npos);
    EXPECT_NE(body.find("\nregcache_tenant_sessions{tenant=\"65534\"} 1\n"), std::string::npos);
  }
  auto [rc, out] = Promtool(body);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "") << "promtool has something to say about:\n" << body;
}

// --held_reclaim_after_ms stays under the 1 s a session under its share waits at most.
TEST(E2E, HeldReclaimAfterIsChecked) {
  for (const char* flag : {"--held_reclaim_after_ms=0", "--held_reclaim_after_ms=901"}) {
    Process p({REGCACHED_PATH, "--device=sim", "--socket_dir=/nonexistent", flag});
    EXPECT_EQ(p.Wait(absl::Seconds(10)), 2) << flag;
  }
}

// Only --metrics_address or --metrics_port, and only HOST:PORT.
TEST(E2E, MetricsAddressFlagIsChecked) {
  for (std::vector<std::string> flags :
       {std::vector<std::string>{"--metrics_address=127.0.0.1:1", "--metrics_port=2"},
        std::vector<std::string>{"--metrics_address=9464"}}) {
    std::vector<std::string> argv = {REGCACHED_PATH, "--device=sim", "--socket_dir=/nonexistent"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    Process p(argv);
    EXPECT_EQ(p.Wait(absl::Seconds(10)), 2) << flags.back();
  }
}

TEST(E2E, LoopbackTcp) {
  int port = FreeLoopbackPort();
  Daemon d({absl::StrCat("--grpc_tcp_port=", port)});
  ASSERT_TRUE(d.ready());
  std::unique_ptr<Process> c = d.Client(-1, port);  // control socket + gRPC over 127.0.0.1
  ASSERT_EQ(Fields(c->ReadLine())["_"], "ok");
  auto mem = Fields(c->Do("alloc 1048576"));
  ASSERT_EQ(mem["_"], "ok");
  auto key = Fields(c->Do(absl::StrCat("reg ", mem["ptr"], " 4096 ", kRw)));
  ASSERT_EQ(key["_"], "ok");
  EXPECT_EQ(c->Do(absl::StrCat("pwrite ", key["rkey"], " ", mem["ptr"], " over-tcp")), "ok");
  EXPECT_EQ(c->Do(absl::StrCat("check ", mem["ptr"], " over-tcp")), "ok");
}

TEST(E2E, RegcachectlDrainStopsTheDaemon) {
  Daemon d({AdminSelf()});
  ASSERT_TRUE(d.ready());
  Session a = Open(d);
  ASSERT_EQ(Fields(a.proc->Do(absl::StrCat("reg ", Addr(a.ptr), " 4096 ", kRw)))["_"], "ok");
  auto [rc, out] = d.Ctl({"drain"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(d.process().Wait(absl::Seconds(10)), 0) << "an admin Drain ends regcached with 0";
}

TEST(E2E, SigtermDrains) {
  auto d = std::make_unique<Daemon>();
  ASSERT_TRUE(d->ready());
  Session a = Open(*d);
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(Fields(a.proc->Do(absl::StrCat("reg ", Addr(a.ptr + i * 8192), " 8192 ", kRw)))["_"],
              "ok");
  }
  ASSERT_EQ(a.proc->Do(absl::StrCat("traffic ", Addr(a.ptr + (1 << 20)))), "ok");
  absl::SleepFor(absl::Milliseconds(100));
  kill(d->process().pid(), SIGTERM);
  EXPECT_EQ(d->process().Wait(absl::Seconds(10)), 0) << "regcached did not drain and exit 0";
  std::string after = a.proc->Do(absl::StrCat("reg ", Addr(a.ptr), " 4096 ", kRw));
  EXPECT_EQ(Code(after), "UNAVAILABLE") << after;
}

// The drain's end does not tear a connected client's next call: regcached keeps answering
// DRAINING while any client stays connected (up to --drain_linger_ms), and exits the moment the
// last one leaves — or at a second SIGTERM.
TEST(E2E, DrainLingersForConnectedClients) {
  for (bool second_signal : {false, true}) {
    SCOPED_TRACE(second_signal ? "second SIGTERM" : "the client leaves");
    Daemon d({"--drain_linger_ms=600000"});
    ASSERT_TRUE(d.ready());
    Session a = Open(d);
    ASSERT_EQ(Fields(a.proc->Do(absl::StrCat("reg ", Addr(a.ptr), " 4096 ", kRw)))["_"], "ok");
    kill(d.process().pid(), SIGTERM);
    // The signal arrives asynchronously: calls succeed until the drain begins (bounded wait).
    const std::string reg = absl::StrCat("reg ", Addr(a.ptr + 8192), " 4096 ", kRw);
    std::string after = a.proc->Do(reg);
    for (const absl::Time deadline = absl::Now() + absl::Seconds(10);
         Code(after) == "ok" && absl::Now() < deadline; after = a.proc->Do(reg)) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    // From then on, however long the client stays, the answer is the reason, never a torn call.
    for (int i = 0; i < 5; ++i) {
      EXPECT_EQ(Code(after), "UNAVAILABLE") << after;
      EXPECT_NE(after.find("draining"), std::string::npos) << after;
      absl::SleepFor(absl::Milliseconds(100));
      after = a.proc->Do(reg);
    }
    EXPECT_TRUE(d.process().Alive()) << "exited with a client still connected";
    if (second_signal) {
      kill(d.process().pid(), SIGTERM);
    } else {
      a.proc->CloseStdin();
      EXPECT_EQ(a.proc->Wait(absl::Seconds(10)), 0);
    }
    EXPECT_EQ(d.process().Wait(absl::Seconds(10)), 0) << "regcached did not exit 0";
  }
}

TEST(E2E, ReregisterAndBatchesThroughTheClientLibrary) {
  Daemon d;
  ASSERT_TRUE(d.ready());
  Session a = Open(d);
  // Reregister: grown in place, the same rkey reaches the new bytes.
  auto key = Fields(a.proc->Do(absl::StrCat("reg ", Addr(a.ptr + 4096), " 4096 ", kRw)));
  ASSERT_EQ(key["_"], "ok");
  EXPECT_EQ(Code(a.proc->Do(absl::StrCat("pwrite ", key["rkey"], " ", Addr(a.ptr), " low"))),
            "PERMISSION_DENIED");
  auto grown =
      Fields(a.proc->Do(absl::StrCat("rereg ", key["handle"], " ", Addr(a.ptr), " 12288 ", kRw)));
  ASSERT_EQ(grown["_"], "ok");
  EXPECT_EQ(grown["same"], "1");
  EXPECT_EQ(grown["rkey"], key["rkey"]);
  EXPECT_EQ(grown["handle"], key["handle"]);
  EXPECT_EQ(a.proc->Do(absl::StrCat("pwrite ", key["rkey"], " ", Addr(a.ptr), " low")), "ok");
  EXPECT_EQ(a.proc->Do(absl::StrCat("check ", Addr(a.ptr), " low")), "ok");
  EXPECT_EQ(Code(a.proc->Do(absl::StrCat("rereg 0x0 ", Addr(a.ptr), " 4096 ", kRw))),
            "INVALID_ARGUMENT");
  // RegisterBatch: each item alone; a bad one fails without stopping the rest.
  auto batch = Fields(a.proc->Do(absl::StrCat(
      "regbatch ", Addr(a.ptr + 65536), " 4096 ", kRw, " ", Addr(a.ptr), " 0 ", kRw, " ",
      Addr(a.ptr + 8 * 1048576), " 4096 ", kRw, " ", Addr(a.ptr + 65536), " 4096 ", kRw)));
  ASSERT_EQ(batch["_"], "ok");
  std::vector<std::string> items = absl::StrSplit(batch["items"], ',');
  ASSERT_EQ(items.size(), 4u) << batch["items"];
  EXPECT_EQ(items[0].substr(0, 3), "OK:");
  EXPECT_EQ(items[1], "INVALID_ARGUMENT");
  EXPECT_EQ(items[2], "OUT_OF_RANGE");
  EXPECT_EQ(items[3], items[0]) << "the second is a hit on the first";
  std::vector<std::string> first = absl::StrSplit(items[0], ':');
  ASSERT_EQ(first.size(), 3u);
  EXPECT_EQ(a.proc->Do(absl::StrCat("pwrite ", first[2], " ", Addr(a.ptr + 65536), " batch")),
            "ok");
  // ReleaseBatch: one status per handle, in order.
  auto released =
      Fields(a.proc->Do(absl::StrCat("relbatch ", first[1], " ", first[1], " ", first[1], " 0")));
  ASSERT_EQ(released["_"], "ok");
  EXPECT_EQ(released["items"], "OK,OK,FAILED_PRECONDITION,INVALID_ARGUMENT");
  // The bound: 1024 items are one call, 1025 are refused whole.
  EXPECT_EQ(a.proc->Do(absl::StrCat("regbatch_n 1024 ", Addr(a.ptr))), "ok n=1024");
  const std::string over = a.proc->Do(absl::StrCat("regbatch_n 1025 ", Addr(a.ptr)));
  EXPECT_EQ(Code(over), "INVALID_ARGUMENT") << over;
  EXPECT_NE(over.find("1024"), std::string::npos) << over;
}

}  // namespace
