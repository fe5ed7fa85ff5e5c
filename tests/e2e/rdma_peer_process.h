// A remote node in a process of its own for the e2e tests: regcache_rdma_peer (its own verbs
// context, PD and queue pair on any device; hca/verbs/rdma_peer_main.cc), driven one command line
// in, one answer line out. The including test defines RDMA_PEER_PATH.
#ifndef REGCACHE_TESTS_E2E_RDMA_PEER_PROCESS_H_
#define REGCACHE_TESTS_E2E_RDMA_PEER_PROCESS_H_

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "regcache/client.h"

namespace regcache::testing {

class RdmaPeer {
 public:
  RdmaPeer() {
    int in[2], out[2];
    EXPECT_EQ(pipe(in), 0);
    EXPECT_EQ(pipe(out), 0);
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      dup2(in[0], 0);
      dup2(out[1], 1);
      close(in[1]);
      close(out[0]);
      // Any device; a request waits 5 s at most (a vanished endpoint must not stall the test).
      execl(RDMA_PEER_PATH, RDMA_PEER_PATH, "any", "5", static_cast<char*>(nullptr));
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    to_ = fdopen(in[1], "w");
    from_ = out[0];
    address_ = Line();
  }
  ~RdmaPeer() {
    if (to_ != nullptr) {
      std::fputs("quit\n", to_);
      std::fclose(to_);
    }
    close(from_);
    int status;
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (absl::Now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        break;
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
  }

  std::string Ask(const std::string& command) {
    std::fputs((command + "\n").c_str(), to_);
    std::fflush(to_);
    return Line();
  }
  // Its queue pair's address (after start, or after "new").
  api::RemoteQp address() const { return Parse(address_); }
  void Renew() { address_ = Ask("new"); }
  std::string Connect(const api::RemoteQp& a) {
    return Ask(absl::StrFormat(
        "connect %d %d %s %d %d", a.qpn, a.psn,
        absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(a.gid.data()), 16)),
        a.lid, a.mtu));
  }
  std::string Write(uint32_t rkey, const void* addr, const std::string& bytes) {
    return Ask(absl::StrFormat("write %x %x %s", rkey, reinterpret_cast<uint64_t>(addr),
                               absl::BytesToHexString(bytes)));
  }
  std::string Read(uint32_t rkey, const void* addr, size_t n) {
    return Ask(absl::StrFormat("read %x %x %d", rkey, reinterpret_cast<uint64_t>(addr), n));
  }

 private:
  std::string Line() {  // bounded: a peer stuck for 60 s is a failure, not a hang
    std::string line;
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    for (;;) {
      pollfd p{from_, POLLIN, 0};
      if (absl::Now() > deadline || poll(&p, 1, 100) < 0) return "err TIMEOUT";
      if ((p.revents & (POLLIN | POLLHUP)) == 0) continue;
      char c;
      if (read(from_, &c, 1) != 1) return "err EOF " + line;
      if (c == '\n') return line;
      line += c;
    }
  }
  static api::RemoteQp Parse(const std::string& line) {
    api::RemoteQp a;
    std::istringstream in(line);
    std::string tag, gid;
    uint32_t lid = 0;
    in >> tag >> a.qpn >> a.psn >> gid >> lid >> a.mtu;
    EXPECT_EQ(tag, "qp") << line;
    const std::string raw = absl::HexStringToBytes(gid);
    if (raw.size() == 16) std::memcpy(a.gid.data(), raw.data(), 16);
    a.lid = static_cast<uint16_t>(lid);
    return a;
  }

  pid_t pid_ = -1;
  FILE* to_ = nullptr;
  int from_ = -1;
  std::string address_;
};

}  // namespace regcache::testing
#endif  // REGCACHE_TESTS_E2E_RDMA_PEER_PROCESS_H_
