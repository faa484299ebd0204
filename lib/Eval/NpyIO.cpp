//===- NpyIO.cpp - .npy and ONNX TensorProto files for the evaluator ------===//

#include "lamina/Eval/Evaluator.h"

#include "ModelLoader.h" // lib/Target/ONNX: TensorReader

#include "lamina/Runtime/Math.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cstring>

using namespace mlir;
using namespace lamina;
using namespace lamina::eval;

namespace {
struct NpyType {
  const char *code; // kind + size, e.g. "f4"
  rt::DType dtype;
};
const NpyType kNpyTypes[] = {
    {"f4", rt::DType::F32}, {"f8", rt::DType::F64}, {"f2", rt::DType::F16},
    {"b1", rt::DType::I1},  {"i1", rt::DType::I8},  {"i2", rt::DType::I16},
    {"i4", rt::DType::I32}, {"i8", rt::DType::I64}, {"u1", rt::DType::U8},
    {"u2", rt::DType::U16}, {"u4", rt::DType::U32}, {"u8", rt::DType::U64},
};
} // namespace

/// The value text after `'key':` in a .npy header dict, trimmed.
static StringRef headerValue(StringRef header, StringRef key) {
  size_t pos = header.find(("'" + key + "'").str());
  if (pos == StringRef::npos)
    return {};
  StringRef rest = header.drop_front(pos + key.size() + 2).ltrim();
  if (!rest.consume_front(":"))
    return {};
  return rest.ltrim();
}

std::string lamina::eval::readNpy(StringRef path, HostTensor &out) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer)
    return "cannot open '" + path.str() + "': " + buffer.getError().message();
  StringRef bytes = (*buffer)->getBuffer();
  auto bad = [&](const std::string &why) {
    return "'" + path.str() + "' is not a supported .npy file: " + why;
  };
  if (bytes.size() < 10 || !bytes.starts_with("\x93NUMPY"))
    return bad("no NUMPY magic");
  unsigned major = uint8_t(bytes[6]);
  size_t headerLen, start;
  if (major == 1) {
    headerLen = uint8_t(bytes[8]) | (size_t(uint8_t(bytes[9])) << 8);
    start = 10;
  } else if ((major == 2 || major == 3) && bytes.size() >= 12) {
    headerLen = 0;
    for (int i = 0; i < 4; ++i)
      headerLen |= size_t(uint8_t(bytes[8 + i])) << (8 * i);
    start = 12;
  } else {
    return bad("format version " + std::to_string(major));
  }
  if (bytes.size() < start + headerLen)
    return bad("truncated header");
  StringRef header = bytes.substr(start, headerLen);
  // descr
  StringRef descr = headerValue(header, "descr");
  if (descr.empty() || (descr[0] != '\'' && descr[0] != '"'))
    return bad("no descr");
  descr = descr.drop_front().take_until([](char c) { return c == '\'' || c == '"'; });
  if (descr.size() != 3)
    return bad("unsupported dtype '" + descr.str() + "'");
  char order = descr[0];
  StringRef code = descr.drop_front();
  const NpyType *type = nullptr;
  for (const NpyType &t : kNpyTypes)
    if (code == t.code)
      type = &t;
  if (!type)
    return bad("unsupported dtype '" + descr.str() + "'");
  if (order == '>' && rt::dtypeSize(type->dtype) > 1)
    return bad("big-endian dtype '" + descr.str() + "'");
  if (order != '<' && order != '|' && order != '=' && order != '>')
    return bad("unsupported dtype '" + descr.str() + "'");
  // shape
  StringRef shapeText = headerValue(header, "shape");
  if (!shapeText.consume_front("("))
    return bad("no shape");
  shapeText = shapeText.take_until([](char c) { return c == ')'; });
  std::vector<int64_t> shape;
  while (true) {
    shapeText = shapeText.ltrim();
    if (shapeText.empty())
      break;
    StringRef item = shapeText.take_until([](char c) { return c == ','; });
    shapeText = shapeText.drop_front(std::min(item.size() + 1, shapeText.size()));
    item = item.trim();
    if (item.empty())
      continue;
    int64_t d;
    if (item.getAsInteger(10, d) || d < 0)
      return bad("bad shape entry '" + item.str() + "'");
    shape.push_back(d);
  }
  bool fortran = headerValue(header, "fortran_order").starts_with("True");
  int nonTrivial = 0;
  for (int64_t d : shape)
    nonTrivial += d > 1;
  if (fortran && nonTrivial > 1)
    return bad("fortran_order arrays are not supported");
  out = HostTensor(type->dtype, shape);
  StringRef data = bytes.drop_front(start + headerLen);
  if (data.size() < out.byteSize())
    return bad("data has " + std::to_string(data.size()) + " bytes, expected " +
               std::to_string(out.byteSize()));
  std::memcpy(out.data(), data.data(), out.byteSize());
  if (type->dtype == rt::DType::I1)
    for (size_t i = 0; i < out.byteSize(); ++i)
      static_cast<uint8_t *>(out.data())[i] =
          static_cast<uint8_t *>(out.data())[i] != 0;
  return "";
}

