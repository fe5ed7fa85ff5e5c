// A minimal JSON emitter for regcachectl's `-o json` (docs/cli.md): objects, arrays, strings,
// integers, booleans and null, written compactly into a string. abseil has no JSON writer and
// the project takes no JSON library for this much.
//
// Strings are escaped as RFC 8259 requires: '"', '\\' and every control character below 0x20
// (\b \f \n \r \t by name, the rest as \u00XX), plus 0x7f as \u007f. Bytes that are not valid
// UTF-8 (stray continuation bytes, overlong forms, surrogates, truncated sequences) are each
// replaced with U+FFFD, so the output is always valid UTF-8 and valid JSON whatever the input.
//
// Usage: w.BeginObject().Key("a").Int(1).Key("b").BeginArray().String("x").EndArray()
//         .EndObject(); w.str() == R"({"a":1,"b":["x"]})".
// The caller pairs Begin/End and gives every object member a Key first; the writer inserts the
// commas and colons. Not thread-safe.
#ifndef REGCACHE_TOOLS_INTERNAL_JSON_WRITER_H_
#define REGCACHE_TOOLS_INTERNAL_JSON_WRITER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace regcache::tools::internal {

// `text` as a JSON string literal, quotes included (escaped as above).
std::string JsonQuote(absl::string_view text);

class JsonWriter {
 public:
  JsonWriter& BeginObject() { return Open('{'); }
  JsonWriter& EndObject() { return Close('}'); }
  JsonWriter& BeginArray() { return Open('['); }
  JsonWriter& EndArray() { return Close(']'); }
  // The next member's name. REQUIRES: inside an object, before each member's value.
  JsonWriter& Key(absl::string_view name);
  JsonWriter& String(absl::string_view value);
  JsonWriter& Int(int64_t value);
  JsonWriter& Uint(uint64_t value);
  JsonWriter& Bool(bool value);
  JsonWriter& Null();

  // What was written so far.
  const std::string& str() const { return out_; }

 private:
  // Before a value: the comma that separates it from the previous one (arrays and the top
  // level; an object member's comma comes before its key).
  void Separate();
  JsonWriter& Open(char bracket);  // a member or element that is an object or array
  JsonWriter& Close(char bracket);

  std::string out_;
  // One entry per open object or array: whether it has had a member yet.
  std::vector<bool> has_member_;
  bool after_key_ = false;
};

}  // namespace regcache::tools::internal
#endif  // REGCACHE_TOOLS_INTERNAL_JSON_WRITER_H_
