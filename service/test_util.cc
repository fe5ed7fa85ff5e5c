#include "service/test_util.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "hca/sim/sim_device.h"
#include "protocol/shm_futex.h"

namespace regcache::service::testing {

std::unique_ptr<RawRing> RawRing::Map(int channel_fd, int state_fd) {
  std::unique_ptr<RawRing> r(new RawRing());
  struct stat cs {
  }, ss{};
  EXPECT_EQ(::fstat(channel_fd, &cs), 0);
  EXPECT_EQ(::fstat(state_fd, &ss), 0);
  r->channel_bytes_ = static_cast<uint64_t>(cs.st_size);
  r->state_bytes_ = static_cast<uint64_t>(ss.st_size);
  void* c = ::mmap(nullptr, r->channel_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, channel_fd, 0);
  void* s = ::mmap(nullptr, r->state_bytes_, PROT_READ, MAP_SHARED, state_fd, 0);
  ::close(channel_fd);
  ::close(state_fd);
  if (c == MAP_FAILED || s == MAP_FAILED) {
    ADD_FAILURE() << "mapping the session's files failed";
    return nullptr;
  }
  r->channel_map_ = static_cast<uint8_t*>(c);
  r->state_map_ = static_cast<uint8_t*>(s);
  r->header_ = reinterpret_cast<shm::ChannelFileHeader*>(r->channel_map_);
  r->channels_ = reinterpret_cast<shm::Channel*>(r->channel_map_ + r->header_->channel_offset);
  r->state_ = reinterpret_cast<const shm::StateHeader*>(r->state_map_);
  r->slots_ =
      reinterpret_cast<const std::atomic<uint32_t>*>(r->state_map_ + r->state_->slot_offset);
  r->events_ =
      reinterpret_cast<const shm::RevocationEvent*>(r->state_map_ + r->state_->event_offset);
  return r;
}

RawRing::~RawRing() {
  if (channel_map_ != nullptr) ::munmap(channel_map_, channel_bytes_);
  if (state_map_ != nullptr) ::munmap(state_map_, state_bytes_);
}

void RawRing::RingDoorbell() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (header_->daemon_waiting.load(std::memory_order_relaxed) != 0) {
    header_->daemon_waiting.store(0, std::memory_order_relaxed);
    header_->doorbell.fetch_add(1, std::memory_order_seq_cst);
    shm::FutexWakeAll(&header_->doorbell);
  }
}

void RawRing::Post(uint32_t ch, const shm::RingRequest& r) {
  shm::ChannelControl& c = channels_[ch].control;
  const uint32_t head = c.req_head.load(std::memory_order_relaxed);
  std::memcpy(&channels_[ch].requests[head % shm::kRingDepth], &r, sizeof(r));
  c.req_head.store(head + 1, std::memory_order_release);
  RingDoorbell();
}

std::vector<uint64_t> RawRing::PostMany(uint32_t ch, std::vector<shm::RingRequest> rs) {
  shm::ChannelControl& c = channels_[ch].control;
  const uint32_t head = c.req_head.load(std::memory_order_relaxed);
  std::vector<uint64_t> seqs;
  for (size_t i = 0; i < rs.size(); ++i) {
    rs[i].seq = next_seq_.fetch_add(1);
    seqs.push_back(rs[i].seq);
    std::memcpy(&channels_[ch].requests[(head + i) % shm::kRingDepth], &rs[i], sizeof(rs[i]));
  }
  c.req_head.store(head + static_cast<uint32_t>(rs.size()), std::memory_order_release);
  RingDoorbell();
  return seqs;
}

void RawRing::PostHeadOnly(uint32_t ch) {
  shm::ChannelControl& c = channels_[ch].control;
  c.req_head.fetch_add(1, std::memory_order_release);
  RingDoorbell();
}