std::string lamina::eval::writeNpy(StringRef path, const HostTensor &t) {
  const HostTensor *src = &t;
  HostTensor widened;
  if (t.dtype == rt::DType::BF16) {
    widened = HostTensor(rt::DType::F32, t.shape);
    auto *in = static_cast<const uint16_t *>(t.data());
    auto *o = static_cast<float *>(widened.data());
    for (int64_t i = 0, n = t.numElements(); i < n; ++i)
      o[i] = rt::math::bf16ToFloat(in[i]);
    src = &widened;
  }
  const char *code = nullptr;
  for (const NpyType &n : kNpyTypes)
    if (n.dtype == src->dtype)
      code = n.code;
  if (!code)
    return std::string("no .npy dtype for ") + rt::dtypeName(src->dtype);
  std::string header = "{'descr': '";
  header += rt::dtypeSize(src->dtype) == 1 ? "|" : "<";
  header += code;
  header += "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < src->shape.size(); ++i)
    header += (i ? ", " : "") + std::to_string(src->shape[i]);
  header += src->shape.size() == 1 ? ",)" : ")";
  header += ", }";
  while ((10 + header.size() + 1) % 64)
    header += ' ';
  header += '\n';
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec, llvm::sys::fs::OF_None);
  if (ec)
    return "cannot write '" + path.str() + "': " + ec.message();
  os << "\x93NUMPY" << char(1) << char(0) << char(header.size() & 0xff)
     << char(header.size() >> 8) << header;
  os.write(static_cast<const char *>(src->data()), src->byteSize());
  os.close();
  if (os.has_error())
    return "cannot write '" + path.str() + "': " + os.error().message();
  return "";
}

std::string lamina::eval::readTensorProto(MLIRContext *context, StringRef path,
                                          HostTensor &out, std::string &name) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer)
    return "cannot open '" + path.str() + "': " + buffer.getError().message();
  StringRef bytes = (*buffer)->getBuffer();
  ::onnx::TensorProto tensor;
  if (bytes.size() > size_t(INT32_MAX) ||
      !tensor.ParseFromArray(bytes.data(), int(bytes.size())))
    return "'" + path.str() + "' is not an ONNX TensorProto";
  name = tensor.name();
  StringRef dir = llvm::sys::path::parent_path(path);
  onnx::TensorReader reader(dir.empty() ? "." : dir);
  RankedTensorType type;
  DenseElementsAttr attr;
  std::string err = reader.validate(context, tensor, type);
  if (err.empty())
    err = reader.read(tensor, type, attr);
  if (err.empty())
    err = fromElementsAttr(attr, out);
  if (!err.empty())
    return "'" + path.str() + "': " + err;
  return "";
}
