//===- Attention.cpp - fused scaled dot-product attention on the host -----===//
//
// graph.attention and graph.attention_grad: the scores of a block of query
// rows at a time (kRowBlock x Sk, never the whole Sq x Sk matrix), each
// product one GEMM call (Gemm.cpp), so the host runs attention at GEMM speed and in
// O(block x Sk) memory. Work splits over threads by (batch, head, row
// block) in the forward and by (batch, kv head) in the backward, which then
// owns its dK and dV and adds their contributions in a fixed order.
//
// f16/bf16 operands are widened to f32 (f64 computes in f64) per slice;
// softmax row sums accumulate in double as the softmax kernel's do.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <cmath>
#include <limits>

using namespace lamina::rt;
using namespace lamina::rt::detail;

namespace {
constexpr int64_t kRowBlock = 64;

/// `rows` rows of `width` elements, `stride` apart from element `offset`
/// of `t`, in compute type C: the tensor's own memory (leading dim
/// `stride`) when it already stores C, else a widened dense copy (leading
/// dim `width`). `ld` is set to the leading dim.
template <typename T, typename C>
const C *widenRows(const Tensor &t, int64_t offset, int64_t rows,
                   int64_t width, int64_t stride, std::vector<C> &buf,
                   int64_t &ld) {
  if constexpr (std::is_same_v<T, C>) {
    ld = std::max<int64_t>(stride, 1);
    return t.as<const C>() + offset;
  } else {
    ld = std::max<int64_t>(width, 1);
    buf.resize(size_t(rows * width));
    const T *p = t.as<const T>() + offset;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < width; ++c)
        buf[size_t(r * width + c)] = C(load(p[r * stride + c]));
    return buf.data();
  }
}

/// Stores dense rows x width `src` into `t` at `offset`, rows `stride`
/// apart.
template <typename T, typename C>
void narrowRows(const C *src, int64_t rows, int64_t width, const Tensor &t,
                int64_t offset, int64_t stride) {
  T *p = t.as<T>() + offset;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < width; ++c)
      p[r * stride + c] = store<T>(src[r * width + c]);
}

template <typename T, typename C>
void narrow(const C *src, int64_t count, const Tensor &t, int64_t offset) {
  narrowRows<T, C>(src, 1, count, t, offset, count);
}

/// The rows of one (batch, head, row block) and the keys they see.
struct Block {
  int64_t b, h, kvh, i0, rows;
  int64_t keys; // keys the block's last row sees (causal), else Sk

  /// Keys row i0 + r sees.
  int64_t limit(const AttentionDims &d, bool causal, int64_t r) const {
    if (!causal)
      return d.sk;
    return std::clamp<int64_t>(i0 + r + d.sk - d.sq + 1, 0, d.sk);
  }
};

Block makeBlock(const AttentionDims &d, bool causal, int64_t b, int64_t h,
                int64_t i0) {
  Block blk{b, h, h / (d.heads / d.kvHeads), i0,
            std::min(kRowBlock, d.sq - i0), d.sk};
  blk.keys = blk.limit(d, causal, blk.rows - 1);
  return blk;
}

/// s = scale * s + bias over the block's rows x keys, then the row
/// probabilities exp(s - lse) (0 past each row's limit). With `lse` null
/// the row's log-sum-exp is computed and stored there first (`rowLse`).
template <typename C>
void probabilities(const AttentionDims &d, const Tensor *bias, double scale,
                   bool causal, const Block &blk, C *s, C *rowLse,
                   bool computeLse, std::vector<C> &biasRow) {
  const C inf = std::numeric_limits<C>::infinity();
  int64_t n = blk.keys;
  for (int64_t r = 0; r < blk.rows; ++r) {
    C *row = s + r * n;
    int64_t lim = blk.limit(d, causal, r);
    if (bias && lim > 0) {
      biasRow.resize(size_t(lim));
      int64_t base = blk.b * d.biasStrides[0] + blk.h * d.biasStrides[1] +
                     (blk.i0 + r) * d.biasStrides[2];
      dispatch(bias->dtype, [&](auto tag) {
        using B = typename decltype(tag)::type;
        if constexpr (isFloatStorage<B>) {
          const B *p = bias->as<const B>() + base;
          for (int64_t j = 0; j < lim; ++j)
            biasRow[size_t(j)] = C(load(p[j * d.biasStrides[3]]));
        }
      });
    }
    C m = -inf;
    for (int64_t j = 0; j < lim; ++j) {
      row[j] = C(scale) * row[j] + (bias ? biasRow[size_t(j)] : C(0));
      m = std::max(m, row[j]);
    }
    if (computeLse) {
      if (m == -inf) {
        rowLse[r] = -inf;
      } else {
        double sum = 0;
        for (int64_t j = 0; j < lim; ++j)
          sum += double(std::exp(row[j] - m));
        rowLse[r] = m + C(std::log(sum));
      }
    }
    C l = rowLse[r];
    for (int64_t j = 0; j < n; ++j)
      row[j] = (j < lim && l != -inf) ? C(std::exp(row[j] - l)) : C(0);
  }
}

