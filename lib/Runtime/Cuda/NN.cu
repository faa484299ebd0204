//===- NN.cu - softmax, norms and their gradients, cross-entropy ----------===//
//
// One thread block per row. A row is re-read from global memory for each
// pass (max, sum, write): rows are at most a vocabulary long and stay in
// L1/L2. Sums accumulate in f32 in a fixed tree order (deterministic, but
// not the host's double sums: agreement is to ~1e-6 relative). Parameter
// gradients (sum over rows) use a second kernel with one column per thread
// and a fixed split of the rows (Common.h's columnSumChunks, then 16 lanes;
// the chunk sums added in order by a third), so they are deterministic too.
//
//===----------------------------------------------------------------------===//

#include "Common.h"

#include <algorithm>
#include <initializer_list>
#include <type_traits>
#include <utility>

using namespace lamina::rt;
using namespace lamina::rt::cuda;
using namespace lamina::rt::cuda::detail;
using lamina::rt::detail::checkCrossEntropy;
using lamina::rt::detail::checkNormBackward;
using lamina::rt::detail::checkSoftmaxBackward;

namespace {
constexpr float kInf = __builtin_huge_valf();

/// Row r of the [outer, n, inner] view: element i at base + i * inner.
template <typename T, bool Log>
__global__ void softmaxKernel(const T *x, T *y, int64_t n, int64_t inner) {
  __shared__ float scratch[32];
  int64_t r = blockIdx.x;
  int64_t base = (r / inner) * n * inner + r % inner;
  const T *xr = x + base;
  T *yr = y + base;
  float mx = -kInf;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    mx = math::maximum(mx, load(xr[i * inner]));
  mx = blockReduce(mx, MaxOp{}, -kInf, scratch);
  float sum = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    sum += math::exp(load(xr[i * inner]) - mx);
  sum = blockReduce(sum, SumOp{}, 0.0f, scratch);
  float s = Log ? math::log(sum) : 1.0f / sum;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    float v = load(xr[i * inner]) - mx;
    yr[i * inner] = store<T>(Log ? v - s : math::exp(v) * s);
  }
}

/// softmax / logSoftmax backward of row r of the [outer, n, inner] view:
/// y (g - sum(g y)) or g - exp(y) sum(g). Each thread reads an element
/// before writing it, so dx may alias y or g.
template <typename T, bool Log>
__global__ void softmaxBackwardKernel(const T *y, const T *g, T *dx, int64_t n,
                                      int64_t inner) {
  __shared__ float scratch[32];
  int64_t r = blockIdx.x;
  int64_t base = (r / inner) * n * inner + r % inner;
  float sum = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    float gv = load(g[base + i * inner]);
    sum += Log ? gv : gv * load(y[base + i * inner]);
  }
  sum = blockReduce(sum, SumOp{}, 0.0f, scratch);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    int64_t k = base + i * inner;
    float yv = load(y[k]), gv = load(g[k]);
    dx[k] = store<T>(Log ? gv - math::exp(yv) * sum : yv * (gv - sum));
  }
}

/// mean and 1/std of a contiguous row (two passes, as the host).
template <typename T>
__device__ void rowMoments(const T *xr, int64_t n, float epsilon,
                           float *scratch, float &mean, float &rstd) {
  float sum = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    sum += load(xr[i]);
  mean = blockReduce(sum, SumOp{}, 0.0f, scratch) / float(n);
  float var = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    float d = load(xr[i]) - mean;
    var += d * d;
  }
  var = blockReduce(var, SumOp{}, 0.0f, scratch) / float(n);
  rstd = 1.0f / math::sqrt(var + epsilon);
}

/// R: the result's type (T, or f16/bf16 for f32 T).
template <typename T, typename R = T>
__global__ void layerNormKernel(const T *x, const T *g, const T *b, R *y,
                                int64_t n, float epsilon) {
  __shared__ float scratch[32];
  const T *xr = x + blockIdx.x * n;
  R *yr = y + blockIdx.x * n;
  float mean, rstd;
  rowMoments(xr, n, epsilon, scratch, mean, rstd);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    float v = (load(xr[i]) - mean) * rstd * load(g[i]);
    if (b)
      v += load(b[i]);
    yr[i] = store<R>(v);
  }
}

/// 1/rms of a contiguous row.
template <typename T>
__device__ float rowRrms(const T *xr, int64_t n, float epsilon,
                         float *scratch) {
  float ms = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    float v = load(xr[i]);
    ms += v * v;
  }
  ms = blockReduce(ms, SumOp{}, 0.0f, scratch) / float(n);
  return 1.0f / math::sqrt(ms + epsilon);
}

template <typename T, typename R = T>
__global__ void rmsNormKernel(const T *x, const T *g, R *y, int64_t n,
                              float epsilon) {
  __shared__ float scratch[32];
  const T *xr = x + blockIdx.x * n;
  R *yr = y + blockIdx.x * n;
  float rrms = rowRrms(xr, n, epsilon, scratch);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    yr[i] = store<R>(load(xr[i]) * rrms * load(g[i]));
}

/// dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat =
/// dy * g. Saves mean and rstd per row when `stats` is set. D: dy's type
/// (T, or f16/bf16 for f32 T, widened on load).
template <typename T, typename D>
__global__ void layerNormBackwardKernel(const T *x, const T *g, const D *dy,
                                        const T *add, T *dx, float2 *stats,
                                        int64_t n, float epsilon) {
  __shared__ float scratch[32];
  int64_t row = blockIdx.x;
  const T *xr = x + row * n;
  const D *dyr = dy + row * n;
  float mean, rstd;
  rowMoments(xr, n, epsilon, scratch, mean, rstd);
  float s1 = 0, s2 = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    float dxhat = load(dyr[i]) * load(g[i]);
    s1 += dxhat;
    s2 += dxhat * (load(xr[i]) - mean) * rstd;
  }
  s1 = blockReduce(s1, SumOp{}, 0.0f, scratch) / float(n);
  s2 = blockReduce(s2, SumOp{}, 0.0f, scratch) / float(n);
  T *dxr = dx + row * n;
  const T *addr = add ? add + row * n : nullptr;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    float xhat = (load(xr[i]) - mean) * rstd;
    float dxhat = load(dyr[i]) * load(g[i]);
    float v = rstd * (dxhat - s1 - xhat * s2);
    dxr[i] = store<T>(addr ? v + load(addr[i]) : v);
  }
  if (stats && threadIdx.x == 0)
    stats[row] = make_float2(mean, rstd);
}

/// dx = rrms * (dxhat - x * rrms^2 * mean(dxhat * x)). Saves rrms per row
/// (as .y; .x = 0) when `stats` is set. D as layerNormBackwardKernel's.
template <typename T, typename D>
__global__ void rmsNormBackwardKernel(const T *x, const T *g, const D *dy,
                                      const T *add, T *dx, float2 *stats,
                                      int64_t n, float epsilon) {
  __shared__ float scratch[32];
  int64_t row = blockIdx.x;
  const T *xr = x + row * n;
  const D *dyr = dy + row * n;
  float rrms = rowRrms(xr, n, epsilon, scratch);
  float s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    s += load(dyr[i]) * load(g[i]) * load(xr[i]);
  s = blockReduce(s, SumOp{}, 0.0f, scratch) / float(n);
  T *dxr = dx + row * n;
  const T *addr = add ? add + row * n : nullptr;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    float dxhat = load(dyr[i]) * load(g[i]);
    float v = rrms * (dxhat - load(xr[i]) * rrms * rrms * s);
    dxr[i] = store<T>(addr ? v + load(addr[i]) : v);
  }
  if (stats && threadIdx.x == 0)
    stats[row] = make_float2(0.0f, rrms);
}

//===----------------------------------------------------------------------===//
// Packed norms: rows of n <= 4096 elements, n a multiple of 4
//===----------------------------------------------------------------------===//
//
// A block of 128 threads (256 for rows above 2048) holds its row in
// registers, V 4-element packs a thread (pack q = threadIdx.x + k
// blockDim.x): one vector load per pack from global memory, the passes
// over registers. Small blocks keep many rows in flight on an SM, so one
// block's reductions overlap the others' loads; the one-block-a-row
// kernels above (512 threads, a scalar load per element per pass) moved a
// third of the H200's bandwidth (docs/results/performance.md, run 5), and
// keeping their rows in registers alone did not help (run 4). The backward
// kernel also sums its chunk of rows' parameter gradients, each thread over its
// own columns, so x and dy are read once, not again by
// normParamGradKernel. Sums are in f32 in a fixed order: deterministic.

/// This thread's packs of a row; packs past the row's end read as 0.
template <typename T, int V>
__device__ void loadPacks(const T *r, int packs, float (&v)[V][4]) {
#pragma unroll
  for (int k = 0; k < V; ++k) {
    int q = threadIdx.x + k * blockDim.x;
    Pack<T, 4> p{};
    if (q < packs)
      p = reinterpret_cast<const Pack<T, 4> *>(r)[q];
#pragma unroll
    for (int e = 0; e < 4; ++e)
      v[k][e] = q < packs ? load(p.v[e]) : 0.0f;
  }
}

__device__ inline bool hasPack(int k, int packs) {
  return int(threadIdx.x) + k * int(blockDim.x) < packs;
}

/// rowMoments (Rms: mean 0 and 1/rms) of a row held in packs.
template <bool Rms, int V>
__device__ void packedMoments(const float (&x)[V][4], int packs, int64_t n,
                              float epsilon, float *scratch, float &mean,
                              float &rstd) {
  mean = 0;
  if (!Rms) {
    float sum = 0;
#pragma unroll
    for (int k = 0; k < V; ++k)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        sum += x[k][e]; // 0 past the row
    mean = blockReduce(sum, SumOp{}, 0.0f, scratch) / float(n);
  }
  float var = 0;
#pragma unroll
  for (int k = 0; k < V; ++k)
    if (hasPack(k, packs))
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float d = x[k][e] - mean;
        var += d * d;
      }
  var = blockReduce(var, SumOp{}, 0.0f, scratch) / float(n);
  rstd = 1.0f / math::sqrt(var + epsilon);
}

