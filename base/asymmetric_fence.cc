#include "base/asymmetric_fence.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>

#include "base/log.h"

namespace regcache::base {
namespace internal_fence {
namespace {

long Membarrier(int cmd) { return ::syscall(__NR_membarrier, cmd, 0, 0); }

bool Register() {
  const char* on = std::getenv("REGCACHE_MEMBARRIER");
  if (on == nullptr || *on == '\0' || *on == '0') return false;  // symmetric: the default
  const long supported = Membarrier(MEMBARRIER_CMD_QUERY);
  if (supported < 0 || (supported & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return false;
  return Membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
}

}  // namespace

// Static initialisation: this runs before main, while the process has one thread.
bool membarrier_ready = Register();

}  // namespace internal_fence

void HeavyFence() {
  if (internal_fence::membarrier_ready) {
    const long rc = internal_fence::Membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED);
    // Registered at start-up, so the kernel cannot refuse it later.
    RC_CHECK(rc == 0) << "membarrier(PRIVATE_EXPEDITED) failed after registration";
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

bool AsymmetricFenceUsesMembarrier() { return internal_fence::membarrier_ready; }

}  // namespace regcache::base