/// Where the rows of q/k/v/out-like tensors start and how far apart they
/// are, for one (batch, head).
struct Rows {
  int64_t offset, stride;
};
Rows queryRows(const AttentionDims &d, int64_t b, int64_t h, int64_t i0,
               int64_t width) {
  return {d.rowOffset(b, h, i0, d.heads, d.sq, width),
          d.rowStride(d.heads, width)};
}
Rows keyRows(const AttentionDims &d, int64_t b, int64_t kvh, int64_t width) {
  return {d.rowOffset(b, kvh, 0, d.kvHeads, d.sk, width),
          d.rowStride(d.kvHeads, width)};
}

template <typename T, typename C>
void forwardT(const AttentionDims &d, const Tensor &q, const Tensor &k,
              const Tensor &v, const Tensor *bias, double scale, bool causal,
              const Tensor &out, const Tensor &lse) {
  int64_t blocks = (d.sq + kRowBlock - 1) / kRowBlock;
  int64_t cost = std::max<int64_t>(1, kRowBlock * d.sk * (d.d + d.dv));
  parallelFor(d.batch * d.heads * blocks, std::max<int64_t>(1, kGrain / cost),
              [&](int64_t begin, int64_t end) {
    std::vector<C> qBuf, kBuf, vBuf, s, o, biasRow, rowLse;
    for (int64_t item = begin; item < end; ++item) {
      int64_t bh = item / blocks;
      Block blk = makeBlock(d, causal, bh / d.heads, bh % d.heads,
                            (item % blocks) * kRowBlock);
      Rows qr = queryRows(d, blk.b, blk.h, blk.i0, d.d);
      Rows kr = keyRows(d, blk.b, blk.kvh, d.d);
      Rows vr = keyRows(d, blk.b, blk.kvh, d.dv);
      Rows orow = queryRows(d, blk.b, blk.h, blk.i0, d.dv);
      int64_t n = blk.keys, ldq = 1, ldk = 1, ldv = 1;
      s.assign(size_t(blk.rows * std::max<int64_t>(n, 1)), C(0));
      o.assign(size_t(blk.rows * d.dv), C(0));
      rowLse.assign(size_t(blk.rows), C(0));
      if (n > 0 && d.d > 0) {
        const C *qp = widenRows<T, C>(q, qr.offset, blk.rows, d.d, qr.stride,
                                      qBuf, ldq);
        const C *kp =
            widenRows<T, C>(k, kr.offset, n, d.d, kr.stride, kBuf, ldk);
        gemm(false, true, blk.rows, n, d.d, C(1), qp, ldq, kp, ldk, C(0),
             s.data(), n);
      }
      probabilities(d, bias, scale, causal, blk, s.data(), rowLse.data(),
                    /*computeLse=*/true, biasRow);
      if (n > 0 && d.dv > 0) {
        const C *vp =
            widenRows<T, C>(v, vr.offset, n, d.dv, vr.stride, vBuf, ldv);
        gemm(false, false, blk.rows, d.dv, n, C(1), s.data(), n, vp, ldv,
             C(0), o.data(), d.dv);
      }
      narrowRows<T, C>(o.data(), blk.rows, d.dv, out, orow.offset,
                       orow.stride);
      int64_t lseOff = bh * d.sq + blk.i0;
      if (lse.dtype == DType::F64)
        narrow<double, C>(rowLse.data(), blk.rows, lse, lseOff);
      else
        narrow<float, C>(rowLse.data(), blk.rows, lse, lseOff);
    }
  });
}