/// layerNormKernel (b may be null) or, Rms, rmsNormKernel, of row
/// blockIdx.x.
template <typename T, typename R, bool Rms, int V>
__global__ void normPackedKernel(const T *x, const T *g, const T *b, R *y,
                                 int64_t n, float epsilon) {
  __shared__ float scratch[32];
  int packs = int(n / 4);
  int64_t row = blockIdx.x;
  float xv[V][4];
  loadPacks(x + row * n, packs, xv);
  float mean, rstd;
  packedMoments<Rms>(xv, packs, n, epsilon, scratch, mean, rstd);
  auto *yr = reinterpret_cast<Pack<R, 4> *>(y + row * n);
#pragma unroll
  for (int k = 0; k < V; ++k) {
    int q = threadIdx.x + k * blockDim.x;
    if (q >= packs)
      continue;
    Pack<T, 4> gp = reinterpret_cast<const Pack<T, 4> *>(g)[q], bp{};
    if (b)
      bp = reinterpret_cast<const Pack<T, 4> *>(b)[q];
    Pack<R, 4> out;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float v = (xv[k][e] - mean) * rstd * load(gp.v[e]);
      out.v[e] = store<R>(b ? v + load(bp.v[e]) : v);
    }
    yr[q] = out;
  }
}

/// The input gradients of rows [c chunk, (c + 1) chunk), c = blockIdx.x, as
/// layerNormBackwardKernel (Rms: rmsNormBackwardKernel) computes them, and,
/// when `part` is set, the chunk's parameter gradient sums in its row c of
/// [chunks, n] (Rms: dg) or [chunks, 2n] (dg, then db). The bound keeps 640
/// threads (5 rows of 128) on an SM: unbounded, ptxas gave the f32 layer
/// norm at V = 4 141 registers, 3 rows an SM; at 96 it spills nothing.
/// D: dy's type (T, or f16/bf16 for f32 T, widened on load).
template <typename T, typename D, bool Rms, int V, int Threads>
__global__ void __launch_bounds__(Threads, 640 / Threads)
    normBackwardPackedKernel(const T *x, const T *g, const D *dy, const T *add,
                             T *dx, float *part, int64_t rows, int64_t n,
                             int64_t chunk, float epsilon) {
  __shared__ float scratch[32];
  int packs = int(n / 4);
  float accG[V][4] = {}, accB[V][4] = {};
  int64_t begin = blockIdx.x * chunk;
  int64_t end = begin + chunk < rows ? begin + chunk : rows;
  for (int64_t row = begin; row < end; ++row) {
    float xv[V][4], dyv[V][4];
    loadPacks(x + row * n, packs, xv);
    loadPacks(dy + row * n, packs, dyv);
    float mean, rstd;
    packedMoments<Rms>(xv, packs, n, epsilon, scratch, mean, rstd);
    // xv becomes xhat and dyv dxhat = dy g, after the parameter sums.
    float s1 = 0, s2 = 0;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      int q = threadIdx.x + k * blockDim.x;
      if (q >= packs)
        continue;
      Pack<T, 4> gp = reinterpret_cast<const Pack<T, 4> *>(g)[q];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float xhat = (xv[k][e] - mean) * rstd, d = dyv[k][e];
        accG[k][e] += d * xhat;
        accB[k][e] += d;
        float dxhat = d * load(gp.v[e]);
        s1 += dxhat;
        s2 += dxhat * xhat;
        xv[k][e] = xhat;
        dyv[k][e] = dxhat;
      }
    }
    s1 = Rms ? 0.0f : blockReduce(s1, SumOp{}, 0.0f, scratch) / float(n);
    s2 = blockReduce(s2, SumOp{}, 0.0f, scratch) / float(n);
    auto *dxr = reinterpret_cast<Pack<T, 4> *>(dx + row * n);
    auto *addr =
        add ? reinterpret_cast<const Pack<T, 4> *>(add + row * n) : nullptr;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      int q = threadIdx.x + k * blockDim.x;
      if (q >= packs)
        continue;
      Pack<T, 4> ap{}, out;
      if (addr)
        ap = addr[q];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float v = rstd * (dyv[k][e] - s1 - xv[k][e] * s2);
        out.v[e] = store<T>(addr ? v + load(ap.v[e]) : v);
      }
      dxr[q] = out;
    }
  }
  if (!part)
    return;
  float *pg = part + int64_t(blockIdx.x) * (Rms ? 1 : 2) * n, *pb = pg + n;
#pragma unroll
  for (int k = 0; k < V; ++k) {
    int q = threadIdx.x + k * blockDim.x;
    if (q >= packs)
      continue;
    Pack<float, 4> og, ob;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      og.v[e] = accG[k][e];
      ob.v[e] = accB[k][e];
    }
    reinterpret_cast<Pack<float, 4> *>(pg)[q] = og;
    if (!Rms)
      reinterpret_cast<Pack<float, 4> *>(pb)[q] = ob;
  }
}

/// dg[j] = sums[j], db[j] = sums[n + j] (db may be null): the packed
/// backward's chunk sums, added, into the parameters' type.
template <typename T>
__global__ void storeParamGradsKernel(const float *sums, T *dg, T *db,
                                      int64_t n) {
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < n;
       j += int64_t(gridDim.x) * blockDim.x) {
    if (dg)
      dg[j] = store<T>(sums[j]);
    if (db)
      db[j] = store<T>(sums[n + j]);
  }
}

