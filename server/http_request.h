// The request side of the metrics endpoint's HTTP/1.x (server/metrics_server.h): a byte-at-a-time
// parser of a request head (request line and header fields, RFC 9112) and the response it gets.
//
// The endpoint serves one thing (GET of one path, no body), so the parser accepts exactly what
// that needs and checks every byte as it arrives against the grammar:
//   request-line  method SP request-target SP "HTTP/1." DIGIT, ending in CRLF (or a bare LF,
//                 which RFC 9112 lets a server accept); empty lines before it are skipped.
//                 method: token characters; request-target: visible ASCII, origin-form
//                 ("/path?query") or absolute-form ("http://host/path").
//   header field  token ":" OWS value OWS, the value of visible ASCII, SP, HTAB and obs-text;
//                 no whitespace before the colon and no obs-fold (a line starting with SP/HTAB).
// Anything else is refused at the first offending byte: 400, or 505 for an HTTP version other
// than 1.x, or 431 when the head grows past its limit before it ends. After the head: an
// HTTP/1.1 request must carry exactly one Host (HTTP/1.0: at most one), and at most one
// Content-Length, of digits. Whether the request has a body is reported (has_body), not
// refused: the server answers 404 or 405 before it looks. One request per connection.
//
// Thread safety: none (one parser per connection, used by one thread).
#ifndef REGCACHE_SERVER_HTTP_REQUEST_H_
#define REGCACHE_SERVER_HTTP_REQUEST_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace regcache::server {

class HttpRequestParser {
 public:
  enum class State { kMore, kDone, kBad };

  // `max_head_bytes`: the most bytes the head may take, its final empty line included.
  explicit HttpRequestParser(size_t max_head_bytes) : max_head_bytes_(max_head_bytes) {}

  // Consumes bytes of the request until the head ends (kDone) or is refused (kBad); bytes after
  // that are not looked at (a body or a pipelined request: the connection closes after one
  // answer). Returns the new state; once kDone or kBad, further calls change nothing.
  State Feed(absl::string_view bytes);

  State state() const { return state_; }
  // kBad: the status to answer (400, 431, 505) and why, in words.
  int error_status() const { return error_status_; }
  const std::string& error() const { return error_; }
  // kDone: the request. The path is the target's path (without query, scheme or authority).
  const std::string& method() const { return method_; }
  const std::string& path() const { return path_; }
  int minor_version() const { return minor_version_; }
  // kDone: a Content-Length other than 0 or a Transfer-Encoding came with the request.
  bool has_body() const { return has_body_; }

 private:
  enum class Step {  // in order: the request line's steps come first
    kLineStart,      // before the request line: an empty line is skipped
    kLeadingCr,      // the CR of such an empty line
    kMethod,
    kTarget,
    kVersion,
    kLineCr,      // the request line's CR was read; LF must follow
    kFieldStart,  // the start of a header line, or of the empty line that ends the head
    kFieldName,
    kFieldValue,
    kFieldCr,  // a header line's CR
    kEndCr,    // the final empty line's CR
  };
  // One byte of the head: of the request line (steps before kFieldStart) or of the fields.
  void Consume(char c);
  void ConsumeRequestLine(char c);
  void ConsumeField(char c);
  void EndRequestLine();
  void EndField();
  void EndHead();
  void Fail(int status, std::string why);
  void FailByte(absl::string_view where, char c);

  const size_t max_head_bytes_;
  size_t head_bytes_ = 0;
  State state_ = State::kMore;
  Step step_ = Step::kLineStart;
  int error_status_ = 0;
  std::string error_;
  std::string method_;
  std::string target_;
  std::string version_;
  std::string path_;
  int minor_version_ = 0;
  std::string field_name_;   // lower case
  std::string field_value_;  // without leading whitespace (trailing is trimmed at its end)
  int hosts_ = 0;
  bool has_body_ = false;
  int content_lengths_ = 0;
};

// The reason phrase of the statuses the endpoint answers ("Not Found"), or "Error".
absl::string_view HttpReasonPhrase(int status);

// A complete HTTP/1.1 response that closes the connection: status line, Content-Type,
// Content-Length, "Connection: close", for 405 "Allow: GET", then `body`.
std::string HttpResponse(int status, absl::string_view content_type, absl::string_view body);

}  // namespace regcache::server
#endif  // REGCACHE_SERVER_HTTP_REQUEST_H_
