// The programs' command lines as a shell user meets them: --help prints the flags and exits 0,
// a usage error (unknown flag, bad or missing value, a stray argument, a value out of range)
// says what is wrong on stderr and exits 2, before anything starts.
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace {

struct Ran {
  int code = -1;
  std::string out, err;
};

std::string Drain(int fd) {
  std::string s;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) s.append(buf, static_cast<size_t>(n));
  close(fd);
  return s;
}

// Runs `argv` to completion with stdout and stderr captured (they are small: it exits at once).
// `journal`: its stderr poses as the journal's stream (JOURNAL_STREAM names it, as systemd does).
Ran RunProgram(std::vector<std::string> argv, bool journal = false) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) std::abort();
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], 1);
    dup2(err[1], 2);
    struct stat st;
    if (journal && fstat(2, &st) == 0) {
      const std::string stream = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
      setenv("JOURNAL_STREAM", stream.c_str(), 1);
    }
    std::vector<char*> args;
    for (std::string& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  Ran r;
  r.err = Drain(err[0]);
  r.out = Drain(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

TEST(CommandLine, RegcachedHelpExitsZeroAndListsItsFlags) {
  for (const char* help : {"--help", "-help", "--helpfull"}) {
    Ran r = RunProgram({REGCACHED_PATH, help});
    EXPECT_EQ(r.code, 0) << help << ": " << r.err;
    EXPECT_TRUE(absl::StrContains(r.out, "--device")) << r.out;
    EXPECT_TRUE(absl::StrContains(r.out, "--umr_timeout_ms")) << r.out;
  }
}

TEST(CommandLine, RegcachedUsageErrorsExitTwoSayingWhy) {
  const struct {
    std::vector<std::string> args;
    const char* says;
  } cases[] = {
      {{"--no_such_flag"}, "unknown flag --no_such_flag"},
      {{"--workers=two"}, "--workers=two"},
      {{"--workers"}, "--workers needs a value"},
      {{"--nodevice"}, "unknown flag --nodevice"},  // --no applies to booleans only
      {{"--allow_pd_export=maybe"}, "--allow_pd_export=maybe"},
      {{"stray"}, "unexpected argument 'stray'"},
      {{"--umr_timeout_ms=0"}, "--umr_timeout_ms must be in 1..600000"},
      {{"--drain_grace_ms=-1"}, "--drain_grace_ms must be in 0..60000"},
      {{"--drain_linger_ms=600001"}, "--drain_linger_ms must be in 0..600000"},
      {{"--log_level=loud"}, "unknown --log_level"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> argv = {REGCACHED_PATH, "--socket_dir=/nonexistent/regcache-cli"};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    Ran r = RunProgram(argv);
    EXPECT_EQ(r.code, 2) << c.args[0] << ": " << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, c.says)) << c.args[0] << ": " << r.err;
  }
}

TEST(CommandLine, RegcachectlHelpExitsZeroAndUsageErrorsTwo) {
  Ran help = RunProgram({REGCACHECTL_PATH, "--help"});
  EXPECT_EQ(help.code, 0) << help.err;
  EXPECT_FALSE(help.out.empty());
  for (std::vector<std::string> args : std::vector<std::vector<std::string>>{
           {"--no_such_flag", "status"}, {"status", "--socket_dir"}, {"no-such-command"}, {}}) {
    std::vector<std::string> argv = {REGCACHECTL_PATH};
    argv.insert(argv.end(), args.begin(), args.end());
    Ran r = RunProgram(argv);
    EXPECT_EQ(r.code, 2) << (args.empty() ? "(none)" : args[0]) << ": " << r.err;
    EXPECT_FALSE(r.err.empty());
  }
}

// Without --socket_dir both programs look where REGCACHE_SOCKET_DIR says.
TEST(CommandLine, WithoutSocketDirTheProgramsLookWhereTheEnvironmentSays) {
  setenv("REGCACHE_SOCKET_DIR", "/nonexistent/regcache-env-dir", 1);
  Ran ctl = RunProgram({REGCACHECTL_PATH, "status"});
  EXPECT_NE(ctl.code, 0);
  EXPECT_TRUE(absl::StrContains(ctl.err + ctl.out, "/nonexistent/regcache-env-dir")) << ctl.err;
  // regcached cannot make its directory under a path that does not exist: it says which.
  Ran daemon = RunProgram({REGCACHED_PATH, "--log_level=error"});
  EXPECT_EQ(daemon.code, 1) << daemon.err;
  EXPECT_TRUE(absl::StrContains(daemon.err, "/nonexistent/regcache-env-dir")) << daemon.err;
  unsetenv("REGCACHE_SOCKET_DIR");
}

// Under systemd each log line carries its syslog priority for the journal.
TEST(CommandLine, LogLinesCarryTheirPriorityForTheJournal) {
  Ran r = RunProgram({REGCACHED_PATH, "--socket_dir=/nonexistent/regcache-journal"}, true);
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(absl::StartsWith(r.err, "<3>E ")) << r.err;  // the failed mkdir, an error
  Ran plain = RunProgram({REGCACHED_PATH, "--socket_dir=/nonexistent/regcache-journal"});
  EXPECT_FALSE(absl::StrContains(plain.err, "<3>")) << plain.err;
}

}  // namespace