/// dg[j] = sum_r dy[r,j] * (x[r,j] - mean_r) * rstd_r, db[j] = sum_r dy[r,j].
/// Block (32, 16): 32 columns, 16 row lanes combined in shared memory, over
/// the rows of chunk blockIdx.y ([c * chunk, (c + 1) * chunk)). With one
/// chunk dg/db are written; otherwise the chunk's f32 sums go to part
/// (rows 2c and 2c + 1 of [2 * chunks, n]) for normParamSumKernel.
template <typename T, typename D>
__global__ void
normParamGradKernel(const T *x, const D *dy, const float2 *stats, T *dg, T *db,
                    float *part, int64_t rows, int64_t n, int64_t chunk) {
  __shared__ float sg[16][33], sb[16][33];
  int64_t j = blockIdx.x * 32 + threadIdx.x;
  int64_t c = blockIdx.y, end = (c + 1) * chunk < rows ? (c + 1) * chunk : rows;
  float accG = 0, accB = 0;
  if (j < n)
    for (int64_t r = c * chunk + threadIdx.y; r < end; r += 16) {
      float d = load(dy[r * n + j]);
      float2 st = stats[r];
      accG += d * (load(x[r * n + j]) - st.x) * st.y;
      accB += d;
    }
  sg[threadIdx.y][threadIdx.x] = accG;
  sb[threadIdx.y][threadIdx.x] = accB;
  __syncthreads();
  if (threadIdx.y == 0 && j < n) {
    float g = 0, b = 0;
    for (int k = 0; k < 16; ++k) {
      g += sg[k][threadIdx.x];
      b += sb[k][threadIdx.x];
    }
    if (part) {
      part[2 * c * n + j] = g;
      part[(2 * c + 1) * n + j] = b;
      return;
    }
    if (dg)
      dg[j] = store<T>(g);
    if (db)
      db[j] = store<T>(b);
  }
}

/// Second pass: each column's chunk sums added in chunk order.
template <typename T>
__global__ void normParamSumKernel(const float *part, T *dg, T *db,
                                   int64_t chunks, int64_t n) {
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < n;
       j += int64_t(gridDim.x) * blockDim.x) {
    float g = part[j], b = part[n + j];
    for (int64_t c = 1; c < chunks; ++c) {
      g += part[2 * c * n + j];
      b += part[(2 * c + 1) * n + j];
    }
    if (dg)
      dg[j] = store<T>(g);
    if (db)
      db[j] = store<T>(b);
  }
}

/// A row's running maximum and sum of exp(x - max), one element at a time:
/// the sum is rescaled when the maximum grows, so the row is read once.
/// As the two-pass sums: -inf elements add nothing, and a NaN or +inf
/// element (exp(inf - inf)) makes the sum NaN.
struct MaxSum {
  float m = -kInf, s = 0.0f;
};

__device__ inline MaxSum nanMaxSum() {
  return MaxSum{__builtin_nanf(""), __builtin_nanf("")};
}

__device__ inline void addTo(MaxSum &a, float x) {
  if (!(x < kInf)) // NaN or +inf
    a = nanMaxSum();
  else if (x > a.m) {
    a.s = a.s * math::exp(a.m - x) + 1.0f; // 0 * exp(-inf) = 0 at the start
    a.m = x;
  } else if (x > -kInf) {
    a.s += math::exp(x - a.m); // NaN once a is
  }
}

__device__ inline MaxSum combine(MaxSum a, MaxSum b) {
  if (a.m != a.m || b.m != b.m)
    return nanMaxSum();
  float m = a.m > b.m ? a.m : b.m;
  float sa = a.m > -kInf ? a.s * math::exp(a.m - m) : 0.0f;
  float sb = b.m > -kInf ? b.s * math::exp(b.m - m) : 0.0f;
  return MaxSum{m, sa + sb};
}

/// The block's MaxSum, in every thread (blockReduce's pattern).
__device__ MaxSum blockMaxSum(MaxSum v, float2 *scratch) {
  for (int o = 16; o > 0; o >>= 1)
    v = combine(v, MaxSum{__shfl_xor_sync(0xffffffffu, v.m, o),
                          __shfl_xor_sync(0xffffffffu, v.s, o)});
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0)
    scratch[warp] = make_float2(v.m, v.s);
  __syncthreads();
  int warps = blockDim.x >> 5;
  v = lane < warps ? MaxSum{scratch[lane].x, scratch[lane].y} : MaxSum{};
  for (int o = 16; o > 0; o >>= 1)
    v = combine(v, MaxSum{__shfl_xor_sync(0xffffffffu, v.m, o),
                          __shfl_xor_sync(0xffffffffu, v.s, o)});
  return v;
}

/// Calls f(i, x[i]) for the block's elements of a row of n: 4 a load when
/// `vec` (n a multiple of 4, the row 4-element aligned), then one by one.
template <typename T, typename F>
__device__ void forRow(const T *xr, int64_t n, bool vec, F &&f) {
  int64_t start = 0;
  if (vec) {
    for (int64_t q = threadIdx.x; q < n / 4; q += blockDim.x) {
      Pack<T, 4> p = reinterpret_cast<const Pack<T, 4> *>(xr)[q];
#pragma unroll
      for (int e = 0; e < 4; ++e)
        f(4 * q + e, load(p.v[e]));
    }
    start = n / 4 * 4;
  }
  for (int64_t i = start + threadIdx.x; i < n; i += blockDim.x)
    f(i, load(xr[i]));
}

