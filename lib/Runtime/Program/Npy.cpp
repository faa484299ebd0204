//===- Npy.cpp - .npy files, owned tensors, type text ---------------------===//
//
// The .npy format: "\x93NUMPY", major, minor, a little-endian header length
// (2 bytes in 1.0, 4 in 2.0/3.0), then a Python dict literal such as
// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } and the data.
// The dict is parsed strictly (a tiny literal parser, not substring
// search), so a key inside a string cannot be mistaken for a field.
//
//===----------------------------------------------------------------------===//

#include "lamina/Runtime/TensorIO.h"

#include "FileUtil.h"

#include <cstdio>
#include <cstring>

using namespace lamina::rt;

namespace {
struct NpyType {
  const char *code; // kind + size, e.g. "f4"
  DType dtype;
};
const NpyType kNpyTypes[] = {
    {"f4", DType::F32}, {"f8", DType::F64}, {"f2", DType::F16},
    {"b1", DType::I1},  {"i1", DType::I8},  {"i2", DType::I16},
    {"i4", DType::I32}, {"i8", DType::I64}, {"u1", DType::U8},
    {"u2", DType::U16}, {"u4", DType::U32}, {"u8", DType::U64},
    // bf16 has no numpy dtype; its bit patterns travel as u2 (writeNpy).
    {"u2", DType::BF16},
};

/// The fields of a .npy header dict.
struct NpyHeader {
  std::string descr;
  bool fortran = false;
  std::vector<int64_t> shape;
};

/// Parses the header dict literal; returns an error or "".
class HeaderParser {
public:
  explicit HeaderParser(const std::string &text) : s(text) {}

  std::string parse(NpyHeader &h) {
    bool sawDescr = false, sawShape = false;
    skip();
    if (!eat('{'))
      return "header is not a dict";
    while (true) {
      skip();
      if (eat('}'))
        break;
      std::string key;
      if (!quoted(key))
        return "bad header key";
      skip();
      if (!eat(':'))
        return "no ':' after header key '" + key + "'";
      skip();
      if (key == "descr") {
        if (!quoted(h.descr))
          return "descr is not a plain dtype string (structured dtypes "
                 "are not supported)";
        sawDescr = true;
      } else if (key == "fortran_order") {
        if (word("True"))
          h.fortran = true;
        else if (!word("False"))
          return "fortran_order is not True or False";
      } else if (key == "shape") {
        if (std::string err = tuple(h.shape); !err.empty())
          return err;
        sawShape = true;
      } else {
        return "unknown header key '" + key + "'";
      }
      skip();
      if (eat(','))
        continue;
      skip();
      if (eat('}'))
        break;
      return "header dict is malformed";
    }
    if (!sawDescr || !sawShape)
      return "header lacks descr or shape";
    return "";
  }

private:
  void skip() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n'))
      ++i;
  }
  bool eat(char c) {
    if (i < s.size() && s[i] == c) {
      ++i;
      return true;
    }
    return false;
  }
  bool word(const char *w) {
    size_t n = std::strlen(w);
    if (s.compare(i, n, w) != 0)
      return false;
    i += n;
    return true;
  }
  bool quoted(std::string &out) {
    if (i >= s.size() || (s[i] != '\'' && s[i] != '"'))
      return false;
    char q = s[i++];
    size_t end = s.find(q, i);
    if (end == std::string::npos)
      return false;
    out = s.substr(i, end - i);
    i = end + 1;
    return true;
  }
  std::string tuple(std::vector<int64_t> &shape) {
    if (!eat('('))
      return "shape is not a tuple";
    while (true) {
      skip();
      if (eat(')'))
        return "";
      if (i >= s.size() || s[i] < '0' || s[i] > '9')
        return "bad shape entry";
      int64_t d = 0;
      while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
        if (d > (kMaxFileElements - (s[i] - '0')) / 10)
          return "shape entry too large";
        d = d * 10 + (s[i++] - '0');
      }
      // Python 2 era writers append 'L' to longs.
      eat('L');
      shape.push_back(d);
      skip();
      if (!eat(',')) {
        skip();
        if (eat(')'))
          return "";
        return "bad shape tuple";
      }
    }
  }

  const std::string &s;
  size_t i = 0;
};
} // namespace

int64_t lamina::rt::checkedNumElements(const int64_t *shape, int rank) {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) {
    int64_t d = shape[i];
    if (d < 0)
      return -1;
    if (d != 0 && n > kMaxFileElements / d)
      return -1;
    n *= d;
  }
  return n;
}

void OwnedTensor::allocate(DType type, std::vector<int64_t> dims) {
  dtype = type;
  shape = std::move(dims);
  // One spare word so data() is never null, even for an empty tensor.
  storage.assign((byteSize() + 7) / 8 + 1, 0);
}

std::string lamina::rt::describeType(DType dtype, const int64_t *shape,
                                     int rank) {
  std::string s = "tensor<";
  for (int i = 0; i < rank; ++i)
    s += std::to_string(shape[i]) + "x";
  return s + dtypeName(dtype) + ">";
}

