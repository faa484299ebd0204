//===- Attention.cu - fused scaled dot-product attention and its gradients ===//
//
// The host's attention / attentionBackward (Kernels.h) on the device. The
// score matrix is never stored: each CTA walks key (or query) tiles, keeps
// its rows' statistics and accumulators on chip and writes its rows once.
//
// Three paths, chosen per call here (LAMINA_CUDA_ATTENTION, Common.h's
// attentionPath, can rule out the first or the first two):
// * cuDNN's fused attention (CudnnAttention.cpp) where cuDNN is built in,
//   present at run time and takes the call;
// * tensor cores (AttentionTensorCore.cu): f16/bf16 with D == Dv in
//   {64, 128} and 16-byte aligned operands, the shapes where the products
//   are the whole cost and WMMA runs them several times faster.
// * generic (this file): every other shape and f32; scalar f32 math on
//   shared-memory tiles (an online softmax over key tiles of 32), D and Dv
//   up to 256, so any call the host takes at those head dims runs.
//
// Forward: one CTA per (b, h, query tile), the heaviest causal tiles first.
// Backward, both paths: Delta[i] = dO[i] . O[i] into a stream-ordered
// scratch (cudaMallocAsync, as NN.cu's statistics); then one kernel per
// (b, kv head, key tile) that loops over the query heads sharing the kv
// head and over the query tiles for dK and dV, and one per (b, h, query
// tile) that loops over key tiles for dQ. P is recomputed from lse in both,
// so nothing is summed with atomics and every gradient is deterministic.
//
//===----------------------------------------------------------------------===//

#include "Attention.h"

#ifdef LAMINA_HAVE_CUDNN
#include "CudnnAttention.h"
#endif

#include <cstdlib>
#include <cstring>
#include <type_traits>

using namespace lamina::rt;
using namespace lamina::rt::cuda;
using namespace lamina::rt::cuda::detail;
using namespace lamina::rt::cuda::detail::attn;
using lamina::rt::detail::AttentionDims;
using lamina::rt::detail::checkAttention;

