#include "base/thread_index.h"

#include <functional>
#include <queue>
#include <vector>

#include "base/mutex.h"

namespace regcache::base {
namespace internal_thread_index {

constinit thread_local uint32_t tls_index = kUnassigned;

namespace {

struct Pool {
  base::Mutex mu;
  // Freed numbers, lowest first.
  std::priority_queue<uint32_t, std::vector<uint32_t>, std::greater<>> free ABSL_GUARDED_BY(mu);
  uint32_t in_use ABSL_GUARDED_BY(mu) = 0;
  std::atomic<uint32_t> limit{0};  // written under mu
};

Pool& GetPool() {
  static Pool* p = new Pool;  // never destroyed: threads may exit after main
  return *p;
}

// Gives the number back when its thread exits.
struct Owner {
  uint32_t index = kUnassigned;
  ~Owner() {
    tls_index = kNoThreadIndex;  // from here on this thread has none
    if (index >= kMaxThreadIndices) return;
    Pool& p = GetPool();
    base::MutexLock lock(&p.mu);
    p.free.push(index);
    p.in_use--;
  }
};
thread_local Owner tls_owner;

}  // namespace

uint32_t Assign() {
  Pool& p = GetPool();
  uint32_t i;
  {
    base::MutexLock lock(&p.mu);
    if (!p.free.empty()) {
      i = p.free.top();
      p.free.pop();
    } else if (p.limit.load(std::memory_order_relaxed) < kMaxThreadIndices) {
      i = p.limit.load(std::memory_order_relaxed);
      p.limit.store(i + 1, std::memory_order_release);
    } else {
      tls_index = kNoThreadIndex;  // not retried: the thread takes the shared paths
      return kNoThreadIndex;
    }
    p.in_use++;
  }
  tls_owner.index = i;  // constructs the owner: its destructor runs at thread exit
  tls_index = i;
  return i;
}

}  // namespace internal_thread_index

uint32_t ThreadIndexLimit() {
  return internal_thread_index::GetPool().limit.load(std::memory_order_acquire);
}

uint32_t ThreadIndicesInUse() {
  auto& p = internal_thread_index::GetPool();
  base::MutexLock lock(&p.mu);
  return p.in_use;
}

}  // namespace regcache::base