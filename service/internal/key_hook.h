// Test hook: points in a key call where a test stalls the daemon to force an interleaving the
// grant protocol must survive (service/revocation_race_test.cc, tests/e2e/ring_client_test.cc).
// Compiled out under NDEBUG, so release builds pay nothing; the dev, asan and tsan builds keep
// it. Internal to service/.
#ifndef REGCACHE_SERVICE_INTERNAL_KEY_HOOK_H_
#define REGCACHE_SERVICE_INTERNAL_KEY_HOOK_H_

#include <atomic>

namespace regcache::service::internal {

enum class KeyHookPoint {
  kHeldNotRecorded,  // the cache returned a grant (a hold), not yet in the grant table
  kRevokeMarked,     // Invalidate marked the grants it found, before the cache invalidates
  kAnswered,         // a ring request's answer passed its deadline check, not yet written
};

#ifndef NDEBUG
extern std::atomic<void (*)(KeyHookPoint)> key_test_hook;
#define RC_KEY_TEST_HOOK(point)                                                             \
  do {                                                                                      \
    if (auto* hook =                                                                        \
            ::regcache::service::internal::key_test_hook.load(std::memory_order_acquire)) { \
      hook(::regcache::service::internal::KeyHookPoint::point);                             \
    }                                                                                       \
  } while (0)
#else
#define RC_KEY_TEST_HOOK(point) \
  do {                          \
  } while (0)
#endif

}  // namespace regcache::service::internal
#endif  // REGCACHE_SERVICE_INTERNAL_KEY_HOOK_H_
