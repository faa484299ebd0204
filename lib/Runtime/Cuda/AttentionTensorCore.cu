//===- AttentionTensorCore.cu - fused attention on WMMA tensor cores ------===//
//
// The fast path of Attention.cu's attention and attentionBackward, for
// f16/bf16 with D == Dv in {64, 128}: at those shapes the products are the
// whole cost, and tensor cores (nvcuda::wmma, 16x16x16, f32 accumulation)
// run them several times faster than the generic path's scalar f32 math.
//
// The flash-attention-2 structure: 4 warps a CTA, 16 rows each, 64-row
// tiles staged in shared memory, tiles wholly above the causal diagonal
// skipped. The backward transposes its products for dK/dV (S^T = K Q^T,
// dP^T = V dO^T), so a warp's 16 keys stay in its registers while the query
// tiles stream past. The WMMA accumulator layout is opaque, so each warp
// probes it once (loads a fragment from a matrix holding each element's own
// position) and then scales rows, masks and scatters elements through that
// map. P and dS are rounded to the storage type before they enter the
// tensor cores (as flash attention does); sums and statistics are f32.
// Tiles are loaded synchronously between two barriers; overlap comes from
// the second CTA an SM holds, not from cp.async pipelining.
//
//===----------------------------------------------------------------------===//

#include "Attention.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

using namespace lamina::rt;
using namespace lamina::rt::cuda::detail;
using namespace lamina::rt::cuda::detail::attn;

namespace {
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

/// dst rows [0, 64) = src rows [0, n) of D 16-bit elements, `stride`
/// elements apart in src (zeros past n), 16 bytes a thread at a time; src
/// and stride are 16-byte aligned (stride a multiple of D).
template <int D>
__device__ void loadTile16(uint16_t *dst, const uint16_t *src, int64_t stride,
                           int64_t n) {
  constexpr int V = D / 8, LD = D + 8;
  for (int idx = threadIdx.x; idx < kTile * V; idx += blockDim.x) {
    int r = idx / V, c = idx % V;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (r < n)
      val = reinterpret_cast<const uint4 *>(src + int64_t(r) * stride)[c];
    *reinterpret_cast<uint4 *>(dst + r * LD + c * 8) = val;
  }
}

/// The warp writes its accumulators (16 x D, scaled by `mul`) to its own 16
/// rows `own` of a 16-bit tile, then copies rows [0, n) of them to dst, rows
/// `stride` elements apart (16-byte aligned as loadTile16's).
template <typename T, int D>
__device__ void storeRows(Acc (&acc)[D / 16], const int (&pos)[kAccN],
                          float mul, uint16_t *own, uint16_t *dst,
                          int64_t stride, int64_t n) {
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
      reinterpret_cast<uint4 *>(dst + int64_t(r) * stride)[c] =
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
  LAMINA_DYNAMIC_SHARED(unsigned char, fsm);
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
      static_cast<const uint16_t *>(a.k) + kRow(a, b, hk, 0, D);
  const uint16_t *vg =
      static_cast<const uint16_t *>(a.v) + kRow(a, b, hk, 0, D);
  const int64_t kLd = kStride(a, D); // v's as k's: Dv == D
  loadTile16<D>(Qs, static_cast<const uint16_t *>(a.q) + qRow(a, b, h, q0, D),
                qStride(a, D), rows);
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
    loadTile16<D>(Ks, kg + k0 * kLd, kLd, kn);
    loadTile16<D>(Vs, vg + k0 * kLd, kLd, kn);
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
  // Empty rows (m still -inf, as the host tests) get out 0 and lse -inf; a
  // NaN score leaves m alone but makes l NaN, which must reach out and lse.
  if (half == 0) {
    st[r] = m != -kInf ? 1.0f / l : 0.0f;
    if (rowOk)
      a.lse[bh * a.Sq + i] = m != -kInf ? m + logf(l) : -kInf;
  }
  __syncwarp();
#pragma unroll
  for (int n = 0; n < D / 16; ++n)
#pragma unroll
    for (int e = 0; e < kAccN; ++e)
      o[n].x[e] *= st[pos[e] >> 4];
  int64_t own0 = warp * 16;
  storeRows<T, D>(o, pos, 1.0f, ownQ,
                  static_cast<uint16_t *>(a.out) + qRow(a, b, h, q0 + own0, D),
                  qStride(a, D), rows - own0);
}

/// K, V, Q and dO tiles, per-warp 16-bit scratch (two for dK/dV, one for
/// dQ), and the query tile's lse and Delta.
template <int D> constexpr size_t backwardFastBytes(int scratches) {
  return 4 * kTileElems<D> * 2 + scratches * 4 * 16 * kLdP * 2 +
         2 * kTile * 4;
}

/// Loads 64 rows of Q and dO from q0 of query head h of batch b, and their
/// lse (-inf past Sq) and Delta.
template <int D>
__device__ void loadQueryTile16(const Args &a, int64_t b, int64_t h,
                                int64_t q0, int64_t rows, uint16_t *Qs,
                                uint16_t *dOs, float *lseS, float *deltaS) {
  const int64_t off = qRow(a, b, h, q0, D), ld = qStride(a, D),
                bh = b * a.H + h;
  loadTile16<D>(Qs, static_cast<const uint16_t *>(a.q) + off, ld, rows);
  loadTile16<D>(dOs, static_cast<const uint16_t *>(a.dO) + off, ld, rows);
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
  LAMINA_DYNAMIC_SHARED(unsigned char, fsm);
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
  const int64_t b = t.b, hk = t.head, k0 = t.t0, kn = t.n;
  const int64_t kLd = kStride(a, D); // k, v, dk and dv alike: Dv == D
  loadTile16<D>(Ks, static_cast<const uint16_t *>(a.k) + kRow(a, b, hk, k0, D),
                kLd, kn);
  loadTile16<D>(Vs, static_cast<const uint16_t *>(a.v) + kRow(a, b, hk, k0, D),
                kLd, kn);
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
    int64_t h = hk * a.G + g;
    for (int64_t q0 = qFirst; q0 < a.Sq; q0 += kTile) {
      int64_t rows = a.Sq - q0 < kTile ? a.Sq - q0 : kTile;
      __syncthreads(); // every warp is done with the previous Q, dO
      loadQueryTile16<D>(a, b, h, q0, rows, Qs, dOs, lseS, deltaS);
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
                  static_cast<uint16_t *>(a.dk) + kRow(a, b, hk, j0, D), kLd,
                  keys);
  storeRows<T, D>(dv, pos, 1.0f, ownV,
                  static_cast<uint16_t *>(a.dv) + kRow(a, b, hk, j0, D), kLd,
                  keys);
}

/// dQ: CTA per (b, h, 64 query rows); warp w owns rows 16w..16w+15.
template <typename T, int D>
__global__ void __launch_bounds__(kFastThreads) dqFast(Args a) {
  constexpr int LD = D + 8;
  LAMINA_DYNAMIC_SHARED(unsigned char, fsm);
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
  const int64_t b = t.b, h = t.head, hk = h / a.G, q0 = t.t0, rows = t.n;
  loadQueryTile16<D>(a, b, h, q0, rows, Qs, dOs, lseS, deltaS);
  int pos[kAccN];
  probeLayout(reinterpret_cast<float *>(ds), pos);
  Acc dq[D / 16];
#pragma unroll
  for (int n = 0; n < D / 16; ++n)
    wmma::fill_fragment(dq[n], 0.0f);
  const uint16_t *kg =
      static_cast<const uint16_t *>(a.k) + kRow(a, b, hk, 0, D);
  const uint16_t *vg =
      static_cast<const uint16_t *>(a.v) + kRow(a, b, hk, 0, D);
  const int64_t kLd = kStride(a, D); // v's as k's: Dv == D
  const int64_t i0 = q0 + warp * 16;
  int64_t kEnd = keyEnd(a, q0, rows);
  for (int64_t k0 = 0; k0 < kEnd; k0 += kTile) {
    int64_t kn = a.Sk - k0 < kTile ? a.Sk - k0 : kTile;
    __syncthreads(); // every warp is done with the previous K, V
    loadTile16<D>(Ks, kg + k0 * kLd, kLd, kn);
    loadTile16<D>(Vs, vg + k0 * kLd, kLd, kn);
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
                  static_cast<uint16_t *>(a.dq) + qRow(a, b, h, i0, D),
                  qStride(a, D), rows - warp * 16);
}
} // namespace

