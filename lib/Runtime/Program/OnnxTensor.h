//===- OnnxTensor.h - ONNX tensors and models without MLIR ------*- C++ -*-===//
//
// The MLIR-free counterpart of the importer's TensorReader
// (lib/Target/ONNX/ModelLoader.h), with the same rules: a tensor's data is
// raw_data, the one typed field ONNX defines for its type, or external data
// resolved only inside the model's folder (no absolute paths, no '..', no
// links leading out) and checked against the real file size. Private to
// lamina_program.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_LIB_RUNTIME_PROGRAM_ONNXTENSOR_H
#define LAMINA_LIB_RUNTIME_PROGRAM_ONNXTENSOR_H

#include "onnx-ml.pb.h"

#include "lamina/Runtime/Status.h"
#include "lamina/Runtime/Tensor.h"
#include "lamina/Runtime/TensorIO.h"

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace lamina::rt {

/// The DType of an ONNX `TensorProto::DataType`; false for types Lamina
/// does not handle (strings, complex, 8-bit floats, ...).
bool dtypeFromOnnx(int32_t dataType, DType &out);

/// Validates and reads the tensors of one model (or one .pb file).
class TensorDecoder {
public:
  /// `baseDir` is the folder external data must stay in.
  explicit TensorDecoder(const std::string &baseDir);

  /// Checks the tensor's type, dims and the size and location of its data,
  /// without reading weight bytes.
  Status inspect(const ::onnx::TensorProto &tensor, DType &dtype,
                 std::vector<int64_t> &shape);

  /// Reads an inspected tensor's values into `dst`, which holds
  /// numElements * dtypeSize(dtype) bytes. Booleans become 0/1.
  Status read(const ::onnx::TensorProto &tensor, DType dtype,
              int64_t numElements, void *dst);

private:
  /// Cached per location: a model's tensors share few data files.
  const ExternalFile &resolveFile(const std::string &location);
  Status resolveExternal(const ::onnx::TensorProto &tensor, uint64_t bytes,
                         std::string &path, uint64_t &offset);

  std::map<std::string, ExternalFile> files;
  std::string baseDir;     // as given
  std::string realBaseDir; // symlinks resolved, "" when it does not exist
};

/// Parses the ONNX model at `path`, streaming from the file (no second copy
/// of the bytes), with protobuf's 2 GiB limit and a nesting limit.
Status loadModel(const std::string &path, ::onnx::ModelProto &model);

/// Makes `t` hold `bytes` as raw_data and nothing else.
void setRawData(::onnx::TensorProto &t, std::string bytes);

/// Writes `model`, whose initializers all hold their data inline (`total`
/// bytes together), to `destPath` atomically; over `inlineLimit`, every
/// initializer of 1 KiB or more goes to `<destPath>.data` (exportOnnx).
Status writeModelFile(::onnx::ModelProto &model, const std::string &destPath,
                      uint64_t total, uint64_t inlineLimit);

/// Calls `fn` on every initializer of `graph` and, recursively, of its
/// subgraphs (If, Loop, Scan bodies), main graph first.
void forEachInitializer(::onnx::GraphProto &graph,
                        const std::function<void(::onnx::TensorProto &)> &fn);

/// Name -> initializer of `graph` and, recursively, of its subgraphs (If,
/// Loop, Scan bodies); the first tensor of a name wins, main graph first.
void collectInitializers(::onnx::GraphProto &graph,
                         std::map<std::string, ::onnx::TensorProto *> &out);

} // namespace lamina::rt

#endif // LAMINA_LIB_RUNTIME_PROGRAM_ONNXTENSOR_H
