// Queue pairs that move data: the target endpoints the daemon creates in a tenant's PD, and a
// requester (a remote node's side) that drives RDMA WRITE, READ and atomics at such an endpoint.
// The requester serves the backend's Peer (a requester in a PD of its own, connected to an
// endpoint in the tenant's PD, so that every access is checked against the tenant's rkeys as a
// remote node's would be) and the test tool that plays a remote node in its own process.
#ifndef REGCACHE_HCA_VERBS_ENDPOINT_H_
#define REGCACHE_HCA_VERBS_ENDPOINT_H_

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "hca/device.h"
#include "hca/verbs/context.h"

namespace regcache::hca::verbs {

class TargetEndpoint final : public Endpoint {
 public:
  static absl::StatusOr<std::unique_ptr<TargetEndpoint>> Create(Context* c, Pd pd,
                                                                const EndpointOptions& options);
  ~TargetEndpoint() override;
  Pd pd() const override { return pd_; }
  const EndpointAddress& local() const override { return local_; }
  absl::Status Connect(const EndpointAddress& remote) override;

 private:
  TargetEndpoint(Context* c, Pd pd) : c_(c), pd_(pd) {}
  Context* const c_;
  const Pd pd_;
  unsigned access_ = 0;
  ibv_cq* cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
  EndpointAddress local_;
  bool connected_ = false;
};

// kInvalidArgument unless `a` is a well-formed remote address for this port (24-bit qpn and
// psn, a known MTU or 0, a GID on RoCE ports).
absl::Status CheckRemoteAddress(const Context& c, const EndpointAddress& a);

// One RC queue pair in a PD of its own with a registered bounce buffer; not thread-safe (one
// caller at a time, as a Peer's user serializes).
class Requester {
 public:
  static absl::StatusOr<std::unique_ptr<Requester>> Create(Context* c);
  ~Requester();
  const EndpointAddress& local() const { return local_; }
  absl::Status Connect(const EndpointAddress& remote);
  // How long one request waits for its completion (default 30 s: software-emulated devices are
  // slow). A peer that is gone is normally reported sooner by the device (retry exceeded).
  void set_timeout(absl::Duration timeout) { timeout_ = timeout; }

  absl::Status Write(Key rkey, uint64_t remote_addr, absl::Span<const uint8_t> data);
  absl::Status Read(Key rkey, uint64_t remote_addr, absl::Span<uint8_t> out);
  absl::StatusOr<uint64_t> Atomic(Key rkey, uint64_t remote_addr, bool compare_swap,
                                  uint64_t compare_or_add, uint64_t swap);

 private:
  explicit Requester(Context* c) : c_(c) {}
  absl::Status EnsureBuffer(size_t bytes);
  // An RDMA WRITE or READ of the first `bytes` of the buffer.
  absl::Status Rdma(ibv_wr_opcode opcode, Key rkey, uint64_t remote_addr, size_t bytes,
                    const char* what);
  // Posts `wr` (signalled) and waits for its completion; kDeadlineExceeded after the timeout.
  absl::Status Execute(ibv_send_wr& wr, const char* what, Key rkey);

  Context* const c_;
  ibv_pd* pd_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
  ibv_mr* mr_ = nullptr;
  std::vector<uint8_t> buffer_;
  EndpointAddress local_;
  bool connected_ = false;
  bool broken_ = false;
  uint64_t next_wr_ = 1;
  absl::Duration timeout_ = absl::Seconds(30);
};

// A Peer of `pd`: a requester in a PD of its own connected to a target endpoint in `pd`, so that
// every access is checked against the PD's rkeys as a remote node's would be. SEND with
// invalidate and local SGE accesses are not offered: kUnimplemented with the reasons given.
absl::StatusOr<std::unique_ptr<Peer>> NewRequesterPeer(Context* c, Pd pd, std::string no_send_inv,
                                                       std::string no_local);

}  // namespace regcache::hca::verbs
#endif  // REGCACHE_HCA_VERBS_ENDPOINT_H_
