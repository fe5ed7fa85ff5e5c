// The device-wide memory of key variants. A pooled key's index is the device's; when a key is
// destroyed (a tenant closes, or recovery gives it up) and the device later hands the same index
// to a new key — of any tenant — that key starts again at variant 0 on the device. The ledger
// remembers the last variant every destroyed index carried, and a key created at that index is
// taken as still carrying it, so its first map gives it the NEXT variant: the full key value
// keeps moving device-wide instead of repeating values other tenants' clients may still hold.
// A value can recur only after its index has been handed out 256 times (docs/architecture.md,
// Key lifecycle).
//
// Only for devices whose maps choose the variant (UMR). On memory-window devices the device
// picks every rkey itself (Capabilities::memory_windows) and the ledger is not used.
//
// Memory: two bytes per key index up to the highest one destroyed (at most the device's key
// table: 32 MiB for 2^24 keys), grown on demand.
//
// Thread safety: every method may be called from any thread.
#ifndef REGCACHE_CACHE_INTERNAL_KEY_LEDGER_H_
#define REGCACHE_CACHE_INTERNAL_KEY_LEDGER_H_

#include <cstdint>
#include <vector>

#include "base/mutex.h"
#include "hca/device.h"

namespace regcache::cache {

class KeyLedger {
 public:
  // `key` (its current full value, the last variant it was handed out with) is being destroyed.
  void Destroyed(hca::Key key) ABSL_LOCKS_EXCLUDED(mu_);
  // A key the device just created: the full value to treat it as (same index, the variant its
  // index last carried; unchanged for an index never destroyed).
  hca::Key Resume(hca::Key created) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  base::Mutex mu_;
  // By index: last variant + 1 (0: never destroyed), so a fresh entry needs no second array.
  std::vector<uint16_t> last_ ABSL_GUARDED_BY(mu_);
};

}  // namespace regcache::cache
#endif  // REGCACHE_CACHE_INTERNAL_KEY_LEDGER_H_
