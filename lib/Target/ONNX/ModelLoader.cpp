//===- ModelLoader.cpp - reading and checking ONNX protobufs --------------===//

#include "ModelLoader.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <google/protobuf/io/coded_stream.h>

using namespace mlir;
using namespace lamina::onnx;
using ::onnx::TensorProto;

std::string lamina::onnx::parseModel(llvm::StringRef bytes,
                                     ::onnx::ModelProto &model) {
  google::protobuf::io::CodedInputStream stream(
      reinterpret_cast<const uint8_t *>(bytes.data()),
      static_cast<int>(std::min<size_t>(bytes.size(), INT32_MAX)));
  // Models up to protobuf's own 2 GiB limit; weights beyond go to external
  // data. Deep nesting in a corrupt file is cut off by the recursion limit.
  stream.SetTotalBytesLimit(INT32_MAX);
  stream.SetRecursionLimit(100);
  if (bytes.size() > INT32_MAX)
    return "file is larger than protobuf's 2 GiB limit (store weights as "
           "external data)";
  if (!model.ParseFromCodedStream(&stream) || !stream.ConsumedEntireMessage())
    return "not a valid ONNX protobuf (truncated or corrupt file)";
  return "";
}

Type lamina::onnx::elementTypeOf(MLIRContext *ctx, int32_t dataType) {
  Builder b(ctx);
  switch (dataType) {
  case TensorProto::FLOAT:
    return b.getF32Type();
  case TensorProto::DOUBLE:
    return b.getF64Type();
  case TensorProto::FLOAT16:
    return b.getF16Type();
  case TensorProto::BFLOAT16:
    return b.getBF16Type();
  case TensorProto::BOOL:
    return b.getI1Type();
  case TensorProto::INT8:
    return b.getIntegerType(8);
  case TensorProto::INT16:
    return b.getIntegerType(16);
  case TensorProto::INT32:
    return b.getIntegerType(32);
  case TensorProto::INT64:
    return b.getIntegerType(64);
  case TensorProto::UINT8:
    return b.getIntegerType(8, /*isSigned=*/false);
  case TensorProto::UINT16:
    return b.getIntegerType(16, false);
  case TensorProto::UINT32:
    return b.getIntegerType(32, false);
  case TensorProto::UINT64:
    return b.getIntegerType(64, false);
  default:
    return {};
  }
}

llvm::StringRef lamina::onnx::dataTypeName(int32_t dataType) {
  if (!TensorProto::DataType_IsValid(dataType))
    return "invalid";
  return TensorProto::DataType_Name(static_cast<TensorProto::DataType>(dataType));
}

int64_t lamina::onnx::checkedNumElements(llvm::ArrayRef<int64_t> shape) {
  return lamina::rt::checkedNumElements(shape.data(), int(shape.size()));
}

/// Bytes per element as ONNX stores them (bool: one byte).
static uint64_t storageBytes(Type elementType) {
  unsigned bits = elementType.getIntOrFloatBitWidth();
  return bits == 1 ? 1 : bits / 8;
}

TensorReader::TensorReader(llvm::StringRef dir, bool allowMissing)
    : baseDir(dir.str()), allowMissingData(allowMissing) {
  llvm::SmallString<256> real;
  if (!dir.empty() && !llvm::sys::fs::real_path(dir, real))
    realBaseDir = std::string(real);
}

std::string TensorReader::validate(MLIRContext *ctx, const TensorProto &tensor,
                                   RankedTensorType &type) {
  Type elementType = elementTypeOf(ctx, tensor.data_type());
  if (!elementType)
    return ("unsupported tensor element type " +
            dataTypeName(tensor.data_type()))
        .str();
  llvm::SmallVector<int64_t> shape(tensor.dims().begin(), tensor.dims().end());
  int64_t n = checkedNumElements(shape);
  if (n < 0)
    return "invalid dims (negative, or more than 2^48 elements)";
  type = RankedTensorType::get(shape, elementType);
  uint64_t bytes = static_cast<uint64_t>(n) * storageBytes(elementType);
  if (tensor.data_location() == TensorProto::EXTERNAL) {
    ExternalRange range;
    std::string err = resolveExternal(tensor, bytes, range);
    // Structure-only models: planning needs the shapes, not the bytes.
    if (!err.empty() && allowMissingData) {
      for (const auto &entry : tensor.external_data())
        if (entry.key() == "location" && files.count(entry.value()) &&
            files[entry.value()].missing)
          return "";
    }
    return err;
  }
  if (tensor.has_raw_data()) {
    if (tensor.raw_data().size() != bytes)
      return ("raw_data holds " + llvm::Twine(tensor.raw_data().size()) +
              " bytes, dims need " + llvm::Twine(bytes))
          .str();
    return "";
  }
  int64_t count = 0;
  switch (tensor.data_type()) {
  case TensorProto::FLOAT:
    count = tensor.float_data_size();
    break;
  case TensorProto::DOUBLE:
    count = tensor.double_data_size();
    break;
  case TensorProto::INT64:
    count = tensor.int64_data_size();
    break;
  case TensorProto::UINT32:
  case TensorProto::UINT64:
    count = tensor.uint64_data_size();
    break;
  default:
    count = tensor.int32_data_size();
    break;
  }
  if (count != n)
    return ("holds " + llvm::Twine(count) + " values, dims need " +
            llvm::Twine(n))
        .str();
  return "";
}

