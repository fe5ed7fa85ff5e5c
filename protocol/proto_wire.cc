#include "protocol/proto_wire.h"

namespace regcache::protocol::wire {

void AppendVarint(std::string* out, uint64_t value) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

void AppendVarintField(std::string* out, uint32_t number, uint64_t value) {
  AppendVarint(out, uint64_t{number} << 3);
  AppendVarint(out, value);
}

void AppendBytesField(std::string* out, uint32_t number, absl::string_view bytes) {
  AppendVarint(out, (uint64_t{number} << 3) | 2);
  AppendVarint(out, bytes.size());
  out->append(bytes.data(), bytes.size());
}

bool Reader::ReadVarint(uint64_t* value) {
  *value = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (rest_.empty()) return false;
    const uint8_t b = static_cast<uint8_t>(rest_.front());
    rest_.remove_prefix(1);
    *value |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return true;
  }
  return false;  // more than 10 bytes
}

bool Reader::Next(Field* field) {
  while (ok_ && !rest_.empty()) {
    uint64_t tag;
    if (!ReadVarint(&tag) || (tag >> 3) == 0 || (tag >> 3) > 0x1fffffff) return Fail();
    field->number = static_cast<uint32_t>(tag >> 3);
    field->wire_type = static_cast<uint32_t>(tag & 7);
    field->varint = 0;
    field->bytes = {};
    switch (field->wire_type) {
      case 0:
        if (!ReadVarint(&field->varint)) return Fail();
        return true;
      case 2: {
        uint64_t n;
        if (!ReadVarint(&n) || n > rest_.size()) return Fail();
        field->bytes = rest_.substr(0, n);
        rest_.remove_prefix(n);
        return true;
      }
      case 1:
      case 5: {
        const size_t n = field->wire_type == 1 ? 8 : 4;
        if (rest_.size() < n) return Fail();
        rest_.remove_prefix(n);
        continue;  // not read by anyone here
      }
      default:
        return Fail();
    }
  }
  return false;
}

}  // namespace regcache::protocol::wire
