// The hold protocol's shared parts: how a thread counts its holds on an object in a word of its
// own, and the two fences that let a reaper count every hold without a lock. The cache's
// registrations (cache/internal/holds.h) and the client's cached grants
// (client/internal/grant_cache.h) both run it; the account of why it never loses a hold, with
// the steps of each side, is docs/hold-protocol.md.
//
// In short. An object has a state word that holders read and reapers mark (no new holders),
// a shared signed count, and one HoldWord per thread that holds it, written only by that thread.
//   holder:  read state (live); store word + 1; HolderFence(); read state again:
//            unchanged → held, else store word - 1; HolderFence(); then as a release.
//   release: store word - 1; HolderFence(); read state: marked → the reaper's rule decides
//            whether this was the last hold.
//   reaper:  mark the state; ReaperFence(); sum shared + every thread's word for the object.
// The fences pair (base/asymmetric_fence.h): either the holder's second read sees the mark, or
// the reaper's sum sees the holder's store. So an object is never reaped while held, and the
// last release of a marked object always finds out.
//
// Thread safety: a HoldWord is written only by the thread that owns it; anyone may read it.
#ifndef REGCACHE_BASE_HOLD_PROTOCOL_H_
#define REGCACHE_BASE_HOLD_PROTOCOL_H_

#include <atomic>
#include <cstdint>

#include "base/asymmetric_fence.h"

namespace regcache::base {

// One thread's holds on one object: (tag << 16) | count. The tag names the object's current
// incarnation (a record's slot and generation, an entry's incarnation): a word whose tag is not
// the object's current one counts for nobody, so an owner may reuse it for another object, or
// the same object's next incarnation, once its count is zero. At kMaxCount a holder counts in
// the object's shared count instead.
struct HoldWord {
  static constexpr int kTagBits = 48;
  static constexpr uint64_t kMaxTag = (uint64_t{1} << kTagBits) - 1;
  static constexpr uint32_t kMaxCount = 0xffff;

  static constexpr uint64_t Make(uint64_t tag, uint32_t count) { return (tag << 16) | count; }
  static constexpr uint64_t Tag(uint64_t w) { return w >> 16; }
  static constexpr uint32_t Count(uint64_t w) { return static_cast<uint32_t>(w & kMaxCount); }
  // The holds `w` counts for the incarnation `tag`.
  static constexpr uint32_t HoldsOf(uint64_t w, uint64_t tag) {
    return Tag(w) == tag ? Count(w) : 0;
  }
};

// The holder's fence: after a store to its own word, before it reads the object's state (or
// whatever a reaper marks) again. Also orders the holder's earlier loads of the object's fields
// before that read, so a recheck that finds the state unchanged vouches for them.
// `mode`: the protocol instance's (base/asymmetric_fence.h); both sides of one instance must
// use the same. Without it, the daemon's default.
inline void HolderFence(FenceMode mode) {
  LightFence(mode);
  std::atomic_thread_fence(std::memory_order_acquire);
}
inline void HolderFence() { HolderFence(internal_fence::default_mode); }

// The reaper's fence: after its mark, before it reads any thread's word.
inline void ReaperFence(FenceMode mode) { HeavyFence(mode); }
inline void ReaperFence() { ReaperFence(internal_fence::default_mode); }

}  // namespace regcache::base
#endif  // REGCACHE_BASE_HOLD_PROTOCOL_H_
