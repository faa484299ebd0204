//===- Args.h - command-line reading for generated programs -----*- C++ -*-===//
//
// What `run` (inference) and `run` (training) share of their argv handling:
// "--opt value" and "--opt=value", and strict decimal counts. Private to
// lamina_program; no getopt, so the behaviour is the same everywhere.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_LIB_RUNTIME_PROGRAM_ARGS_H
#define LAMINA_LIB_RUNTIME_PROGRAM_ARGS_H

#include <stdint.h>
#include <string>

namespace lamina::rt {

class ArgReader {
public:
  ArgReader(int argc, char **argv) : argc(argc), argv(argv) {}

  /// Moves to the next argument; false after the last.
  bool next() {
    if (++index >= argc)
      return false;
    name_ = argv[index];
    value_.clear();
    inline_ = false;
    if (name_.rfind("--", 0) == 0) {
      size_t eq = name_.find('=');
      if (eq != std::string::npos) {
        value_ = name_.substr(eq + 1);
        name_ = name_.substr(0, eq);
        inline_ = true;
      }
    }
    return true;
  }
  /// The option as written, without an "=value" part.
  const std::string &name() const { return name_; }
  /// The whole argument, for "unknown argument" messages.
  const char *raw() const { return argv[index]; }
  /// A flag takes no value: "--flag=x" is not the flag.
  bool isFlag(const char *flag) const { return !inline_ && name_ == flag; }
  /// The option's value ("=value" or the next argument); false if none.
  bool take(std::string &out) {
    if (!inline_) {
      if (index + 1 >= argc)
        return false;
      value_ = argv[++index];
    }
    out = value_;
    return true;
  }

private:
  int argc;
  char **argv;
  int index = 0;
  std::string name_, value_;
  bool inline_ = false;
};

/// A decimal count of at most 18 digits that is >= min.
inline bool parseCount(const std::string &s, int64_t &out, int64_t min) {
  if (s.empty() || s.size() > 18)
    return false;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9')
      return false;
    v = v * 10 + (c - '0');
  }
  out = v;
  return v >= min;
}

} // namespace lamina::rt

#endif // LAMINA_LIB_RUNTIME_PROGRAM_ARGS_H
