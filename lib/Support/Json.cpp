//===- Json.cpp - the small JSON reader and writer
//-------------------------===//
//
// lamina/Support/Json.h. Plain C++17, no LLVM: generated programs link it.
//
//===----------------------------------------------------------------------===//

#include "lamina/Support/Json.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace lamina::json {

namespace {
class Parser {
public:
  explicit Parser(std::string_view text) : s(text) {}

  Expected<Value> document() {
    Value v;
    if (!parseValue(v, 0))
      return Status::error(err);
    skipSpace();
    if (pos != s.size())
      return fail("unexpected text after the JSON value"), Status::error(err);
    return v;
  }

private:
  std::string_view s;
  size_t pos = 0;
  std::string err;

  bool fail(const std::string &what) {
    int line = 1, col = 1;
    for (size_t i = 0; i < pos && i < s.size(); ++i)
      s[i] == '\n' ? (++line, col = 1) : ++col;
    err = "line " + std::to_string(line) + " column " + std::to_string(col) +
          ": " + what;
    return false;
  }
  void skipSpace() {
    while (pos < s.size() && (s[pos] == ' ' || s[pos] == '\t' ||
                              s[pos] == '\n' || s[pos] == '\r'))
      ++pos;
  }
  bool literal(std::string_view word) {
    if (s.substr(pos, word.size()) != word)
      return fail("invalid literal");
    pos += word.size();
    return true;
  }
  bool parseString(std::string &out) {
    ++pos; // opening quote
    while (pos < s.size() && s[pos] != '"') {
      char c = s[pos++];
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos >= s.size())
        break;
      char e = s[pos++];
      switch (e) {
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      case 'r':
        out += '\r';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'u': {
        if (pos + 4 > s.size())
          return fail("truncated \\u escape");
        unsigned code =
            std::strtoul(std::string(s.substr(pos, 4)).c_str(), nullptr, 16);
        pos += 4;
        // Keep BMP code points as UTF-8 (surrogate pairs are not joined).
        if (code < 0x80) {
          out += char(code);
        } else if (code < 0x800) {
          out += char(0xC0 | (code >> 6));
          out += char(0x80 | (code & 0x3F));
        } else {
          out += char(0xE0 | (code >> 12));
          out += char(0x80 | ((code >> 6) & 0x3F));
          out += char(0x80 | (code & 0x3F));
        }
        break;
      }
      default:
        out += e;
      }
    }
    if (pos >= s.size())
      return fail("unterminated string");
    ++pos;
    return true;
  }
  bool parseValue(Value &v, int depth) {
    if (depth > 64)
      return fail("nesting too deep");
    skipSpace();
    if (pos >= s.size())
      return fail("unexpected end of input");
    char c = s[pos];
    if (c == '{') {
      v.kind = Value::Object;
      ++pos;
      skipSpace();
      if (pos < s.size() && s[pos] == '}')
        return ++pos, true;
      while (true) {
        skipSpace();
        if (pos >= s.size() || s[pos] != '"')
          return fail("expected a quoted key");
        std::string k;
        if (!parseString(k))
          return false;
        skipSpace();
        if (pos >= s.size() || s[pos] != ':')
          return fail("expected ':' after key \"" + k + "\"");
        ++pos;
        Value member;
        if (!parseValue(member, depth + 1))
          return false;
        v.object.emplace_back(std::move(k), std::move(member));
        skipSpace();
        if (pos < s.size() && s[pos] == ',') {
          ++pos;
          continue;
        }
        if (pos < s.size() && s[pos] == '}')
          return ++pos, true;
        return fail("expected ',' or '}'");
      }
    }
    if (c == '[') {
      v.kind = Value::Array;
      ++pos;
      skipSpace();
      if (pos < s.size() && s[pos] == ']')
        return ++pos, true;
      while (true) {
        Value item;
        if (!parseValue(item, depth + 1))
          return false;
        v.array.push_back(std::move(item));
        skipSpace();
        if (pos < s.size() && s[pos] == ',') {
          ++pos;
          continue;
        }
        if (pos < s.size() && s[pos] == ']')
          return ++pos, true;
        return fail("expected ',' or ']'");
      }
    }
    if (c == '"') {
      v.kind = Value::String;
      return parseString(v.string);
    }
    if (c == 't' || c == 'f') {
      v.kind = Value::Bool;
      v.boolean = c == 't';
      return literal(c == 't' ? "true" : "false");
    }
    if (c == 'n')
      return literal("null");
    const std::string rest(s.substr(pos, 64));
    char *end = nullptr;
    v.number = std::strtod(rest.c_str(), &end);
    if (end == rest.c_str())
      return fail("expected a value");
    v.kind = Value::Number;
    pos += end - rest.c_str();
    return true;
  }
};
} // namespace