namespace lamina::rt::cuda::detail::attn {
template <typename T> Status forwardTensorCore(Args a, cudaStream_t stream) {
  const char *name = "attention";
  a.tiles = ceilDiv(a.Sq, kTile);
  int64_t blocks = a.B * a.H * a.tiles;
  return a.D == 64 ? launch(name, forwardFast<T, 64>, blocks, kFastThreads,
                            forwardFastBytes<64>(), a, stream)
                   : launch(name, forwardFast<T, 128>, blocks, kFastThreads,
                            forwardFastBytes<128>(), a, stream);
}

/// dK and dV, then dQ.
template <typename T> Status backwardTensorCore(Args a, cudaStream_t stream) {
  const char *name = "attention_grad";
  bool d64 = a.D == 64;
  a.tiles = ceilDiv(a.Sk, kTile);
  if (Status s = launch(
          name, d64 ? dkvFast<T, 64> : dkvFast<T, 128>, a.B * a.Hk * a.tiles,
          kFastThreads,
          d64 ? backwardFastBytes<64>(2) : backwardFastBytes<128>(2), a,
          stream);
      !s.ok())
    return s;
  a.tiles = ceilDiv(a.Sq, kTile);
  return launch(name, d64 ? dqFast<T, 64> : dqFast<T, 128>,
                a.B * a.H * a.tiles, kFastThreads,
                d64 ? backwardFastBytes<64>(1) : backwardFastBytes<128>(1), a,
                stream);
}

template Status forwardTensorCore<Half>(Args, cudaStream_t);
template Status forwardTensorCore<BFloat16>(Args, cudaStream_t);
template Status backwardTensorCore<Half>(Args, cudaStream_t);
template Status backwardTensorCore<BFloat16>(Args, cudaStream_t);
} // namespace lamina::rt::cuda::detail::attn
