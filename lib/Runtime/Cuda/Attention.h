//===- Attention.h - shared by the fused attention kernels -----*- C++ -*-===//
//
// Private to Attention.cu (host side, generic kernels) and
// AttentionTensorCore.cu (the WMMA kernels), and compiled only by nvcc.
// Both kinds of kernel take the same Args by value and must agree on the
// causal rule, the tile a CTA owns and the bias addressing, or the two paths
// would disagree on the same call; so those live here once. The tensor-core
// launch functions are declared here and chosen in Attention.cu.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_LIB_RUNTIME_CUDA_ATTENTION_H
#define LAMINA_LIB_RUNTIME_CUDA_ATTENTION_H

#include "Common.h"

#include <cstdint>

namespace lamina::rt::cuda::detail::attn {
constexpr float kInf = __builtin_huge_valf();

/// The optional bias: element (b, h, i, j) at b*s[0] + h*s[1] + i*s[2] +
/// j*s[3], any float type (read as f32).
struct Bias {
  const void *p = nullptr;
  DType type = DType::F32;
  int64_t s[4] = {0, 0, 0, 0};
};

/// Everything a kernel needs, by value. The forward writes out and lse; the
/// backward reads out (for Delta), dO, lseIn and delta and writes the
/// gradients. q, k, v, out, dO and the gradients are head-major ([B, heads,
/// S, width]) or, with seqMajor, seq-major ([B, S, heads, width]); kernels
/// address their rows only through qRow/kRow and qStride/kStride below. lse,
/// lseIn and delta are [B, H, Sq] either way.
struct Args {
  const void *q, *k, *v, *dO;
  void *out, *dq, *dk, *dv;
  float *lse;
  const float *lseIn, *delta;
  Bias bias;
  int64_t B, H, Hk, G, Sq, Sk, D, Dv;
  int64_t off; // Sk - Sq: causal keeps keys j <= i + off
  int64_t tiles; // tiles per (b, head) along the CTA's own axis
  float scale;
  bool causal;
  bool seqMajor; // AttentionLayout::SeqMajor
  int bq, bk; // generic tile sizes (rows, keys)
};

/// Where row i (along S, `len` rows) of head `head` of batch b starts in a
/// q/k/v/out-like tensor of `heads` heads and rows of `width` elements, and
/// the elements from one row to the next: AttentionDims::rowOffset and
/// rowStride on the device.
__host__ __device__ inline int64_t rowOffset(const Args &a, int64_t b,
                                             int64_t head, int64_t i,
                                             int64_t heads, int64_t len,
                                             int64_t width) {
  return a.seqMajor ? ((b * len + i) * heads + head) * width
                    : ((b * heads + head) * len + i) * width;
}
__host__ __device__ inline int64_t rowStride(const Args &a, int64_t heads,
                                             int64_t width) {
  return a.seqMajor ? heads * width : width;
}

/// The query side (q, out, dO, dq: H heads of Sq rows): row i of query head
/// h of batch b, rows of `width` (D or Dv) elements.
__host__ __device__ inline int64_t qRow(const Args &a, int64_t b, int64_t h,
                                        int64_t i, int64_t width) {
  return rowOffset(a, b, h, i, a.H, a.Sq, width);
}
__host__ __device__ inline int64_t qStride(const Args &a, int64_t width) {
  return rowStride(a, a.H, width);
}
/// The key side (k, v, dk, dv: Hk heads of Sk rows): row j of kv head hk of
/// batch b.
__host__ __device__ inline int64_t kRow(const Args &a, int64_t b, int64_t hk,
                                        int64_t j, int64_t width) {
  return rowOffset(a, b, hk, j, a.Hk, a.Sk, width);
}
__host__ __device__ inline int64_t kStride(const Args &a, int64_t width) {
  return rowStride(a, a.Hk, width);
}

__device__ inline float biasLoad(const Bias &bias, int64_t o) {
  switch (bias.type) {
  case DType::F16: return load(static_cast<const Half *>(bias.p)[o]);
  case DType::BF16: return load(static_cast<const BFloat16 *>(bias.p)[o]);
  case DType::F64: return float(static_cast<const double *>(bias.p)[o]);
  default: return static_cast<const float *>(bias.p)[o];
  }
}
__device__ inline int64_t biasOffset(const Bias &bias, int64_t b, int64_t h,
                                     int64_t i, int64_t j) {
  return b * bias.s[0] + h * bias.s[1] + i * bias.s[2] + j * bias.s[3];
}

/// The CTA's tile: batch b, head (a query head for query tiles, a kv head
/// for key tiles), first row t0 and rows n of an axis of `len` cut in
/// `size`. `lastFirst` starts the heaviest causal query tiles first.
struct Tile {
  int64_t b, head, bh, t0, n;
};
__device__ inline Tile tileOf(const Args &a, int64_t heads, int64_t len,
                              int size, bool lastFirst) {
  int64_t t = blockIdx.x % a.tiles, bh = blockIdx.x / a.tiles;
  if (lastFirst)
    t = a.tiles - 1 - t;
  int64_t t0 = t * size;
  return Tile{bh / heads, bh % heads, bh, t0,
              len - t0 < size ? len - t0 : size};
}

// The causal rule (keys j <= i + Sk - Sq) in the forms the kernels use.

/// Whether key j is visible from query i (the causal rule only).
__device__ inline bool visible(const Args &a, int64_t i, int64_t j) {
  return !a.causal || j <= i + a.off;
}

/// Within a tile whose first query is i0 and first key j0, element (r, c)
/// (query i0 + r, key j0 + c) is causally visible iff c - r <= the result
/// (clamped into int: tiles are at most 64 wide).
__device__ inline int causalLimit(const Args &a, int64_t i0, int64_t j0) {
  if (!a.causal)
    return 1 << 20;
  int64_t l = i0 + a.off - j0;
  return int(l < -256 ? -256 : (l > 256 ? 256 : l));
}

/// Keys [0, end) that query rows [q0, q0 + rows) can see.
__device__ inline int64_t keyEnd(const Args &a, int64_t q0, int64_t rows) {
  if (!a.causal)
    return a.Sk;
  int64_t e = q0 + rows + a.off;
  return e < 0 ? 0 : (e < a.Sk ? e : a.Sk);
}

/// The first query that can see key k0 (0 without causal).
__device__ inline int64_t queryStart(const Args &a, int64_t k0) {
  if (!a.causal)
    return 0;
  int64_t s = k0 - a.off;
  return s < 0 ? 0 : s;
}

inline int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// The checks before a launch of `kernel` on `blocks` CTAs with `bytes` of
/// dynamic shared memory: a grid that fits, and the opt-in past the default
/// 48 KiB, or why the device cannot give it. Attention.cu.
Status allowLaunch(const char *name, const void *kernel, int64_t blocks,
                   size_t bytes);

/// Launches kernel(a) on `blocks` CTAs of `threads` with `bytes` of dynamic
/// shared memory (nothing for no blocks) after allowLaunch.
template <typename K>
Status launch(const char *name, K kernel, int64_t blocks, int threads,
              size_t bytes, const Args &a, cudaStream_t stream) {
  if (blocks == 0)
    return Status::success();
  if (Status s = allowLaunch(name, reinterpret_cast<const void *>(kernel),
                             blocks, bytes);
      !s.ok())
    return s;
  launchKernel(kernel, unsigned(blocks), threads, bytes, stream, a);
  return launched(name);
}

/// The tensor-core path (AttentionTensorCore.cu), for T = Half or BFloat16
/// with a.D == a.Dv in {64, 128} and every operand 16-byte aligned; the
/// caller checks all three. In either layout every row offset and row
/// stride is then a multiple of D elements (16 bytes is 8), so the rows the
/// kernels move 16 bytes at a time stay aligned when the base pointers are.
/// The forward writes out and lse; the backward writes dK, dV and dQ from
/// a.delta, which must already hold dO . O.
template <typename T> Status forwardTensorCore(Args a, cudaStream_t stream);
template <typename T> Status backwardTensorCore(Args a, cudaStream_t stream);
} // namespace lamina::rt::cuda::detail::attn

#endif // LAMINA_LIB_RUNTIME_CUDA_ATTENTION_H