/// Forward (loss set: the row's loss) or backward (grad set: the row's
/// gradient scaled by gradRows[row], stored as G: T, or f16/bf16 for f32
/// T) of softmax cross-entropy: one read of the row for its maximum and
/// sum, one more (backward) for the gradient. L, the per-row values' type:
/// T, or f32 for f16/bf16 T.
template <typename T, typename G, typename L>
__global__ void crossEntropyKernel(const T *logits, const void *labels,
                                   bool wideLabels, int64_t ignoreIndex,
                                   const L *gradRows, L *loss, G *grad,
                                   int64_t v, bool vec, ErrorSlot *slot) {
  __shared__ float2 scratch[32];
  int64_t row = blockIdx.x;
  const T *xr = logits + row * v;
  int64_t label = readIndex(labels, wideLabels, row);
  bool ignored = label == ignoreIndex;
  bool bad = !ignored && (label < 0 || label >= v);
  if (bad && threadIdx.x == 0)
    recordError(slot, DataError::Label, row, label, v);
  if (ignored || bad) {
    if (loss && threadIdx.x == 0)
      loss[row] = store<L>(0.0f);
    if (grad)
      for (int64_t i = threadIdx.x; i < v; i += blockDim.x)
        grad[row * v + i] = store<G>(0.0f);
    return;
  }
  MaxSum acc;
  forRow(xr, v, vec, [&](int64_t, float x) { addTo(acc, x); });
  acc = blockMaxSum(acc, scratch);
  float mx = acc.m, sum = acc.s;
  if (loss) {
    if (threadIdx.x == 0)
      loss[row] = store<L>(math::log(sum) - (load(xr[label]) - mx));
    return;
  }
  float inv = 1.0f / sum, scale = load(gradRows[row]);
  G *gr = grad + row * v;
  auto value = [&](int64_t i, float x) {
    float p = math::exp(x - mx) * inv;
    return store<G>((p - (i == label ? 1.0f : 0.0f)) * scale);
  };
  if (!vec) {
    forRow(xr, v, false, [&](int64_t i, float x) { gr[i] = value(i, x); });
    return;
  }
  for (int64_t q = threadIdx.x; q < v / 4; q += blockDim.x) {
    Pack<T, 4> in = reinterpret_cast<const Pack<T, 4> *>(xr)[q];
    Pack<G, 4> out;
#pragma unroll
    for (int e = 0; e < 4; ++e)
      out.v[e] = value(4 * q + e, load(in.v[e]));
    reinterpret_cast<Pack<G, 4> *>(gr)[q] = out;
  }
  for (int64_t i = v / 4 * 4 + threadIdx.x; i < v; i += blockDim.x)
    gr[i] = value(i, load(xr[i]));
}

/// The host's checks, and a type the device kernels compute on.
Status checkDeviceAlongAxis(const char *name, const Tensor &input,
                            int64_t &axis, const Tensor &result) {
  if (Status st = checkFloatAlongAxis(name, input, axis, result); !st.ok())
    return st;
  return isDeviceFloat(input.dtype) ? Status::success()
                                    : unsupported(name, input);
}
/// Calls f(Tag<T>, Tag<R>) for an op's input type T (a device float type)
/// and result type R (T, or f16/bf16 for f32 T: the op's checks have
/// checked which).
template <typename F>
void dispatchInOut(const Tensor &input, const Tensor &result, F &&f) {
  if (!lamina::rt::detail::dispatchNarrowed(input, result, f))
    dispatchFloat(input.dtype, [&](auto tag) { f(tag, tag); });
}

/// The packed norm kernels' block size and packs a thread for rows of n
/// (V: 1, 2 or 4), when they take the call: n a multiple of 4 up to 4096,
/// every tensor 4-element aligned (rows then are too), and LAMINA_CUDA_NORM
/// not `rows`.
struct PackedNorm {
  int threads = 0, packsPerThread = 0;
  explicit operator bool() const { return threads != 0; }
};
PackedNorm packedNorm(int64_t n, std::initializer_list<const Tensor *> ts) {
  if (n == 0 || n % 4 != 0 || n > 4096 || rowNormKernels())
    return {};
  for (const Tensor *t : ts)
    if (t && !alignedTo(t->data, 4 * t->elementSize()))
      return {};
  int threads = n / 4 > 4 * 128 ? 256 : 128;
  int v = int((n / 4 + threads - 1) / threads);
  return {threads, v > 2 ? 4 : v};
}

/// Calls f(std::integral_constant<int, V>) for the plan's V.
template <typename F> void withPacks(const PackedNorm &plan, F &&f) {
  switch (plan.packsPerThread) {
  case 1:
    f(std::integral_constant<int, 1>{});
    break;
  case 2:
    f(std::integral_constant<int, 2>{});
    break;
  default:
    f(std::integral_constant<int, 4>{});
    break;
  }
}

Status checkDeviceNorm(const char *name, const Tensor &input, int64_t &axis,
                       const Tensor *const *params, int numParams,
                       const Tensor &result, int64_t &rows, int64_t &n) {
  if (Status st = lamina::rt::detail::checkNormForward(
          name, input, axis, params, numParams, result, rows, n);
      !st.ok())
    return st;
  return isDeviceFloat(input.dtype) ? Status::success()
                                    : unsupported(name, input);
}

