//===- Json.h - the small JSON reader and writer of the LLVM-free code ----===//
//
// One JSON library for the code that runs without LLVM: the planner
// (LaminaPlan: its reports, traces and hardware files) and the runtime
// generated programs link (the distributed driver's --stats and --trace,
// the safetensors header). Generated programs must not depend on LLVM, so
// this is not llvm::json; the compiler's own MLIR/LLVM code uses llvm::json.
// Built as LaminaSupport (lib/Support), plain C++17.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_SUPPORT_JSON_H
#define LAMINA_SUPPORT_JSON_H

#include "lamina/Support/Status.h"

#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace lamina::json {

/// A parsed JSON value. Objects keep their members in document order.
struct Value {
  enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<Value> array;
  std::vector<std::pair<std::string, Value>> object;

  /// The member named `key` of an object (the first one), or null when this
  /// is not an object or has no such member.
  const Value *find(std::string_view key) const;
  /// The number member `key`, or `otherwise` when it is absent or not a
  /// number.
  double numberOr(std::string_view key, double otherwise) const;
};

/// Parses one JSON document; errors say "line L column C: ...".
Expected<Value> parse(std::string_view text);

/// `"text"` with JSON escapes.
std::string quote(std::string_view text);
/// A finite number in the shortest form that round-trips (non-finite: null).
std::string number(double v);
/// A finite number with `decimals` digits after the point, as printf's
/// "%.*f" writes it (non-finite: null).
std::string fixed(double v, int decimals);

/// How a container lays out its members.
enum class Layout {
  /// One member a line, indented two spaces for each indented container
  /// open: {\n  "a": 1,\n  "b": 2\n}
  Indented,
  /// On one line, spaced: {"a": 1, "b": [1, 2]}
  Inline,
  /// On one line, no spaces: {"a":1,"b":[1,2]}
  Compact,
};

/// Streams JSON with commas and layout handled: begin/end nest, key() names
/// the next value inside an object. A container takes the layout given to
/// begin, else its parent's, else the writer's.
class Writer {
public:
  explicit Writer(std::string &out, Layout layout = Layout::Indented)
      : out(out), layout(layout) {}
  Writer &beginObject() { return open('{', current()); }
  Writer &beginObject(Layout l) { return open('{', l); }
  Writer &endObject() { return close('}'); }
  Writer &beginArray() { return open('[', current()); }
  Writer &beginArray(Layout l) { return open('[', l); }
  Writer &endArray() { return close(']'); }
  Writer &key(std::string_view k);
  Writer &value(double v) { return raw(number(v)); }
  template <typename T,
            std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>,
                             int> = 0>
  Writer &value(T v) {
    return raw(std::to_string(v));
  }
  Writer &value(bool v) { return raw(v ? "true" : "false"); }
  Writer &value(std::string_view v) { return raw(quote(v)); }
  Writer &value(const char *v) { return raw(quote(v)); }
  Writer &value(const std::string &v) { return raw(quote(v)); }
  /// A parsed value, written again (numbers in the shortest form), its
  /// containers laid out as a container begun here would be, or as `l`.
  Writer &value(const Value &v) { return value(v, current()); }
  Writer &value(const Value &v, Layout l);
  Writer &null() { return raw("null"); }
  /// A number with `decimals` digits after the point (fixed()).
  Writer &fixedValue(double v, int decimals) { return raw(fixed(v, decimals)); }
  /// One complete JSON value that is already written (by another Writer, or
  /// another process), copied as it is.
  Writer &rawValue(std::string_view json) { return raw(json); }
  /// key(k).value(v)
  template <typename T> Writer &field(std::string_view k, const T &v) {
    return key(k).value(v);
  }

private:
  struct Open {
    Layout layout;
    bool empty; ///< nothing written in it yet
  };
  Layout current() const {
    return stack.empty() ? layout : stack.back().layout;
  }
  /// Two spaces for each indented container open.
  std::string indent() const;
  Writer &open(char c, Layout l);
  Writer &close(char c);
  Writer &raw(std::string_view text);
  void separate();
  std::string &out;
  Layout layout;
  std::vector<Open> stack; ///< the containers open, innermost last
  bool afterKey = false;
};

} // namespace lamina::json

#endif // LAMINA_SUPPORT_JSON_H
