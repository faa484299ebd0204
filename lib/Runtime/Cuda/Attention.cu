//===- Attention.cu - fused scaled dot-product attention and its gradients ===//
//
// The host's attention / attentionBackward (Kernels.h) on the device. The
// score matrix is never stored: each CTA walks key (or query) tiles, keeps
// its rows' statistics and accumulators on chip and writes its rows once.
//
// Two paths, chosen per call (LAMINA_CUDA_ATTENTION=generic, read once,
// forces the generic one everywhere):
// * fast: f16/bf16 with D == Dv in {64, 128} and 16-byte aligned operands.
//   Tensor cores through nvcuda::wmma (16x16x16, f32 accumulation), the
//   flash-attention-2 structure: 4 warps, 16 rows each, 64-row tiles staged
//   in shared memory, tiles wholly above the causal diagonal skipped. The
//   WMMA accumulator layout is opaque, so each warp probes it once (loads a
//   fragment from a matrix holding each element's own position) and then
//   scales rows and scatters elements to shared memory through that map.
// * generic: every other shape and f32; scalar f32 math on shared-memory
//   tiles (an online softmax over key tiles of 32), D and Dv up to 256.
//
// Forward: one CTA per (b, h, query tile), the heaviest causal tiles first.
// Backward, both paths: Delta[i] = dO[i] . O[i] into a stream-ordered
// scratch (cudaMallocAsync, as NN.cu's statistics); then one kernel per
// (b, kv head, key tile) that loops over the query heads sharing the kv
// head and over the query tiles for dK and dV, and one per (b, h, query
// tile) that loops over key tiles for dQ. P is recomputed from lse in both,
// so nothing is summed with atomics and every gradient is deterministic.
// The fast path rounds P and dS to the storage type before they enter the
// tensor cores (as flash attention does); sums and statistics are f32.
// K/V (Q/dO) tiles are loaded synchronously between two barriers; overlap
// comes from the second CTA an SM holds, not from cp.async pipelining.
//
//===----------------------------------------------------------------------===//

#include "Common.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <cstdlib>
#include <cstring>
#include <type_traits>

using namespace lamina::rt;
using namespace lamina::rt::cuda;
using namespace lamina::rt::cuda::detail;
using lamina::rt::detail::AttentionDims;
using lamina::rt::detail::checkAttention;

namespace {
constexpr float kInf = __builtin_huge_valf();
/// Head dims the generic path takes (its tiles must fit in shared memory).
constexpr int64_t kMaxHeadDim = 256;

/// The optional bias: element (b, h, i, j) at b*s[0] + h*s[1] + i*s[2] +
/// j*s[3], any float type (read as f32).
struct Bias {
  const void *p = nullptr;
  DType type = DType::F32;
  int64_t s[4] = {0, 0, 0, 0};
};

/// Everything a kernel needs, by value. The forward writes out and lse; the
/// backward reads out (for Delta), dO, lseIn and delta and writes the
/// gradients.
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
  int bq, bk; // generic tile sizes (rows, keys)
};

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

/// Within a tile whose first query is i0 and first key j0, element (r, c)
/// (query i0 + r, key j0 + c) is causally visible iff c - r <= the result
/// (clamped into int: tiles are at most 64 wide).
__device__ inline int causalLimit(const Args &a, int64_t i0, int64_t j0) {
  if (!a.causal)
    return 1 << 20;
  int64_t l = i0 + a.off - j0;
  return int(l < -256 ? -256 : (l > 256 ? 256 : l));
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
  return Tile{bh / heads, bh % heads, bh, t0, len - t0 < size ? len - t0 : size};
}

