#include "service/internal/session_shm.h"

#include <fcntl.h>
#include <linux/memfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <new>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "base/errno_status.h"
#include "base/status_macros.h"
#include "base/unique_fd.h"

namespace regcache::service::internal {
namespace {

constexpr uint32_t kMaxSlots = 1u << 30;

// A sealable memfd of `bytes` bytes, sealed against shrinking and growing, mapped read-write.
// On success *fd and *map are set; on error nothing is left open.
absl::Status MakeFile(const std::string& name, uint64_t bytes, base::UniqueFd* fd, void** map) {
  base::UniqueFd f(::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!f) return base::ErrnoToStatus(errno, absl::StrFormat("memfd_create %s", name));
  if (::ftruncate(f.get(), static_cast<off_t>(bytes)) != 0 ||
      ::fcntl(f.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) {
    return base::ErrnoToStatus(errno, absl::StrFormat("size and seal %s", name));
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, f.get(), 0);
  if (p == MAP_FAILED) return base::ErrnoToStatus(errno, absl::StrFormat("mmap %s", name));
  *fd = std::move(f);
  *map = p;
  return absl::OkStatus();
}

absl::StatusOr<int> Dup(int fd) {
  const int d = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (d < 0) return base::ErrnoToStatus(errno, "dup a session file");
  return d;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SessionShm>> SessionShm::Create(uint64_t session_id,
                                                               uint32_t channels, uint32_t slots) {
  if (channels == 0 || channels > shm::kMaxChannels) {
    return absl::InvalidArgumentError(
        absl::StrFormat("ring channels %d outside [1, %d]", channels, shm::kMaxChannels));
  }
  if (slots == 0 || slots > kMaxSlots) {
    return absl::InvalidArgumentError(
        absl::StrFormat("grant slots %d outside [1, %d]", slots, kMaxSlots));
  }
  std::unique_ptr<SessionShm> s(new SessionShm());
  s->channels_ = channels;
  s->slots_ = slots;
  s->channel_bytes_ = shm::ChannelFileBytes(channels);
  s->state_bytes_ = shm::StateFileBytes(slots);
  RETURN_IF_ERROR(MakeFile(absl::StrFormat("regcache-s%d-channels", session_id), s->channel_bytes_,
                           &s->channel_fd_, &s->channel_map_));
  if (::fcntl(s->channel_fd_.get(), F_ADD_SEALS, F_SEAL_SEAL) != 0) {
    return base::ErrnoToStatus(errno, "seal the channel file");
  }
  RETURN_IF_ERROR(MakeFile(absl::StrFormat("regcache-s%d-state", session_id), s->state_bytes_,
                           &s->state_fd_, &s->state_map_));

  // The files are fresh (zero-filled): only the headers need writing.
  auto* ch = new (s->channel_map_) shm::ChannelFileHeader();
  ch->magic = shm::kChannelFileMagic;
  ch->version = shm::kShmVersion;
  ch->channels = channels;
  ch->depth = shm::kRingDepth;
  ch->session_id = session_id;
  ch->channel_offset = shm::kPageBytes;
  ch->channel_stride = sizeof(shm::Channel);
  s->channel_header_ = ch;
  auto* base = static_cast<uint8_t*>(s->channel_map_);
  s->channels_base_ = reinterpret_cast<shm::Channel*>(base + shm::kPageBytes);

  auto* st = new (s->state_map_) shm::StateHeader();
  st->magic = shm::kStateFileMagic;
  st->version = shm::kShmVersion;
  st->slots = slots;
  st->event_capacity = shm::kEventCapacity;
  st->session_id = session_id;
  st->event_offset = shm::kPageBytes;
  st->slot_offset = shm::kPageBytes + uint64_t{shm::kEventCapacity} * sizeof(shm::RevocationEvent);
  s->state_header_ = st;
  auto* state = static_cast<uint8_t*>(s->state_map_);
  s->events_ = reinterpret_cast<shm::RevocationEvent*>(state + st->event_offset);
  s->slot_words_ = reinterpret_cast<std::atomic<uint32_t>*>(state + st->slot_offset);
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  static_assert(std::atomic<uint32_t>::is_always_lock_free);

  // Our writable mapping stays; no later one can be made (the client's included).
  if (::fcntl(s->state_fd_.get(), F_ADD_SEALS, F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) != 0) {
    return base::ErrnoToStatus(errno, "seal the state file against writes");
  }
  return s;
}

SessionShm::~SessionShm() {
  if (channel_map_ != nullptr) ::munmap(channel_map_, channel_bytes_);
  if (state_map_ != nullptr) ::munmap(state_map_, state_bytes_);
}

absl::StatusOr<int> SessionShm::DupChannelFd() const { return Dup(channel_fd_.get()); }
absl::StatusOr<int> SessionShm::DupStateFd() const { return Dup(state_fd_.get()); }

}  // namespace regcache::service::internal
