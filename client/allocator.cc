// The registered-memory allocator (include/regcache/regcache_alloc.h): a jemalloc arena whose
// extent hooks carve extents out of one region of the session's attached memory.
//
// The hooks' contract (man jemalloc, "arena.<i>.extent_hooks"), and our answers:
//   alloc         carve from the region: a free range first (first fit), else the bump pointer.
//                 Fresh memory (never handed out since the region was allocated: a new memfd
//                 reads as zeros) is reported zeroed; reused memory is zeroed only on request.
//                 Always committed. NULL when nothing fits: jemalloc then fails the malloc.
//   dalloc        true = opt out: jemalloc keeps the extent ("retained") and reuses it. Memory of
//                 the region never leaves the arena while it lives, so it stays attached.
//   destroy       (only when the arena is destroyed, regcache_alloc_fini) back to the free list.
//   commit        false = success: the region is always committed.
//   decommit      true = opt out: nothing to do, the pages stay.
//   purge_lazy,   NULL = opt out. Purging cannot help here: MADV_DONTNEED on a MAP_SHARED memfd
//   purge_forced  neither frees nor zeroes its pages (the file keeps them), and the daemon holds
//                 the memory attached (pinned, for non-ODP memory) anyway.
//   split, merge  false = allowed: every extent lies in the one mapping of the region.
#include <jemalloc/jemalloc.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "base/mutex.h"
#include "regcache/regcache.h"
#include "regcache/regcache_alloc.h"

namespace regcache::api {
namespace {

constexpr uint64_t kMinArenaBytes = uint64_t{8} << 20;
constexpr uint64_t kPage = 4096;
constexpr size_t kMaxFreeRanges = 64;

uintptr_t AlignUp(uintptr_t p, size_t alignment) {
  return (p + alignment - 1) & ~(static_cast<uintptr_t>(alignment) - 1);
}

// The region's address space: [base, end). Below `bump` everything was handed out once (and is
// either in use by jemalloc or on the free list); at and above `fresh` nothing ever was.
class Region {
 public:
  void Reset(uintptr_t base, size_t length) ABSL_LOCKS_EXCLUDED(mu_) {
    base::MutexLock l(&mu_);
    base_ = bump_ = fresh_ = base;
    end_ = base + length;
    free_count_ = 0;
    dropped_ = 0;
  }

  // An extent of `size` bytes aligned to `alignment`, at exactly `want` unless that is 0; 0 when
  // none fits. *fresh: whether the extent was never handed out before (reads as zeros).
  uintptr_t Carve(uintptr_t want, size_t size, size_t alignment, bool* fresh)
      ABSL_LOCKS_EXCLUDED(mu_) {
    base::MutexLock l(&mu_);
    for (size_t i = 0; i < free_count_; ++i) {
      Range r = free_[i];
      uintptr_t p = want != 0 ? want : AlignUp(r.begin, alignment);
      if (p < r.begin || p - r.begin > r.length || r.length - (p - r.begin) < size) continue;
      free_[i] = free_[--free_count_];
      PutLocked(r.begin, p - r.begin);
      PutLocked(p + size, r.begin + r.length - (p + size));
      *fresh = p >= fresh_;
      fresh_ = p + size > fresh_ ? p + size : fresh_;
      return p;
    }
    uintptr_t p = want != 0 ? want : AlignUp(bump_, alignment);
    if (p < bump_ || p > end_ || end_ - p < size) return 0;
    PutLocked(bump_, p - bump_);  // the alignment gap
    bump_ = p + size;
    *fresh = p >= fresh_;
    fresh_ = bump_ > fresh_ ? bump_ : fresh_;
    return p;
  }

  void Give(uintptr_t begin, size_t length) ABSL_LOCKS_EXCLUDED(mu_) {
    base::MutexLock l(&mu_);
    PutLocked(begin, length);
  }

  bool Contains(uintptr_t p, uint64_t length) ABSL_LOCKS_EXCLUDED(mu_) {
    base::MutexLock l(&mu_);
    return p >= base_ && p <= end_ && end_ - p >= length;
  }

  // Bytes below the bump pointer: what jemalloc has taken, alignment gaps included.
  uint64_t carved() ABSL_LOCKS_EXCLUDED(mu_) {
    base::MutexLock l(&mu_);
    return bump_ - base_;
  }

