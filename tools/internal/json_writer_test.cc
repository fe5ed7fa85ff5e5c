#include "tools/internal/json_writer.h"

#include <cstdint>
#include <limits>
#include <string>

#include "gtest/gtest.h"

namespace regcache::tools::internal {
namespace {

TEST(JsonQuote, PlainTextIsQuotedAsIs) {
  EXPECT_EQ(JsonQuote(""), R"("")");
  EXPECT_EQ(JsonQuote("sim0 cache.hits"), R"("sim0 cache.hits")");
}

TEST(JsonQuote, QuotesBackslashesAndControlCharactersAreEscaped) {
  EXPECT_EQ(JsonQuote("a\"b\\c"), R"("a\"b\\c")");
  EXPECT_EQ(JsonQuote("\b\f\n\r\t"), R"("\b\f\n\r\t")");
  EXPECT_EQ(JsonQuote(std::string("\x01\x1f\x7f", 3)), R"("\u0001\u001f\u007f")");
  EXPECT_EQ(JsonQuote(std::string("a\0b", 3)), R"("a\u0000b")");
  EXPECT_EQ(JsonQuote("/"), R"("/")") << "'/' needs no escape";
}

TEST(JsonQuote, ValidUtf8PassesThrough) {
  EXPECT_EQ(JsonQuote("\xc3\xa9"), "\"\xc3\xa9\"");                  // é
  EXPECT_EQ(JsonQuote("\xe2\x82\xac"), "\"\xe2\x82\xac\"");          // €
  EXPECT_EQ(JsonQuote("\xf0\x9f\x98\x80"), "\"\xf0\x9f\x98\x80\"");  // U+1F600
}

TEST(JsonQuote, InvalidUtf8BecomesReplacementCharacters) {
  EXPECT_EQ(JsonQuote("\x80"), R"("\ufffd")") << "stray continuation byte";
  EXPECT_EQ(JsonQuote("\xc0\xaf"), R"("\ufffd\ufffd")") << "overlong '/'";
  EXPECT_EQ(JsonQuote("\xed\xa0\x80"), R"("\ufffd\ufffd\ufffd")") << "a surrogate";
  EXPECT_EQ(JsonQuote("\xf4\x90\x80\x80"), R"("\ufffd\ufffd\ufffd\ufffd")") << "above U+10FFFF";
  EXPECT_EQ(JsonQuote("a\xe2\x82"), R"("a\ufffd\ufffd")") << "truncated at the end";
  EXPECT_EQ(JsonQuote("\xff"), R"("\ufffd")");
}

TEST(JsonWriter, NestedObjectsAndArraysGetCommasAndColons) {
  JsonWriter w;
  w.BeginObject()
      .Key("a")
      .Int(1)
      .Key("b")
      .BeginArray()
      .String("x")
      .Bool(true)
      .Null()
      .BeginObject()
      .EndObject()
      .EndArray()
      .Key("c")
      .BeginObject()
      .Key("d")
      .Bool(false)
      .EndObject()
      .EndObject();
  EXPECT_EQ(w.str(), R"({"a":1,"b":["x",true,null,{}],"c":{"d":false}})");
}

TEST(JsonWriter, EmptyContainers) {
  JsonWriter w;
  w.BeginObject().Key("keys").BeginArray().EndArray().EndObject();
  EXPECT_EQ(w.str(), R"({"keys":[]})");
}

TEST(JsonWriter, IntegersAreExactDecimal) {
  JsonWriter w;
  w.BeginArray()
      .Uint(std::numeric_limits<uint64_t>::max())
      .Int(std::numeric_limits<int64_t>::min())
      .Int(0)
      .EndArray();
  EXPECT_EQ(w.str(), "[18446744073709551615,-9223372036854775808,0]");
}

TEST(JsonWriter, KeysAreEscaped) {
  JsonWriter w;
  w.BeginObject().Key("a\"b").String("\n").EndObject();
  EXPECT_EQ(w.str(), R"({"a\"b":"\n"})");
}

}  // namespace
}  // namespace regcache::tools::internal