const TensorReader::ResolvedFile &
TensorReader::resolveFile(const std::string &location) {
  auto [it, inserted] = files.try_emplace(location);
  if (inserted)
    it->second = rt::resolveExternalFile(baseDir, realBaseDir, location);
  return it->second;
}

std::string TensorReader::resolveExternal(const TensorProto &tensor,
                                          uint64_t expectedBytes,
                                          ExternalRange &range) {
  std::string location;
  std::optional<uint64_t> offset, length;
  for (const auto &entry : tensor.external_data()) {
    auto number = [&](std::optional<uint64_t> &field) -> bool {
      uint64_t v;
      if (llvm::StringRef(entry.value()).getAsInteger(10, v))
        return false;
      field = v;
      return true;
    };
    if (entry.key() == "location")
      location = entry.value();
    else if (entry.key() == "offset" && !number(offset))
      return "external data offset '" + entry.value() + "' is not a number";
    else if (entry.key() == "length" && !number(length))
      return "external data length '" + entry.value() + "' is not a number";
  }
  if (location.empty())
    return "external data without a location";
  const ResolvedFile &file = resolveFile(location);
  if (!file.error.empty())
    return file.error;
  uint64_t size = file.size;
  uint64_t start = offset.value_or(0);
  if (start > size)
    return ("external data offset " + llvm::Twine(start) + " is past the end of '" +
            location + "' (" + llvm::Twine(size) + " bytes)")
        .str();
  if (length && *length != expectedBytes)
    return ("external data length " + llvm::Twine(*length) +
            " differs from the " + llvm::Twine(expectedBytes) +
            " bytes the dims need")
        .str();
  if (expectedBytes > size - start)
    return ("external data range [" + llvm::Twine(start) + ", +" +
            llvm::Twine(expectedBytes) + ") runs past the end of '" + location +
            "' (" + llvm::Twine(size) + " bytes)")
        .str();
  range.path = file.path;
  range.offset = start;
  return "";
}

/// Values from raw little-endian bytes.
static DenseElementsAttr fromRaw(RankedTensorType type, llvm::StringRef bytes) {
  if (type.getElementType().isInteger(1)) {
    llvm::SmallVector<bool> values;
    for (char c : bytes)
      values.push_back(c != 0);
    return DenseElementsAttr::get(type, values);
  }
  return DenseElementsAttr::getFromRawBuffer(
      type, llvm::ArrayRef<char>(bytes.data(), bytes.size()));
}

std::string TensorReader::read(const TensorProto &tensor, RankedTensorType type,
                               DenseElementsAttr &out) {
  Type elementType = type.getElementType();
  uint64_t bytes = type.getNumElements() * storageBytes(elementType);
  if (tensor.data_location() == TensorProto::EXTERNAL) {
    ExternalRange range;
    if (std::string err = resolveExternal(tensor, bytes, range); !err.empty())
      return err;
    auto buffer = llvm::MemoryBuffer::getFileSlice(range.path, bytes,
                                                   range.offset);
    if (!buffer)
      return "cannot read external data '" + range.path +
             "': " + buffer.getError().message();
    out = fromRaw(type, (*buffer)->getBuffer());
    return "";
  }
  if (tensor.has_raw_data()) {
    out = fromRaw(type, tensor.raw_data());
    return "";
  }
  // Typed fields: only the one ONNX defines for this data type is read
  // (validate() checked its length), so stray fields cannot add values.
  int64_t n = type.getNumElements();
  unsigned width = elementType.getIntOrFloatBitWidth();
  switch (tensor.data_type()) {
  case TensorProto::FLOAT:
  case TensorProto::DOUBLE: {
    llvm::SmallVector<APFloat> values;
    if (tensor.data_type() == TensorProto::FLOAT)
      for (float v : tensor.float_data())
        values.push_back(APFloat(v));
    else
      for (double v : tensor.double_data())
        values.push_back(APFloat(v));
    if (static_cast<int64_t>(values.size()) != n)
      return "value count does not match the dims";
    out = DenseElementsAttr::get(type, values);
    return "";
  }
  case TensorProto::FLOAT16:
  case TensorProto::BFLOAT16: {
    llvm::SmallVector<APFloat> values;
    for (int32_t bits : tensor.int32_data())
      values.push_back(APFloat(cast<FloatType>(elementType).getFloatSemantics(),
                               APInt(16, static_cast<uint16_t>(bits))));
    if (static_cast<int64_t>(values.size()) != n)
      return "value count does not match the dims";
    out = DenseElementsAttr::get(type, values);
    return "";
  }
  default:
    break;
  }
  llvm::SmallVector<APInt> values;
  if (tensor.data_type() == TensorProto::INT64)
    for (int64_t v : tensor.int64_data())
      values.push_back(APInt(width, static_cast<uint64_t>(v), true, true));
  else if (tensor.data_type() == TensorProto::UINT32 ||
           tensor.data_type() == TensorProto::UINT64)
    for (uint64_t v : tensor.uint64_data())
      values.push_back(APInt(width, v, false, true));
  else
    for (int32_t v : tensor.int32_data())
      values.push_back(APInt(width, static_cast<uint64_t>(static_cast<int64_t>(v)),
                             true, true));
  if (static_cast<int64_t>(values.size()) != n)
    return "value count does not match the dims";
  out = DenseElementsAttr::get(type, values);
  return "";
}