/// Whether key j is visible from query i (the causal rule only).
__device__ inline bool visible(const Args &a, int64_t i, int64_t j) {
  return !a.causal || j <= i + a.off;
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

__device__ inline float warpSum(float v) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ inline float warpMax(float v) {
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// Delta[r] = sum_c dO[r, c] * O[r, c]: a warp per row.
template <typename T>
__global__ void deltaKernel(const T *o, const T *dO, float *delta,
                            int64_t rows, int64_t dv) {
  int lane = threadIdx.x & 31;
  int64_t warps = int64_t(gridDim.x) * (blockDim.x >> 5);
  for (int64_t r = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
       r < rows; r += warps) {
    float s = 0;
    for (int64_t c = lane; c < dv; c += 32)
      s += load(o[r * dv + c]) * load(dO[r * dv + c]);
    s = warpSum(s);
    if (lane == 0)
      delta[r] = s;
  }
}

//===----------------------------------------------------------------------===//
// Generic path: f32 math on shared-memory tiles, any D, Dv <= 256
//===----------------------------------------------------------------------===//

constexpr int kGenThreads = 256;
constexpr int kGenBK = 32; // forward key tile: one key per lane

/// dst[r * ld + c] = src row r (n rows of `cols` valid, `rows` in all; the
/// rest zero) as f32.
template <typename T>
__device__ void loadTileF32(float *dst, int ld, const T *src, int64_t n,
                            int rows, int64_t cols) {
  for (int64_t e = threadIdx.x; e < rows * cols; e += blockDim.x) {
    int64_t r = e / cols, c = e % cols;
    dst[r * ld + c] = r < n ? load(src[r * cols + c]) : 0.0f;
  }
}

__device__ inline float dotF32(const float *x, const float *y, int n) {
  float s = 0;
  for (int c = 0; c < n; ++c)
    s += x[c] * y[c];
  return s;
}

/// acc[x * C + c] += sum_{y < n} A[y * aY + x * aX] * B[y * bY + c] for x <
/// X, c < C: the generic kernels' tile products, a thread per element.
__device__ void accumulate(float *acc, int X, int C, int64_t n,
                           const float *A, int aY, int aX, const float *B,
                           int bY) {
  for (int e = threadIdx.x; e < X * C; e += blockDim.x) {
    int x = e / C, c = e % C;
    float s = 0;
    for (int y = 0; y < n; ++y)
      s += A[y * aY + x * aX] * B[y * bY + c];
    acc[e] += s;
  }
}

/// Forward: CTA per (b, h, query tile of a.bq rows), key tiles of 32.
template <typename T>
__global__ void __launch_bounds__(kGenThreads) forwardGeneric(Args a) {
  extern __shared__ float gsm[];
  const int bq = a.bq, D = int(a.D), Dv = int(a.Dv);
  float *Qs = gsm;                      // bq x (D+1)
  float *Ks = Qs + bq * (D + 1);        // 32 x (D+1)
  float *Vs = Ks + kGenBK * (D + 1);    // 32 x Dv
  float *Ss = Vs + kGenBK * Dv;         // bq x 32: scores, then P
  float *Os = Ss + bq * kGenBK;         // bq x Dv
  float *rowM = Os + bq * Dv, *rowL = rowM + bq, *rowA = rowL + bq;

  const Tile t = tileOf(a, a.H, a.Sq, bq, true);
  const int64_t b = t.b, h = t.head, hk = h / a.G, bh = t.bh, q0 = t.t0,
                rows = t.n;
  const T *qg = static_cast<const T *>(a.q) + (bh * a.Sq + q0) * D;
  const T *kg = static_cast<const T *>(a.k) + (b * a.Hk + hk) * a.Sk * D;
  const T *vg = static_cast<const T *>(a.v) + (b * a.Hk + hk) * a.Sk * Dv;

  loadTileF32(Qs, D + 1, qg, rows, bq, D);
  for (int e = threadIdx.x; e < bq * Dv; e += blockDim.x)
    Os[e] = 0;
  for (int r = threadIdx.x; r < bq; r += blockDim.x) {
    rowM[r] = -kInf;
    rowL[r] = 0;
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int warps = blockDim.x >> 5;
  int64_t kEnd = keyEnd(a, q0, rows);
  for (int64_t k0 = 0; k0 < kEnd; k0 += kGenBK) {
    int64_t kn = a.Sk - k0 < kGenBK ? a.Sk - k0 : kGenBK;
    __syncthreads(); // the previous tile is consumed
    loadTileF32(Ks, D + 1, kg + k0 * D, kn, kGenBK, D);
    loadTileF32(Vs, Dv, vg + k0 * Dv, kn, kGenBK, Dv);
    __syncthreads();
    for (int e = threadIdx.x; e < bq * kGenBK; e += blockDim.x) {
      int r = e / kGenBK, j = e % kGenBK;
      int64_t i = q0 + r, key = k0 + j;
      float s = -kInf;
      if (r < rows && j < kn && visible(a, i, key)) {
        s = a.scale * dotF32(Qs + r * (D + 1), Ks + j * (D + 1), D);
        if (a.bias.p)
          s += biasLoad(a.bias, biasOffset(a.bias, b, h, i, key));
      }
      Ss[e] = s;
    }
    __syncthreads();
    // Online softmax, a warp per row: rescale factor for O in rowA.
    for (int r = warp; r < bq; r += warps) {
      float s = Ss[r * kGenBK + lane];
      float mOld = rowM[r], mNew = fmaxf(mOld, warpMax(s));
      float mUse = mNew == -kInf ? 0.0f : mNew; // all -inf so far: p = 0
      float p = math::exp(s - mUse);
      Ss[r * kGenBK + lane] = p;
      float sum = warpSum(p);
      if (lane == 0) {
        float alpha = math::exp(mOld - mUse);
        rowA[r] = alpha;
        rowL[r] = rowL[r] * alpha + sum;
        rowM[r] = mNew;
      }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < bq * Dv; e += blockDim.x) {
      int r = e / Dv, c = e % Dv;
      float acc = 0;
      for (int j = 0; j < kn; ++j)
        acc += Ss[r * kGenBK + j] * Vs[j * Dv + c];
      Os[e] = Os[e] * rowA[r] + acc;
    }
  }
  __syncthreads();
  T *og = static_cast<T *>(a.out) + (bh * a.Sq + q0) * Dv;
  for (int64_t e = threadIdx.x; e < rows * Dv; e += blockDim.x) {
    float l = rowL[e / Dv];
    og[e] = store<T>(l > 0 ? Os[e] / l : 0.0f);
  }
  for (int r = threadIdx.x; r < rows; r += blockDim.x) {
    float l = rowL[r];
    a.lse[bh * a.Sq + q0 + r] = l > 0 ? rowM[r] + math::log(l) : -kInf;
  }
}

/// P[r][j] and dS[r][j] of query row q0 + r and key k0 + j (0 where
/// masked), from f32 tiles Q (ld D+1), K (ld D+1), dO (ld Dv+1), V (ld
/// Dv+1) and the rows' lse / Delta. P is stored only when `P` is set.
__device__ void scoresGeneric(const Args &a, int64_t b, int64_t h, int64_t q0,
                              int64_t rows, int64_t k0, int64_t kn,
                              const float *Qs, const float *Ks,
                              const float *dOs, const float *Vs,
                              const float *lseS, const float *deltaS,
                              float *P, float *dS) {
  const int bq = a.bq, bk = a.bk, D = int(a.D), Dv = int(a.Dv);
  for (int e = threadIdx.x; e < bq * bk; e += blockDim.x) {
    int r = e / bk, j = e % bk;
    int64_t i = q0 + r, key = k0 + j;
    float p = 0, ds = 0;
    if (r < rows && j < kn && lseS[r] != -kInf && visible(a, i, key)) {
      float s = a.scale * dotF32(Qs + r * (D + 1), Ks + j * (D + 1), D);
      if (a.bias.p)
        s += biasLoad(a.bias, biasOffset(a.bias, b, h, i, key));
      p = math::exp(s - lseS[r]);
      float dp = dotF32(dOs + r * (Dv + 1), Vs + j * (Dv + 1), Dv);
      ds = p * (dp - deltaS[r]);
    }
    if (P)
      P[e] = p;
    dS[e] = ds;
  }
}

/// The query tile's Q, dO, lse and Delta (lse -inf past Sq: P = 0 there).
template <typename T>
__device__ void loadQueryTile(const Args &a, int64_t bh, int64_t q0,
                              int64_t rows, float *Qs, float *dOs,
                              float *lseS, float *deltaS) {
  const int64_t D = a.D, Dv = a.Dv;
  loadTileF32(Qs, int(D + 1), static_cast<const T *>(a.q) + (bh * a.Sq + q0) * D,
              rows, a.bq, D);
  loadTileF32(dOs, int(Dv + 1),
              static_cast<const T *>(a.dO) + (bh * a.Sq + q0) * Dv, rows, a.bq,
              Dv);
  for (int r = threadIdx.x; r < a.bq; r += blockDim.x) {
    lseS[r] = r < rows ? a.lseIn[bh * a.Sq + q0 + r] : -kInf;
    deltaS[r] = r < rows ? a.delta[bh * a.Sq + q0 + r] : 0.0f;
  }
}

/// dK, dV: CTA per (b, kv head, key tile of a.bk), over the group's query
/// heads and the query tiles that can see the key tile.
template <typename T>
__global__ void __launch_bounds__(kGenThreads) dkvGeneric(Args a) {
  extern __shared__ float gsm[];
  const int bq = a.bq, bk = a.bk, D = int(a.D), Dv = int(a.Dv);
  float *Ks = gsm;                    // bk x (D+1)
  float *Vs = Ks + bk * (D + 1);      // bk x (Dv+1)
  float *dKs = Vs + bk * (Dv + 1);    // bk x D
  float *dVs = dKs + bk * D;          // bk x Dv
  float *Qs = dVs + bk * Dv;          // bq x (D+1)
  float *dOs = Qs + bq * (D + 1);     // bq x (Dv+1)
  float *Ps = dOs + bq * (Dv + 1);    // bq x bk
  float *dSs = Ps + bq * bk;          // bq x bk
  float *lseS = dSs + bq * bk, *deltaS = lseS + bq;

  const Tile t = tileOf(a, a.Hk, a.Sk, bk, false);
  const int64_t b = t.b, hk = t.head, bhk = t.bh, k0 = t.t0, kn = t.n;
  loadTileF32(Ks, D + 1, static_cast<const T *>(a.k) + (bhk * a.Sk + k0) * D,
              kn, bk, D);
  loadTileF32(Vs, Dv + 1, static_cast<const T *>(a.v) + (bhk * a.Sk + k0) * Dv,
              kn, bk, Dv);
  for (int e = threadIdx.x; e < bk * D; e += blockDim.x)
    dKs[e] = 0;
  for (int e = threadIdx.x; e < bk * Dv; e += blockDim.x)
    dVs[e] = 0;
  int64_t qFirst = queryStart(a, k0) / bq * bq;
  for (int64_t g = 0; g < a.G; ++g) {
    int64_t h = hk * a.G + g, bh = b * a.H + h;
    for (int64_t q0 = qFirst; q0 < a.Sq; q0 += bq) {
      int64_t rows = a.Sq - q0 < bq ? a.Sq - q0 : bq;
      __syncthreads(); // the previous query tile is consumed
      loadQueryTile<T>(a, bh, q0, rows, Qs, dOs, lseS, deltaS);
      __syncthreads();
      scoresGeneric(a, b, h, q0, rows, k0, kn, Qs, Ks, dOs, Vs, lseS, deltaS,
                    Ps, dSs);
      __syncthreads();
      accumulate(dKs, bk, D, rows, dSs, bk, 1, Qs, D + 1);   // dS^T Q
      accumulate(dVs, bk, Dv, rows, Ps, bk, 1, dOs, Dv + 1); // P^T dO
    }
  }
  __syncthreads();
  T *dkg = static_cast<T *>(a.dk) + (bhk * a.Sk + k0) * D;
  T *dvg = static_cast<T *>(a.dv) + (bhk * a.Sk + k0) * Dv;
  for (int64_t e = threadIdx.x; e < kn * D; e += blockDim.x)
    dkg[e] = store<T>(a.scale * dKs[e]);
  for (int64_t e = threadIdx.x; e < kn * Dv; e += blockDim.x)
    dvg[e] = store<T>(dVs[e]);
}

/// dQ: CTA per (b, h, query tile of a.bq), over the visible key tiles.
template <typename T>
__global__ void __launch_bounds__(kGenThreads) dqGeneric(Args a) {
  extern __shared__ float gsm[];
  const int bq = a.bq, bk = a.bk, D = int(a.D), Dv = int(a.Dv);
  float *Qs = gsm;                    // bq x (D+1)
  float *dOs = Qs + bq * (D + 1);     // bq x (Dv+1)
  float *Ks = dOs + bq * (Dv + 1);    // bk x (D+1)
  float *Vs = Ks + bk * (D + 1);      // bk x (Dv+1)
  float *dQs = Vs + bk * (Dv + 1);    // bq x D
  float *dSs = dQs + bq * D;          // bq x bk
  float *lseS = dSs + bq * bk, *deltaS = lseS + bq;

  const Tile t = tileOf(a, a.H, a.Sq, bq, true);
  const int64_t b = t.b, h = t.head, hk = h / a.G, bh = t.bh, q0 = t.t0,
                rows = t.n;
  loadQueryTile<T>(a, bh, q0, rows, Qs, dOs, lseS, deltaS);
  for (int e = threadIdx.x; e < bq * D; e += blockDim.x)
    dQs[e] = 0;
  const T *kg = static_cast<const T *>(a.k) + (b * a.Hk + hk) * a.Sk * D;
  const T *vg = static_cast<const T *>(a.v) + (b * a.Hk + hk) * a.Sk * Dv;
  int64_t kEnd = keyEnd(a, q0, rows);
  for (int64_t k0 = 0; k0 < kEnd; k0 += bk) {
    int64_t kn = a.Sk - k0 < bk ? a.Sk - k0 : bk;
    __syncthreads();
    loadTileF32(Ks, D + 1, kg + k0 * D, kn, bk, D);
    loadTileF32(Vs, Dv + 1, vg + k0 * Dv, kn, bk, Dv);
    __syncthreads();
    scoresGeneric(a, b, h, q0, rows, k0, kn, Qs, Ks, dOs, Vs, lseS, deltaS,
                  nullptr, dSs);
    __syncthreads();
    accumulate(dQs, bq, D, kn, dSs, 1, bk, Ks, D + 1); // dS K
  }
  __syncthreads();
  T *dqg = static_cast<T *>(a.dq) + (bh * a.Sq + q0) * D;
  for (int64_t e = threadIdx.x; e < rows * D; e += blockDim.x)
    dqg[e] = store<T>(a.scale * dQs[e]);
}

//===----------------------------------------------------------------------===//
// Fast path: f16/bf16, D == Dv in {64, 128}, WMMA
//===----------------------------------------------------------------------===//

namespace wmma = nvcuda::wmma;

constexpr int kFastThreads = 128; // 4 warps x 16 rows = 64-row tiles
constexpr int kTile = 64;
constexpr int kLdS = kTile + 4; // f32 score scratch row stride (floats)
constexpr int kLdP = kTile + 8; // 16-bit P / dS scratch row stride

template <typename T> struct WmmaType;
template <> struct WmmaType<Half> { using type = __half; };
template <> struct WmmaType<BFloat16> { using type = __nv_bfloat16; };

using Acc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
constexpr int kAccN = Acc::num_elements;
template <typename T>
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16,
                             typename WmmaType<T>::type, wmma::row_major>;
template <typename T>
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16,
                                typename WmmaType<T>::type, wmma::row_major>;
template <typename T>
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16,
                                typename WmmaType<T>::type, wmma::col_major>;

/// x rounded to nearest even as T's bits: the hardware conversion, which
/// agrees with Math.h's except for NaN payloads, in fewer registers.
template <typename T> __device__ inline uint16_t bits16(float x);
template <> __device__ inline uint16_t bits16<Half>(float x) {
  return __half_as_ushort(__float2half_rn(x));
}
template <> __device__ inline uint16_t bits16<BFloat16>(float x) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

/// A 16-bit shared tile as the WMMA element type.
template <typename T> __device__ inline const typename WmmaType<T>::type *
wt(const uint16_t *p) {
  return reinterpret_cast<const typename WmmaType<T>::type *>(p);
}

/// Elements of a 16-bit tile of 64 rows of D (+8 padding, which keeps the
/// rows' banks apart and the WMMA pointers 32-byte aligned).
template <int D> constexpr int kTileElems = kTile * (D + 8);

/// pos[e] = row * 16 + col of accumulator element e of this lane: a
/// fragment loaded from a 16x16 matrix holding each element's own index.
/// `scratch` is the warp's own, 32-byte aligned, >= 1 KiB.
__device__ void probeLayout(float *scratch, int (&pos)[kAccN]) {
  int lane = threadIdx.x & 31;
  for (int e = lane; e < 256; e += 32)
    scratch[e] = float(e);
  __syncwarp();
  Acc f;
  wmma::load_matrix_sync(f, scratch, 16, wmma::mem_row_major);
#pragma unroll
  for (int e = 0; e < kAccN; ++e)
    pos[e] = int(f.x[e]);
  __syncwarp();
}

/// dst rows [0, 64) = src rows [0, n) of D 16-bit elements (zeros past n),
/// 16 bytes a thread at a time; src is 16-byte aligned.
template <int D>
__device__ void loadTile16(uint16_t *dst, const uint16_t *src, int64_t n) {
  constexpr int V = D / 8, LD = D + 8;
  for (int idx = threadIdx.x; idx < kTile * V; idx += blockDim.x) {
    int r = idx / V, c = idx % V;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (r < n)
      val = reinterpret_cast<const uint4 *>(src + int64_t(r) * D)[c];
    *reinterpret_cast<uint4 *>(dst + r * LD + c * 8) = val;
  }
}

/// The warp writes its accumulators (16 x D, scaled by `mul`) to its own 16
/// rows `own` of a 16-bit tile, then copies rows [0, n) of them to dst.
template <typename T, int D>
__device__ void storeRows(Acc (&acc)[D / 16], const int (&pos)[kAccN],
                          float mul, uint16_t *own, uint16_t *dst, int64_t n) {
  constexpr int LD = D + 8, V = D / 8;
  int lane = threadIdx.x & 31;
  __syncwarp();
#pragma unroll
  for (int f = 0; f < D / 16; ++f)
#pragma unroll
    for (int e = 0; e < kAccN; ++e)
      own[(pos[e] >> 4) * LD + f * 16 + (pos[e] & 15)] =
          bits16<T>(acc[f].x[e] * mul);
  __syncwarp();
  for (int idx = lane; idx < 16 * V; idx += 32) {
    int r = idx / V, c = idx % V;
    if (r < n)
      reinterpret_cast<uint4 *>(dst + int64_t(r) * D)[c] =
          *reinterpret_cast<const uint4 *>(own + r * LD + c * 8);
  }
}

/// S (16 x 64, one accumulator per 16 columns) = rows16 (16 x D) times
/// cols64^T (cols64: 64 x D), both 16-bit tiles of row stride D + 8.
template <typename T, int D>
__device__ void mmaABt(Acc (&s)[4], const uint16_t *rows16,
                       const uint16_t *cols64) {
  constexpr int LD = D + 8;
#pragma unroll
  for (int n = 0; n < 4; ++n)
    wmma::fill_fragment(s[n], 0.0f);
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    FragA<T> fa;
    wmma::load_matrix_sync(fa, wt<T>(rows16 + kk * 16), LD);
#pragma unroll
    for (int n = 0; n < 4; ++n) {
      FragBCol<T> fb;
      wmma::load_matrix_sync(fb, wt<T>(cols64 + n * 16 * LD + kk * 16), LD);
      wmma::mma_sync(s[n], fa, fb, s[n]);
    }
  }
}

/// acc (16 x D) += p16 (16 x 64, row stride kLdP) times m (64 x D, stride
/// D + 8).
template <typename T, int D>
__device__ void mmaAccum(Acc (&acc)[D / 16], const uint16_t *p16,
                         const uint16_t *m) {
  constexpr int LD = D + 8;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    FragA<T> fa;
    wmma::load_matrix_sync(fa, wt<T>(p16 + kk * 16), kLdP);
#pragma unroll
    for (int n = 0; n < D / 16; ++n) {
      FragBRow<T> fb;
      wmma::load_matrix_sync(fb, wt<T>(m + kk * 16 * LD + n * 16), LD);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
}

template <int D> constexpr size_t forwardFastBytes() {
  return 3 * kTileElems<D> * 2 + 4 * 16 * kLdS * 4 + 4 * 16 * kLdP * 2 +
         4 * 16 * 4;
}

/// Forward: CTA per (b, h, 64 query rows); warp w owns rows 16w..16w+15.
template <typename T, int D>
__global__ void __launch_bounds__(kFastThreads) forwardFast(Args a) {
  constexpr int LD = D + 8;
  extern __shared__ __align__(128) unsigned char fsm[];
  uint16_t *Qs = reinterpret_cast<uint16_t *>(fsm);
  uint16_t *Ks = Qs + kTileElems<D>, *Vs = Ks + kTileElems<D>;
  float *Ss = reinterpret_cast<float *>(Vs + kTileElems<D>);
  uint16_t *Ps = reinterpret_cast<uint16_t *>(Ss + 4 * 16 * kLdS);
  float *stat = reinterpret_cast<float *>(Ps + 4 * 16 * kLdP);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float *ss = Ss + warp * 16 * kLdS, *st = stat + warp * 16;
  uint16_t *ps = Ps + warp * 16 * kLdP, *ownQ = Qs + warp * 16 * LD;

  const Tile t = tileOf(a, a.H, a.Sq, kTile, true);
  const int64_t b = t.b, h = t.head, hk = h / a.G, bh = t.bh, q0 = t.t0,
                rows = t.n;
  const uint16_t *kg =
      static_cast<const uint16_t *>(a.k) + (b * a.Hk + hk) * a.Sk * D;
  const uint16_t *vg =
      static_cast<const uint16_t *>(a.v) + (b * a.Hk + hk) * a.Sk * D;
  loadTile16<D>(Qs, static_cast<const uint16_t *>(a.q) + (bh * a.Sq + q0) * D,
                rows);
  int pos[kAccN];
  probeLayout(ss, pos);
  __syncthreads();
  Acc o[D / 16];
#pragma unroll
  for (int n = 0; n < D / 16; ++n)
    wmma::fill_fragment(o[n], 0.0f);

  // Softmax lanes: a pair per row, lane `half` takes the odd/even columns.
  const int r = lane >> 1, half = lane & 1;
  const int64_t i = q0 + warp * 16 + r;
  const bool rowOk = i < a.Sq;
  float m = -kInf, l = 0;
  int64_t kEnd = keyEnd(a, q0, rows);
  for (int64_t k0 = 0; k0 < kEnd; k0 += kTile) {
    int64_t kn = a.Sk - k0 < kTile ? a.Sk - k0 : kTile;
    __syncthreads(); // every warp is done with the previous K, V
    loadTile16<D>(Ks, kg + k0 * D, kn);
    loadTile16<D>(Vs, vg + k0 * D, kn);
    __syncthreads();
    {
      Acc s[4];
      mmaABt<T, D>(s, ownQ, Ks);
#pragma unroll
      for (int n = 0; n < 4; ++n)
        wmma::store_matrix_sync(ss + n * 16, s[n], kLdS, wmma::mem_row_major);
    }
    __syncwarp();
    // Keys c < cEnd of the tile are visible from row i.
    int cEnd = rowOk ? min(int(kn), causalLimit(a, i, k0) + 1) : 0;
    int64_t bRow = a.bias.p ? biasOffset(a.bias, b, h, i, k0) : 0;
    float sv[kTile / 2], mx = -kInf;
#pragma unroll
    for (int x = 0; x < kTile / 2; ++x) {
      int c = half + 2 * x;
      float s = -kInf;
      if (c < cEnd) {
        s = a.scale * ss[r * kLdS + c];
        if (a.bias.p)
          s += biasLoad(a.bias, bRow + c * a.bias.s[3]);
      }
      sv[x] = s;
      mx = fmaxf(mx, s);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    float mNew = fmaxf(m, mx);
    float mUse = mNew == -kInf ? 0.0f : mNew; // all -inf so far: p = 0
    float sum = 0;
#pragma unroll
    for (int x = 0; x < kTile / 2; ++x) {
      float p = __expf(sv[x] - mUse);
      sum += p;
      ps[r * kLdP + half + 2 * x] = bits16<T>(p);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    float alpha = __expf(m - mUse);
    l = l * alpha + sum;
    m = mNew;
    if (half == 0)
      st[r] = alpha;
    __syncwarp();
#pragma unroll
    for (int n = 0; n < D / 16; ++n)
#pragma unroll
      for (int e = 0; e < kAccN; ++e)
        o[n].x[e] *= st[pos[e] >> 4];
    mmaAccum<T, D>(o, ps, Vs);
    __syncwarp(); // ss, ps, st are rewritten by the next tile
  }
  if (half == 0) {
    st[r] = l > 0 ? 1.0f / l : 0.0f;
    if (rowOk)
      a.lse[bh * a.Sq + i] = l > 0 ? m + logf(l) : -kInf;
  }
  __syncwarp();
#pragma unroll
  for (int n = 0; n < D / 16; ++n)
#pragma unroll
    for (int e = 0; e < kAccN; ++e)
      o[n].x[e] *= st[pos[e] >> 4];
  int64_t own0 = warp * 16;
  storeRows<T, D>(o, pos, 1.0f, ownQ,
                  static_cast<uint16_t *>(a.out) + (bh * a.Sq + q0 + own0) * D,
                  rows - own0);
}

/// K, V, Q and dO tiles, per-warp 16-bit scratch (two for dK/dV, one for
/// dQ), and the query tile's lse and Delta.
template <int D> constexpr size_t backwardFastBytes(int scratches) {
  return 4 * kTileElems<D> * 2 + scratches * 4 * 16 * kLdP * 2 +
         2 * kTile * 4;
}

/// Loads 64 rows of Q and dO from q0 of head bh, and their lse (-inf past
/// Sq) and Delta.
template <int D>
__device__ void loadQueryTile16(const Args &a, int64_t bh, int64_t q0,
                                int64_t rows, uint16_t *Qs, uint16_t *dOs,
                                float *lseS, float *deltaS) {
  loadTile16<D>(Qs, static_cast<const uint16_t *>(a.q) + (bh * a.Sq + q0) * D,
                rows);
  loadTile16<D>(dOs,
                static_cast<const uint16_t *>(a.dO) + (bh * a.Sq + q0) * D,
                rows);
  for (int x = threadIdx.x; x < kTile; x += blockDim.x) {
    lseS[x] = x < rows ? a.lseIn[bh * a.Sq + q0 + x] : -kInf;
    deltaS[x] = x < rows ? a.delta[bh * a.Sq + q0 + x] : 0.0f;
  }
}

/// dK, dV: CTA per (b, kv head, 64 keys); warp w owns keys 16w..16w+15 and
/// computes the transposed products (S^T = K Q^T, dP^T = V dO^T), so dV +=
/// P^T dO and dK += dS^T Q accumulate in its registers.
template <typename T, int D>
__global__ void __launch_bounds__(kFastThreads) dkvFast(Args a) {
  constexpr int LD = D + 8;
  extern __shared__ __align__(128) unsigned char fsm[];
  uint16_t *Ks = reinterpret_cast<uint16_t *>(fsm);
  uint16_t *Vs = Ks + kTileElems<D>, *Qs = Vs + kTileElems<D>,
           *dOs = Qs + kTileElems<D>;
  uint16_t *Pt = dOs + kTileElems<D>, *dSt = Pt + 4 * 16 * kLdP;
  float *lseS = reinterpret_cast<float *>(dSt + 4 * 16 * kLdP);
  float *deltaS = lseS + kTile;
  const int warp = threadIdx.x >> 5;
  uint16_t *pt = Pt + warp * 16 * kLdP, *dst = dSt + warp * 16 * kLdP;
  uint16_t *ownK = Ks + warp * 16 * LD, *ownV = Vs + warp * 16 * LD;

  const Tile t = tileOf(a, a.Hk, a.Sk, kTile, false); // low tiles: most work
  const int64_t b = t.b, hk = t.head, bhk = t.bh, k0 = t.t0, kn = t.n;
  loadTile16<D>(Ks, static_cast<const uint16_t *>(a.k) + (bhk * a.Sk + k0) * D,
                kn);
  loadTile16<D>(Vs, static_cast<const uint16_t *>(a.v) + (bhk * a.Sk + k0) * D,
                kn);
  int pos[kAccN];
  probeLayout(reinterpret_cast<float *>(pt), pos);
  Acc dk[D / 16], dv[D / 16];
#pragma unroll
  for (int n = 0; n < D / 16; ++n) {
    wmma::fill_fragment(dk[n], 0.0f);
    wmma::fill_fragment(dv[n], 0.0f);
  }
  const int64_t j0 = k0 + warp * 16;
  const int keys = int(kn) - warp * 16; // this warp's keys (may be <= 0)
  int64_t qFirst = queryStart(a, k0) / kTile * kTile;
  for (int64_t g = 0; g < a.G; ++g) {
    int64_t h = hk * a.G + g, bh = b * a.H + h;
    for (int64_t q0 = qFirst; q0 < a.Sq; q0 += kTile) {
      int64_t rows = a.Sq - q0 < kTile ? a.Sq - q0 : kTile;
      __syncthreads(); // every warp is done with the previous Q, dO
      loadQueryTile16<D>(a, bh, q0, rows, Qs, dOs, lseS, deltaS);
      __syncthreads();
      Acc s[4];
      mmaABt<T, D>(s, ownK, Qs);
      // Element (key jr, query ic) is visible iff jr < keys, jr - ic <=
      // lim and the query row has an lse (rows past Sq have -inf).
      int lim = causalLimit(a, q0, j0);
      int64_t bBase = a.bias.p ? biasOffset(a.bias, b, h, q0, j0) : 0;
#pragma unroll
      for (int n = 0; n < 4; ++n)
#pragma unroll
        for (int e = 0; e < kAccN; ++e) {
          int jr = pos[e] >> 4, ic = n * 16 + (pos[e] & 15);
          float L = lseS[ic], p = 0;
          if (jr < keys && jr - ic <= lim && L != -kInf) {
            float sc = a.scale * s[n].x[e];
            if (a.bias.p)
              sc += biasLoad(a.bias, bBase + ic * a.bias.s[2] +
                                         jr * a.bias.s[3]);
            p = __expf(sc - L);
          }
          s[n].x[e] = p;
          pt[jr * kLdP + ic] = bits16<T>(p);
        }
      __syncwarp();
      mmaAccum<T, D>(dv, pt, dOs);
      Acc dp[4];
      mmaABt<T, D>(dp, ownV, dOs);
#pragma unroll
      for (int n = 0; n < 4; ++n)
#pragma unroll
        for (int e = 0; e < kAccN; ++e) {
          int jr = pos[e] >> 4, ic = n * 16 + (pos[e] & 15);
          dst[jr * kLdP + ic] =
              bits16<T>(s[n].x[e] * (dp[n].x[e] - deltaS[ic]));
        }
      __syncwarp();
      mmaAccum<T, D>(dk, dst, Qs);
      __syncwarp(); // pt, dst are rewritten by the next tile
    }
  }
  __syncthreads(); // no tile at all: the K, V loads may still be running
  storeRows<T, D>(dk, pos, a.scale, ownK,
                  static_cast<uint16_t *>(a.dk) + (bhk * a.Sk + j0) * D, keys);
  storeRows<T, D>(dv, pos, 1.0f, ownV,
                  static_cast<uint16_t *>(a.dv) + (bhk * a.Sk + j0) * D, keys);
}

/// dQ: CTA per (b, h, 64 query rows); warp w owns rows 16w..16w+15.
template <typename T, int D>
__global__ void __launch_bounds__(kFastThreads) dqFast(Args a) {
  constexpr int LD = D + 8;
  extern __shared__ __align__(128) unsigned char fsm[];
  uint16_t *Qs = reinterpret_cast<uint16_t *>(fsm);
  uint16_t *dOs = Qs + kTileElems<D>, *Ks = dOs + kTileElems<D>,
           *Vs = Ks + kTileElems<D>;
  uint16_t *dSs = Vs + kTileElems<D>;
  float *lseS = reinterpret_cast<float *>(dSs + 4 * 16 * kLdP);
  float *deltaS = lseS + kTile;
  const int warp = threadIdx.x >> 5;
  uint16_t *ds = dSs + warp * 16 * kLdP;
  uint16_t *ownQ = Qs + warp * 16 * LD, *ownDO = dOs + warp * 16 * LD;

  const Tile t = tileOf(a, a.H, a.Sq, kTile, true);
  const int64_t b = t.b, h = t.head, hk = h / a.G, bh = t.bh, q0 = t.t0,
                rows = t.n;
  loadQueryTile16<D>(a, bh, q0, rows, Qs, dOs, lseS, deltaS);
  int pos[kAccN];
  probeLayout(reinterpret_cast<float *>(ds), pos);
  Acc dq[D / 16];
#pragma unroll
  for (int n = 0; n < D / 16; ++n)
    wmma::fill_fragment(dq[n], 0.0f);
  const uint16_t *kg =
      static_cast<const uint16_t *>(a.k) + (b * a.Hk + hk) * a.Sk * D;
  const uint16_t *vg =
      static_cast<const uint16_t *>(a.v) + (b * a.Hk + hk) * a.Sk * D;
  const int64_t i0 = q0 + warp * 16;
  int64_t kEnd = keyEnd(a, q0, rows);
  for (int64_t k0 = 0; k0 < kEnd; k0 += kTile) {
    int64_t kn = a.Sk - k0 < kTile ? a.Sk - k0 : kTile;
    __syncthreads(); // every warp is done with the previous K, V
    loadTile16<D>(Ks, kg + k0 * D, kn);
    loadTile16<D>(Vs, vg + k0 * D, kn);
    __syncthreads();
    Acc s[4], dp[4];
    mmaABt<T, D>(s, ownQ, Ks);
    mmaABt<T, D>(dp, ownDO, Vs);
    int lim = causalLimit(a, i0, k0);
    int64_t bBase = a.bias.p ? biasOffset(a.bias, b, h, i0, k0) : 0;
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
      for (int e = 0; e < kAccN; ++e) {
        int ir = pos[e] >> 4, jc = n * 16 + (pos[e] & 15);
        float L = lseS[warp * 16 + ir], v = 0;
        if (jc < kn && jc - ir <= lim && L != -kInf) {
          float sc = a.scale * s[n].x[e];
          if (a.bias.p)
            sc += biasLoad(a.bias, bBase + ir * a.bias.s[2] +
                                       jc * a.bias.s[3]);
          v = __expf(sc - L) * (dp[n].x[e] - deltaS[warp * 16 + ir]);
        }
        ds[ir * kLdP + jc] = bits16<T>(v);
      }
    __syncwarp();
    mmaAccum<T, D>(dq, ds, Ks);
    __syncwarp(); // ds is rewritten by the next tile
  }
  __syncthreads(); // no tile at all: the Q loads may still be running
  storeRows<T, D>(dq, pos, a.scale, ownQ,
                  static_cast<uint16_t *>(a.dq) + (bh * a.Sq + i0) * D,
                  rows - warp * 16);
}

//===----------------------------------------------------------------------===//
// Host side
//===----------------------------------------------------------------------===//

bool forceGeneric() {
  static const bool force = [] {
    const char *e = std::getenv("LAMINA_CUDA_ATTENTION");
    return e && std::strcmp(e, "generic") == 0;
  }();
  return force;
}

bool aligned16(const void *p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

/// Launches kernel<<<blocks, threads, bytes>>>(a) (nothing for no blocks),
/// opting into more than the default 48 KiB of dynamic shared memory when
/// it needs it, or says why the device cannot give it.
template <typename K>
Status launch(const char *name, K kernel, int64_t blocks, int threads,
              size_t bytes, const Args &a, cudaStream_t stream) {
  if (blocks == 0)
    return Status::success();
  if (blocks > 0x7fffffff)
    return Status::error(std::string(name) + ": too many tiles for one grid");
  if (bytes > 48 * 1024) {
    int dev = 0, optin = 0;
    if (Status s = cudaCheck(name, cudaGetDevice(&dev)); !s.ok())
      return s;
    if (Status s = cudaCheck(
            name, cudaDeviceGetAttribute(
                      &optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
        !s.ok())
      return s;
    if (bytes > size_t(optin))
      return Status::error(std::string(name) + ": needs " +
                           std::to_string(bytes) + " bytes of shared memory "
                           "a block; the device allows " +
                           std::to_string(optin));
    if (Status s = cudaCheck(
            name, cudaFuncSetAttribute(
                      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                      int(bytes)));
        !s.ok())
      return s;
  }
  kernel<<<unsigned(blocks), threads, bytes, stream>>>(a);
  return launched(name);
}

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// The shared checks, then what the device kernels add: a device float type
/// and head dims the generic tiles fit.
Status prepare(const char *name, const Tensor &q, const Tensor &k,
               const Tensor &v, const Tensor *bias, const Tensor &out,
               const Tensor &lse, const Tensor *gradOut, const Tensor *gradQ,
               const Tensor *gradK, const Tensor *gradV, double scale,
               bool causal, Args &a) {
  AttentionDims d;
  if (Status s = checkAttention(name, q, k, v, bias, out, lse, gradOut, gradQ,
                                gradK, gradV, d);
      !s.ok())
    return s;
  if (!isDeviceFloat(q.dtype))
    return unsupported(name, q);
  if (d.d > kMaxHeadDim || d.dv > kMaxHeadDim)
    return Status::error(std::string(name) + ": head dims " +
                         std::to_string(d.d) + " and " + std::to_string(d.dv) +
                         " exceed the CUDA backend's " +
                         std::to_string(kMaxHeadDim));
  a = Args{};
  a.q = q.data;
  a.k = k.data;
  a.v = v.data;
  a.out = out.data;
  a.lse = lse.as<float>();
  a.lseIn = lse.as<float>();
  a.dO = gradOut ? gradOut->data : nullptr;
  a.dq = gradQ ? gradQ->data : nullptr;
  a.dk = gradK ? gradK->data : nullptr;
  a.dv = gradV ? gradV->data : nullptr;
  if (bias) {
    a.bias.p = bias->data;
    a.bias.type = bias->dtype;
    std::memcpy(a.bias.s, d.biasStrides, sizeof a.bias.s);
  }
  a.B = d.batch;
  a.H = d.heads;
  a.Hk = d.kvHeads;
  a.G = d.heads / d.kvHeads; // checkAttention: kvHeads >= 1 divides heads
  a.Sq = d.sq;
  a.Sk = d.sk;
  a.D = d.d;
  a.Dv = d.dv;
  a.off = d.sk - d.sq;
  a.scale = float(scale);
  a.causal = causal;
  return Status::success();
}

bool fastShape(const Tensor &q, const Args &a) {
  return !forceGeneric() &&
         (q.dtype == DType::F16 || q.dtype == DType::BF16) && a.D == a.Dv &&
         (a.D == 64 || a.D == 128);
}

size_t genericForwardBytes(const Args &a) {
  int64_t bq = a.bq, D = a.D, Dv = a.Dv;
  return size_t(bq * (D + 1) + kGenBK * (D + 1) + kGenBK * Dv + bq * kGenBK +
                bq * Dv + 3 * bq) *
         4;
}
size_t genericDkvBytes(const Args &a) {
  int64_t t = a.bq, D = a.D, Dv = a.Dv;
  return size_t(t * (3 * D + 3 * Dv + 4) + 2 * t * t + 2 * t) * 4;
}
size_t genericDqBytes(const Args &a) {
  int64_t t = a.bq, D = a.D, Dv = a.Dv;
  return size_t(t * (3 * D + 2 * Dv + 4) + t * t + 2 * t) * 4;
}

/// Scratch for Delta, returned to the stream's pool after the kernels.
struct Scratch {
  void *ptr = nullptr;
  cudaStream_t stream;
  explicit Scratch(cudaStream_t s) : stream(s) {}
  ~Scratch() {
    if (ptr)
      (void)cudaFreeAsync(ptr, stream);
  }
};

/// Forward launches for storage type T.
template <typename T> Status forwardTyped(Args a, bool fast, cudaStream_t st) {
  const char *name = "attention";
  if constexpr (!std::is_same_v<T, float>) {
    if (fast) {
      a.tiles = ceilDiv(a.Sq, kTile);
      int64_t blocks = a.B * a.H * a.tiles;
      return a.D == 64 ? launch(name, forwardFast<T, 64>, blocks, kFastThreads,
                                forwardFastBytes<64>(), a, st)
                       : launch(name, forwardFast<T, 128>, blocks,
                                kFastThreads, forwardFastBytes<128>(), a, st);
    }
  }
  a.bq = (a.D > 128 || a.Dv > 128) ? 16 : 32;
  a.bk = kGenBK;
  a.tiles = ceilDiv(a.Sq, a.bq);
  return launch(name, forwardGeneric<T>, a.B * a.H * a.tiles, kGenThreads,
                genericForwardBytes(a), a, st);
}

/// Backward launches for storage type T: Delta, then dK/dV, then dQ.
template <typename T>
Status backwardTyped(Args a, bool fast, float *delta, cudaStream_t st) {
  const char *name = "attention_grad";
  int64_t rows = a.B * a.H * a.Sq;
  if (rows > 0) {
    deltaKernel<T><<<gridFor(rows * 32), 256, 0, st>>>(
        static_cast<T *>(a.out), static_cast<const T *>(a.dO), delta, rows,
        a.Dv);
    if (Status s = launched(name); !s.ok())
      return s;
  }
  if constexpr (!std::is_same_v<T, float>) {
    if (fast) {
      bool d64 = a.D == 64;
      a.tiles = ceilDiv(a.Sk, kTile);
      if (Status s = launch(
              name, d64 ? dkvFast<T, 64> : dkvFast<T, 128>,
              a.B * a.Hk * a.tiles, kFastThreads,
              d64 ? backwardFastBytes<64>(2) : backwardFastBytes<128>(2), a,
              st);
          !s.ok())
        return s;
      a.tiles = ceilDiv(a.Sq, kTile);
      return launch(name, d64 ? dqFast<T, 64> : dqFast<T, 128>,
                    a.B * a.H * a.tiles, kFastThreads,
                    d64 ? backwardFastBytes<64>(1) : backwardFastBytes<128>(1),
                    a, st);
    }
  }
  a.bq = a.bk = (a.D > 64 || a.Dv > 64) ? 16 : 32;
  a.tiles = ceilDiv(a.Sk, a.bk);
  if (Status s = launch(name, dkvGeneric<T>, a.B * a.Hk * a.tiles,
                        kGenThreads, genericDkvBytes(a), a, st);
      !s.ok())
    return s;
  a.tiles = ceilDiv(a.Sq, a.bq);
  return launch(name, dqGeneric<T>, a.B * a.H * a.tiles, kGenThreads,
                genericDqBytes(a), a, st);
}
} // namespace

Status lamina::rt::cuda::attention(const Tensor &q, const Tensor &k,
                                   const Tensor &v, const Tensor *bias,
                                   double scale, bool causal, const Tensor &out,
                                   const Tensor &lse, cudaStream_t stream) {
  Args a;
  if (Status s = prepare("attention", q, k, v, bias, out, lse, nullptr,
                         nullptr, nullptr, nullptr, scale, causal, a);
      !s.ok())
    return s;
  if (a.B * a.H * a.Sq == 0)
    return Status::success();
  bool fast = fastShape(q, a);
  for (const void *p : {q.data, k.data, v.data, out.data})
    fast = fast && aligned16(p);
  switch (q.dtype) {
  case DType::F16: return forwardTyped<Half>(a, fast, stream);
  case DType::BF16: return forwardTyped<BFloat16>(a, fast, stream);
  default: return forwardTyped<float>(a, fast, stream);
  }
}

Status lamina::rt::cuda::attentionBackward(
    const Tensor &q, const Tensor &k, const Tensor &v, const Tensor *bias,
    const Tensor &out, const Tensor &lse, const Tensor &gradOut, double scale,
    bool causal, const Tensor &gradQ, const Tensor &gradK, const Tensor &gradV,
    cudaStream_t stream) {
  const char *name = "attention_grad";
  Args a;
  if (Status s = prepare(name, q, k, v, bias, out, lse, &gradOut, &gradQ,
                         &gradK, &gradV, scale, causal, a);
      !s.ok())
    return s;
  int64_t rows = a.B * a.H * a.Sq;
  if (rows == 0 && a.B * a.Hk * a.Sk == 0)
    return Status::success();
  Scratch delta(stream);
  if (rows > 0)
    if (Status s = cudaCheck(name, cudaMallocAsync(&delta.ptr,
                                                   size_t(rows) * 4, stream));
        !s.ok())
      return s;
  a.delta = static_cast<const float *>(delta.ptr);
  bool fast = fastShape(q, a);
  for (const void *p : {q.data, k.data, v.data, out.data, gradOut.data,
                        gradQ.data, gradK.data, gradV.data})
    fast = fast && aligned16(p);
  float *d = static_cast<float *>(delta.ptr);
  switch (q.dtype) {
  case DType::F16: return backwardTyped<Half>(a, fast, d, stream);
  case DType::BF16: return backwardTyped<BFloat16>(a, fast, d, stream);
  default: return backwardTyped<float>(a, fast, d, stream);
  }
}
