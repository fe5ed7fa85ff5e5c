// The backing memory of one tenant, and the KLM layout of a range over it.
//
// A backing is memory the tenant attached: `length` bytes that the tenant sees at `va` (its own
// virtual addresses) and that the device reaches through `key` at `device_addr`, the address of
// `va` in the key's address space: the daemon's mapping of the same bytes (equal to `va` when the
// cache is embedded in the process), or `va` itself on a memory-window device, whose backings are
// registered at the tenant's addresses. Backings of a tenant never overlap in `va`.
//
// Thread safety: none; the tenant serializes access.
#ifndef REGCACHE_CACHE_BACKING_SET_H_
#define REGCACHE_CACHE_BACKING_SET_H_

#include <cstdint>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "hca/device.h"
#include "umr/prm.h"

namespace regcache::cache {

using BackingId = uint64_t;
// A layout's KLM entries and the backings it uses. Most ranges lie in one attached region, or
// across two: held inline, so laying out such a range allocates nothing.
using KlmLayout = absl::InlinedVector<hca::KlmEntry, 2>;
using BackingIds = absl::InlinedVector<BackingId, 2>;
struct BackingRecord;
// The backings of a layout themselves: valid while the set does not change (generation()).
using BackingRefs = absl::InlinedVector<const BackingRecord*, 2>;

struct BackingRecord {
  BackingId id = 0;
  uint64_t va = 0;
  uint64_t length = 0;
  uint64_t device_addr = 0;
  hca::Backing device;          // the direct key and its geometry
  hca::Key gate = 0;            // the key layouts name instead of device.key (0: none; gates.h)
  hca::AccessFlags access = 0;  // rights registrations over it may have
  uint64_t users = 0;           // registrations whose layout uses it
  bool removing = false;        // being detached: new layouts refuse it
};

// Largest byte count of one KLM entry (the PRM's 2 GiB).
inline constexpr uint64_t kMaxKlmEntryBytes = umr::kMaxKlmByteCount;

class BackingSet {
 public:
  // Adds a backing. kAlreadyExists if [va, va+length) overlaps an existing backing.
  // REQUIRES: length > 0 and va + length does not overflow (the caller validated).
  absl::Status Add(const BackingRecord& record);

  // OK if [va, va+length) overlaps no backing, else kAlreadyExists naming the overlap.
  absl::Status CheckFree(uint64_t va, uint64_t length) const;

  // Removes and returns it. kNotFound for an unknown id.
  absl::StatusOr<BackingRecord> Remove(BackingId id);

  BackingRecord* Find(BackingId id);
  const absl::btree_map<uint64_t, BackingRecord>& by_va() const { return by_va_; }

  // Marks `b`, one of this set's backings (Find), as being detached: layouts refuse it from now
  // on.
  void MarkRemoving(BackingRecord& b) {
    b.removing = true;
    ++generation_;
  }
  // Moves on with every change a layout could see (Add, Remove, MarkRemoving): a layout made at
  // one generation is still the layout at the same generation.
  uint64_t generation() const { return generation_; }

  // The KLM entries that map [va, va+length) through the backings, in address order, each at
  // most kMaxKlmEntryBytes: a range spanning two adjacent backings gets (at least) two entries.
  // `used`, if given, receives the ids of the backings involved, in order.
  // Errors: kOutOfRange naming the first uncovered address when the backings do not cover the
  // range; kPermissionDenied when a covering backing lacks some of `access`;
  // kFailedPrecondition when a covering backing is being detached.
  // `refs`, if given, receives the backings themselves, in the same order.
  // `last`, if given, names a backing of this set (or is null) tried before the search, and
  // receives the one the range starts in: layouts made one after another with the set
  // unchanged (one hold of the tenant's lock) skip the search while their ranges stay in one
  // backing.
  // REQUIRES: length > 0, no overflow.
  absl::StatusOr<KlmLayout> Layout(uint64_t va, uint64_t length, hca::AccessFlags access,
                                   BackingIds* used, BackingRefs* refs = nullptr,
                                   const BackingRecord** last = nullptr) const;

  // `b`, a backing of this set reached through a layout's refs while the set was unchanged
  // since (generation()), to change what the set lets its owner change (users).
  BackingRecord& Own(const BackingRecord* b) { return const_cast<BackingRecord&>(*b); }

  uint64_t total_bytes() const { return total_bytes_; }
  size_t size() const { return by_va_.size(); }

 private:
  absl::btree_map<uint64_t, BackingRecord> by_va_;  // key: va
  absl::flat_hash_map<BackingId, uint64_t> va_of_;  // id -> key in by_va_
  uint64_t total_bytes_ = 0;
  uint64_t generation_ = 0;
};

}  // namespace regcache::cache
#endif  // REGCACHE_CACHE_BACKING_SET_H_
