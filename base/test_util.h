// Test-only gMock matchers for absl::Status and absl::StatusOr<T> (Debian's abseil 20220623
// predates absl's own status matchers):
//
//   EXPECT_THAT(cache.Release(t, h), IsOk());
//   EXPECT_THAT(cache.Register(t, va, 0, kRw), StatusIs(absl::StatusCode::kInvalidArgument));
//   EXPECT_THAT(s, StatusIs(absl::StatusCode::kNotFound, HasSubstr("handle")));
//   EXPECT_THAT(daemon.Register(...), IsOkAndHolds(Field(&KeyGrant::hit, true)));
//
// A failure prints the status itself (code, message and payloads), not two bare codes.
// Needs gtest/gmock: tests only (the header self-compile skips test_util.h).
#ifndef REGCACHE_BASE_TEST_UTIL_H_
#define REGCACHE_BASE_TEST_UTIL_H_

#include <ostream>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"

namespace regcache::base {
namespace status_matchers_internal {

inline const absl::Status& GetStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

template <typename CodeMatcher, typename MessageMatcher>
class StatusIsMatcher {
 public:
  StatusIsMatcher(CodeMatcher code, MessageMatcher message)
      : code_(std::move(code)), message_(std::move(message)) {}

  template <typename StatusLike>
  operator ::testing::Matcher<const StatusLike&>() const {  // NOLINT: implicit by design
    return ::testing::MakeMatcher(new Impl<StatusLike>(code_, message_));
  }

 private:
  template <typename StatusLike>
  class Impl : public ::testing::MatcherInterface<const StatusLike&> {
   public:
    Impl(const CodeMatcher& code, const MessageMatcher& message)
        : code_(::testing::SafeMatcherCast<absl::StatusCode>(code)),
          message_(::testing::SafeMatcherCast<const std::string&>(message)) {}

    bool MatchAndExplain(const StatusLike& value,
                         ::testing::MatchResultListener* listener) const override {
      const absl::Status& s = GetStatus(value);
      *listener << "whose status is " << s;
      return code_.Matches(s.code()) && message_.Matches(std::string(s.message()));
    }
    void DescribeTo(std::ostream* os) const override {
      *os << "has a status code that ";
      code_.DescribeTo(os);
      *os << " and a message that ";
      message_.DescribeTo(os);
    }
    void DescribeNegationTo(std::ostream* os) const override {
      *os << "has a status code that ";
      code_.DescribeNegationTo(os);
      *os << " or a message that ";
      message_.DescribeNegationTo(os);
    }

   private:
    const ::testing::Matcher<absl::StatusCode> code_;
    const ::testing::Matcher<const std::string&> message_;
  };

  CodeMatcher code_;
  MessageMatcher message_;
};

template <typename ValueMatcher>
class IsOkAndHoldsMatcher {
 public:
  explicit IsOkAndHoldsMatcher(ValueMatcher value) : value_(std::move(value)) {}

  template <typename StatusOrT>
  operator ::testing::Matcher<const StatusOrT&>() const {  // NOLINT: implicit by design
    return ::testing::MakeMatcher(new Impl<StatusOrT>(value_));
  }

 private:
  template <typename StatusOrT>
  class Impl : public ::testing::MatcherInterface<const StatusOrT&> {
   public:
    using Value = typename StatusOrT::value_type;
    explicit Impl(const ValueMatcher& value)
        : value_(::testing::SafeMatcherCast<const Value&>(value)) {}

    bool MatchAndExplain(const StatusOrT& v,
                         ::testing::MatchResultListener* listener) const override {
      if (!v.ok()) {
        *listener << "which has status " << v.status();
        return false;
      }
      return value_.MatchAndExplain(*v, listener);
    }
    void DescribeTo(std::ostream* os) const override {
      *os << "is OK and has a value that ";
      value_.DescribeTo(os);
    }
    void DescribeNegationTo(std::ostream* os) const override {
      *os << "is not OK, or has a value that ";
      value_.DescribeNegationTo(os);
    }

   private:
    const ::testing::Matcher<const Value&> value_;
  };

  ValueMatcher value_;
};

}  // namespace status_matchers_internal

// The status (of a Status or a StatusOr) has code `code` (a code or a matcher of one) and a
// message matching `message` (anything by default).
template <typename CodeMatcher, typename MessageMatcher>
status_matchers_internal::StatusIsMatcher<CodeMatcher, MessageMatcher> StatusIs(
    CodeMatcher code, MessageMatcher message) {
  return {std::move(code), std::move(message)};
}
template <typename CodeMatcher>
auto StatusIs(CodeMatcher code) {
  return StatusIs(std::move(code), ::testing::_);
}

// The status is OK.
inline auto IsOk() { return StatusIs(absl::StatusCode::kOk); }

// A StatusOr that is OK and whose value matches `value`.
template <typename ValueMatcher>
status_matchers_internal::IsOkAndHoldsMatcher<ValueMatcher> IsOkAndHolds(ValueMatcher value) {
  return status_matchers_internal::IsOkAndHoldsMatcher<ValueMatcher>(std::move(value));
}

}  // namespace regcache::base
#endif  // REGCACHE_BASE_TEST_UTIL_H_
