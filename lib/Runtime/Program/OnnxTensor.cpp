//===- OnnxTensor.cpp - ONNX tensors and models without MLIR --------------===//

#include "OnnxTensor.h"

#include "FileUtil.h"
#include "lamina/Runtime/TensorIO.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>

#include <climits>
#include <cstring>
#include <optional>
#include <sys/stat.h>

using namespace lamina::rt;
using ::onnx::TensorProto;

bool lamina::rt::dtypeFromOnnx(int32_t dataType, DType &out) {
  static const std::pair<int32_t, DType> kTypes[] = {
      {TensorProto::FLOAT, DType::F32},     {TensorProto::DOUBLE, DType::F64},
      {TensorProto::FLOAT16, DType::F16},   {TensorProto::BFLOAT16, DType::BF16},
      {TensorProto::BOOL, DType::I1},       {TensorProto::INT8, DType::I8},
      {TensorProto::INT16, DType::I16},     {TensorProto::INT32, DType::I32},
      {TensorProto::INT64, DType::I64},     {TensorProto::UINT8, DType::U8},
      {TensorProto::UINT16, DType::U16},    {TensorProto::UINT32, DType::U32},
      {TensorProto::UINT64, DType::U64},
  };
  for (const auto &[onnxType, dtype] : kTypes)
    if (onnxType == dataType) {
      out = dtype;
      return true;
    }
  return false;
}

static std::string onnxTypeName(int32_t dataType) {
  if (!TensorProto::DataType_IsValid(dataType))
    return "invalid (" + std::to_string(dataType) + ")";
  return TensorProto::DataType_Name(TensorProto::DataType(dataType));
}

/// A decimal uint64 with nothing else around it.
static bool parseUnsigned(const std::string &s, uint64_t &out) {
  if (s.empty() || s.size() > 20)
    return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9' || v > (UINT64_MAX - uint64_t(c - '0')) / 10)
      return false;
    v = v * 10 + uint64_t(c - '0');
  }
  out = v;
  return true;
}

/// How many values the typed field ONNX defines for the data type holds.
static int64_t typedCount(const TensorProto &t) {
  switch (t.data_type()) {
  case TensorProto::FLOAT: return t.float_data_size();
  case TensorProto::DOUBLE: return t.double_data_size();
  case TensorProto::INT64: return t.int64_data_size();
  case TensorProto::UINT32:
  case TensorProto::UINT64: return t.uint64_data_size();
  default: return t.int32_data_size();
  }
}

TensorDecoder::TensorDecoder(const std::string &dir)
    : baseDir(dir), realBaseDir(dir.empty() ? "" : realPath(dir)) {}

Status TensorDecoder::inspect(const TensorProto &tensor, DType &dtype,
                              std::vector<int64_t> &shape) {
  if (!dtypeFromOnnx(tensor.data_type(), dtype))
    return Status::error("unsupported tensor element type " +
                         onnxTypeName(tensor.data_type()));
  shape.assign(tensor.dims().begin(), tensor.dims().end());
  int64_t n = checkedNumElements(shape.data(), int(shape.size()));
  if (n < 0)
    return Status::error("invalid dims (negative, or more than 2^48 elements)");
  uint64_t bytes = uint64_t(n) * dtypeSize(dtype);
  if (tensor.data_location() == TensorProto::EXTERNAL) {
    std::string path;
    uint64_t offset;
    return resolveExternal(tensor, bytes, path, offset);
  }
  if (tensor.has_raw_data()) {
    if (tensor.raw_data().size() != bytes)
      return Status::error("raw_data holds " +
                           std::to_string(tensor.raw_data().size()) +
                           " bytes, dims need " + std::to_string(bytes));
    return Status::success();
  }
  if (int64_t count = typedCount(tensor); count != n)
    return Status::error("holds " + std::to_string(count) +
                         " values, dims need " + std::to_string(n));
  return Status::success();
}