namespace {
/// Head dims the generic path takes (its tiles must fit in shared memory).
constexpr int64_t kMaxHeadDim = 256;

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

/// Delta[r] = sum_c dO[r, c] * O[r, c] for the rows r = (b * H + h) * Sq +
/// i of delta ([B, H, Sq]), wherever the layout keeps row i of head h of
/// out and dO: a warp per row.
template <typename T>
__global__ void deltaKernel(Args a, float *delta, int64_t rows) {
  const T *o = static_cast<const T *>(a.out);
  const T *dO = static_cast<const T *>(a.dO);
  const int64_t dv = a.Dv;
  int lane = threadIdx.x & 31;
  int64_t warps = int64_t(gridDim.x) * (blockDim.x >> 5);
  for (int64_t r = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
       r < rows; r += warps) {
    int64_t bh = r / a.Sq, i = r % a.Sq;
    int64_t base = qRow(a, bh / a.H, bh % a.H, i, dv);
    float s = 0;
    for (int64_t c = lane; c < dv; c += 32)
      s += load(o[base + c]) * load(dO[base + c]);
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

/// dst[r * ld + c] = src row r (n rows of `cols` valid, `stride` elements
/// apart in src, `rows` in all; the rest zero) as f32.
template <typename T>
__device__ void loadTileF32(float *dst, int ld, const T *src, int64_t stride,
                            int64_t n, int rows, int64_t cols) {
  for (int64_t e = threadIdx.x; e < rows * cols; e += blockDim.x) {
    int64_t r = e / cols, c = e % cols;
    dst[r * ld + c] = r < n ? load(src[r * stride + c]) : 0.0f;
  }
}

/// dst row r (rows [0, n), `stride` elements apart) = src[r * cols + c]
/// (scaled by `mul`) as T.
template <typename T>
__device__ void storeTile(T *dst, int64_t stride, const float *src, int64_t n,
                          int64_t cols, float mul) {
  for (int64_t e = threadIdx.x; e < n * cols; e += blockDim.x) {
    int64_t r = e / cols, c = e % cols;
    dst[r * stride + c] = store<T>(mul * src[e]);
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
  LAMINA_DYNAMIC_SHARED(float, gsm);
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
  const T *qg = static_cast<const T *>(a.q) + qRow(a, b, h, q0, D);
  const T *kg = static_cast<const T *>(a.k) + kRow(a, b, hk, 0, D);
  const T *vg = static_cast<const T *>(a.v) + kRow(a, b, hk, 0, Dv);
  const int64_t kLd = kStride(a, D), vLd = kStride(a, Dv);

  loadTileF32(Qs, D + 1, qg, qStride(a, D), rows, bq, D);
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
    loadTileF32(Ks, D + 1, kg + k0 * kLd, kLd, kn, kGenBK, D);
    loadTileF32(Vs, Dv, vg + k0 * vLd, vLd, kn, kGenBK, Dv);
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
  // A row is empty when its maximum stayed -inf (the host's test): a NaN
  // score leaves the maximum alone but makes l NaN, and must reach out.
  T *og = static_cast<T *>(a.out) + qRow(a, b, h, q0, Dv);
  const int64_t oLd = qStride(a, Dv);
  for (int64_t e = threadIdx.x; e < rows * Dv; e += blockDim.x) {
    int64_t r = e / Dv, c = e % Dv;
    og[r * oLd + c] = store<T>(rowM[r] != -kInf ? Os[e] / rowL[r] : 0.0f);
  }
  for (int r = threadIdx.x; r < rows; r += blockDim.x)
    a.lse[bh * a.Sq + q0 + r] =
        rowM[r] != -kInf ? rowM[r] + math::log(rowL[r]) : -kInf;
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

/// The query tile's Q, dO, lse and Delta of query head h of batch b (lse
/// -inf past Sq: P = 0 there).
template <typename T>
__device__ void loadQueryTile(const Args &a, int64_t b, int64_t h, int64_t q0,
                              int64_t rows, float *Qs, float *dOs,
                              float *lseS, float *deltaS) {
  const int64_t D = a.D, Dv = a.Dv, bh = b * a.H + h;
  loadTileF32(Qs, int(D + 1),
              static_cast<const T *>(a.q) + qRow(a, b, h, q0, D), qStride(a, D),
              rows, a.bq, D);
  loadTileF32(dOs, int(Dv + 1),
              static_cast<const T *>(a.dO) + qRow(a, b, h, q0, Dv),
              qStride(a, Dv), rows, a.bq, Dv);
  for (int r = threadIdx.x; r < a.bq; r += blockDim.x) {
    lseS[r] = r < rows ? a.lseIn[bh * a.Sq + q0 + r] : -kInf;
    deltaS[r] = r < rows ? a.delta[bh * a.Sq + q0 + r] : 0.0f;
  }
}

/// dK, dV: CTA per (b, kv head, key tile of a.bk), over the group's query
/// heads and the query tiles that can see the key tile.
template <typename T>
__global__ void __launch_bounds__(kGenThreads) dkvGeneric(Args a) {
  LAMINA_DYNAMIC_SHARED(float, gsm);
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
  const int64_t b = t.b, hk = t.head, k0 = t.t0, kn = t.n;
  // (Offsets and strides recomputed for the stores: fewer live registers.)
  loadTileF32(Ks, D + 1, static_cast<const T *>(a.k) + kRow(a, b, hk, k0, D),
              kStride(a, D), kn, bk, D);
  loadTileF32(Vs, Dv + 1, static_cast<const T *>(a.v) + kRow(a, b, hk, k0, Dv),
              kStride(a, Dv), kn, bk, Dv);
  for (int e = threadIdx.x; e < bk * D; e += blockDim.x)
    dKs[e] = 0;
  for (int e = threadIdx.x; e < bk * Dv; e += blockDim.x)
    dVs[e] = 0;
  int64_t qFirst = queryStart(a, k0) / bq * bq;
  for (int64_t g = 0; g < a.G; ++g) {
    int64_t h = hk * a.G + g;
    for (int64_t q0 = qFirst; q0 < a.Sq; q0 += bq) {
      int64_t rows = a.Sq - q0 < bq ? a.Sq - q0 : bq;
      __syncthreads(); // the previous query tile is consumed
      loadQueryTile<T>(a, b, h, q0, rows, Qs, dOs, lseS, deltaS);
      __syncthreads();
      scoresGeneric(a, b, h, q0, rows, k0, kn, Qs, Ks, dOs, Vs, lseS, deltaS,
                    Ps, dSs);
      __syncthreads();
      accumulate(dKs, bk, D, rows, dSs, bk, 1, Qs, D + 1);   // dS^T Q
      accumulate(dVs, bk, Dv, rows, Ps, bk, 1, dOs, Dv + 1); // P^T dO
    }
  }
  __syncthreads();
  storeTile(static_cast<T *>(a.dk) + kRow(a, b, hk, k0, D), kStride(a, D), dKs,
            kn, D, a.scale);
  storeTile(static_cast<T *>(a.dv) + kRow(a, b, hk, k0, Dv), kStride(a, Dv),
            dVs, kn, Dv, 1.0f);
}

/// dQ: CTA per (b, h, query tile of a.bq), over the visible key tiles.
template <typename T>
__global__ void __launch_bounds__(kGenThreads) dqGeneric(Args a) {
  LAMINA_DYNAMIC_SHARED(float, gsm);
  const int bq = a.bq, bk = a.bk, D = int(a.D), Dv = int(a.Dv);
  float *Qs = gsm;                    // bq x (D+1)
  float *dOs = Qs + bq * (D + 1);     // bq x (Dv+1)
  float *Ks = dOs + bq * (Dv + 1);    // bk x (D+1)
  float *Vs = Ks + bk * (D + 1);      // bk x (Dv+1)
  float *dQs = Vs + bk * (Dv + 1);    // bq x D
  float *dSs = dQs + bq * D;          // bq x bk
  float *lseS = dSs + bq * bk, *deltaS = lseS + bq;

  const Tile t = tileOf(a, a.H, a.Sq, bq, true);
  const int64_t b = t.b, h = t.head, hk = h / a.G, q0 = t.t0, rows = t.n;
  loadQueryTile<T>(a, b, h, q0, rows, Qs, dOs, lseS, deltaS);
  for (int e = threadIdx.x; e < bq * D; e += blockDim.x)
    dQs[e] = 0;
  const T *kg = static_cast<const T *>(a.k) + kRow(a, b, hk, 0, D);
  const T *vg = static_cast<const T *>(a.v) + kRow(a, b, hk, 0, Dv);
  const int64_t kLd = kStride(a, D), vLd = kStride(a, Dv);
  int64_t kEnd = keyEnd(a, q0, rows);
  for (int64_t k0 = 0; k0 < kEnd; k0 += bk) {
    int64_t kn = a.Sk - k0 < bk ? a.Sk - k0 : bk;
    __syncthreads();
    loadTileF32(Ks, D + 1, kg + k0 * kLd, kLd, kn, bk, D);
    loadTileF32(Vs, Dv + 1, vg + k0 * vLd, vLd, kn, bk, Dv);
    __syncthreads();
    scoresGeneric(a, b, h, q0, rows, k0, kn, Qs, Ks, dOs, Vs, lseS, deltaS,
                  nullptr, dSs);
    __syncthreads();
    accumulate(dQs, bq, D, kn, dSs, 1, bk, Ks, D + 1); // dS K
  }
  __syncthreads();
  storeTile(static_cast<T *>(a.dq) + qRow(a, b, h, q0, D), qStride(a, D), dQs,
            rows, D, a.scale);
}

//===----------------------------------------------------------------------===//
// Host side
//===----------------------------------------------------------------------===//

/// The shared checks, then what the device kernels add: a device float type
/// and head dims the generic tiles fit.
Status prepare(const char *name, const Tensor &q, const Tensor &k,
               const Tensor &v, const Tensor *bias, const Tensor &out,
               const Tensor &lse, const Tensor *gradOut, const Tensor *gradQ,
               const Tensor *gradK, const Tensor *gradV, double scale,
               bool causal, AttentionLayout layout, Args &a) {
  AttentionDims d;
  if (Status s = checkAttention(name, q, k, v, bias, out, lse, gradOut, gradQ,
                                gradK, gradV, layout, d);
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
  a.seqMajor = d.seqMajor;
  return Status::success();
}

#ifdef LAMINA_HAVE_CUDNN
/// The call as cuDNN's path sees it (CudnnAttention.h).
cudnn_attention::Call cudnnCall(DType t, const Args &a) {
  cudnn_attention::Call c{};
  c.dtype = t;
  c.q = a.q;
  c.k = a.k;
  c.v = a.v;
  c.out = a.out;
  c.lse = a.lse;
  c.dO = a.dO;
  c.dq = a.dq;
  c.dk = a.dk;
  c.dv = a.dv;
  c.B = a.B;
  c.H = a.H;
  c.Hk = a.Hk;
  c.Sq = a.Sq;
  c.Sk = a.Sk;
  c.D = a.D;
  c.scale = a.scale;
  c.causal = a.causal;
  c.seqMajor = a.seqMajor;
  return c;
}

/// cuDNN's fused attention, when it takes the call: true with its Status.
/// qkvStride: q, k, v (and their gradients) packed in one tensor's rows.
bool viaCudnn(DType t, const Args &a, bool backward, cudaStream_t stream,
              Status &result, int64_t qkvStride = 0) {
  cudnn_attention::Call c = cudnnCall(t, a);
  c.qkvStride = qkvStride;
  if (a.B * a.H * a.Sq == 0 || a.Sk == 0 ||
      !cudnn_attention::eligible(c, a.bias.p != nullptr, a.Dv))
    return false;
  return backward ? cudnn_attention::backward(c, stream, result)
                  : cudnn_attention::forward(c, stream, result);
}
#endif

/// The tensor-core path's types and head dims (alignment is checked apart).
bool fastShape(const Tensor &q, const Args &a) {
  return attentionPath() != AttentionPath::Generic &&
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


/// Forward launches for storage type T.
template <typename T> Status forwardTyped(Args a, bool fast, cudaStream_t st) {
  if constexpr (!std::is_same_v<T, float>) {
    if (fast)
      return forwardTensorCore<T>(a, st);
  }
  a.bq = (a.D > 128 || a.Dv > 128) ? 16 : 32;
  a.bk = kGenBK;
  a.tiles = ceilDiv(a.Sq, a.bq);
  return launch("attention", forwardGeneric<T>, a.B * a.H * a.tiles,
                kGenThreads, genericForwardBytes(a), a, st);
}

/// Backward launches for storage type T: Delta, then dK/dV, then dQ.
template <typename T>
Status backwardTyped(Args a, bool fast, float *delta, cudaStream_t st) {
  const char *name = "attention_grad";
  int64_t rows = a.B * a.H * a.Sq;
  if (rows > 0) {
    launchKernel(deltaKernel<T>, gridFor(rows * 32), 256, 0, st, a, delta,
                 rows);
    if (Status s = launched(name); !s.ok())
      return s;
  }
  if constexpr (!std::is_same_v<T, float>) {
    if (fast)
      return backwardTensorCore<T>(a, st);
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

Status lamina::rt::cuda::detail::attn::allowLaunch(const char *name,
                                                 const void *kernel,
                                                 int64_t blocks, size_t bytes) {
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
  return Status::success();
}

Status lamina::rt::cuda::attention(const Tensor &q, const Tensor &k,
                                   const Tensor &v, const Tensor *bias,
                                   double scale, bool causal, const Tensor &out,
                                   const Tensor &lse, AttentionLayout layout,
                                   cudaStream_t stream) {
  Args a;
  if (Status s = prepare("attention", q, k, v, bias, out, lse, nullptr,
                         nullptr, nullptr, nullptr, scale, causal, layout, a);
      !s.ok())
    return s;
  if (a.B * a.H * a.Sq == 0)
    return Status::success();
#ifdef LAMINA_HAVE_CUDNN
  if (Status s; viaCudnn(q.dtype, a, false, stream, s))
    return s;
#endif
  bool fast = fastShape(q, a);
  for (const void *p : {q.data, k.data, v.data, out.data})
    fast = fast && alignedTo(p, 16);
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
    AttentionLayout layout, cudaStream_t stream) {
  const char *name = "attention_grad";
  Args a;
  if (Status s = prepare(name, q, k, v, bias, out, lse, &gradOut, &gradQ,
                         &gradK, &gradV, scale, causal, layout, a);
      !s.ok())
    return s;
  int64_t rows = a.B * a.H * a.Sq;
  if (rows == 0 && a.B * a.Hk * a.Sk == 0)
    return Status::success();
#ifdef LAMINA_HAVE_CUDNN
  if (Status s; viaCudnn(q.dtype, a, true, stream, s))
    return s;
#endif
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
    fast = fast && alignedTo(p, 16);
  float *d = static_cast<float *>(delta.ptr);
  switch (q.dtype) {
  case DType::F16: return backwardTyped<Half>(a, fast, d, stream);
  case DType::BF16: return backwardTyped<BFloat16>(a, fast, d, stream);
  default: return backwardTyped<float>(a, fast, d, stream);
  }
}

//===----------------------------------------------------------------------===//
// Packed q/k/v (graph.packed_attention)
//===----------------------------------------------------------------------===//

namespace {
/// q [B, S, H, D], k and v [B, S, Hk, D] as views of columns 0, H D and
/// (H + Hk) D of a packed tensor's rows ([B, S, W], W = (H + 2 Hk) D). Not
/// contiguous: only cuDNN (given the row stride) reads them in place.
struct Packed {
  int64_t B = 0, S = 0, H = 0, Hk = 0, D = 0, W = 0;
  int64_t qShape[4] = {}, kShape[4] = {};
  Tensor q, k, v;
  Packed(const Packed &) = delete; // the views point at the shapes above
  Packed() = default;
};

Status unpack(const char *name, const Tensor &t, int64_t heads,
              int64_t kvHeads, Packed &p) {
  if (t.rank != 3 || heads < 1 || kvHeads < 1 || heads % kvHeads != 0 ||
      t.shape[2] % (heads + 2 * kvHeads) != 0)
    return Status::error(std::string(name) + ": " + describe(t) +
                         " is not [B, S, (" + std::to_string(heads) +
                         " + 2 x " + std::to_string(kvHeads) + ") D]");
  p.B = t.shape[0];
  p.S = t.shape[1];
  p.W = t.shape[2];
  p.H = heads;
  p.Hk = kvHeads;
  p.D = p.W / (heads + 2 * kvHeads);
  int64_t q[4] = {p.B, p.S, p.H, p.D}, k[4] = {p.B, p.S, p.Hk, p.D};
  std::copy(q, q + 4, p.qShape);
  std::copy(k, k + 4, p.kShape);
  char *base = static_cast<char *>(t.data);
  size_t es = size_t(t.elementSize());
  p.q = Tensor{base, t.dtype, 4, p.qShape};
  p.k = Tensor{base + size_t(p.H * p.D) * es, t.dtype, 4, p.kShape};
  p.v = Tensor{base + size_t((p.H + p.Hk) * p.D) * es, t.dtype, 4, p.kShape};
  return Status::success();
}

/// cuDNN on the packed views (the forward, or with gradOut and the packed
/// gradient g the backward) at a row stride of W, when it takes the call:
/// true with its Status (an argument error included).
bool packedViaCudnn(const char *name, const Packed &p, const Tensor &out,
                    const Tensor &lse, const Tensor *gradOut, const Packed *g,
                    double scale, bool causal, cudaStream_t stream,
                    Status &result) {
#ifdef LAMINA_HAVE_CUDNN
  Args a;
  if (Status s = prepare(name, p.q, p.k, p.v, nullptr, out, lse, gradOut,
                         g ? &g->q : nullptr, g ? &g->k : nullptr,
                         g ? &g->v : nullptr, scale, causal,
                         AttentionLayout::SeqMajor, a);
      !s.ok()) {
    result = s;
    return true;
  }
  return a.B * a.H * a.Sq > 0 &&
         viaCudnn(p.q.dtype, a, g != nullptr, stream, result, p.W);
#else
  (void)name, (void)p, (void)out, (void)lse, (void)gradOut, (void)g,
      (void)scale, (void)causal, (void)stream, (void)result;
  return false;
#endif
}

/// Contiguous copies of packed views (or room for them): the kernels' q,
/// k, v or dq, dk, dv.
struct Dense {
  Scratch q, k, v;
  Tensor tq, tk, tv;
  explicit Dense(cudaStream_t s) : q(s), k(s), v(s) {}
};

/// Copies each row's `width` bytes between a packed view and its dense
/// twin, `rows` rows, in stream order.
Status copyRows(const char *name, void *dst, size_t dpitch, const void *src,
                size_t spitch, size_t width, int64_t rows,
                cudaStream_t stream) {
  if (rows == 0 || width == 0)
    return Status::success();
  return cudaCheck(name, cudaMemcpy2DAsync(dst, dpitch, src, spitch, width,
                                           size_t(rows),
                                           cudaMemcpyDeviceToDevice, stream));
}

/// Room for dense q, k, v; with `copy`, filled from the packed views.
Status densify(const char *name, const Packed &p, bool copy, Dense &d,
               cudaStream_t stream) {
  size_t es = size_t(p.q.elementSize()), rowBytes = size_t(p.W) * es;
  int64_t rows = p.B * p.S;
  struct Part {
    Scratch &room;
    Tensor &view;
    const Tensor &packed;
    int64_t heads;
  } parts[] = {{d.q, d.tq, p.q, p.H}, {d.k, d.tk, p.k, p.Hk},
               {d.v, d.tv, p.v, p.Hk}};
  for (Part &part : parts) {
    size_t width = size_t(part.heads * p.D) * es;
    if (Status s = cudaCheck(name, cudaMallocAsync(
                                       &part.room.ptr,
                                       std::max<size_t>(16, width * size_t(rows)),
                                       stream));
        !s.ok())
      return s;
    part.view = Tensor{part.room.ptr, part.packed.dtype, 4, part.packed.shape};
    if (copy)
      if (Status s = copyRows(name, part.room.ptr, width, part.packed.data,
                              rowBytes, width, rows, stream);
          !s.ok())
        return s;
  }
  return Status::success();
}
} // namespace

Status lamina::rt::cuda::packedAttention(const Tensor &qkv, int64_t heads,
                                         int64_t kvHeads, double scale,
                                         bool causal, const Tensor &out,
                                         const Tensor &lse,
                                         cudaStream_t stream) {
  const char *name = "packed_attention";
  Packed p;
  if (Status s = unpack(name, qkv, heads, kvHeads, p); !s.ok())
    return s;
  if (Status s; packedViaCudnn(name, p, out, lse, nullptr, nullptr, scale,
                               causal, stream, s))
    return s;
  // The kernels read dense tensors: the slices, copied out.
  Dense d(stream);
  if (Status s = densify(name, p, true, d, stream); !s.ok())
    return s;
  return attention(d.tq, d.tk, d.tv, nullptr, scale, causal, out, lse,
                   AttentionLayout::SeqMajor, stream);
}

Status lamina::rt::cuda::packedAttentionBackward(
    const Tensor &qkv, const Tensor &out, const Tensor &lse,
    const Tensor &gradOut, int64_t heads, int64_t kvHeads, double scale,
    bool causal, const Tensor &gradQkv, cudaStream_t stream) {
  const char *name = "packed_attention_grad";
  if (gradQkv.dtype != qkv.dtype || !sameShape(gradQkv, qkv))
    return Status::error(std::string(name) + ": gradient " +
                         describe(gradQkv) + " is not shaped as " +
                         describe(qkv));
  Packed p, g;
  if (Status s = unpack(name, qkv, heads, kvHeads, p); !s.ok())
    return s;
  if (Status s = unpack(name, gradQkv, heads, kvHeads, g); !s.ok())
    return s;
  if (Status s; packedViaCudnn(name, p, out, lse, &gradOut, &g, scale,
                               causal, stream, s))
    return s;
  Dense in(stream), grads(stream);
  if (Status s = densify(name, p, true, in, stream); !s.ok())
    return s;
  if (Status s = densify(name, g, false, grads, stream); !s.ok())
    return s;
  if (Status s = attentionBackward(in.tq, in.tk, in.tv, nullptr, out, lse,
                                   gradOut, scale, causal, grads.tq, grads.tk,
                                   grads.tv, AttentionLayout::SeqMajor, stream);
      !s.ok())
    return s;
  // The gradients into their columns of gradQkv's rows.
  size_t es = size_t(qkv.elementSize()), rowBytes = size_t(g.W) * es;
  for (auto [dense, packed] : {std::pair(&grads.tq, &g.q),
                               std::pair(&grads.tk, &g.k),
                               std::pair(&grads.tv, &g.v)}) {
    size_t width = size_t(packed->shape[2] * g.D) * es;
    if (Status s = copyRows(name, packed->data, rowBytes, dense->data, width,
                            width, g.B * g.S, stream);
        !s.ok())
      return s;
  }
  return Status::success();
}