Status softmaxImpl(const char *name, bool log, const Tensor &input,
                   int64_t axis, const Tensor &result, cudaStream_t stream) {
  if (Status st = checkDeviceAlongAxis(name, input, axis, result); !st.ok())
    return st;
  int64_t outer, n, inner;
  splitAround(input, int(axis), outer, n, inner);
  if (input.numElements() == 0)
    return Status::success();
  dispatchFloat(input.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto kernel = log ? softmaxKernel<T, true> : softmaxKernel<T, false>;
    launchKernel(kernel, unsigned(outer * inner), rowThreads(n), 0, stream,
                 input.as<T>(), result.as<T>(), n, inner);
  });
  return launched(name);
}

Status softmaxBackwardImpl(const char *name, bool log, const Tensor &result,
                           const Tensor &grad, int64_t axis,
                           const Tensor &gradInput, cudaStream_t stream) {
  if (Status st = checkSoftmaxBackward(name, result, grad, axis, gradInput);
      !st.ok())
    return st;
  if (!isDeviceFloat(result.dtype))
    return unsupported(name, result);
  int64_t outer, n, inner;
  splitAround(result, int(axis), outer, n, inner);
  if (result.numElements() == 0)
    return Status::success();
  dispatchFloat(result.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto kernel =
        log ? softmaxBackwardKernel<T, true> : softmaxBackwardKernel<T, false>;
    launchKernel(kernel, unsigned(outer * inner), rowThreads(n), 0, stream,
                 result.as<T>(), grad.as<T>(), gradInput.as<T>(), n, inner);
  });
  return launched(name);
}

} // namespace

Status lamina::rt::cuda::softmax(const Tensor &input, int64_t axis,
                                 const Tensor &result, cudaStream_t stream) {
  return softmaxImpl("softmax", false, input, axis, result, stream);
}

Status lamina::rt::cuda::logSoftmax(const Tensor &input, int64_t axis,
                                    const Tensor &result,
                                    cudaStream_t stream) {
  return softmaxImpl("log_softmax", true, input, axis, result, stream);
}

Status lamina::rt::cuda::softmaxBackward(const Tensor &result,
                                         const Tensor &gradResult,
                                         int64_t axis, const Tensor &gradInput,
                                         cudaStream_t stream) {
  return softmaxBackwardImpl("softmax_grad", false, result, gradResult, axis,
                             gradInput, stream);
}

Status lamina::rt::cuda::logSoftmaxBackward(const Tensor &result,
                                            const Tensor &gradResult,
                                            int64_t axis,
                                            const Tensor &gradInput,
                                            cudaStream_t stream) {
  return softmaxBackwardImpl("log_softmax_grad", true, result, gradResult,
                             axis, gradInput, stream);
}

namespace {
/// layerNorm (bias may be null) or, `rms`, rmsNorm.
Status normForward(const char *name, bool rms, const Tensor &input,
                   const Tensor &scale, const Tensor *bias, int64_t axis,
                   double epsilon, const Tensor &result, cudaStream_t stream) {
  const Tensor *params[] = {&scale, bias};
  int64_t rows, n;
  Status s =
      checkDeviceNorm(name, input, axis, params, rms ? 1 : 2, result, rows, n);
  if (!s.ok() || input.numElements() == 0)
    return s;
  PackedNorm plan = packedNorm(n, {&input, &scale, bias, &result});
  dispatchInOut(input, result, [&](auto in, auto out) {
    using T = typename decltype(in)::type;
    using R = typename decltype(out)::type;
    const T *x = input.as<T>(), *g = scale.as<T>();
    const T *b = bias ? bias->as<T>() : nullptr;
    R *y = result.as<R>();
    float eps = float(epsilon);
    if (!plan) {
      if (rms)
        launchKernel(rmsNormKernel<T, R>, unsigned(rows), rowThreads(n), 0,
                     stream, x, g, y, n, eps);
      else
        launchKernel(layerNormKernel<T, R>, unsigned(rows), rowThreads(n), 0,
                     stream, x, g, b, y, n, eps);
      return;
    }
    withPacks(plan, [&](auto v) {
      constexpr int V = decltype(v)::value;
      launchKernel(rms ? normPackedKernel<T, R, true, V>
                       : normPackedKernel<T, R, false, V>,
                   unsigned(rows), plan.threads, 0, stream, x, g, b, y, n, eps);
    });
  });
  return launched(name);
}
} // namespace

Status lamina::rt::cuda::layerNorm(const Tensor &input, const Tensor &scale,
                                   const Tensor *bias, int64_t axis,
                                   double epsilon, const Tensor &result,
                                   cudaStream_t stream) {
  return normForward("layer_norm", false, input, scale, bias, axis, epsilon,
                     result, stream);
}

Status lamina::rt::cuda::rmsNorm(const Tensor &input, const Tensor &scale,
                                 int64_t axis, double epsilon,
                                 const Tensor &result, cudaStream_t stream) {
  return normForward("rms_norm", true, input, scale, nullptr, axis, epsilon,
                     result, stream);
}

