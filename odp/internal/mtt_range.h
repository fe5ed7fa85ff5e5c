// MTT entry arithmetic of a backing (a direct key over [addr, addr + length) with 2^log pages).
//
// Entry i of the key covers the page base + i * P where P = 2^log_page_size and base = addr
// rounded down to P (an unaligned start puts the first bytes in the middle of entry 0, as the
// device computes u = (V - S) + (S mod P), i = u / P). A UMR rewrites whole 64-byte blocks of
// 8 entries (a UMR's translation offset and size must be 64-byte aligned: docs/prm.md, UMR
// WQE), so every range odp/ rewrites is widened to 8-entry blocks; the key's table
// holds round_up(num_entries, 8) entries.
#ifndef REGCACHE_ODP_INTERNAL_MTT_RANGE_H_
#define REGCACHE_ODP_INTERNAL_MTT_RANGE_H_

#include <algorithm>
#include <cstdint>

#include "hca/device.h"

namespace regcache::odp::internal {

inline constexpr uint32_t kEntriesPerBlock = 8;  // 64 bytes of 8-byte MTT entries

// Entries [first, end) of a key.
struct EntryRange {
  uint32_t first = 0;
  uint32_t end = 0;
  bool empty() const { return end <= first; }
  friend bool operator==(const EntryRange&, const EntryRange&) = default;
};

inline uint64_t PageBytes(const hca::Backing& b) { return uint64_t{1} << b.log_page_size; }
inline uint64_t PageBase(const hca::Backing& b) { return b.addr & ~(PageBytes(b) - 1); }
// Entries in the key's table: num_entries rounded up to whole blocks.
inline uint32_t TableEntries(const hca::Backing& b) {
  return (b.num_entries + kEntriesPerBlock - 1) / kEntriesPerBlock * kEntriesPerBlock;
}

// The entries that hold [addr, addr + length) ∩ the backing; empty if they do not intersect.
inline EntryRange EntriesCovering(const hca::Backing& b, uint64_t addr, uint64_t length) {
  const uint64_t lo = std::max(addr, b.addr);
  const uint64_t hi = std::min(addr + length, b.addr + b.length);
  if (length == 0 || addr + length < addr || lo >= hi) return {};
  const uint64_t base = PageBase(b);
  return EntryRange{static_cast<uint32_t>((lo - base) >> b.log_page_size),
                    static_cast<uint32_t>(((hi - 1 - base) >> b.log_page_size) + 1)};
}

// `r` widened to whole 8-entry blocks (never past the key's table).
inline EntryRange AlignToBlocks(const hca::Backing& b, EntryRange r) {
  if (r.empty()) return r;
  const uint32_t first = r.first / kEntriesPerBlock * kEntriesPerBlock;
  const uint32_t end = std::min(
      (r.end + kEntriesPerBlock - 1) / kEntriesPerBlock * kEntriesPerBlock, TableEntries(b));
  return EntryRange{first, end};
}

// The daemon-side bytes entry i maps, clamped to the backing: what must be resident before the
// entry may be published.
inline void EntryBytes(const hca::Backing& b, uint32_t i, uint64_t* addr, uint64_t* length) {
  const uint64_t start = std::max(PageBase(b) + (uint64_t{i} << b.log_page_size), b.addr);
  const uint64_t end =
      std::min(PageBase(b) + (uint64_t{i + 1} << b.log_page_size), b.addr + b.length);
  *addr = start;
  *length = end > start ? end - start : 0;
}

// The DMA address of entry i's page (the sim's identity IOMMU: the daemon's VA).
inline uint64_t EntryDmaAddr(const hca::Backing& b, uint32_t i) {
  return PageBase(b) + (uint64_t{i} << b.log_page_size);
}

}  // namespace regcache::odp::internal
#endif  // REGCACHE_ODP_INTERNAL_MTT_RANGE_H_
