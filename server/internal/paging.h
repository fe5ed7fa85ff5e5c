// Paging of the List calls (ListKeys, ListMemory, ListEndpoints, Sessions; docs/api.md): a page
// holds at most page_size items (0: kDefaultPageSize; above kMaxPageSize: kMaxPageSize; negative:
// INVALID_ARGUMENT) in ascending id order, and the response's next_page_token names the last id
// it returned, so the next page starts after it. Items that exist for the whole walk appear
// exactly once; one created or removed meanwhile may or may not appear. The token is opaque to
// clients (web-safe base64 of "v1:<list>:<scope>:<last id>"); one for another list or scope (the
// session listed), or that does not parse, is INVALID_ARGUMENT (reason INVALID_PAGE_TOKEN).
#ifndef REGCACHE_SERVER_INTERNAL_PAGING_H_
#define REGCACHE_SERVER_INTERNAL_PAGING_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace regcache::server::internal {

inline constexpr int32_t kDefaultPageSize = 1000;
inline constexpr int32_t kMaxPageSize = 10000;

struct PageSpec {
  uint64_t after = 0;  // ids up to this one were on earlier pages (0: the first page)
  size_t size = kDefaultPageSize;
};

// The page a request asks for, in list `list` of `scope`.
absl::StatusOr<PageSpec> ParsePage(absl::string_view list, uint64_t scope, int32_t page_size,
                                   absl::string_view page_token);

// The token of the page after the one that ended with id `last`.
std::string NextPageToken(absl::string_view list, uint64_t scope, uint64_t last);

// Cuts `items` down to the page `spec` names (sorted by id(item)); returns the next page's token,
// "" when this page is the last.
template <typename T, typename IdFn>
std::string TakePage(std::vector<T>& items, IdFn id, absl::string_view list, uint64_t scope,
                     const PageSpec& spec) {
  std::sort(items.begin(), items.end(), [&](const T& a, const T& b) { return id(a) < id(b); });
  auto first = std::find_if(items.begin(), items.end(),
                            [&](const T& item) { return id(item) > spec.after; });
  items.erase(items.begin(), first);
  if (items.size() <= spec.size) return std::string();
  items.resize(spec.size);
  return NextPageToken(list, scope, id(items.back()));
}

}  // namespace regcache::server::internal
#endif  // REGCACHE_SERVER_INTERNAL_PAGING_H_
