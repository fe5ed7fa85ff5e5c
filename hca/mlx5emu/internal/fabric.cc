// The fabric between emulated devices: the responder's half of every RDMA operation, and the
// port that carries a request to a queue pair on another device, in this process or another.
//
// A device goes on the fabric when its first verbs queue pair reaches RTR: it listens on a unix
// stream socket in the abstract namespace named after its port GID, which carries the process
// id (GidOf), so each process is a host of its own. A requester whose address vector names
// another GID hands its oldest work request to its device's port thread, which gathers a
// WRITE's bytes under the device lock, sends the request without it, and completes the work
// request under the lock again. The responder's listener executes it against the queue pair it
// names, under its own device's lock, with the same checks as a request from its own device.
// What no queue pair answers (no listener, a queue pair gone or not connected to the sender, a
// PSN out of sequence, a device that failed) completes as the transport's retries running out.
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/mutex.h"
#include "base/unique_fd.h"
#include "hca/mlx5emu/internal/emu.h"
#include "hca/mlx5emu/internal/verbs_ops.h"
#include "hca/sim/sim_core.h"
#include "hca/status.h"
#include "umr/cqe.h"

namespace regcache::hca::mlx5emu {
namespace {

constexpr uint32_t kRequestMagic = 0x52434631;  // "RCF1"
constexpr uint32_t kReplyMagic = 0x52434672;
constexpr uint64_t kMaxMessage = uint64_t{1} << 30;  // the port's max_msg_sz
// How long a requester waits for its responder's process before it gives up (the retries of
// a real transport, with timeout 14 and retry_cnt 7, last about 0.5 s).
constexpr int kAnswerTimeoutMs = 2000;

struct WireRequest {
  uint32_t magic = kRequestMagic;
  uint32_t reserved = 0;
  RdmaRequest req;
};  // followed by a WRITE's `req.length` bytes

struct WireReply {
  uint32_t magic = kReplyMagic;
  uint8_t answered = 0;
  uint8_t syndrome = 0;
  uint16_t reserved = 0;
  uint64_t length = 0;
};  // followed by `length` bytes (a READ's or an atomic's)

bool IsAtomic(uint32_t op) {
  return op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD;
}

// The abstract socket address of the device whose port GID is `gid`.
socklen_t AddressOf(const uint8_t* gid, sockaddr_un* sa) {
  *sa = sockaddr_un{};
  sa->sun_family = AF_UNIX;
  const std::string name = absl::StrCat(
      "regcache-mlx5emu-fabric/",
      absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(gid), 16)));
  std::memcpy(sa->sun_path + 1, name.data(), name.size());  // sun_path[0] = 0: abstract
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

bool WriteAll(int fd, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  while (n > 0) {
    const ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    b += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool ReadAll(int fd, void* p, size_t n) {
  auto* b = static_cast<uint8_t*>(p);
  while (n > 0) {
    const ssize_t r = recv(fd, b, n, MSG_WAITALL);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    b += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

}  // namespace

// A device's port on the fabric: its listener (the responder side) and its requester thread.
// Never destroyed, as the device.
class Port {
 public:
  Port(Device* dev, base::UniqueFd listener) : dev_(dev), listener_(std::move(listener)) {
    std::thread([this] { Serve(); }).detach();
    std::thread([this] { Drive(); }).detach();
  }

  void Send(uint32_t qpn) {
    base::MutexLock lock(&mu_);
    queue_.push_back(qpn);
    cv_.Signal();
  }

 private:
  // The responder: answers every connection's requests in turn.
  void Serve() {
    std::vector<pollfd> fds{{listener_.get(), POLLIN, 0}};
    std::vector<base::UniqueFd> conns;
    for (;;) {
      if (poll(fds.data(), fds.size(), -1) < 0) continue;
      for (size_t i = fds.size(); i-- > 1;) {
        if (fds[i].revents == 0) continue;
        if ((fds[i].revents & POLLIN) == 0 || !Answer(fds[i].fd)) {
          conns.erase(conns.begin() + static_cast<ptrdiff_t>(i - 1));
          fds.erase(fds.begin() + static_cast<ptrdiff_t>(i));
        }
      }
      if ((fds[0].revents & POLLIN) != 0) {
        base::UniqueFd c(accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
        if (c.get() >= 0) {
          fds.push_back({c.get(), POLLIN, 0});
          conns.push_back(std::move(c));
        }
      }
    }
  }

  // One request from `fd` and its answer; false when the connection is done.
  bool Answer(int fd) {
    WireRequest w;
    if (!ReadAll(fd, &w, sizeof(w)) || w.magic != kRequestMagic || w.req.length > kMaxMessage) {
      return false;
    }
    std::vector<uint8_t> in(w.req.opcode == IBV_WR_RDMA_WRITE ? w.req.length : 0);
    if (!ReadAll(fd, in.data(), in.size())) return false;
    std::vector<uint8_t> out;
    std::optional<uint8_t> answer;
    {
      base::MutexLock lock(&dev_->mu);
      if (!dev_->fatal()) answer = Respond(dev_, w.req, in, &out);
    }
    WireReply r;
    r.answered = answer.has_value() ? 1 : 0;
    r.syndrome = answer.value_or(0);
    r.length = out.size();
    return WriteAll(fd, &r, sizeof(r)) && WriteAll(fd, out.data(), out.size());
  }

  // The requester: one work request at a time, in the order queue pairs handed them over.
  void Drive() {
    for (;;) {
      uint32_t qpn;
      {
        base::MutexLock lock(&mu_);
        while (queue_.empty()) cv_.Wait(&mu_);
        qpn = queue_.front();
        queue_.pop_front();
      }
      Carry(qpn);
      dev_->Kick();
    }
  }

  void Carry(uint32_t qpn) {
    SendWr w;
    RdmaRequest req;
    std::vector<uint8_t> data;
    uint8_t to[16];
    uint32_t epoch;
    {
      base::MutexLock lock(&dev_->mu);
      Qp* qp = Find(qpn);
      if (qp == nullptr) return;
      if (qp->pending.empty() || qp->qp.state != IBV_QPS_RTS) {
        qp->on_fabric = false;  // reset, or failed meanwhile: the device thread flushes
        return;
      }
      w = qp->pending.front();
      qp->pending.pop_front();
      if (const uint8_t s = PrepareWr(dev_, qp, w, &req, &data); s != 0) {
        CompleteWr(qp, w, s);
        qp->on_fabric = false;
        return;
      }
      std::memcpy(to, qp->dgid.raw, sizeof(to));
      epoch = qp->epoch;
    }
    std::vector<uint8_t> back;
    const std::optional<uint8_t> answer = Exchange(to, req, data, &back);
    base::MutexLock lock(&dev_->mu);
    Qp* qp = Find(qpn);
    if (qp == nullptr) return;  // destroyed meanwhile
    qp->on_fabric = false;
    if (qp->epoch != epoch) return;  // reset meanwhile: its work requests are gone
    uint8_t s = Conclude(dev_, qp, w, answer, back);
    if (qp->qp.state == IBV_QPS_ERR && s == 0) s = umr::kCqeSyndWrFlush;
    CompleteWr(qp, w, s);
  }

  Qp* Find(uint32_t qpn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(dev_->mu) {
    auto it = dev_->qps.find(qpn);
    return it == dev_->qps.end() ? nullptr : it->second;
  }

  // Sends `req` to the device at `to` and waits for its answer: nullopt when none comes.
  std::optional<uint8_t> Exchange(const uint8_t* to, const RdmaRequest& req,
                                  const std::vector<uint8_t>& data, std::vector<uint8_t>* back) {
    const std::string key(reinterpret_cast<const char*>(to), 16);
    auto it = links_.find(key);
    if (it == links_.end()) {
      base::UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
      sockaddr_un sa;
      const socklen_t len = AddressOf(to, &sa);
      if (fd.get() < 0 || connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), len) != 0) {
        return std::nullopt;  // no such host on the fabric
      }
      timeval tv{kAnswerTimeoutMs / 1000, (kAnswerTimeoutMs % 1000) * 1000};
      setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
      it = links_.emplace(key, std::move(fd)).first;
    }
    WireRequest w;
    w.req = req;
    WireReply r;
    const int fd = it->second.get();
    if (!WriteAll(fd, &w, sizeof(w)) || !WriteAll(fd, data.data(), data.size()) ||
        !ReadAll(fd, &r, sizeof(r)) || r.magic != kReplyMagic || r.length > kMaxMessage) {
      links_.erase(it);  // the host went, or hangs: the next request reconnects
      return std::nullopt;
    }
    back->resize(r.length);
    if (!ReadAll(fd, back->data(), back->size())) {
      links_.erase(it);
      return std::nullopt;
    }
    if (r.answered == 0) return std::nullopt;
    return r.syndrome;
  }

  Device* const dev_;
  const base::UniqueFd listener_;
  base::Mutex mu_;
  base::CondVar cv_;
  std::deque<uint32_t> queue_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, base::UniqueFd> links_;  // by GID; the requester thread's alone
};

uint32_t PsnSpan(const RdmaRequest& r, uint32_t mtu) {
  if (IsAtomic(r.opcode) || r.length == 0) return 1;
  return static_cast<uint32_t>((r.length + mtu - 1) / mtu);
}

std::optional<uint8_t> Respond(Device* dev, const RdmaRequest& req, absl::Span<const uint8_t> in,
                               std::vector<uint8_t>* out) {
  auto it = dev->qps.find(req.dest_qpn);
  if (it == dev->qps.end() || it->second->dv) return std::nullopt;
  Qp* t = it->second;
  if (t->qp.state != IBV_QPS_RTR && t->qp.state != IBV_QPS_RTS) return std::nullopt;
  // An RC responder takes packets from the queue pair it is connected to, in PSN order.
  if (t->dest_qpn != req.src_qpn || std::memcmp(t->dgid.raw, req.gid, 16) != 0 ||
      req.psn != t->rq_psn) {
    return std::nullopt;
  }
  auto remote_error = [t](uint8_t syndrome) {
    ToError(t);  // the responder's queue pair fails too
    return syndrome;
  };
  const bool atomic = IsAtomic(req.opcode);
  const unsigned need = atomic                           ? IBV_ACCESS_REMOTE_ATOMIC
                        : req.opcode == IBV_WR_RDMA_READ ? IBV_ACCESS_REMOTE_READ
                                                         : IBV_ACCESS_REMOTE_WRITE;
  if ((t->access & need) == 0) return remote_error(umr::kCqeSyndRemoteInvalReq);
  if (atomic && (req.length != 8 || req.remote_addr % 8 != 0)) {
    return remote_error(umr::kCqeSyndRemoteInvalReq);
  }
  if (req.opcode == IBV_WR_RDMA_WRITE && in.size() != req.length) {
    return remote_error(umr::kCqeSyndRemoteInvalReq);
  }
  const sim::AccessKind kind = atomic                           ? sim::AccessKind::kRemoteAtomic
                               : req.opcode == IBV_WR_RDMA_READ ? sim::AccessKind::kRemoteRead
                                                                : sim::AccessKind::kRemoteWrite;
  sim::Segments remote;
  if (absl::Status s = dev->core().Translate(t->pd->pdn, t->qp.qp_num, req.rkey, req.remote_addr,
                                             req.length, kind, sim::FaultPolicy::kResolve, &remote);
      !s.ok()) {
    return remote_error(SyndromeOf(s, Syndrome::kRemoteAccess));
  }
  if (atomic) {
    const absl::StatusOr<uint64_t> old =
        sim::AtomicAt(remote, req.opcode == IBV_WR_ATOMIC_CMP_AND_SWP, req.compare_add, req.swap);
    if (!old.ok()) return remote_error(SyndromeOf(old.status(), Syndrome::kRemoteInvalReq));
    out->resize(8);
    std::memcpy(out->data(), &*old, 8);
  } else if (req.opcode == IBV_WR_RDMA_READ) {
    out->resize(req.length);
    sim::CopyOut(remote, absl::MakeSpan(*out));
  } else {
    sim::CopyIn(remote, in);
  }
  t->rq_psn = (t->rq_psn + PsnSpan(req, t->path_mtu)) & 0xffffff;
  return 0;
}

void AttachToFabric(Device* dev) {
  if (dev->port != nullptr) return;
  const ibv_gid gid = GidOf(dev);
  base::UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un sa;
  const socklen_t len = AddressOf(gid.raw, &sa);
  if (fd.get() < 0 || bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), len) != 0 ||
      listen(fd.get(), 64) != 0) {
    Violation(
        absl::StrFormat("%s: cannot go on the fabric (%s): queue pairs of other devices "
                        "will not reach it",
                        dev->name(), std::strerror(errno)));
    return;
  }
  dev->port = new Port(dev, std::move(fd));
}

void SendOnFabric(Device* dev, uint32_t qpn) {
  if (dev->port == nullptr) {  // never went on the fabric: nobody can answer
    auto it = dev->qps.find(qpn);
    if (it == dev->qps.end()) return;
    Qp* qp = it->second;
    qp->on_fabric = false;
    while (!qp->pending.empty()) {
      const SendWr w = qp->pending.front();
      qp->pending.pop_front();
      CompleteWr(qp, w, qp->qp.state == IBV_QPS_ERR ? umr::kCqeSyndWrFlush : kSynRetryExceeded);
    }
    return;
  }
  dev->port->Send(qpn);
}

}  // namespace regcache::hca::mlx5emu
