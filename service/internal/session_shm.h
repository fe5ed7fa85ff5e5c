// The two shared files of a session's fast path (protocol/shm_protocol.h): the channel file
// (request and completion rings, mapped read-write by the client) and the state file (grant
// state words and revocation events, which the client can only map read-only). Internal to
// service/.
//
// Both are memfds sized once and sealed against shrinking and growing before any descriptor
// leaves the daemon, so nothing a client does can make the daemon's mappings fault. The state
// file is mapped here read-write first and then sealed with F_SEAL_FUTURE_WRITE: from then on
// no writable mapping of it can be made, and write(2) on it fails, in any process.
//
// Thread safety: the accessors are const after Create; what the mappings hold is shared memory
// whose protocol the header states.
#ifndef REGCACHE_SERVICE_INTERNAL_SESSION_SHM_H_
#define REGCACHE_SERVICE_INTERNAL_SESSION_SHM_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "base/unique_fd.h"
#include "protocol/shm_protocol.h"

namespace regcache::service::internal {

namespace shm = ::regcache::protocol::shm;

class SessionShm {
 public:
  // Creates, seals and maps both files for session `session_id` and fills their headers.
  // kInvalidArgument for channels outside [1, kMaxChannels] or slots 0 or above 2^30;
  // errno-based errors from memfd_create / ftruncate / fcntl / mmap.
  static absl::StatusOr<std::unique_ptr<SessionShm>> Create(uint64_t session_id, uint32_t channels,
                                                            uint32_t slots);
  ~SessionShm();
  SessionShm(const SessionShm&) = delete;
  SessionShm& operator=(const SessionShm&) = delete;

  uint32_t channels() const { return channels_; }
  uint32_t slots() const { return slots_; }
  shm::ChannelFileHeader* channel_header() const { return channel_header_; }
  shm::Channel* channel(uint32_t i) const { return channels_base_ + i; }
  shm::StateHeader* state_header() const { return state_header_; }
  std::atomic<uint32_t>* slot_words() const { return slot_words_; }
  shm::RevocationEvent* events() const { return events_; }
  uint64_t channel_file_bytes() const { return channel_bytes_; }
  uint64_t state_file_bytes() const { return state_bytes_; }

  // New close-on-exec descriptors of the files, for the transport to pass to the client and
  // then close.
  absl::StatusOr<int> DupChannelFd() const;
  absl::StatusOr<int> DupStateFd() const;

 private:
  SessionShm() = default;

  uint32_t channels_ = 0;
  uint32_t slots_ = 0;
  base::UniqueFd channel_fd_;
  base::UniqueFd state_fd_;
  uint64_t channel_bytes_ = 0;
  uint64_t state_bytes_ = 0;
  void* channel_map_ = nullptr;
  void* state_map_ = nullptr;
  shm::ChannelFileHeader* channel_header_ = nullptr;
  shm::Channel* channels_base_ = nullptr;
  shm::StateHeader* state_header_ = nullptr;
  std::atomic<uint32_t>* slot_words_ = nullptr;
  shm::RevocationEvent* events_ = nullptr;
};

}  // namespace regcache::service::internal
#endif  // REGCACHE_SERVICE_INTERNAL_SESSION_SHM_H_
