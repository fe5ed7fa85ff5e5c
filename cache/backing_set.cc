#include "cache/backing_set.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_format.h"
#include "base/error_reason.h"
#include "base/status_macros.h"

namespace regcache::cache {

absl::Status BackingSet::Add(const BackingRecord& record) {
  RETURN_IF_ERROR(CheckFree(record.va, record.length));
  by_va_.emplace(record.va, record);
  va_of_[record.id] = record.va;
  total_bytes_ += record.length;
  ++generation_;
  return absl::OkStatus();
}

absl::Status BackingSet::CheckFree(uint64_t va, uint64_t length) const {
  const uint64_t end = va + length;
  // The first backing starting at or after va, and the one before it.
  auto next = by_va_.lower_bound(va);
  if (next != by_va_.end() && next->first < end) {
    return absl::AlreadyExistsError(absl::StrFormat(
        "memory [0x%x, 0x%x) overlaps attached memory at 0x%x", va, end, next->first));
  }
  if (next != by_va_.begin()) {
    auto prev = std::prev(next);
    if (prev->second.va + prev->second.length > va) {
      return absl::AlreadyExistsError(
          absl::StrFormat("memory [0x%x, 0x%x) overlaps attached memory [0x%x, 0x%x)", va, end,
                          prev->second.va, prev->second.va + prev->second.length));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<BackingRecord> BackingSet::Remove(BackingId id) {
  auto v = va_of_.find(id);
  if (v == va_of_.end()) {
    return absl::NotFoundError(absl::StrFormat("no attached memory with id %d", id));
  }
  auto it = by_va_.find(v->second);
  BackingRecord r = it->second;
  by_va_.erase(it);
  va_of_.erase(v);
  total_bytes_ -= r.length;
  ++generation_;
  return r;
}

BackingRecord* BackingSet::Find(BackingId id) {
  auto v = va_of_.find(id);
  return v == va_of_.end() ? nullptr : &by_va_.find(v->second)->second;
}

absl::StatusOr<KlmLayout> BackingSet::Layout(uint64_t va, uint64_t length, hca::AccessFlags access,
                                             BackingIds* used, BackingRefs* refs,
                                             const BackingRecord** last) const {
  KlmLayout entries;
  if (used != nullptr) used->clear();
  if (refs != nullptr) refs->clear();
  // Each backing the layout uses, recorded as asked; and its entry of n bytes at address `at`.
  const auto use = [&](const BackingRecord& b) {
    if (used != nullptr) used->push_back(b.id);
    if (refs != nullptr) refs->push_back(&b);
  };
  const auto piece = [](const BackingRecord& b, uint64_t at, uint64_t n) {
    return hca::KlmEntry{b.gate != 0 ? b.gate : b.device.key, b.device_addr + (at - b.va), n};
  };
  const uint64_t end = va + length;
  // The range inside the backing the previous layout started in: no search. Only when one
  // entry maps it, and nothing would be refused (else the path below says why).
  if (last != nullptr && *last != nullptr) {
    const BackingRecord& b = **last;
    if (b.va <= va && end <= b.va + b.length && length <= kMaxKlmEntryBytes && !b.removing &&
        (access & ~b.access) == 0) {
      use(b);
      entries.push_back(piece(b, va, length));
      return entries;
    }
  }
  // The backing containing va is the last one starting at or before it.
  auto it = by_va_.upper_bound(va);
  // Both refusals name the first address attached memory does not cover.
  const auto not_attached = [&](uint64_t outside, std::string message) {
    return base::WithReason(absl::OutOfRangeError(std::move(message)),
                            base::reason::kRangeNotAttached,
                            {{"addr", absl::StrFormat("0x%x", va)},
                             {"length", absl::StrFormat("%d", length)},
                             {"first_outside", absl::StrFormat("0x%x", outside)}});
  };
  if (it == by_va_.begin()) {
    return not_attached(va, absl::StrFormat("address 0x%x is not in attached memory", va));
  }
  --it;
  uint64_t cursor = va;
  while (cursor < end) {
    if (it == by_va_.end() || it->second.va > cursor ||
        it->second.va + it->second.length <= cursor) {
      return not_attached(
          cursor, absl::StrFormat(
                      "range [0x%x, 0x%x) is not covered by attached memory: 0x%x is outside it",
                      va, end, cursor));
    }
    const BackingRecord& b = it->second;
    if (b.removing) {
      return absl::FailedPreconditionError(
          absl::StrFormat("attached memory at 0x%x is being detached", b.va));
    }
    if ((access & ~b.access) != 0) {
      return absl::PermissionDeniedError(
          absl::StrFormat("attached memory at 0x%x allows %s, the request needs %s", b.va,
                          hca::AccessToString(b.access), hca::AccessToString(access)));
    }
    const uint64_t piece_end = std::min(end, b.va + b.length);
    use(b);
    if (last != nullptr && cursor == va) *last = &b;
    while (cursor < piece_end) {
      const uint64_t n = std::min(piece_end - cursor, kMaxKlmEntryBytes);
      entries.push_back(piece(b, cursor, n));
      cursor += n;
    }
    ++it;
  }
  return entries;
}

}  // namespace regcache::cache