//===- JsonTest.cpp - the shared JSON reader and writer -------------------===//

#include "lamina/Support/Json.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

using namespace lamina;

namespace {

TEST(Json, ParsesEveryKind) {
  Expected<json::Value> v = json::parse(
      R"( {"n": -1.5e2, "t": true, "f": false, "z": null,
           "s": "a\"b\\c\n\u00e9", "a": [1, [], {}], "o": {"k": "v"}} )");
  ASSERT_TRUE(v.ok()) << v.error();
  ASSERT_EQ(v->kind, json::Value::Object);
  ASSERT_EQ(v->object.size(), 7u);
  EXPECT_EQ(v->object[0].first, "n"); // document order
  EXPECT_EQ(v->object[6].first, "o");
  EXPECT_EQ(v->find("n")->number, -150);
  EXPECT_TRUE(v->find("t")->boolean);
  EXPECT_EQ(v->find("f")->kind, json::Value::Bool);
  EXPECT_FALSE(v->find("f")->boolean);
  EXPECT_EQ(v->find("z")->kind, json::Value::Null);
  EXPECT_EQ(v->find("s")->string, "a\"b\\c\n\xc3\xa9");
  const json::Value *a = v->find("a");
  ASSERT_EQ(a->array.size(), 3u);
  EXPECT_EQ(a->array[1].kind, json::Value::Array);
  EXPECT_EQ(a->array[2].kind, json::Value::Object);
  EXPECT_EQ(v->find("o")->find("k")->string, "v");
  EXPECT_EQ(v->find("missing"), nullptr);
  EXPECT_EQ(a->find("n"), nullptr); // not an object
  EXPECT_EQ(v->numberOr("n", 7), -150);
  EXPECT_EQ(v->numberOr("s", 7), 7); // not a number
  EXPECT_EQ(v->numberOr("missing", 7), 7);
}

TEST(Json, ParseErrorsSayWhere) {
  Expected<json::Value> v = json::parse("{\"a\": 1,\n \"b\" 2}");
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.error(), "line 2 column 6: expected ':' after key \"b\"");
  EXPECT_NE(json::parse("[1] x").error().find("unexpected text after"),
            std::string::npos);
  EXPECT_NE(json::parse("\"abc").error().find("unterminated string"),
            std::string::npos);
  EXPECT_NE(json::parse("").error().find("unexpected end of input"),
            std::string::npos);
  EXPECT_NE(json::parse("[1,]").error().find("expected a value"),
            std::string::npos);
  EXPECT_NE(json::parse("tru").error().find("invalid literal"),
            std::string::npos);
  EXPECT_NE(json::parse(std::string(100, '[')).error().find("too deep"),
            std::string::npos);
}

TEST(Json, QuotesAndNumbers) {
  EXPECT_EQ(json::quote("a\"\\\n\t\r\x01z"), R"("a\"\\\n\t\r\u0001z")");
  EXPECT_EQ(json::number(3), "3");
  EXPECT_EQ(json::number(-0.0), "0");
  EXPECT_EQ(json::number(0.1), "0.1");
  EXPECT_EQ(json::number(1e300), "1e+300");
  EXPECT_EQ(json::number(1.0 / 3), "0.3333333333333333");
  EXPECT_EQ(json::number(std::nan("")), "null");
  EXPECT_EQ(json::number(std::numeric_limits<double>::infinity()), "null");
  EXPECT_EQ(json::fixed(0.0599412, 6), "0.059941");
  EXPECT_EQ(json::fixed(16384.4, 0), "16384");
  EXPECT_EQ(json::fixed(40.31, 3), "40.310");
  EXPECT_EQ(json::fixed(1e20, 1), "100000000000000000000.0");
  EXPECT_EQ(json::fixed(-std::numeric_limits<double>::infinity(), 2), "null");
}

/// One document with every kind of value, in `layout`.
std::string sample(json::Layout layout) {
  std::string out;
  json::Writer w(out, layout);
  w.beginObject()
      .field("name", "x")
      .field("int", -3)
      .field("size", size_t(18446744073709551615ull))
      .field("i64", int64_t(-9007199254740993))
      .field("u", 7u)
      .field("pi", 3.25)
      .field("yes", true);
  w.key("none").null();
  w.key("list").beginArray().value(1).value("two").beginArray().endArray();
  w.beginObject().endObject().endArray();
  w.key("fixed").fixedValue(2.5, 3);
  w.endObject();
  return out;
}

