#include "odp/internal/populate.h"

#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <mutex>

#include "absl/strings/str_format.h"
#include "base/errno_status.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace regcache::odp::internal {
namespace {

// Non-null while this thread runs a guarded touch. A plain pointer in static TLS: reading it
// from a signal handler is async-signal-safe in an executable (initial/local-exec TLS model;
// these libraries are static).
thread_local sigjmp_buf* t_guard = nullptr;

struct sigaction g_previous_bus;
struct sigaction g_previous_segv;
std::once_flag g_install_once;

void GuardHandler(int sig, siginfo_t* info, void* context) {
  sigjmp_buf* guard = t_guard;
  if (guard != nullptr) {
    t_guard = nullptr;
    siglongjmp(*guard, sig);
  }
  // Not ours: hand it to whoever was there before.
  const struct sigaction& previous = sig == SIGBUS ? g_previous_bus : g_previous_segv;
  if ((previous.sa_flags & SA_SIGINFO) != 0 && previous.sa_sigaction != nullptr) {
    previous.sa_sigaction(sig, info, context);
    return;
  }
  if (previous.sa_handler == SIG_DFL || previous.sa_handler == SIG_IGN) {
    // A synchronous fault cannot be ignored: restore the default action and return; the
    // faulting instruction runs again and the process dies as it would have without us.
    signal(sig, SIG_DFL);
    return;
  }
  previous.sa_handler(sig);
}

void InstallGuardHandlers() {
  std::call_once(g_install_once, [] {
    struct sigaction sa = {};
    sa.sa_sigaction = GuardHandler;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &g_previous_bus);
    sigaction(SIGSEGV, &sa, &g_previous_segv);
  });
}

// Write-intent touch: a compare-and-swap of the byte with its own value. Locked RMWs always
// need write access (so the page is faulted writable), and the value never changes, whoever
// else writes the byte meanwhile.
inline void TouchForWrite(uint8_t* p) {
  uint8_t v = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (
      !__atomic_compare_exchange_n(p, &v, v, /*weak=*/false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
}

// The touch loop, out of line so that nothing it changes lives in GuardedTouch's frame across
// the sigsetjmp: the page being touched is published through `at`.
__attribute__((noinline)) void TouchPages(uint64_t start, uint64_t end, uint64_t page, bool write,
                                          volatile uint64_t* at) {
  for (uint64_t next = start; next < end; next += page) {
    *at = next;
    uint8_t* p = reinterpret_cast<uint8_t*>(next);
    if (write) {
      TouchForWrite(p);
    } else {
      (void)*static_cast<volatile const uint8_t*>(p);
    }
  }
}

absl::Status GuardedTouch(uint64_t start, uint64_t end, uint64_t page, bool write) {
  InstallGuardHandlers();
  sigjmp_buf env;
  // Read after a siglongjmp: kept in memory, never changed in this frame after sigsetjmp.
  volatile uint64_t at = start;
  volatile bool for_write = write;
  const int sig = sigsetjmp(env, /*savemask=*/1);
  if (sig != 0) {
    return absl::UnavailableError(
        absl::StrFormat("page at 0x%x cannot be made resident (%s while touching it for %s)",
                        static_cast<uint64_t>(at), sig == SIGBUS ? "SIGBUS" : "SIGSEGV",
                        for_write ? "write" : "read"));
  }
  t_guard = &env;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  TouchPages(at, end, page, for_write, &at);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_guard = nullptr;
  return absl::OkStatus();
}

bool ProbePopulate() {
  const long page = sysconf(_SC_PAGESIZE);
  void* p = mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return false;
  const bool ok = madvise(p, page, MADV_POPULATE_READ) == 0;
  munmap(p, page);
  return ok;
}

}  // namespace

bool KernelHasPopulate() {
  static const bool has = ProbePopulate();
  return has;
}

absl::Status MakeResident(uint64_t addr, uint64_t length, bool write, bool use_madvise) {
  if (length == 0) return absl::OkStatus();
  if (addr + length < addr) {
    return absl::InvalidArgumentError(absl::StrFormat("range [0x%x, +%u) wraps", addr, length));
  }
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t start = addr & ~(page - 1);
  const uint64_t end = (addr + length + page - 1) & ~(page - 1);
  if (use_madvise && KernelHasPopulate()) {
    const int advice = write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ;
    for (int attempt = 0;; ++attempt) {
      if (madvise(reinterpret_cast<void*>(start), end - start, advice) == 0) {
        return absl::OkStatus();
      }
      const int err = errno;
      // EINTR: a signal arrived while faulting; the pages done so far stay done.
      if ((err == EINTR || err == EAGAIN) && attempt < 16) continue;
      return base::ErrnoToStatus(
          err, absl::StrFormat("madvise(%s) [0x%x, +%u)",
                               write ? "MADV_POPULATE_WRITE" : "MADV_POPULATE_READ", start,
                               end - start));
    }
  }
  return GuardedTouch(start, end, page, write);
}

}  // namespace regcache::odp::internal