namespace {
/// normBackward on the packed kernels: the input gradient and each chunk's
/// parameter sums in one pass over x and dy, then the chunks added in
/// Reduce.cu's fixed order and stored in the parameters' type.
Status packedNormBackward(const char *name, bool rms, const PackedNorm &plan,
                          const Tensor &input, const Tensor &scale,
                          const Tensor &gradResult, int64_t rows, int64_t n,
                          double epsilon, const Tensor &gradInput,
                          const Tensor *gradScale, const Tensor *gradBias,
                          const Tensor *addend, cudaStream_t stream) {
  bool wantParams = gradScale || gradBias;
  // Rows a block, a function of the shape only: about 1024 blocks (8 an SM
  // of a 132-SM H200), and at least 8 rows, so that the [blocks, 2n]
  // partials moved are a quarter of the x and dy they save re-reading.
  int64_t chunk = wantParams ? std::max<int64_t>(8, (rows + 1023) / 1024) : 1;
  int64_t blocks = (rows + chunk - 1) / chunk;
  int64_t width = (rms ? 1 : 2) * n;
  Scratch partials(stream), sums(stream);
  if (wantParams)
    for (auto [scratch, bytes] :
         {std::pair{&partials, blocks * width * sizeof(float)},
          std::pair{&sums, width * sizeof(float)}})
      if (Status s =
              cudaCheck(name, cudaMallocAsync(&scratch->ptr, bytes, stream));
          !s.ok())
        return s;
  float *part = static_cast<float *>(partials.ptr);
  dispatchInOut(input, gradResult, [&](auto in, auto grad) {
    using T = typename decltype(in)::type;
    using D = typename decltype(grad)::type;
    withPacks(plan, [&](auto v) {
      constexpr int V = decltype(v)::value;
      auto kernel = [&] {
        if constexpr (V == 4)
          if (plan.threads == 256)
            return rms ? normBackwardPackedKernel<T, D, true, V, 256>
                       : normBackwardPackedKernel<T, D, false, V, 256>;
        return rms ? normBackwardPackedKernel<T, D, true, V, 128>
                   : normBackwardPackedKernel<T, D, false, V, 128>;
      }();
      launchKernel(kernel, unsigned(blocks), plan.threads, 0, stream,
                   input.as<T>(), scale.as<T>(), gradResult.as<D>(),
                   addend ? addend->as<T>() : nullptr, gradInput.as<T>(), part,
                   rows, n, chunk, float(epsilon));
    });
  });
  if (Status s = launched(name); !s.ok() || !wantParams)
    return s;
  int64_t partShape[] = {blocks, width}, sumShape[] = {width}, axis = 0;
  Tensor partTensor{part, DType::F32, 2, partShape},
      sumTensor{sums.ptr, DType::F32, 1, sumShape};
  if (Status s = lamina::rt::cuda::reduce(ReduceOp::Sum, partTensor, &axis, 1,
                                          false, sumTensor, stream);
      !s.ok())
    return s;
  dispatchFloat(input.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launchKernel(storeParamGradsKernel<T>, gridFor(n), 256, 0, stream,
                 sumTensor.as<const float>(),
                 gradScale ? gradScale->as<T>() : nullptr,
                 gradBias ? gradBias->as<T>() : nullptr, n);
  });
  return launched(name);
}

Status normBackward(const char *name, bool rms, const Tensor &input,
                    const Tensor &scale, const Tensor &gradResult,
                    int64_t axis, double epsilon, const Tensor &gradInput,
                    const Tensor *gradScale, const Tensor *gradBias,
                    const Tensor *addend, cudaStream_t stream) {
  int64_t rows, n;
  if (Status s = checkNormBackward(name, input, axis, scale, gradResult,
                                   gradInput, gradScale, gradBias, rows, n,
                                   addend);
      !s.ok())
    return s;
  if (!isDeviceFloat(input.dtype))
    return unsupported(name, input);
  if (rows == 0 || n == 0) {
    // Parameter gradients of no rows are 0.
    for (const Tensor *t : {gradScale, gradBias})
      if (t && t->byteSize())
        if (Status s = cudaCheck(name, cudaMemsetAsync(t->data, 0,
                                                       t->byteSize(), stream));
            !s.ok())
          return s;
    return Status::success();
  }
  if (PackedNorm plan =
          packedNorm(n, {&input, &scale, &gradResult, addend, &gradInput});
      plan)
    return packedNormBackward(name, rms, plan, input, scale, gradResult, rows,
                              n, epsilon, gradInput, gradScale, gradBias,
                              addend, stream);
  Scratch stats(stream);
  bool wantParams = gradScale || gradBias;
  if (wantParams)
    if (Status s = cudaCheck(name, cudaMallocAsync(&stats.ptr,
                                                   rows * sizeof(float2),
                                                   stream));
        !s.ok())
      return s;
  float2 *st = static_cast<float2 *>(stats.ptr);
  // Common.h's shape-determined split, as an outer `reduce`'s: [8192, 2048]
  // gets 16 chunks of 512 rows, 1024 blocks instead of 64.
  int64_t chunks = columnSumChunks(n, rows);
  int64_t chunk = (rows + chunks - 1) / chunks;
  Scratch partials(stream);
  if (wantParams && chunks > 1)
    if (Status s = cudaCheck(
            name, cudaMallocAsync(&partials.ptr, 2 * chunks * n * sizeof(float),
                                  stream));
        !s.ok())
      return s;
  float *part = static_cast<float *>(partials.ptr);
  dispatchInOut(input, gradResult, [&](auto in, auto grad) {
    using T = typename decltype(in)::type;
    using D = typename decltype(grad)::type;
    auto kernel =
        rms ? rmsNormBackwardKernel<T, D> : layerNormBackwardKernel<T, D>;
    launchKernel(kernel, unsigned(rows), rowThreads(n), 0, stream,
                 input.as<T>(), scale.as<T>(), gradResult.as<D>(),
                 addend ? addend->as<T>() : nullptr, gradInput.as<T>(), st, n,
                 float(epsilon));
    if (!wantParams)
      return;
    T *dg = gradScale ? gradScale->as<T>() : nullptr;
    T *db = gradBias ? gradBias->as<T>() : nullptr;
    launchKernel(normParamGradKernel<T, D>,
                 dim3(unsigned((n + 31) / 32), unsigned(chunks)), dim3(32, 16),
                 0, stream, input.as<T>(), gradResult.as<D>(), st, dg, db, part,
                 rows, n, chunk);
    if (part)
      launchKernel(normParamSumKernel<T>, gridFor(n), 256, 0, stream, part, dg,
                   db, chunks, n);
  });
  return launched(name);
}
} // namespace

