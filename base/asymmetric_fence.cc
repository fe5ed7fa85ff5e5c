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

// REGCACHE_MEMBARRIER: -1 unset (each user's default), 0 symmetric everywhere, 1 membarrier.
int EnvChoice() {
  const char* on = std::getenv("REGCACHE_MEMBARRIER");
  if (on == nullptr || *on == '\0') return -1;
  return *on == '0' ? 0 : 1;
}

bool Register(int choice) {
  if (choice == 0) return false;
  const long supported = Membarrier(MEMBARRIER_CMD_QUERY);
  if (supported < 0 || (supported & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return false;
  return Membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
}

// Static initialisation: this runs before main (or at dlopen of a library holding it), before
// any code of it can run a fence. In this order.
const int env_choice = EnvChoice();
const bool registered = Register(env_choice);

}  // namespace

FenceMode default_mode =
    registered && env_choice == 1 ? FenceMode::kMembarrier : FenceMode::kSymmetric;

}  // namespace internal_fence

FenceMode ChooseFenceMode(FenceMode preferred) {
  if (!internal_fence::registered) return FenceMode::kSymmetric;
  if (internal_fence::env_choice == 1) return FenceMode::kMembarrier;
  return preferred;  // REGCACHE_MEMBARRIER=0 registers nothing (above)
}

void HeavyFence(FenceMode mode) {
  if (mode == FenceMode::kMembarrier) {
    const long rc = internal_fence::Membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED);
    // Registered at start-up, so the kernel cannot refuse it later.
    RC_CHECK(rc == 0) << "membarrier(PRIVATE_EXPEDITED) failed after registration";
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

bool AsymmetricFenceUsesMembarrier() {
  return internal_fence::default_mode == FenceMode::kMembarrier;
}

}  // namespace regcache::base