 private:
  struct Range {
    uintptr_t begin = 0;
    size_t length = 0;
  };

  // Puts [begin, +length) back: onto the bump pointer when it ends there, else on the free list.
  // A full free list drops the range (it stays unused until the arena is destroyed): jemalloc
  // retains what it frees, so only alignment gaps and a destroyed arena's extents come here.
  void PutLocked(uintptr_t begin, size_t length) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (length == 0) return;
    if (begin + length == bump_) {
      bump_ = begin;
      return;
    }
    if (free_count_ == kMaxFreeRanges) {
      dropped_ += length;
      return;
    }
    free_[free_count_++] = Range{begin, length};
  }

  base::Mutex mu_;
  uintptr_t base_ ABSL_GUARDED_BY(mu_) = 0;
  uintptr_t end_ ABSL_GUARDED_BY(mu_) = 0;
  uintptr_t bump_ ABSL_GUARDED_BY(mu_) = 0;
  uintptr_t fresh_ ABSL_GUARDED_BY(mu_) = 0;
  Range free_[kMaxFreeRanges] ABSL_GUARDED_BY(mu_);
  size_t free_count_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
};

// The process's one allocator. Never destroyed: jemalloc may call the hooks until exit.
struct Allocator {
  std::atomic<bool> ready{false};
  unsigned arena = 0;  // written by init/fini only (which nothing may race)
  regcache_client_t* client = nullptr;
  regcache_memory_t memory{};
  Region region;
};

Allocator& State() {
  static Allocator* const state = new Allocator;
  return *state;
}

void* HookAlloc(extent_hooks_t*, void* new_addr, size_t size, size_t alignment, bool* zero,
                bool* commit, unsigned) {
  bool fresh = false;
  uintptr_t p =
      State().region.Carve(reinterpret_cast<uintptr_t>(new_addr), size, alignment, &fresh);
  if (p == 0) return nullptr;
  if (*zero && !fresh) std::memset(reinterpret_cast<void*>(p), 0, size);
  if (fresh) *zero = true;
  *commit = true;
  return reinterpret_cast<void*>(p);
}

bool HookDalloc(extent_hooks_t*, void*, size_t, bool, unsigned) { return true; }

void HookDestroy(extent_hooks_t*, void* addr, size_t size, bool, unsigned) {
  State().region.Give(reinterpret_cast<uintptr_t>(addr), size);
}

bool HookCommit(extent_hooks_t*, void*, size_t, size_t, size_t, unsigned) { return false; }

bool HookDecommit(extent_hooks_t*, void*, size_t, size_t, size_t, unsigned) { return true; }

bool HookSplit(extent_hooks_t*, void*, size_t, size_t, size_t, bool, unsigned) { return false; }

bool HookMerge(extent_hooks_t*, void*, size_t, void*, size_t, bool, unsigned) { return false; }

// jemalloc keeps the pointer for the arena's life: static storage.
extent_hooks_t hooks = {HookAlloc,
                        HookDalloc,
                        HookDestroy,
                        HookCommit,
                        HookDecommit,
                        /*purge_lazy=*/nullptr,
                        /*purge_forced=*/nullptr,
                        HookSplit,
                        HookMerge};

regcache_code_t Error(regcache_code_t code, const char* fmt, const char* arg, int value) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), fmt, arg, value);
  return regcache_set_last_error(code, buf);
}

}  // namespace
}  // namespace regcache::api

using regcache::api::State;

