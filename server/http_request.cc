#include "server/http_request.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace regcache::server {
namespace {

// The longest method: GET is all the endpoint serves; anything long is no method it knows.
constexpr size_t kMaxMethodBytes = 32;
// "HTTP/1.1"
constexpr size_t kVersionBytes = 8;

// tchar of RFC 9110 5.6.2.
bool IsTokenChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
         absl::string_view("!#$%&'*+-.^_`|~").find(c) != absl::string_view::npos;
}

bool IsVisible(char c) { return c >= 0x21 && c <= 0x7e; }

// A field value's byte: visible ASCII, SP, HTAB or obs-text (0x80-0xff).
bool IsFieldValueChar(char c) {
  return IsVisible(c) || c == ' ' || c == '\t' || static_cast<unsigned char>(c) >= 0x80;
}

bool AllDigits(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

}  // namespace

HttpRequestParser::State HttpRequestParser::Feed(absl::string_view bytes) {
  for (char c : bytes) {
    if (state_ != State::kMore) break;
    if (head_bytes_ == max_head_bytes_) {
      Fail(431, absl::StrCat("request head larger than ", max_head_bytes_, " bytes"));
      break;
    }
    ++head_bytes_;
    Consume(c);
  }
  return state_;
}

void HttpRequestParser::Consume(char c) {
  if (step_ >= Step::kFieldStart) {
    ConsumeField(c);
  } else {
    ConsumeRequestLine(c);
  }
}

void HttpRequestParser::ConsumeRequestLine(char c) {
  switch (step_) {
    case Step::kLineStart:
      if (c == '\r') {
        step_ = Step::kLeadingCr;
      } else if (c == '\n') {
        // an empty line before the request line is skipped
      } else if (IsTokenChar(c)) {
        method_.push_back(c);
        step_ = Step::kMethod;
      } else {
        FailByte("request line", c);
      }
      return;
    case Step::kLeadingCr:
      if (c == '\n') {
        step_ = Step::kLineStart;
      } else {
        Fail(400, "request line: CR without LF");
      }
      return;
    case Step::kMethod:
      if (c == ' ') {
        step_ = Step::kTarget;
      } else if (!IsTokenChar(c)) {
        FailByte("method", c);
      } else if (method_.size() == kMaxMethodBytes) {
        Fail(400, absl::StrCat("method longer than ", kMaxMethodBytes, " bytes"));
      } else {
        method_.push_back(c);
      }
      return;
    case Step::kTarget:
      if (c == ' ' && !target_.empty()) {
        step_ = Step::kVersion;
      } else if (IsVisible(c)) {
        target_.push_back(c);
      } else {
        FailByte("request target", c);
      }
      return;
    case Step::kVersion:
      if (c == '\r') {
        step_ = Step::kLineCr;
      } else if (c == '\n') {
        EndRequestLine();
      } else if (IsVisible(c) && version_.size() < kVersionBytes) {
        version_.push_back(c);
      } else {
        FailByte("HTTP version", c);
      }
      return;
    case Step::kLineCr:
      if (c == '\n') {
        EndRequestLine();
      } else {
        Fail(400, "request line: CR without LF");
      }
      return;
    default:
      return;  // ConsumeField's
  }
}

void HttpRequestParser::ConsumeField(char c) {
  switch (step_) {
    case Step::kFieldStart:
      if (c == '\r') {
        step_ = Step::kEndCr;
      } else if (c == '\n') {
        EndHead();
      } else if (c == ' ' || c == '\t') {
        Fail(400, "header line starts with whitespace (obs-fold is not accepted)");
      } else if (IsTokenChar(c)) {
        field_name_.assign(1, absl::ascii_tolower(static_cast<unsigned char>(c)));
        step_ = Step::kFieldName;
      } else {
        FailByte("header name", c);
      }
      return;
    case Step::kFieldName:
      if (c == ':') {
        field_value_.clear();
        step_ = Step::kFieldValue;
      } else if (IsTokenChar(c)) {
        field_name_.push_back(absl::ascii_tolower(static_cast<unsigned char>(c)));
      } else {
        FailByte("header name", c);
      }
      return;
    case Step::kFieldValue:
      if (c == '\r') {
        step_ = Step::kFieldCr;
      } else if (c == '\n') {
        EndField();
      } else if (!IsFieldValueChar(c)) {
        FailByte(absl::StrCat("header ", field_name_), c);
      } else if (!field_value_.empty() || (c != ' ' && c != '\t')) {
        field_value_.push_back(c);
      }
      return;
    case Step::kFieldCr:
      if (c == '\n') {
        EndField();
      } else {
        Fail(400, absl::StrCat("header ", field_name_, ": CR without LF"));
      }
      return;
    case Step::kEndCr:
      if (c == '\n') {
        EndHead();
      } else {
        Fail(400, "end of head: CR without LF");
      }
      return;
    default:
      return;  // ConsumeRequestLine's
  }
}

