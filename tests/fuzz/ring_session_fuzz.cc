// Fuzz target: a session's rings as a hostile client writes them. A real daemon on the simulated
// device runs in this process; each input is one session whose channel file the input writes
// directly, bypassing the client library:
//
//   input := step*
//   step  := kind:u8 channel:u8 bytes[64]
//   kind % 4 == 0   post the 64 bytes as a request at req_head and ring the doorbell
//   kind % 4 == 1   publish req_head + 1 without writing the entry (a truncated message)
//   kind % 4 == 2   overwrite req_head and cpl_tail with the first 8 bytes (garbage indices)
//   kind % 4 == 3   consume every completion there is
// Channels 0..kFuzzChannels-1 take the steps. Afterwards the last channel, untouched, must still
// answer a Nop within seconds, and the session must close cleanly: whatever a client writes,
// the daemon neither crashes nor stops serving the session's other threads.
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/log.h"
#include "hca/sim/sim_device.h"
#include "protocol/shm_futex.h"
#include "protocol/shm_protocol.h"
#include "service/daemon.h"

namespace shm = ::regcache::protocol::shm;

namespace {

constexpr uint32_t kFuzzChannels = 3;

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "ring_session_fuzz: %s\n", what);
    std::abort();
  }
}

regcache::service::Daemon& TheDaemon() {
  static regcache::service::Daemon* d = [] {
    regcache::base::SetMinLogSeverity(regcache::base::LogSeverity::kError);
    regcache::hca::sim::RegisterBackend();
    regcache::service::DaemonConfig config;
    config.ring_channels = kFuzzChannels + 1;
    config.cache.pool.low_watermark = 1;
    config.cache.pool.high_watermark = 2;
    auto made = regcache::service::Daemon::Create(config, nullptr);
    Check(made.ok(), "daemon");
    return made->release();
  }();
  return *d;
}

void Ring(shm::ChannelFileHeader* h) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (h->daemon_waiting.exchange(0) != 0) {
    h->doorbell.fetch_add(1);
    shm::FutexWakeAll(&h->doorbell);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  regcache::service::Daemon& daemon = TheDaemon();
  auto grant = daemon.OpenSession({::getpid(), ::getuid(), ::getgid()});
  Check(grant.ok(), "open session");
  const uint64_t bytes = shm::ChannelFileBytes(grant->ring_channels);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, grant->channel_fd, 0);
  ::close(grant->channel_fd);
  ::close(grant->state_fd);
  Check(p != MAP_FAILED, "mmap");
  auto* header = static_cast<shm::ChannelFileHeader*>(p);
  auto channel = [&](uint32_t i) {
    return reinterpret_cast<shm::Channel*>(static_cast<uint8_t*>(p) + header->channel_offset +
                                           i * header->channel_stride);
  };

  for (size_t pos = 0; pos + 2 + 64 <= size; pos += 2 + 64) {
    const uint8_t kind = data[pos] % 4;
    shm::Channel* ch = channel(data[pos + 1] % kFuzzChannels);
    shm::ChannelControl& c = ch->control;
    const uint8_t* body = data + pos + 2;
    const uint32_t head = c.req_head.load();
    switch (kind) {
      case 0:
        std::memcpy(&ch->requests[head % shm::kRingDepth], body, sizeof(shm::RingRequest));
        c.req_head.store(head + 1, std::memory_order_release);
        Ring(header);
        break;
      case 1:
        c.req_head.store(head + 1, std::memory_order_release);
        Ring(header);
        break;
      case 2: {
        uint32_t v[2];
        std::memcpy(v, body, sizeof(v));
        c.req_head.store(v[0]);
        c.cpl_tail.store(v[1]);
        Ring(header);
        break;
      }
      case 3:
        c.cpl_tail.store(c.cpl_head.load(std::memory_order_acquire));
        Ring(header);
        break;
    }
  }

  // The untouched channel still gets its answer.
  shm::Channel* good = channel(kFuzzChannels);
  shm::RingRequest nop{};
  nop.seq = 42;
  nop.op = static_cast<uint16_t>(shm::RingOp::kNop);
  const uint32_t want = good->control.cpl_head.load() + 1;
  good->requests[good->control.req_head.load() % shm::kRingDepth] = nop;
  good->control.req_head.fetch_add(1, std::memory_order_release);
  Ring(header);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (good->control.cpl_head.load(std::memory_order_acquire) != want) {
    Check(absl::Now() < deadline, "the untouched channel was not served");
    absl::SleepFor(absl::Microseconds(20));
  }
  Check(good->completions[(want - 1) % shm::kRingDepth].seq == 42, "wrong completion");
  Check(daemon.CloseSession(grant->id).ok(), "close session");
  ::munmap(p, bytes);
  return 0;
}
