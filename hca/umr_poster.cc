#include "hca/umr_poster.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "hca/prm_convert.h"
#include "hca/status.h"
#include "umr/mkey.h"
#include "umr/prm.h"
#include "umr/segments.h"

namespace regcache::hca {
namespace {

// WQEBBs to reserve for a UMR WQE with `translation_bytes` of inline translation (64-B padded);
// beyond the largest WQE the builder fails, so the reservation stops there.
unsigned UmrWqebbs(size_t translation_bytes) {
  return static_cast<unsigned>(std::min<size_t>(
      umr::kUmrHeadWqebbs + translation_bytes / umr::kWqebb, umr::kMaxWqebbsPerWqe));
}

absl::Status PostError(absl::Status s) {
  // Builder failures are the caller's request breaking its REQUIRES.
  if (s.code() == absl::StatusCode::kResourceExhausted ||
      s.code() == absl::StatusCode::kUnimplemented) {
    return s;
  }
  return absl::InvalidArgumentError(s.message());
}

absl::Status AtomicRefused() {
  return absl::InvalidArgumentError(
      "remote atomic access cannot be granted by a UMR on this device "
      "(umr_modify_atomic_disabled)");
}

// The map's translation in umr's descriptors. kInvalidArgument for a KLM length outside
// (0, 2^31].
absl::Status FillTranslation(const MapRequest& r, umr::MapKeyRequest* m) {
  switch (r.layout) {
    case Layout::kKlm:
      m->mode = umr::AccessMode::kKlm;
      for (const KlmEntry& e : r.klm) {
        if (e.length == 0 || e.length > umr::kMaxKlmByteCount) {
          return absl::InvalidArgumentError(
              absl::StrCat("KLM length ", e.length, " outside (0, 2^31]"));
        }
        m->klm.push_back(ToUmrKlm(e));
      }
      break;
    case Layout::kKsm:
      m->mode = umr::AccessMode::kKsm;
      m->log_entity_size = static_cast<uint8_t>(r.log_entity_size);
      for (const KlmEntry& e : r.klm) m->ksm.push_back(ToUmrKsm(e));
      break;
    case Layout::kMtt:
      m->mode = umr::AccessMode::kMtt;
      m->log_entity_size = static_cast<uint8_t>(r.log_entity_size);
      for (const MttEntry& e : r.mtt) m->mtt.push_back(ToUmrMtt(e));
      break;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<UmrPoster>> UmrPoster::Create(absl::Span<uint8_t> ring,
                                                             UmrPosterOptions options) {
  const size_t wqebbs = ring.size() / umr::kWqebb;
  if (wqebbs < 4 || ring.size() % umr::kWqebb != 0 || (wqebbs & (wqebbs - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a send queue of ", ring.size(), " bytes is not a power of two >= 4 WQEBBs"));
  }
  umr::SqRing::Options o;
  o.sqn = options.sqn;
  o.umr_fence = options.umr_fence;
  absl::StatusOr<umr::SqRing> sq = umr::SqRing::Create(ring, o);
  if (!sq.ok()) return sq.status();
  return std::unique_ptr<UmrPoster>(
      new UmrPoster(std::make_unique<umr::SqRing>(*std::move(sq)), std::move(options)));
}

UmrPoster::UmrPoster(std::unique_ptr<umr::SqRing> sq, UmrPosterOptions options)
    : options_(std::move(options)), sq_(std::move(sq)), shadow_(sq_->num_wqebbs()) {}

UmrPoster::~UmrPoster() {
  if (staging_.lkey != 0 && options_.release_staging) options_.release_staging(staging_.lkey);
}

absl::StatusOr<umr::TranslationStaging> UmrPoster::ReserveStaging(size_t n) {
  if (staging_.bytes.empty()) {
    if (!options_.register_staging) {
      return absl::UnimplementedError("this queue cannot stage a translation (pointer mode)");
    }
    staging_.bytes.assign(options_.staging_bytes, 0);
    absl::StatusOr<Key> lkey = options_.register_staging(absl::MakeSpan(staging_.bytes));
    if (!lkey.ok()) {
      staging_.bytes.clear();
      return lkey.status();
    }
    staging_.lkey = *lkey;
  }
  const uint64_t size = staging_.bytes.size();
  if (n > size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a translation of ", n, " bytes exceeds the queue's staging buffer of ", size));
  }
  if (staging_.in_use.empty()) staging_.head = staging_.tail = 0;  // empty: the whole buffer
  uint64_t start = staging_.head;
  if (start % size + n > size) start += size - start % size;  // contiguous: skip to the start
  if (start + n - staging_.tail > size) {
    return absl::ResourceExhaustedError("translation staging full (maps not yet completed)");
  }
  staging_pending_ = start + n;
  uint8_t* p = staging_.bytes.data() + start % size;
  return umr::TranslationStaging{absl::MakeSpan(p, n), reinterpret_cast<uint64_t>(p),
                                 staging_.lkey};
}

void UmrPoster::ReleaseStaging() {
  while (!staging_.in_use.empty() &&
         static_cast<int32_t>(staging_.in_use.front().first - retired_) < 0) {
    staging_.tail = staging_.in_use.front().second;
    staging_.in_use.pop_front();
  }
}

absl::Status UmrPoster::Post(
    uint64_t request_id, const PostOptions& options, unsigned max_wqebbs, bool is_umr,
    const std::function<absl::StatusOr<umr::WqeSize>(const umr::WqeHeader&, absl::Span<uint8_t>)>&
        build) {
  const umr::WqeHeader header =
      sq_->NextHeader(is_umr, options.signaled, options.fence, max_wqebbs);
  absl::StatusOr<absl::Span<uint8_t>> buf = sq_->Begin(retired_, max_wqebbs);
  if (!buf.ok()) return buf.status();
  absl::StatusOr<umr::WqeSize> size = build(header, *buf);
  if (!size.ok()) return PostError(size.status());
  const uint32_t counter = sq_->producer();
  absl::StatusOr<uint32_t> committed = sq_->Commit(*size, header, is_umr);
  if (!committed.ok()) return committed.status();
  if (staging_pending_ != 0) {
    staging_.head = staging_pending_;
    staging_.in_use.emplace_back(counter, staging_.head);
    staging_pending_ = 0;
  }
  last_wqe_ = counter;
  shadow_[counter & (depth() - 1)] = Shadow{request_id, options.signaled, size->wqebbs};
  return absl::OkStatus();
}

absl::Status UmrPoster::PostMap(uint64_t request_id, const MapRequest& r) {
  umr::MapKeyRequest m;
  m.key = umr::MakeKey(KeyIndex(r.key), r.new_variant);
  m.access = ToMkeyAccess(r.access | kLocalRead);
  m.start_addr = r.start_addr;
  m.length = r.length;
  m.length64 = r.length64;
  m.en_rinval = r.remote_invalidate;
  m.check_free = r.require_free ? umr::FreeCheck::kMustBeFree : umr::FreeCheck::kNone;
  m.modify = options_.modify;
  if (m.access.remote_atomic && !m.modify.atomic) return AtomicRefused();
  RETURN_IF_ERROR(FillTranslation(r, &m));
  const size_t n = m.mtt.size() + m.klm.size() + m.ksm.size();
  const size_t padded = umr::PaddedTranslationBytes(m.mode, n);
  const size_t klm_limit = std::min<size_t>(options_.max_inline_klm, umr::kMaxInlineKlms);
  const size_t inline_limit = m.mode == umr::AccessMode::kMtt
                                  ? std::min<size_t>(2 * klm_limit, umr::kMaxInlineMtts)
                                  : klm_limit;
  if (n <= inline_limit) {
    return Post(request_id, r.options, UmrWqebbs(padded), true,
                [&m](const umr::WqeHeader& h, absl::Span<uint8_t> out) {
                  // Capacity is the device's check (MW_BIND), not the poster's.
                  return umr::BuildMapKey(h, m, /*capacity_entries=*/UINT32_MAX, out);
                });
  }
  // Too long to travel inline: by pointer, from the queue's staging buffer.
  ASSIGN_OR_RETURN(const umr::TranslationStaging staging, ReserveStaging(padded));
  constexpr unsigned kPointerWqebbs = (umr::kUmrHeadDs + 1 + 3) / 4;  // DS 9
  absl::Status s = Post(request_id, r.options, kPointerWqebbs, true,
                        [&](const umr::WqeHeader& h, absl::Span<uint8_t> out) {
                          return umr::BuildMapKeyByPointer(h, m, UINT32_MAX, staging, out);
                        });
  staging_pending_ = 0;  // committed by Post, or dropped
  return s;
}

absl::Status UmrPoster::PostUpdate(uint64_t request_id, const UpdateRequest& r) {
  if (r.fields == 0) return absl::InvalidArgumentError("UpdateRequest with no fields");
  umr::UpdateKeyRequest u;
  u.key = umr::MakeKey(KeyIndex(r.key), r.new_variant);
  u.check_free = umr::FreeCheck::kMustNotBeFree;
  u.fields.access = ToMkeyAccess(r.access | kLocalRead);
  u.fields.start_addr = r.start_addr;
  u.fields.len = r.length;
  u.fields.length64 = r.length64;
  u.fields.mkey_7_0 = r.new_variant;
  u.fields.en_rinval = r.remote_invalidate;
  if (r.fields & kUpdateAccess) {
    if ((r.access & kRemoteAtomic) && !options_.modify.atomic) return AtomicRefused();
    u.mask |= options_.modify.atomic ? umr::kMaskAccess : umr::kMaskAccess & ~umr::kMaskA;
  }
  if (r.fields & kUpdateRange) u.mask |= umr::kMaskLen | umr::kMaskStartAddr;
  if (r.fields & kUpdateVariant) u.mask |= umr::kMaskKey;
  if (r.fields & kUpdateRemoteInvalidate) u.mask |= umr::kMaskEnRinval;
  return Post(request_id, r.options, umr::kUmrHeadWqebbs, true,
              [&u](const umr::WqeHeader& h, absl::Span<uint8_t> out) {
                return umr::BuildUpdateKey(h, u, out);
              });
}

absl::Status UmrPoster::PostInvalidate(uint64_t request_id, Key key, PostOptions options) {
  umr::LocalInvalidateRequest r;
  r.key = key;
  return Post(request_id, options, umr::kUmrHeadWqebbs, true,
              [&r](const umr::WqeHeader& h, absl::Span<uint8_t> out) {
                return umr::BuildLocalInvalidate(h, r, out);
              });
}

absl::Status UmrPoster::PostRewriteTranslation(uint64_t request_id, Key key, uint32_t first_entry,
                                               absl::Span<const MttEntry> entries,
                                               PostOptions options) {
  constexpr size_t kBlock = umr::EntriesPer64B(umr::AccessMode::kMtt);
  if (entries.empty() || entries.size() % kBlock != 0 || first_entry % kBlock != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MTT rewrite [", first_entry, ", +", entries.size(), ") is not whole blocks of 8 entries"));
  }
  umr::RewriteTranslationRequest r;
  r.key = key;
  r.mode = umr::AccessMode::kMtt;
  r.first_entry = first_entry;
  r.check_free = umr::FreeCheck::kMustNotBeFree;
  for (const MttEntry& e : entries) r.mtt.push_back(ToUmrMtt(e));
  const unsigned wqebbs =
      UmrWqebbs(umr::PaddedTranslationBytes(umr::AccessMode::kMtt, entries.size()));
  const bool extended = options_.extended_translation_offset;
  return Post(request_id, options, wqebbs, true,
              [&r, extended](const umr::WqeHeader& h, absl::Span<uint8_t> out) {
                return umr::BuildRewriteTranslation(h, r, extended, out);
              });
}

absl::Status UmrPoster::PostNop(uint64_t request_id) {
  PostOptions o;
  o.signaled = true;
  return Post(
      request_id, o, 1, /*is_umr=*/false,
      [](const umr::WqeHeader& h, absl::Span<uint8_t> out) { return umr::BuildNop(h, out); });
}

bool UmrPoster::Retire(const umr::Cqe& cqe, Completion* out) {
  const uint16_t wqe_counter = cqe.wqe_counter;
  const uint32_t counter =
      retired_ + static_cast<uint16_t>(wqe_counter - static_cast<uint16_t>(retired_));
  const uint32_t slot = counter & (depth() - 1);
  const Shadow& sh = shadow_[slot];
  retired_ = counter + sh.wqebbs;
  ReleaseStaging();
  const bool error = cqe.is_error();
  if (!error && !sh.want_completion) return false;  // forced signal: retire only
  out->request_id = sh.request_id;
  if (!error) {
    out->syndrome = Syndrome::kNone;
    out->vendor_syndrome = 0;
    out->status = absl::OkStatus();
    return true;
  }
  out->syndrome = static_cast<Syndrome>(cqe.syndrome);
  out->vendor_syndrome = cqe.vendor_err_synd;
  const std::string reason = options_.error_reason
                                 ? options_.error_reason(slot)
                                 : absl::StrFormat("vendor syndrome 0x%02x", cqe.vendor_err_synd);
  out->status = DeviceError(out->syndrome, absl::StrFormat("WQE %u: %s", wqe_counter, reason),
                            out->vendor_syndrome);
  return true;
}

}  // namespace regcache::hca