extern "C" {

regcache_code_t regcache_alloc_init(regcache_client_t* client, uint64_t arena_bytes) {
  namespace ra = regcache::api;
  ra::Allocator& a = State();
  if (client == nullptr)
    return regcache_set_last_error(REGCACHE_INVALID_ARGUMENT, "client is NULL");
  if (a.ready.load()) {
    return regcache_set_last_error(REGCACHE_FAILED_PRECONDITION,
                                   "regcache_alloc_init: already set up");
  }
  if (arena_bytes < ra::kMinArenaBytes) {
    return ra::Error(REGCACHE_INVALID_ARGUMENT, "regcache_alloc_init: %s below %d MiB",
                     "arena_bytes", static_cast<int>(ra::kMinArenaBytes >> 20));
  }
  arena_bytes = (arena_bytes + ra::kPage - 1) & ~(ra::kPage - 1);
  regcache_memory_t memory;
  regcache_code_t code = regcache_allocate(client, arena_bytes, 0, 0, &memory);
  if (code != REGCACHE_OK) return code;  // the daemon's message is the last error
  a.region.Reset(reinterpret_cast<uintptr_t>(memory.data), memory.length);
  unsigned arena = 0;
  size_t arena_size = sizeof(arena);
  extent_hooks_t* hooks = &ra::hooks;
  int err = mallctl("arenas.create", &arena, &arena_size, &hooks, sizeof(hooks));
  if (err != 0) {
    regcache_detach(client, &memory);
    return ra::Error(REGCACHE_INTERNAL, "jemalloc %s failed: errno %d", "arenas.create", err);
  }
  a.client = client;
  a.memory = memory;
  a.arena = arena;
  a.ready.store(true, std::memory_order_release);
  return regcache_set_last_error(REGCACHE_OK, nullptr);
}

void* regcache_malloc(size_t size) {
  regcache::api::Allocator& a = State();
  if (!a.ready.load(std::memory_order_acquire)) {
    errno = EINVAL;
    return nullptr;
  }
  void* p = mallocx(size == 0 ? 1 : size, MALLOCX_ARENA(a.arena) | MALLOCX_TCACHE_NONE);
  if (p == nullptr) errno = ENOMEM;
  return p;
}

void regcache_free(void* ptr) {
  if (ptr != nullptr) dallocx(ptr, MALLOCX_TCACHE_NONE);
}

regcache_code_t regcache_malloc_key(const void* ptr, uint64_t length, uint32_t access,
                                    regcache_key_t* out) {
  regcache::api::Allocator& a = State();
  if (!a.ready.load(std::memory_order_acquire)) {
    return regcache_set_last_error(REGCACHE_FAILED_PRECONDITION,
                                   "regcache_malloc_key: regcache_alloc_init has not run");
  }
  if (ptr == nullptr) return regcache_set_last_error(REGCACHE_INVALID_ARGUMENT, "ptr is NULL");
  if (!a.region.Contains(reinterpret_cast<uintptr_t>(ptr), length)) {
    return regcache_set_last_error(REGCACHE_OUT_OF_RANGE,
                                   "regcache_malloc_key: the range is not regcache_malloc memory");
  }
  return regcache_register(a.client, ptr, length, access, REGCACHE_PREFETCH_NONE, out);
}

regcache_code_t regcache_alloc_info(regcache_alloc_info_t* out) {
  regcache::api::Allocator& a = State();
  if (out == nullptr) return regcache_set_last_error(REGCACHE_INVALID_ARGUMENT, "out is NULL");
  if (!a.ready.load(std::memory_order_acquire)) {
    return regcache_set_last_error(REGCACHE_FAILED_PRECONDITION,
                                   "regcache_alloc_info: regcache_alloc_init has not run");
  }
  *out = regcache_alloc_info_t{};
  out->memory_id = a.memory.id;
  out->base = a.memory.data;
  out->length = a.memory.length;
  out->carved = a.region.carved();
  out->arena = a.arena;
  return regcache_set_last_error(REGCACHE_OK, nullptr);
}

regcache_code_t regcache_alloc_fini(void) {
  namespace ra = regcache::api;
  ra::Allocator& a = State();
  if (!a.ready.load()) {
    return regcache_set_last_error(REGCACHE_FAILED_PRECONDITION,
                                   "regcache_alloc_fini: regcache_alloc_init has not run");
  }
  char name[64];
  std::snprintf(name, sizeof(name), "arena.%u.destroy", a.arena);
  int err = mallctl(name, nullptr, nullptr, nullptr, 0);
  if (err != 0) return ra::Error(REGCACHE_INTERNAL, "jemalloc %s failed: errno %d", name, err);
  a.ready.store(false);
  regcache_code_t code = regcache_detach(a.client, &a.memory);
  a.client = nullptr;
  a.memory = regcache_memory_t{};
  return code;
}

}  // extern "C"
