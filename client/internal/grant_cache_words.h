// The words of a GrantCache entry, shared by its translation units (grant_cache.cc: hits,
// inserts, releases; grant_cache_reap.cc: reapers). See grant_cache.h for the protocol.
#ifndef REGCACHE_CLIENT_INTERNAL_GRANT_CACHE_WORDS_H_
#define REGCACHE_CLIENT_INTERNAL_GRANT_CACHE_WORDS_H_

#include <cstdint>

#include "base/hold_protocol.h"

namespace regcache::api::internal::grant_cache_words {

// Entry state word: (incarnation << 32) | flags. Only reapers and Insert write it (under mu_).
inline constexpr uint64_t kLive = 1;  // holds a grant
inline constexpr uint64_t kForgotten =
    2;                                  // revoked or invalidated: no new references; the last reaps
inline constexpr uint64_t kMarked = 4;  // a reaper counts its references: no new ones meanwhile

inline uint32_t Inc(uint64_t s) { return static_cast<uint32_t>(s >> 32); }
inline uint64_t Clean(uint32_t inc) { return (uint64_t{inc} << 32) | kLive; }
// A thread's count word is a base::HoldWord tagged with the incarnation it counts.
using base::HoldWord;
inline uint32_t WordInc(uint64_t w) { return static_cast<uint32_t>(HoldWord::Tag(w)); }
inline uint32_t Count(uint64_t w) { return HoldWord::Count(w); }

}  // namespace regcache::api::internal::grant_cache_words

#endif  // REGCACHE_CLIENT_INTERNAL_GRANT_CACHE_WORDS_H_
