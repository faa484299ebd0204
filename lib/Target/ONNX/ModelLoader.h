//===- ModelLoader.h - reading and checking ONNX protobufs ------*- C++ -*-===//
//
// Everything that touches bytes a model file supplies: the protobuf parse,
// tensor sizes, and external data, which is resolved only inside the model's
// folder and checked against the real file size. Nothing a file says is
// trusted before it is checked here.
//
//===----------------------------------------------------------------------===//
#ifndef LAMINA_LIB_TARGET_ONNX_MODELLOADER_H
#define LAMINA_LIB_TARGET_ONNX_MODELLOADER_H

#include "onnx-ml.pb.h"

#include "lamina/Runtime/TensorIO.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/StringMap.h"

#include <string>

namespace lamina::onnx {

/// Parses `bytes` as a ModelProto; returns an error message or "".
std::string parseModel(llvm::StringRef bytes, ::onnx::ModelProto &model);

/// The MLIR element type of an ONNX `TensorProto::DataType`, or null for
/// types Lamina does not handle (strings, complex, 8-bit floats, ...).
mlir::Type elementTypeOf(mlir::MLIRContext *context, int32_t dataType);

/// The ONNX name of a data type, for messages.
llvm::StringRef dataTypeName(int32_t dataType);

/// Largest element count Lamina accepts for any tensor (2^48): far beyond any
/// model and safe from int64 overflow in byte counts.
inline constexpr int64_t kMaxElements = lamina::rt::kMaxFileElements;

/// Element count of `shape`, or -1 when a dim is negative or the product
/// exceeds kMaxElements.
int64_t checkedNumElements(llvm::ArrayRef<int64_t> shape);

/// Validates and reads initializer / attribute tensors of one model.
class TensorReader {
public:
  /// `baseDir` is the model's folder ("" refuses external data).
  /// `allowMissingData` accepts external data whose file does not exist
  /// (validate() succeeds; read() still fails), for structure-only models.
  explicit TensorReader(llvm::StringRef baseDir, bool allowMissingData = false);

  /// Checks the tensor's type, dims and the size and location of its data,
  /// without reading weight bytes. Sets `type`; returns an error or "".
  std::string validate(mlir::MLIRContext *context,
                       const ::onnx::TensorProto &tensor,
                       mlir::RankedTensorType &type);

  /// Reads a validated tensor's values.
  std::string read(const ::onnx::TensorProto &tensor,
                   mlir::RankedTensorType type, mlir::DenseElementsAttr &out);

private:
  struct ExternalRange {
    std::string path;
    uint64_t offset = 0;
  };
  std::string resolveExternal(const ::onnx::TensorProto &tensor,
                              uint64_t expectedBytes, ExternalRange &range);

  /// Per location: the resolved path and size, or the error (a model's
  /// tensors share few data files; resolving costs system calls).
  /// The rules themselves are the runtime's (rt::resolveExternalFile), so
  /// the importer and generated programs accept the same files.
  using ResolvedFile = lamina::rt::ExternalFile;
  const ResolvedFile &resolveFile(const std::string &location);
  llvm::StringMap<ResolvedFile> files;

  std::string baseDir;     // as given
  std::string realBaseDir; // symlinks resolved, "" when unavailable
  bool allowMissingData = false;
};

} // namespace lamina::onnx

#endif
