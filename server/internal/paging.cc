#include "server/internal/paging.h"

#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/error_reason.h"

namespace regcache::server::internal {
namespace {

absl::Status BadToken(absl::string_view why) {
  return base::WithReason(absl::InvalidArgumentError(absl::StrCat("page_token: ", why)),
                          base::reason::kInvalidPageToken);
}

}  // namespace

absl::StatusOr<PageSpec> ParsePage(absl::string_view list, uint64_t scope, int32_t page_size,
                                   absl::string_view page_token) {
  if (page_size < 0) {
    return absl::InvalidArgumentError(absl::StrCat("page_size ", page_size, " is negative"));
  }
  PageSpec spec;
  spec.size = page_size == 0 ? kDefaultPageSize : std::min(page_size, kMaxPageSize);
  if (page_token.empty()) return spec;
  std::string text;
  if (!absl::WebSafeBase64Unescape(page_token, &text)) return BadToken("not a page token");
  std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  uint64_t token_scope = 0;
  if (parts.size() != 4 || parts[0] != "v1" || !absl::SimpleAtoi(parts[2], &token_scope) ||
      !absl::SimpleAtoi(parts[3], &spec.after)) {
    return BadToken("not a page token");
  }
  if (parts[1] != list || token_scope != scope) {
    return BadToken(absl::StrCat("the token belongs to another list than ", list, " of ", scope));
  }
  return spec;
}

std::string NextPageToken(absl::string_view list, uint64_t scope, uint64_t last) {
  return absl::WebSafeBase64Escape(absl::StrCat("v1:", list, ":", scope, ":", last));
}

}  // namespace regcache::server::internal