template <typename T, typename C>
void backwardT(const AttentionDims &d, const Tensor &q, const Tensor &k,
               const Tensor &v, const Tensor *bias, const Tensor &out,
               const Tensor &lse, const Tensor &gradOut, double scale,
               bool causal, const Tensor &gradQ, const Tensor &gradK,
               const Tensor &gradV) {
  int64_t group = d.heads / d.kvHeads;
  int64_t blocks = (d.sq + kRowBlock - 1) / kRowBlock;
  parallelFor(d.batch * d.kvHeads, 1, [&](int64_t begin, int64_t end) {
    std::vector<C> kBuf, vBuf, qBuf, doBuf, oBuf, s, dp, dq, dk, dv, biasRow,
        rowLse;
    for (int64_t item = begin; item < end; ++item) {
      int64_t b = item / d.kvHeads, kvh = item % d.kvHeads;
      Rows kr = keyRows(d, b, kvh, d.d), vr = keyRows(d, b, kvh, d.dv);
      int64_t ldk = 1, ldv = 1;
      const C *kp = widenRows<T, C>(k, kr.offset, d.sk, d.d, kr.stride, kBuf,
                                    ldk);
      const C *vp = widenRows<T, C>(v, vr.offset, d.sk, d.dv, vr.stride,
                                    vBuf, ldv);
      dk.assign(size_t(d.sk * d.d), C(0));
      dv.assign(size_t(d.sk * d.dv), C(0));
      // Heads, then row blocks, in order: dK and dV add up deterministically.
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h)
        for (int64_t blkIdx = 0; blkIdx < blocks; ++blkIdx) {
          Block blk = makeBlock(d, causal, b, h, blkIdx * kRowBlock);
          int64_t bh = b * d.heads + h, n = blk.keys;
          Rows qr = queryRows(d, b, h, blk.i0, d.d);
          Rows orow = queryRows(d, b, h, blk.i0, d.dv);
          dq.assign(size_t(blk.rows * d.d), C(0));
          if (n > 0) {
            int64_t ldq = 1, ldg = 1, ldo = 1;
            const C *qp = widenRows<T, C>(q, qr.offset, blk.rows, d.d,
                                          qr.stride, qBuf, ldq);
            const C *gop = widenRows<T, C>(gradOut, orow.offset, blk.rows,
                                           d.dv, orow.stride, doBuf, ldg);
            const C *op = widenRows<T, C>(out, orow.offset, blk.rows, d.dv,
                                          orow.stride, oBuf, ldo);
            rowLse.resize(size_t(blk.rows));
            for (int64_t r = 0; r < blk.rows; ++r)
              rowLse[size_t(r)] =
                  lse.dtype == DType::F64
                      ? C(lse.as<const double>()[bh * d.sq + blk.i0 + r])
                      : C(lse.as<const float>()[bh * d.sq + blk.i0 + r]);
            s.assign(size_t(blk.rows * n), C(0));
            if (d.d > 0)
              gemm(false, true, blk.rows, n, d.d, C(1), qp, ldq, kp, ldk,
                   C(0), s.data(), n);
            probabilities(d, bias, scale, causal, blk, s.data(), rowLse.data(),
                          /*computeLse=*/false, biasRow);
            // dV += P^T dO;  dP = dO V^T.
            dp.assign(size_t(blk.rows * n), C(0));
            if (d.dv > 0) {
              gemm(true, false, n, d.dv, blk.rows, C(1), s.data(), n, gop,
                   ldg, C(1), dv.data(), d.dv);
              gemm(false, true, blk.rows, n, d.dv, C(1), gop, ldg, vp, ldv,
                   C(0), dp.data(), n);
            }
            // dS = scale * P (dP - rowsum(dO * O)), in place over dP.
            for (int64_t r = 0; r < blk.rows; ++r) {
              double delta = 0;
              for (int64_t c = 0; c < d.dv; ++c)
                delta += double(gop[r * ldg + c]) * double(op[r * ldo + c]);
              for (int64_t j = 0; j < n; ++j)
                dp[size_t(r * n + j)] = C(scale) * s[size_t(r * n + j)] *
                                        (dp[size_t(r * n + j)] - C(delta));
            }
            if (d.d > 0) {
              // dQ = dS K;  dK += dS^T Q.
              gemm(false, false, blk.rows, d.d, n, C(1), dp.data(), n, kp, ldk,
                   C(0), dq.data(), d.d);
              gemm(true, false, n, d.d, blk.rows, C(1), dp.data(), n, qp, ldq,
                   C(1), dk.data(), d.d);
            }
          }
          narrowRows<T, C>(dq.data(), blk.rows, d.d, gradQ, qr.offset,
                           qr.stride);
        }
      narrowRows<T, C>(dk.data(), d.sk, d.d, gradK, kr.offset, kr.stride);
      narrowRows<T, C>(dv.data(), d.sk, d.dv, gradV, vr.offset, vr.stride);
    }
  });
}

Status fail(const char *name, const std::string &what) {
  return Status::error(std::string(name) + ": " + what);
}

} // namespace