Status lamina::rt::cuda::layerNormBackward(
    const Tensor &input, const Tensor &scale, const Tensor &gradResult,
    int64_t axis, double epsilon, const Tensor &gradInput,
    const Tensor *gradScale, const Tensor *gradBias, const Tensor *addend,
    cudaStream_t stream) {
  return normBackward("layer_norm_grad", false, input, scale, gradResult,
                      axis, epsilon, gradInput, gradScale, gradBias, addend,
                      stream);
}

Status lamina::rt::cuda::rmsNormBackward(const Tensor &input,
                                         const Tensor &scale,
                                         const Tensor &gradResult, int64_t axis,
                                         double epsilon,
                                         const Tensor &gradInput,
                                         const Tensor *gradScale,
                                         const Tensor *addend,
                                         cudaStream_t stream) {
  return normBackward("rms_norm_grad", true, input, scale, gradResult,
                      axis, epsilon, gradInput, gradScale, nullptr, addend,
                      stream);
}

namespace {
Status crossEntropy(const char *name, const Tensor &logits,
                    const Tensor &labels, int64_t ignoreIndex,
                    const Tensor &rowValue, const Tensor *gradLogits,
                    cudaStream_t stream) {
  int64_t rows, v;
  if (Status s = checkCrossEntropy(name, logits, labels, rowValue, gradLogits,
                                   rows, v);
      !s.ok())
    return s;
  if (!isDeviceFloat(logits.dtype))
    return unsupported(name, logits);
  if (rows == 0)
    return Status::success();
  ErrorSlot *slot = errorSlot();
  if (!slot)
    return Status::error(std::string(name) + ": no device error slot");
  // 4-element loads where every row starts 4-element aligned (the
  // gradient's too: it has the logits' shape).
  size_t width = 4 * size_t(logits.elementSize());
  bool vec = v % 4 == 0 && alignedTo(logits.data, width) &&
             (!gradLogits ||
              alignedTo(gradLogits->data, 4 * size_t(gradLogits->elementSize())));
  // f32 logits may have an f16/bf16 gradient, f16/bf16 logits f32 per-row
  // values (checkCrossEntropy).
  bool wide = lamina::rt::detail::wideRowValue(logits, rowValue);
  dispatchInOut(logits, gradLogits ? *gradLogits : logits,
                [&](auto in, auto out) {
                  using T = typename decltype(in)::type;
                  using G = typename decltype(out)::type;
                  lamina::rt::detail::dispatchRowValue<T>(
                      wide, [&](auto rowTag) {
                        using L = typename decltype(rowTag)::type;
                        launchKernel(crossEntropyKernel<T, G, L>,
                                     unsigned(rows), rowThreads(v), 0, stream,
                                     logits.as<T>(), labels.data,
                                     labels.dtype == DType::I64, ignoreIndex,
                                     gradLogits ? rowValue.as<L>() : nullptr,
                                     gradLogits ? nullptr : rowValue.as<L>(),
                                     gradLogits ? gradLogits->as<G>() : nullptr,
                                     v, vec, slot);
                      });
                });
  return launched(name);
}
} // namespace

Status lamina::rt::cuda::softmaxCrossEntropy(const Tensor &logits,
                                             const Tensor &labels,
                                             int64_t ignoreIndex,
                                             const Tensor &loss,
                                             cudaStream_t stream) {
  return crossEntropy("softmax_cross_entropy", logits, labels, ignoreIndex,
                      loss, nullptr, stream);
}

Status lamina::rt::cuda::softmaxCrossEntropyBackward(
    const Tensor &logits, const Tensor &labels, const Tensor &gradLoss,
    int64_t ignoreIndex, const Tensor &gradLogits, cudaStream_t stream) {
  return crossEntropy("softmax_cross_entropy_grad", logits, labels,
                      ignoreIndex, gradLoss, &gradLogits, stream);
}