Status lamina::rt::readNpyHeader(const std::string &path, NpyInfo &info) {
  File file;
  uint64_t size = 0;
  if (Status s = file.openForRead(path, size); !s.ok())
    return s;
  auto bad = [&](const std::string &why) {
    return Status::error("'" + path + "' is not a supported .npy file: " + why);
  };
  unsigned char prefix[12];
  if (size < 10 || !file.readAt(prefix, 10, 0).ok() ||
      std::memcmp(prefix, "\x93NUMPY", 6) != 0)
    return bad("no NUMPY magic");
  unsigned major = prefix[6];
  uint64_t headerLen, start;
  if (major == 1) {
    headerLen = prefix[8] | (uint64_t(prefix[9]) << 8);
    start = 10;
  } else if ((major == 2 || major == 3) && size >= 12) {
    if (!file.readAt(prefix, 12, 0).ok())
      return bad("truncated header");
    headerLen = 0;
    for (int i = 0; i < 4; ++i)
      headerLen |= uint64_t(prefix[8 + i]) << (8 * i);
    start = 12;
  } else {
    return bad("format version " + std::to_string(major));
  }
  if (size - start < headerLen || headerLen > (1u << 20))
    return bad("truncated header");
  std::string text(headerLen, '\0');
  if (!file.readAt(&text[0], headerLen, start).ok())
    return bad("truncated header");
  NpyHeader header;
  if (std::string err = HeaderParser(text).parse(header); !err.empty())
    return bad(err);

  const std::string &descr = header.descr;
  const NpyType *type = nullptr;
  if (descr.size() == 3)
    for (const NpyType &t : kNpyTypes)
      if (descr.compare(1, 2, t.code) == 0) {
        type = &t; // first match: u2 reads as U16
        break;
      }
  char order = descr.empty() ? 0 : descr[0];
  if (!type || (order != '<' && order != '|' && order != '=' && order != '>'))
    return bad("unsupported dtype '" + descr + "'");
  // '=' is native order, which is little-endian on every host we build for.
  if (order == '>' && dtypeSize(type->dtype) > 1)
    return bad("big-endian dtype '" + descr + "'");
  int nonTrivial = 0;
  for (int64_t d : header.shape)
    nonTrivial += d > 1;
  if (header.fortran && nonTrivial > 1)
    return bad("fortran_order arrays are not supported");
  int64_t n = checkedNumElements(header.shape.data(), int(header.shape.size()));
  if (n < 0)
    return bad("more than 2^48 elements");
  // Checked before anything is allocated or mapped: a header must not
  // promise more than the file holds.
  uint64_t bytes = uint64_t(n) * dtypeSize(type->dtype),
           dataStart = start + headerLen;
  if (size - dataStart < bytes)
    return bad("data has " + std::to_string(size - dataStart) +
               " bytes, the shape needs " + std::to_string(bytes));
  info.dtype = type->dtype;
  info.shape = std::move(header.shape);
  info.dataOffset = dataStart;
  info.fileSize = size;
  return Status::success();
}

Status lamina::rt::readNpy(const std::string &path, OwnedTensor &out) {
  NpyInfo info;
  if (Status s = readNpyHeader(path, info); !s.ok())
    return s;
  File file;
  uint64_t size = 0;
  if (Status s = file.openForRead(path, size); !s.ok())
    return s;
  out.allocate(info.dtype, std::move(info.shape));
  uint64_t bytes = out.byteSize();
  if (size < info.dataOffset + bytes)
    return Status::error("'" + path + "' changed while it was read");
  if (Status s = file.readAt(out.data(), bytes, info.dataOffset); !s.ok())
    return s;
  if (out.dtype == DType::I1) {
    auto *p = static_cast<uint8_t *>(out.data());
    for (uint64_t i = 0; i < bytes; ++i)
      p[i] = p[i] != 0;
  }
  return Status::success();
}

Status lamina::rt::writeNpy(const std::string &path, const Tensor &t) {
  const char *code = nullptr;
  for (const NpyType &n : kNpyTypes)
    if (n.dtype == t.dtype) {
      code = n.code;
      break;
    }
  if (!code)
    return Status::error(std::string("no .npy dtype for ") +
                         dtypeName(t.dtype));
  std::string header = "{'descr': '";
  header += dtypeSize(t.dtype) == 1 ? "|" : "<";
  header += code;
  header += "', 'fortran_order': False, 'shape': (";
  for (int i = 0; i < t.rank; ++i)
    header += (i ? ", " : "") + std::to_string(t.shape[i]);
  header += t.rank == 1 ? ",)" : ")";
  header += ", }";
  // numpy pads the header with spaces and a newline to a 64-byte boundary.
  while ((10 + header.size() + 1) % 64)
    header += ' ';
  header += '\n';
  if (header.size() > 0xffff)
    return Status::error("rank " + std::to_string(t.rank) +
                         " is too large for a .npy 1.0 header");
  std::string prefix = "\x93NUMPY";
  prefix += char(1);
  prefix += char(0);
  prefix += char(header.size() & 0xff);
  prefix += char(header.size() >> 8);
  File file;
  if (Status s = file.openForWrite(path); !s.ok())
    return s;
  if (Status s = file.write(prefix.data(), prefix.size()); !s.ok())
    return s;
  if (Status s = file.write(header.data(), header.size()); !s.ok())
    return s;
  if (Status s = file.write(t.data, t.byteSize()); !s.ok())
    return s;
  return file.close();
}