Status lamina::rt::detail::checkAttention(
    const char *name, const Tensor &q, const Tensor &k, const Tensor &v,
    const Tensor *bias, const Tensor &out, const Tensor &lse,
    const Tensor *gradOut, const Tensor *gradQ, const Tensor *gradK,
    const Tensor *gradV, AttentionLayout layout, AttentionDims &dims) {
  if (q.rank != 4 || k.rank != 4 || v.rank != 4 || !isFloat(q.dtype) ||
      k.dtype != q.dtype || v.dtype != q.dtype)
    return fail(name, "q, k and v must be rank-4 tensors of one float type, "
                      "got " + describe(q) + ", " + describe(k) + ", " +
                      describe(v));
  AttentionDims d;
  d.seqMajor = layout == AttentionLayout::SeqMajor;
  // The head and sequence dims of q/k/v/out: 1 and 2, or 2 and 1.
  const int hd = d.seqMajor ? 2 : 1, sd = d.seqMajor ? 1 : 2;
  d.batch = q.dim(0);
  d.heads = q.dim(hd);
  d.sq = q.dim(sd);
  d.d = q.dim(3);
  d.kvHeads = k.dim(hd);
  d.sk = k.dim(sd);
  d.dv = v.dim(3);
  if (k.dim(0) != d.batch || k.dim(3) != d.d || v.dim(0) != d.batch ||
      v.dim(hd) != d.kvHeads || v.dim(sd) != d.sk)
    return fail(name, std::string(d.seqMajor
                                      ? "q [B, Sq, H, D] needs k [B, Sk, Hk, "
                                        "D] and v [B, Sk, Hk, Dv], got "
                                      : "q [B, H, Sq, D] needs k [B, Hk, Sk, "
                                        "D] and v [B, Hk, Sk, Dv], got ") +
                          describe(q) + ", " + describe(k) + ", " +
                          describe(v));
  if (d.kvHeads < 1 || d.heads % d.kvHeads != 0)
    return fail(name, std::to_string(d.heads) + " query heads cannot share " +
                          std::to_string(d.kvHeads) + " kv heads");
  if (bias) {
    int64_t full[4] = {d.batch, d.heads, d.sq, d.sk};
    if (!isFloat(bias->dtype) || bias->rank > 4 ||
        !broadcastStrides(bias->shape, bias->rank, full, 4, d.biasStrides))
      return fail(name, "bias " + describe(*bias) +
                            " must be a float tensor broadcastable to " +
                            shapeString(full, 4));
  }
  DType lseType = q.dtype == DType::F64 ? DType::F64 : DType::F32;
  std::vector<int64_t> outDims = {d.batch, d.heads, d.sq, d.dv};
  if (d.seqMajor)
    std::swap(outDims[1], outDims[2]);
  if (out.dtype != q.dtype || !hasShape(out, outDims) ||
      lse.dtype != lseType || !hasShape(lse, {d.batch, d.heads, d.sq}))
    return fail(name, std::string("results must be out ") +
                          (d.seqMajor ? "[B, Sq, H, Dv]" : "[B, H, Sq, Dv]") +
                          " of q's type and lse [B, H, Sq] of " +
                          dtypeName(lseType) + ", got " + describe(out) +
                          ", " + describe(lse));
  if (gradOut && (gradOut->dtype != out.dtype || !sameShape(*gradOut, out)))
    return fail(name, "gradient " + describe(*gradOut) + " differs from out " +
                          describe(out));
  const Tensor *grads[] = {gradQ, gradK, gradV};
  const Tensor *like[] = {&q, &k, &v};
  for (int i = 0; i < 3; ++i)
    if (grads[i] &&
        (grads[i]->dtype != like[i]->dtype || !sameShape(*grads[i], *like[i])))
      return fail(name, "gradient " + describe(*grads[i]) + " differs from " +
                            describe(*like[i]));
  dims = d;
  return Status::success();
}

Status lamina::rt::attention(const Tensor &q, const Tensor &k, const Tensor &v,
                             const Tensor *bias, double scale, bool causal,
                             const Tensor &out, const Tensor &lse,
                             AttentionLayout layout) {
  AttentionDims d;
  if (Status s = checkAttention("attention", q, k, v, bias, out, lse, nullptr,
                                nullptr, nullptr, nullptr, layout, d);
      !s.ok())
    return s;
  dispatch(q.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (isFloatStorage<T>) {
      using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
      forwardT<T, C>(d, q, k, v, bias, scale, causal, out, lse);
    }
  });
  return Status::success();
}

Status lamina::rt::attentionBackward(
    const Tensor &q, const Tensor &k, const Tensor &v, const Tensor *bias,
    const Tensor &out, const Tensor &lse, const Tensor &gradOut, double scale,
    bool causal, const Tensor &gradQ, const Tensor &gradK,
    const Tensor &gradV, AttentionLayout layout) {
  AttentionDims d;
  if (Status s = checkAttention("attention_grad", q, k, v, bias, out, lse,
                                &gradOut, &gradQ, &gradK, &gradV, layout, d);
      !s.ok())
    return s;
  dispatch(q.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (isFloatStorage<T>) {
      using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
      backwardT<T, C>(d, q, k, v, bias, out, lse, gradOut, scale, causal,
                      gradQ, gradK, gradV);
    }
  });
  return Status::success();
}
