#include "hca/device.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace regcache::hca {

const char* KeyBoundsName(KeyBounds b) {
  switch (b) {
    case KeyBounds::kUnknown:
      return "unknown";
    case KeyBounds::kKey:
      return "key";
    case KeyBounds::kCut:
      return "cut";
    case KeyBounds::kAttachment:
      return "attachment";
  }
  return "invalid";
}

std::string AccessToString(AccessFlags access) {
  std::vector<absl::string_view> parts;
  if (access & kLocalRead) parts.push_back("lr");
  if (access & kLocalWrite) parts.push_back("lw");
  if (access & kRemoteRead) parts.push_back("rr");
  if (access & kRemoteWrite) parts.push_back("rw");
  if (access & kRemoteAtomic) parts.push_back("a");
  if (parts.empty()) return "none";
  return absl::StrJoin(parts, "|");
}

absl::StatusOr<PdExport> Device::ExportPd(Pd pd) {
  (void)pd;
  return absl::UnimplementedError(
      absl::StrCat(capabilities().backend, ": the device cannot export its PDs to clients"));
}

absl::StatusOr<Backing> Device::ImportBacking(Pd pd, const ImportedRegion& region) {
  (void)pd;
  (void)region;
  return absl::UnimplementedError(
      absl::StrCat(capabilities().backend, ": the device cannot import memory regions of clients"));
}

absl::StatusOr<Backing> Device::RegisterDmabufBacking(Pd pd, const DmabufRange& buf,
                                                      uint64_t length, uint64_t iova,
                                                      AccessFlags access) {
  (void)pd;
  (void)buf;
  (void)length;
  (void)iova;
  (void)access;
  return absl::UnimplementedError(
      absl::StrCat(capabilities().backend, ": the device cannot register dma-bufs"));
}

}  // namespace regcache::hca