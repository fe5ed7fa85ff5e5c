// The protobuf wire format, by hand, for the few small standard messages the client library
// reads and writes without their generated code: grpc.health.v1's request and response
// (tools/internal/health_probe.h) and google.rpc.Status with its ErrorInfo detail
// (protocol/grpc_status.h). Generated code for those would register their .proto files in
// the process-wide descriptor pool, and a program that links its own copy of them next to
// libregcache.so would abort at load ("File already exists in database").
//
// Wire types: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32 (3 and 4, groups, are refused).
#ifndef REGCACHE_PROTOCOL_PROTO_WIRE_H_
#define REGCACHE_PROTOCOL_PROTO_WIRE_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace regcache::protocol::wire {

void AppendVarint(std::string* out, uint64_t value);
// Field `number` as a varint (wire type 0).
void AppendVarintField(std::string* out, uint32_t number, uint64_t value);
// Field `number` as length-delimited bytes (wire type 2): strings, bytes, messages.
void AppendBytesField(std::string* out, uint32_t number, absl::string_view bytes);

// One message's fields in wire order. Every read is bounds-checked: malformed bytes stop the
// reader and leave ok() false, never read past the input.
class Reader {
 public:
  struct Field {
    uint32_t number = 0;
    uint32_t wire_type = 0;
    uint64_t varint = 0;      // wire type 0
    absl::string_view bytes;  // wire type 2 (a view into the input)
  };

  explicit Reader(absl::string_view bytes) : rest_(bytes) {}

  // The next field (fixed32 and fixed64 are skipped over, their value unread): false at the
  // end of the input or at the first malformed byte (then ok() is false).
  bool Next(Field* field);
  bool ok() const { return ok_; }

 private:
  bool ReadVarint(uint64_t* value);
  bool Fail() {
    ok_ = false;
    rest_ = {};
    return false;
  }

  absl::string_view rest_;
  bool ok_ = true;
};

}  // namespace regcache::protocol::wire
#endif  // REGCACHE_PROTOCOL_PROTO_WIRE_H_