ExternalFile lamina::rt::resolveExternalFile(const std::string &baseDir,
                                             const std::string &realBaseDir,
                                             const std::string &location) {
  ExternalFile file;
  if (realBaseDir.empty()) {
    file.error = "external data '" + location +
                 "' needs the model's folder, which is unknown here";
    return file;
  }
  // Only relative paths below the model's folder: no absolute paths, no
  // '..', and (checked after resolving) no links that lead outside.
  if (location.empty() || location[0] == '/' || location[0] == '\\') {
    file.error = "external data location '" + location +
                 "' is an absolute path; only paths inside the model's "
                 "folder are allowed";
    return file;
  }
  for (size_t start = 0; start <= location.size();) {
    size_t end = location.find('/', start);
    if (end == std::string::npos)
      end = location.size();
    if (location.compare(start, end - start, "..") == 0) {
      file.error = "external data location '" + location +
                   "' leaves the model's folder ('..')";
      return file;
    }
    start = end + 1;
  }
  std::string real = realPath(baseDir + "/" + location);
  if (real.empty()) {
    file.error = "external data file '" + location + "' does not exist";
    file.missing = true;
    return file;
  }
  bool inside = realBaseDir == "/" ||
                (real.compare(0, realBaseDir.size(), realBaseDir) == 0 &&
                 real.size() > realBaseDir.size() &&
                 real[realBaseDir.size()] == '/');
  if (!inside) {
    file.error = "external data location '" + location +
                 "' resolves outside the model's folder (a link?)";
    return file;
  }
  struct stat st;
  if (::stat(real.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    file.error = "external data '" + location + "' is not a regular file";
    return file;
  }
  file.path = real;
  file.size = uint64_t(st.st_size);
  return file;
}

const ExternalFile &TensorDecoder::resolveFile(const std::string &location) {
  auto [it, inserted] = files.try_emplace(location);
  if (inserted)
    it->second = resolveExternalFile(baseDir, realBaseDir, location);
  return it->second;
}

Status TensorDecoder::resolveExternal(const TensorProto &tensor,
                                      uint64_t bytes, std::string &path,
                                      uint64_t &offsetOut) {
  std::string location;
  std::optional<uint64_t> offset, length;
  for (const auto &entry : tensor.external_data()) {
    uint64_t v;
    if (entry.key() == "location") {
      location = entry.value();
    } else if (entry.key() == "offset" || entry.key() == "length") {
      if (!parseUnsigned(entry.value(), v))
        return Status::error("external data " + entry.key() + " '" +
                             entry.value() + "' is not a number");
      (entry.key() == "offset" ? offset : length) = v;
    }
  }
  if (location.empty())
    return Status::error("external data without a location");
  const ExternalFile &file = resolveFile(location);
  if (!file.error.empty())
    return Status::error(file.error);
  uint64_t start = offset.value_or(0);
  if (start > file.size)
    return Status::error("external data offset " + std::to_string(start) +
                         " is past the end of '" + location + "' (" +
                         std::to_string(file.size) + " bytes)");
  if (length && *length != bytes)
    return Status::error("external data length " + std::to_string(*length) +
                         " differs from the " + std::to_string(bytes) +
                         " bytes the dims need");
  if (bytes > file.size - start)
    return Status::error("external data range [" + std::to_string(start) +
                         ", +" + std::to_string(bytes) +
                         ") runs past the end of '" + location + "' (" +
                         std::to_string(file.size) + " bytes)");
  path = file.path;
  offsetOut = start;
  return Status::success();
}

/// Narrows typed-field values into `dst` as `T`.
template <typename T, typename Field>
static void narrow(const Field &values, void *dst) {
  T *out = static_cast<T *>(dst);
  for (int i = 0, n = values.size(); i < n; ++i)
    out[i] = static_cast<T>(values.Get(i));
}

Status TensorDecoder::read(const TensorProto &tensor, DType dtype,
                           int64_t n, void *dst) {
  uint64_t bytes = uint64_t(n) * dtypeSize(dtype);
  if (tensor.data_location() == TensorProto::EXTERNAL) {
    std::string path;
    uint64_t offset;
    if (Status s = resolveExternal(tensor, bytes, path, offset); !s.ok())
      return s;
    File file;
    uint64_t size;
    if (Status s = file.openForRead(path, size); !s.ok())
      return s;
    // The file may have shrunk since it was inspected.
    if (size < offset || size - offset < bytes)
      return Status::error("external data '" + path + "' is truncated");
    if (Status s = file.readAt(dst, bytes, offset); !s.ok())
      return s;
  } else if (tensor.has_raw_data()) {
    if (tensor.raw_data().size() != bytes)
      return Status::error("raw_data size does not match the dims");
    std::memcpy(dst, tensor.raw_data().data(), bytes);
  } else {
    // Only the field ONNX defines for this type is read (and its length
    // checked), so stray fields cannot add values.
    if (typedCount(tensor) != n)
      return Status::error("value count does not match the dims");
    switch (tensor.data_type()) {
    case TensorProto::FLOAT: narrow<float>(tensor.float_data(), dst); break;
    case TensorProto::DOUBLE: narrow<double>(tensor.double_data(), dst); break;
    case TensorProto::INT64: narrow<int64_t>(tensor.int64_data(), dst); break;
    case TensorProto::UINT64: narrow<uint64_t>(tensor.uint64_data(), dst); break;
    case TensorProto::UINT32: narrow<uint32_t>(tensor.uint64_data(), dst); break;
    case TensorProto::INT32: narrow<int32_t>(tensor.int32_data(), dst); break;
    // fp16/bf16 bit patterns sit in the low 16 bits of int32_data.
    case TensorProto::FLOAT16:
    case TensorProto::BFLOAT16:
    case TensorProto::INT16:
    case TensorProto::UINT16: narrow<uint16_t>(tensor.int32_data(), dst); break;
    default: narrow<uint8_t>(tensor.int32_data(), dst); break;
    }
  }
  if (dtype == DType::I1) {
    auto *p = static_cast<uint8_t *>(dst);
    for (uint64_t i = 0; i < bytes; ++i)
      p[i] = p[i] != 0;
  }
  return Status::success();
}

Status lamina::rt::loadModel(const std::string &path,
                             ::onnx::ModelProto &model) {
  File file;
  uint64_t size = 0;
  if (Status s = file.openForRead(path, size); !s.ok())
    return s;
  if (size > uint64_t(INT_MAX))
    return Status::error("'" + path +
                         "' is larger than protobuf's 2 GiB limit (store "
                         "weights as external data)");
  google::protobuf::io::FileInputStream input(file.fd());
  google::protobuf::io::CodedInputStream stream(&input);
  stream.SetTotalBytesLimit(INT_MAX);
  // Deep nesting in a corrupt file is cut off by the recursion limit.
  stream.SetRecursionLimit(100);
  if (!model.ParseFromCodedStream(&stream) || !stream.ConsumedEntireMessage())
    return Status::error("'" + path +
                         "' is not a valid ONNX model (truncated or corrupt "
                         "file)");
  return Status::success();
}

void lamina::rt::forEachInitializer(
    ::onnx::GraphProto &graph,
    const std::function<void(TensorProto &)> &fn) {
  for (TensorProto &t : *graph.mutable_initializer())
    fn(t);
  for (auto &node : *graph.mutable_node())
    for (auto &attr : *node.mutable_attribute()) {
      if (attr.has_g())
        forEachInitializer(*attr.mutable_g(), fn);
      for (auto &sub : *attr.mutable_graphs())
        forEachInitializer(sub, fn);
    }
}

void lamina::rt::collectInitializers(
    ::onnx::GraphProto &graph, std::map<std::string, TensorProto *> &out) {
  forEachInitializer(graph, [&out](TensorProto &t) {
    out.emplace(t.name(), &t);
  });
}

Status lamina::rt::readTensorProto(const std::string &path, OwnedTensor &out,
                                   std::string *name) {
  File file;
  uint64_t size = 0;
  if (Status s = file.openForRead(path, size); !s.ok())
    return s;
  if (size > uint64_t(INT_MAX))
    return Status::error("'" + path + "' is larger than protobuf's 2 GiB limit");
  std::string bytes(size, '\0');
  if (Status s = file.readAt(&bytes[0], size, 0); !s.ok())
    return s;
  TensorProto tensor;
  if (!tensor.ParseFromString(bytes))
    return Status::error("'" + path + "' is not an ONNX TensorProto");
  bytes = std::string();
  if (name)
    *name = tensor.name();
  TensorDecoder decoder(parentDir(path));
  DType dtype;
  std::vector<int64_t> shape;
  Status s = decoder.inspect(tensor, dtype, shape);
  if (s.ok()) {
    out.allocate(dtype, std::move(shape));
    s = decoder.read(tensor, dtype, out.numElements(), out.data());
  }
  if (!s.ok())
    return Status::error("'" + path + "': " + s.message());
  return Status::success();
}
