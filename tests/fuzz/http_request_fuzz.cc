// Fuzz target: the metrics endpoint's request-head parser (server/http_request.h), which sees
// whatever bytes a local process sends to /metrics. The first input byte says where to split
// the rest into two Feed calls; the outcome must not depend on the split, nor differ from
// feeding one byte at a time, and what a finished parse reports must hold its promises.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/strings/string_view.h"
#include "server/http_request.h"

namespace rc = ::regcache::server;

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

constexpr size_t kMaxHead = 512;

struct Outcome {
  rc::HttpRequestParser::State state;
  int status;
  std::string error, method, path;
  int minor;
  bool body;
  bool operator==(const Outcome&) const = default;
};

Outcome Of(const rc::HttpRequestParser& p) {
  return {p.state(), p.error_status(),  p.error(),   p.method(),
          p.path(),  p.minor_version(), p.has_body()};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const absl::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t split = data[0] % (in.size() + 1);

  rc::HttpRequestParser whole(kMaxHead);
  whole.Feed(in);
  rc::HttpRequestParser halves(kMaxHead);
  halves.Feed(in.substr(0, split));
  halves.Feed(in.substr(split));
  rc::HttpRequestParser bytes(kMaxHead);
  for (char c : in) bytes.Feed(absl::string_view(&c, 1));
  const Outcome o = Of(whole);
  Check(o == Of(halves));
  Check(o == Of(bytes));

  using State = rc::HttpRequestParser::State;
  if (o.state == State::kDone) {
    Check(!o.method.empty() && o.method.size() <= 32);
    Check(!o.path.empty() && o.path[0] == '/' && o.path.find('?') == std::string::npos);
    for (char c : o.path) Check(c > 0x20 && c < 0x7f);
    Check(o.minor >= 0 && o.minor <= 9);
    Check(in.size() >= 14);  // "G / HTTP/1.0\n\n" is the shortest head
  } else if (o.state == State::kBad) {
    Check(o.status == 400 || o.status == 431 || o.status == 505);
    Check(!o.error.empty());
  } else {
    Check(in.size() <= kMaxHead);
  }
  // The answer is well formed whatever the status.
  const std::string answer = rc::HttpResponse(o.status == 0 ? 200 : o.status, "text/plain", "x");
  Check(answer.rfind("HTTP/1.1 ", 0) == 0 && answer.find("\r\n\r\nx") == answer.size() - 5);
  return 0;
}
