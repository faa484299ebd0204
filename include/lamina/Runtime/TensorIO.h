//===- TensorIO.h - .npy and ONNX TensorProto files -------------*- C++ -*-===//
//
// Reading and writing tensor files without MLIR: the program driver
// (Program.h) reads its inputs and writes its outputs with these, and the
// reference evaluator (lamina-eval) shares them so both accept exactly the
// same files. Nothing a file says is trusted: header fields, dims and
// external-data ranges are checked before any byte is read.
//
// Implemented in lib/Runtime/Program (library lamina_program).
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_RUNTIME_TENSORIO_H
#define LAMINA_RUNTIME_TENSORIO_H

#include "lamina/Runtime/Status.h"
#include "lamina/Runtime/Tensor.h"

#include <stdint.h>
#include <string>
#include <vector>

namespace lamina::rt {

/// Largest element count accepted from any file (2^48), as in the importer:
/// far beyond any model and safe from int64 overflow in byte counts.
inline constexpr int64_t kMaxFileElements = int64_t(1) << 48;

/// Element count of `shape`, or -1 when a dim is negative or the product
/// exceeds kMaxFileElements.
int64_t checkedNumElements(const int64_t *shape, int rank);

/// An owning dense row-major tensor. Storage is whole 8-byte words, so it is
/// aligned for every DType.
struct OwnedTensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint64_t> storage;

  /// Sets dtype and shape and sizes the storage (zero-filled).
  void allocate(DType type, std::vector<int64_t> dims);
  int64_t numElements() const {
    return lamina::rt::numElements(shape.data(), int(shape.size()));
  }
  size_t byteSize() const { return size_t(numElements()) * dtypeSize(dtype); }
  void *data() { return storage.data(); }
  const void *data() const { return storage.data(); }
  /// A kernel view; valid while this tensor lives and is not reallocated.
  Tensor view() const {
    return Tensor{const_cast<uint64_t *>(storage.data()), dtype,
                  int(shape.size()), shape.data()};
  }
};

/// "tensor<2x3xf32>" (MLIR spelling), for messages.
std::string describeType(DType dtype, const int64_t *shape, int rank);

/// Reads a .npy file: format 1.0-3.0, C order (or fortran_order on data
/// with at most one dim > 1), little-endian or byte-sized dtypes f2 f4 f8
/// b1 i1..i8 u1..u8. Booleans are normalised to 0/1. A '<u2' file holds
/// bf16 bit patterns when read for a bf16 value (see writeNpy); the caller
/// decides that, this function reports U16.
Status readNpy(const std::string &path, OwnedTensor &out);

/// A .npy file's header, checked as readNpy checks it (the data it
/// promises lies inside the file): its dtype, shape, and where the data
/// starts, for readers that map the data rather than read it.
struct NpyInfo {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t dataOffset = 0;
  uint64_t fileSize = 0;
};
Status readNpyHeader(const std::string &path, NpyInfo &info);

/// Writes `t` to `path` as a format 1.0 .npy in C order. bf16 has no numpy
/// dtype: it is written as '<u2' holding the bf16 bit patterns (exact;
/// `np.load(f).view(ml_dtypes.bfloat16)` recovers the values).
Status writeNpy(const std::string &path, const Tensor &t);

/// Reads a serialized onnx TensorProto (`input_0.pb`). External data is
/// resolved only inside the file's folder, under the importer's rules (no
/// absolute paths, no '..', no links leading out, ranges checked against
/// the real file size). `name`, when given, receives the proto's name.
Status readTensorProto(const std::string &path, OwnedTensor &out,
                       std::string *name = nullptr);

/// Where an ONNX external-data `location` leads, or why it is refused.
struct ExternalFile {
  std::string path;  ///< canonical path, when `error` is empty
  uint64_t size = 0; ///< its real size in bytes
  std::string error; ///< "" when the location is acceptable
  bool missing = false; ///< refused only because the file does not exist
};

/// Resolves `location` against the model folder `baseDir`, whose canonical
/// path is `realBaseDir` ("" when unknown: then everything is refused).
/// Accepts only a relative path without '..' components that, after
/// resolving links, names a regular file inside the folder. The one
/// implementation of these rules, for the program driver and any MLIR-free
/// reader of ONNX files.
ExternalFile resolveExternalFile(const std::string &baseDir,
                                 const std::string &realBaseDir,
                                 const std::string &location);

} // namespace lamina::rt

#endif // LAMINA_RUNTIME_TENSORIO_H
