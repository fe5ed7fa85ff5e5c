#include "protocol/reason_numbers.h"

#include <iterator>

namespace regcache::protocol {

uint32_t ReasonNumber(absl::string_view reason) {
  for (size_t i = 0; i < std::size(kNumberedReasons); ++i) {
    if (kNumberedReasons[i] == reason) return static_cast<uint32_t>(i + 1);
  }
  return 0;
}

absl::string_view NumberedReason(uint32_t n) {
  if (n == 0 || n > std::size(kNumberedReasons)) return {};
  return kNumberedReasons[n - 1];
}

}  // namespace regcache::protocol
