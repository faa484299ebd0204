//===- Tensor.h - non-owning tensor view for the runtime --------*- C++ -*-===//
//
// A kernel argument: a data pointer, an element type and a static shape.
// Storage is always dense row-major, which is all generated code produces,
// so there are no strides to carry. The view owns nothing: generated code
// points it into its arena and at `static const int64_t` shape arrays.
//
// The free functions are LAMINA_HD so CUDA kernels can share the broadcast
// index mapping.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_RUNTIME_TENSOR_H
#define LAMINA_RUNTIME_TENSOR_H

#include "lamina/Runtime/Math.h"

#include <stddef.h>
#include <stdint.h>

namespace lamina::rt {

/// Element types. i1 is stored one byte per element, 0 or 1; f16/bf16 are
/// stored as their 16-bit patterns (Half, BFloat16).
enum class DType : uint8_t {
  F32, F64, F16, BF16, I1, I8, I16, I32, I64, U8, U16, U32, U64
};

LAMINA_HD constexpr size_t dtypeSize(DType t) {
  switch (t) {
  case DType::F64: case DType::I64: case DType::U64: return 8;
  case DType::F32: case DType::I32: case DType::U32: return 4;
  case DType::F16: case DType::BF16: case DType::I16: case DType::U16: return 2;
  default: return 1;
  }
}
LAMINA_HD constexpr bool isFloat(DType t) {
  return t == DType::F32 || t == DType::F64 || t == DType::F16 ||
         t == DType::BF16;
}
LAMINA_HD constexpr bool isSignedInt(DType t) {
  return t == DType::I8 || t == DType::I16 || t == DType::I32 ||
         t == DType::I64;
}
/// "f32", "i1", ...: the MLIR spelling, for error messages.
const char *dtypeName(DType t);

LAMINA_HD inline int64_t numElements(const int64_t *shape, int rank) {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i)
    n *= shape[i];
  return n;
}

/// Row-major element strides of `shape`.
LAMINA_HD inline void rowMajorStrides(const int64_t *shape, int rank,
                                      int64_t *strides) {
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; --i) {
    strides[i] = s;
    s *= shape[i];
  }
}

/// Numpy broadcast of two shapes (right-aligned, 1 stretches) into `out`,
/// which has room for max(aRank, bRank) dims. False if they do not broadcast.
LAMINA_HD inline bool broadcastShape(const int64_t *a, int aRank,
                                     const int64_t *b, int bRank,
                                     int64_t *out, int *outRank) {
  int rank = aRank > bRank ? aRank : bRank;
  for (int i = 0; i < rank; ++i) {
    int64_t da = i < rank - aRank ? 1 : a[i - (rank - aRank)];
    int64_t db = i < rank - bRank ? 1 : b[i - (rank - bRank)];
    if (da != db && da != 1 && db != 1)
      return false;
    out[i] = da == 1 ? db : da;
  }
  *outRank = rank;
  return true;
}

/// Strides, indexed by result dim, that read an input of shape `in`
/// broadcast to `out`: the input's row-major stride, or 0 where the input is
/// stretched or absent. False if `in` does not broadcast to `out`.
LAMINA_HD inline bool broadcastStrides(const int64_t *in, int inRank,
                                       const int64_t *out, int outRank,
                                       int64_t *strides) {
  if (inRank > outRank)
    return false;
  int64_t s = 1;
  for (int i = outRank - 1; i >= 0; --i) {
    int j = i - (outRank - inRank);
    if (j < 0) {
      strides[i] = 0;
      continue;
    }
    if (in[j] != out[i] && in[j] != 1)
      return false;
    strides[i] = in[j] == 1 ? 0 : s;
    s *= in[j];
  }
  return true;
}

/// The input element offset behind result element `index` (row-major), given
/// the strides from broadcastStrides.
LAMINA_HD inline int64_t broadcastOffset(int64_t index, const int64_t *out,
                                         int outRank,
                                         const int64_t *strides) {
  int64_t offset = 0;
  for (int i = outRank - 1; i >= 0; --i) {
    offset += (index % out[i]) * strides[i];
    index /= out[i];
  }
  return offset;
}

/// The view. An aggregate, so generated code writes
/// `Tensor{ptr, DType::F32, 2, shape}`; rank 0 (a scalar) needs no shape.
struct Tensor {
  void *data = nullptr;
  DType dtype = DType::F32;
  int rank = 0;
  const int64_t *shape = nullptr;

  LAMINA_HD int64_t numElements() const {
    return lamina::rt::numElements(shape, rank);
  }
  LAMINA_HD int64_t dim(int i) const { return shape[i]; }
  LAMINA_HD size_t elementSize() const { return dtypeSize(dtype); }
  LAMINA_HD size_t byteSize() const {
    return size_t(numElements()) * dtypeSize(dtype);
  }
  template <typename T> LAMINA_HD T *as() const {
    return static_cast<T *>(data);
  }
};

} // namespace lamina::rt

#endif // LAMINA_RUNTIME_TENSOR_H
