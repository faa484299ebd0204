//===- Json.h - the little JSON LaminaPlan reads and writes --------------===//
//
// LaminaPlan stays free of LLVM so it links into anything; hardware files
// and the reports only need flat objects, so a small reader and writer do.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_LIB_PLAN_JSON_H
#define LAMINA_LIB_PLAN_JSON_H

#include "lamina/Schedule/Expected.h"

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lamina::plan::json {

struct Value {
  enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<Value> array;
  std::vector<std::pair<std::string, Value>> object;
};

/// Parses one JSON document; errors say "line L column C: ...".
schedule::Expected<Value> parse(std::string_view text);

/// `"text"` with JSON escapes.
std::string quote(std::string_view text);
/// A finite number in the shortest form that round-trips (non-finite: null).
std::string number(double v);

/// Streams JSON with commas and indentation handled: open()/close() nest,
/// key() names the next value inside an object.
class Writer {
public:
  explicit Writer(std::string &out, bool pretty = true)
      : out(out), pretty(pretty) {}
  Writer &beginObject() { return open('{'); }
  Writer &endObject() { return close('}'); }
  Writer &beginArray() { return open('['); }
  Writer &endArray() { return close(']'); }
  Writer &key(std::string_view k);
  Writer &value(double v) { return raw(number(v)); }
  Writer &value(long long v) { return raw(std::to_string(v)); }
  Writer &value(int v) { return raw(std::to_string(v)); }
  Writer &value(bool v) { return raw(v ? "true" : "false"); }
  Writer &value(std::string_view v) { return raw(quote(v)); }
  Writer &value(const char *v) { return raw(quote(v)); }
  Writer &value(const std::string &v) { return raw(quote(v)); }
  /// key(k).value(v)
  template <typename T> Writer &field(std::string_view k, const T &v) {
    return key(k).value(v);
  }

private:
  Writer &open(char c);
  Writer &close(char c);
  Writer &raw(const std::string &text);
  void separate();
  std::string &out;
  bool pretty;
  std::vector<bool> first; ///< per open container: nothing written yet
  bool afterKey = false;
};

} // namespace lamina::plan::json

#endif // LAMINA_LIB_PLAN_JSON_H