void HttpRequestParser::EndRequestLine() {
  const absl::string_view v = version_;
  if (v.size() != kVersionBytes || !absl::StartsWith(v, "HTTP/") ||
      !absl::ascii_isdigit(static_cast<unsigned char>(v[5])) || v[6] != '.' ||
      !absl::ascii_isdigit(static_cast<unsigned char>(v[7]))) {
    Fail(400, absl::StrCat("request line: '", v, "' is no HTTP version"));
    return;
  }
  if (v[5] != '1') {
    Fail(505, absl::StrCat(v, " is not supported: HTTP/1.0 and HTTP/1.1 are"));
    return;
  }
  minor_version_ = v[7] - '0';
  absl::string_view target = target_;
  if (target.size() > 7 && absl::StartsWithIgnoreCase(target, "http://")) {
    // absolute-form: the path starts after the authority (RFC 9112 3.2.2)
    size_t slash = target.find('/', 7);
    target = slash == absl::string_view::npos ? "/" : target.substr(slash);
  }
  if (target.empty() || target[0] != '/') {
    Fail(400, absl::StrCat("request target '", target_, "' is not a path"));
    return;
  }
  path_ = std::string(target.substr(0, target.find('?')));
  step_ = Step::kFieldStart;
}

void HttpRequestParser::EndField() {
  absl::string_view value = absl::StripTrailingAsciiWhitespace(field_value_);
  if (field_name_ == "host") {
    ++hosts_;
  } else if (field_name_ == "content-length") {
    ++content_lengths_;
    if (!AllDigits(value)) {
      Fail(400, "Content-Length is not a number");
      return;
    }
    if (value.find_first_not_of('0') != absl::string_view::npos) has_body_ = true;
  } else if (field_name_ == "transfer-encoding") {
    has_body_ = true;
  }
  step_ = Step::kFieldStart;
}

void HttpRequestParser::EndHead() {
  if (hosts_ > 1 || (minor_version_ >= 1 && hosts_ == 0)) {
    Fail(400, absl::StrCat("an HTTP/1.1 request carries exactly one Host field, not ", hosts_));
    return;
  }
  if (content_lengths_ > 1) {
    Fail(400, "more than one Content-Length");
    return;
  }
  state_ = State::kDone;
}

void HttpRequestParser::Fail(int status, std::string why) {
  state_ = State::kBad;
  error_status_ = status;
  error_ = std::move(why);
}

void HttpRequestParser::FailByte(absl::string_view where, char c) {
  Fail(400, absl::StrCat(where, ": unexpected byte 0x",
                         absl::Hex(static_cast<unsigned char>(c), absl::kZeroPad2), " at offset ",
                         head_bytes_ - 1));
}

absl::string_view HttpReasonPhrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 431:
      return "Request Header Fields Too Large";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Error";
  }
}

std::string HttpResponse(int status, absl::string_view content_type, absl::string_view body) {
  return absl::StrCat("HTTP/1.1 ", status, " ", HttpReasonPhrase(status),
                      "\r\nContent-Type: ", content_type, "\r\nContent-Length: ", body.size(),
                      "\r\nConnection: close\r\n", status == 405 ? "Allow: GET\r\n" : "", "\r\n",
                      body);
}

}  // namespace regcache::server