TEST(Json, WritesEachLayout) {
  EXPECT_EQ(sample(json::Layout::Compact),
            R"({"name":"x","int":-3,"size":18446744073709551615,)"
            R"("i64":-9007199254740993,"u":7,"pi":3.25,"yes":true,)"
            R"("none":null,"list":[1,"two",[],{}],"fixed":2.500})");
  EXPECT_EQ(sample(json::Layout::Inline),
            R"({"name": "x", "int": -3, "size": 18446744073709551615, )"
            R"("i64": -9007199254740993, "u": 7, "pi": 3.25, "yes": true, )"
            R"("none": null, "list": [1, "two", [], {}], "fixed": 2.500})");
  EXPECT_EQ(sample(json::Layout::Indented), R"({
  "name": "x",
  "int": -3,
  "size": 18446744073709551615,
  "i64": -9007199254740993,
  "u": 7,
  "pi": 3.25,
  "yes": true,
  "none": null,
  "list": [
    1,
    "two",
    [],
    {}
  ],
  "fixed": 2.500
})");
}

TEST(Json, ContainersMixLayouts) {
  // The runtime's --stats file: an inline object whose array has one
  // inline member a line; rawValue copies JSON another writer made.
  std::string rank;
  json::Writer(rank, json::Layout::Inline)
      .beginObject()
      .field("rank", 0)
      .field("bytes", 16)
      .endObject();
  std::string out;
  json::Writer w(out, json::Layout::Inline);
  w.beginObject()
      .field("steps", 2)
      .key("ranks")
      .beginArray(json::Layout::Indented);
  w.rawValue(rank).rawValue(rank);
  w.beginObject(json::Layout::Inline).field("a", 1).field("b", 2);
  w.endObject().endArray().field("after", "x").endObject();
  EXPECT_EQ(out, "{\"steps\": 2, \"ranks\": [\n"
                 "  {\"rank\": 0, \"bytes\": 16},\n"
                 "  {\"rank\": 0, \"bytes\": 16},\n"
                 "  {\"a\": 1, \"b\": 2}\n"
                 "], \"after\": \"x\"}");
  // Nested indented containers inside an inline one indent by their own
  // depth only.
  std::string nested;
  json::Writer n(nested, json::Layout::Inline);
  n.beginArray().beginObject(json::Layout::Indented).key("k").beginArray();
  n.value(1).endArray().endObject().value(2).endArray();
  EXPECT_EQ(nested, "[{\n  \"k\": [\n    1\n  ]\n}, 2]");
}

TEST(Json, ParsedValuesAreWrittenAgain) {
  const char *text =
      R"({"a": [1, 2.5, "s\n", true, null, {"b": {}}], "c": -1e-07})";
  Expected<json::Value> v = json::parse(text);
  ASSERT_TRUE(v.ok()) << v.error();
  std::string inlineText;
  json::Writer(inlineText, json::Layout::Inline).value(*v);
  EXPECT_EQ(inlineText, text);
  std::string compact;
  json::Writer(compact, json::Layout::Compact).value(*v);
  EXPECT_EQ(compact, R"({"a":[1,2.5,"s\n",true,null,{"b":{}}],"c":-1e-07})");
  // value(v, layout) lays out v's containers so whatever the writer's.
  std::string mixed;
  json::Writer w(mixed);
  w.beginArray().value(v->find("a")->array[5], json::Layout::Inline);
  w.endArray();
  EXPECT_EQ(mixed, "[\n  {\"b\": {}}\n]");
  // What the writer writes the reader reads back.
  for (json::Layout l :
       {json::Layout::Indented, json::Layout::Inline, json::Layout::Compact}) {
    Expected<json::Value> back = json::parse(sample(l));
    ASSERT_TRUE(back.ok()) << back.error();
    EXPECT_EQ(back->find("name")->string, "x");
    EXPECT_EQ(back->numberOr("i64", 0), -9007199254740992.0);
    EXPECT_EQ(back->find("list")->array.size(), 4u);
    EXPECT_EQ(back->numberOr("fixed", 0), 2.5);
  }
}

} // namespace
