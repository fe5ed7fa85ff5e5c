// The key calls of one session (register, window, re-register, release, invalidate, prefetch,
// query) on the daemon's cache, with the session's grant table around each: whichever
// transport a call came by, every grant gets its state slot and every revocation sets the
// state word first (service/internal/grant_table.h). Internal to service/.
//
// Callers hand in the Session itself: the daemon's gRPC side after pinning it (SessionTable::
// Pin), a session's ring worker directly — the worker runs only while its session is open
// (the daemon stops it before it closes the session), so the ring's hot path takes no lock
// and no lookup for it. Every call refuses with kUnavailable once the daemon drains.
//
// Thread safety: any thread; the cache and the grant table lock for themselves.
#ifndef REGCACHE_SERVICE_INTERNAL_SESSION_KEYS_H_
#define REGCACHE_SERVICE_INTERNAL_SESSION_KEYS_H_

#include <atomic>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cache/reg_cache.h"
#include "hca/device.h"
#include "odp/servicer.h"
#include "service/internal/grant_table.h"
#include "service/internal/key_hook.h"
#include "service/internal/ring_server.h"
#include "service/internal/session_table.h"

namespace regcache::service::internal {

// The grant of a key call, without its state slot (for the transports that keep their own record
// of it), one call's or a batch's.
absl::StatusOr<cache::KeyGrant> GrantOf(absl::StatusOr<SlottedGrant> g);
std::vector<absl::StatusOr<cache::KeyGrant>> GrantsOf(std::vector<absl::StatusOr<SlottedGrant>> g);

class SessionKeys final : public KeyCalls {
 public:
  // `cache`, `servicer` (null on a device without on-demand paging), `device` and `draining`
  // must outlive this object.
  SessionKeys(cache::RegCache* cache, odp::Servicer* servicer, const hca::Device* device,
              const std::atomic<bool>* draining);

  absl::StatusOr<SlottedGrant> Register(Session& s, uint64_t va, uint64_t length,
                                        hca::AccessFlags access,
                                        std::optional<odp::PrefetchMode> prefetch) override;
  std::vector<absl::StatusOr<SlottedGrant>> RegisterBatch(
      Session& s, absl::Span<const RegisterCall> calls) override;
  absl::StatusOr<SlottedGrant> Window(Session& s, cache::Handle parent, uint64_t offset,
                                      uint64_t length, hca::AccessFlags access) override;
  absl::StatusOr<SlottedGrant> Reregister(Session& s, cache::Handle handle, uint64_t va,
                                          uint64_t length, hca::AccessFlags access) override;
  absl::Status Release(Session& s, cache::Handle handle) override;
  absl::Status Invalidate(Session& s, cache::Handle handle) override;
  absl::Status Prefetch(Session& s, uint64_t va, uint64_t length, bool write,
                        std::optional<odp::PrefetchMode> mode) override;
  absl::StatusOr<cache::RegistrationInfo> Query(Session& s, cache::Handle handle) override;

 private:
  absl::Status Open() const;  // kUnavailable while draining
  // Open(), and kUnavailable (DEVICE_FAILED) once the device has failed: no key can be made.
  absl::Status Usable() const;
  absl::Status NoOdp() const;
  // Records `g` in the session's grant table (Granted, asking the cache whether it revoked the
  // key meanwhile).
  absl::StatusOr<SlottedGrant> Record(Session& s, absl::StatusOr<cache::KeyGrant> g,
                                      cache::Handle parent);
  absl::StatusOr<cache::KeyGrant> RegisterIn(Session& s, uint64_t va, uint64_t length,
                                             hca::AccessFlags access,
                                             std::optional<odp::PrefetchMode> prefetch);

  cache::RegCache* const cache_;
  odp::Servicer* const servicer_;
  const hca::Device* const device_;
  const std::atomic<bool>* const draining_;
};

}  // namespace regcache::service::internal
#endif  // REGCACHE_SERVICE_INTERNAL_SESSION_KEYS_H_
