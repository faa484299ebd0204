//===- NpyIO.cpp - .npy and ONNX TensorProto files for the evaluator ------===//
//
// Thin adapters over the runtime's MLIR-free readers and writers
// (lamina/Runtime/TensorIO.h), so lamina-eval and generated programs accept
// exactly the same files under the same rules.
//
//===----------------------------------------------------------------------===//

#include "lamina/Eval/Evaluator.h"

#include "lamina/Runtime/Math.h"
#include "lamina/Runtime/TensorIO.h"

using namespace lamina;
using namespace lamina::eval;

/// Moves a runtime tensor into a HostTensor (the storage is handed over,
/// not copied: both are vectors of 8-byte words).
static void adopt(rt::OwnedTensor &&t, HostTensor &out) {
  out.dtype = t.dtype;
  out.shape = std::move(t.shape);
  out.storage = std::move(t.storage);
}

std::string lamina::eval::readNpy(llvm::StringRef path, HostTensor &out) {
  rt::OwnedTensor t;
  if (rt::Status s = rt::readNpy(path.str(), t); !s.ok())
    return s.message();
  adopt(std::move(t), out);
  return "";
}

std::string lamina::eval::writeNpy(llvm::StringRef path, const HostTensor &t) {
  // The evaluator writes bf16 widened to f4 so numpy reads values directly
  // (generated programs keep the exact bit patterns as u2 instead).
  if (t.dtype != rt::DType::BF16)
    return rt::writeNpy(path.str(), t.view()).message();
  HostTensor widened(rt::DType::F32, t.shape);
  auto *in = static_cast<const uint16_t *>(t.data());
  auto *o = static_cast<float *>(widened.data());
  for (int64_t i = 0, n = t.numElements(); i < n; ++i)
    o[i] = rt::math::bf16ToFloat(in[i]);
  return rt::writeNpy(path.str(), widened.view()).message();
}

std::string lamina::eval::readTensorProto(mlir::MLIRContext *, llvm::StringRef path,
                                          HostTensor &out, std::string &name) {
  rt::OwnedTensor t;
  if (rt::Status s = rt::readTensorProto(path.str(), t, &name); !s.ok())
    return s.message();
  adopt(std::move(t), out);
  return "";
}