const Value *Value::find(std::string_view key) const {
  if (kind != Object)
    return nullptr;
  for (const auto &[k, v] : object)
    if (k == key)
      return &v;
  return nullptr;
}

double Value::numberOr(std::string_view key, double otherwise) const {
  const Value *v = find(key);
  return v && v->kind == Number ? v->number : otherwise;
}

Expected<Value> parse(std::string_view text) { return Parser(text).document(); }

std::string quote(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\t':
      out += "\\t";
      break;
    case '\r':
      out += "\\r";
      break;
    default:
      if (static_cast<unsigned char>(c) < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", c);
        out += buf;
      } else {
        out += c;
      }
    }
  }
  return out + "\"";
}

std::string number(double v) {
  if (!std::isfinite(v))
    return "null";
  if (v == std::floor(v) && std::fabs(v) < 1e15)
    return std::to_string(static_cast<long long>(v));
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v); // shortest
  return std::string(buf, ec == std::errc() ? end : buf);
}

std::string fixed(double v, int decimals) {
  if (!std::isfinite(v))
    return "null";
  int n = std::snprintf(nullptr, 0, "%.*f", decimals, v);
  std::string out(size_t(n > 0 ? n : 0), '\0');
  std::snprintf(out.data(), out.size() + 1, "%.*f", decimals, v);
  return out;
}

std::string Writer::indent() const {
  size_t n = 0;
  for (const Open &o : stack)
    n += o.layout == Layout::Indented;
  return std::string(2 * n, ' ');
}

void Writer::separate() {
  if (afterKey) {
    afterKey = false;
    return;
  }
  if (stack.empty())
    return;
  Open &o = stack.back();
  if (!o.empty)
    out += ',';
  if (o.layout == Layout::Indented)
    out += '\n' + indent();
  else if (o.layout == Layout::Inline && !o.empty)
    out += ' ';
  o.empty = false;
}

Writer &Writer::open(char c, Layout l) {
  separate();
  out += c;
  stack.push_back({l, true});
  return *this;
}

Writer &Writer::close(char c) {
  Open o = stack.back();
  stack.pop_back();
  if (o.layout == Layout::Indented && !o.empty)
    out += '\n' + indent();
  out += c;
  return *this;
}

Writer &Writer::key(std::string_view k) {
  separate();
  out += quote(k);
  out += current() == Layout::Compact ? ":" : ": ";
  afterKey = true;
  return *this;
}

Writer &Writer::raw(std::string_view text) {
  separate();
  out += text;
  return *this;
}

Writer &Writer::value(const Value &v, Layout l) {
  switch (v.kind) {
  case Value::Null:
    return null();
  case Value::Bool:
    return value(v.boolean);
  case Value::Number:
    return value(v.number);
  case Value::String:
    return value(v.string);
  case Value::Array:
    beginArray(l);
    for (const Value &item : v.array)
      value(item, l);
    return endArray();
  case Value::Object:
    beginObject(l);
    for (const auto &[k, member] : v.object)
      key(k).value(member, l);
    return endObject();
  }
  return *this;
}

} // namespace lamina::json