std::optional<shm::RingCompletion> RawRing::Next(uint32_t ch, absl::Duration timeout) {
  shm::ChannelControl& c = channels_[ch].control;
  const uint32_t tail = c.cpl_tail.load(std::memory_order_relaxed);
  const absl::Time deadline = absl::Now() + timeout;
  for (int spins = 0; c.cpl_head.load(std::memory_order_acquire) == tail; ++spins) {
    if (spins < 1000) continue;
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return std::nullopt;
    c.client_waiting.store(1, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (c.cpl_head.load(std::memory_order_seq_cst) == tail) {
      shm::FutexWait(&c.cpl_head, tail, std::min(left, absl::Milliseconds(100)));
    }
    c.client_waiting.store(0, std::memory_order_relaxed);
  }
  shm::RingCompletion out;
  std::memcpy(&out, &channels_[ch].completions[tail % shm::kRingDepth], sizeof(out));
  c.cpl_tail.store(tail + 1, std::memory_order_release);
  return out;
}

shm::RingCompletion RawRing::Call(uint32_t ch, shm::RingRequest r, absl::Duration timeout) {
  r.seq = next_seq_.fetch_add(1);
  Post(ch, r);
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    std::optional<shm::RingCompletion> c = Next(ch, deadline - absl::Now());
    if (!c.has_value()) {
      shm::RingCompletion t{};
      t.seq = r.seq;
      t.code = static_cast<uint32_t>(absl::StatusCode::kDeadlineExceeded);
      return t;
    }
    if (c->seq == r.seq) return *c;
  }
}

shm::RingRequest RegisterReq(uint64_t va, uint64_t length, uint32_t access) {
  shm::RingRequest r{};
  r.op = static_cast<uint16_t>(shm::RingOp::kRegister);
  r.va = va;
  r.length = length;
  r.access = access;
  return r;
}

shm::RingRequest WindowReq(uint64_t parent, uint64_t offset, uint64_t length, uint32_t access) {
  shm::RingRequest r{};
  r.op = static_cast<uint16_t>(shm::RingOp::kWindow);
  r.handle = parent;
  r.va = offset;
  r.length = length;
  r.access = access;
  return r;
}

shm::RingRequest HandleReq(shm::RingOp op, uint64_t handle) {
  shm::RingRequest r{};
  r.op = static_cast<uint16_t>(op);
  r.handle = handle;
  return r;
}

shm::RingRequest NopReq() {
  shm::RingRequest r{};
  r.op = static_cast<uint16_t>(shm::RingOp::kNop);
  return r;
}

void RingFixture::Start(const DaemonConfig& config) {
  hca::sim::RegisterBackend();
  sessions_.clear();
  daemon_.reset();
  auto d = Daemon::Create(config, &registry_);
  ASSERT_TRUE(d.ok()) << d.status();
  daemon_ = std::move(*d);
}

void RingFixture::TearDown() {
  sessions_.clear();
  daemon_.reset();
}

RingFixture::Sess& RingFixture::Open(uint64_t length) {
  auto g = daemon_->OpenSession(PeerCredentials{::getpid(), 0, 0});
  EXPECT_TRUE(g.ok()) << g.status();
  auto s = std::make_unique<Sess>();
  s->id = g->id;
  s->ring = RawRing::Map(g->channel_fd, g->state_fd);
  auto m = daemon_->AllocateMemory(s->id, length, false);
  EXPECT_TRUE(m.ok()) << m.status();
  s->memory = m->id;
  s->length = length;
  void* p = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd, 0);
  ::close(m->fd);
  EXPECT_NE(p, MAP_FAILED);
  s->mem = static_cast<uint8_t*>(p);
  EXPECT_TRUE(daemon_->AttachMemory(s->id, s->memory, s->va(0), false).ok());
  sessions_.push_back(std::move(s));
  return *sessions_.back();
}

int64_t RingFixture::Stat(absl::string_view component, absl::string_view name) {
  absl::StatusOr<int64_t> v = base::stats::FindValue(daemon_->Stats(), component, name);
  if (v.ok()) return *v;
  ADD_FAILURE() << v.status();
  return -1;
}

}  // namespace regcache::service::testing
