#include "base/error_reason.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/cord.h"
#include "absl/strings/str_split.h"

namespace regcache::base {

absl::Status WithReason(absl::Status status, absl::string_view reason,
                        std::vector<std::pair<std::string, std::string>> metadata) {
  if (status.ok()) return status;
  std::string text(reason);
  for (auto& [key, value] : metadata) {
    std::replace(value.begin(), value.end(), '\n', ' ');
    text.append("\n").append(key).append("=").append(value);
  }
  status.SetPayload(kErrorReasonTypeUrl, absl::Cord(text));
  return status;
}

std::optional<ErrorReason> GetErrorReason(const absl::Status& status) {
  auto payload = status.GetPayload(kErrorReasonTypeUrl);  // absl::optional here
  if (!payload.has_value()) return std::nullopt;
  const std::string text(*payload);
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  if (lines.empty() || lines[0].empty()) return std::nullopt;
  ErrorReason out{std::string(lines[0]), {}};
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t eq = lines[i].find('=');
    if (eq == absl::string_view::npos) return std::nullopt;
    out.metadata.emplace_back(lines[i].substr(0, eq), lines[i].substr(eq + 1));
  }
  return out;
}

}  // namespace regcache::base
