//===- MoE.cpp - top-k and the mixture-of-experts layer -------------------===//
//
// moe groups the (token, slot) pairs by expert (a counting sort, so every
// expert's rows are in token order), runs each expert's three GEMMs over
// its rows on one thread (experts in parallel), and adds each token's
// expert outputs in expert order, as PyTorch's eager loop's index_add does.
// The backward recomputes the gate and up products.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"
#include "MoERouting.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

using namespace lamina::rt;
using namespace lamina::rt::detail;

namespace {

template <typename T> T sigmoid(T g) { return T(1) / (T(1) + std::exp(-g)); }

/// One expert's forward over its rows: x [n, H] gathered, gate and up [n,
/// I], a = silu(gate) * up, y = a down^T [n, H].
template <typename T> struct ExpertPass {
  int64_t n = 0;
  std::vector<T> x, gate, up, a, y;

  void forward(const Routing &r, int64_t e, const T *input, const T *gateUp,
               const T *down) {
    n = r.count(e);
    const int64_t h = r.hidden, i = r.inner;
    x.resize(size_t(n * h));
    for (int64_t q = 0; q < n; ++q) {
      int64_t t = r.slot[size_t(r.offset[size_t(e)] + q)] / r.k;
      std::copy_n(input + t * h, h, x.data() + q * h);
    }
    const T *w = gateUp + e * 2 * i * h;
    gate.assign(size_t(n * i), T(0));
    up.assign(size_t(n * i), T(0));
    gemm(false, true, n, i, h, T(1), x.data(), h, w, h, T(0), gate.data(), i);
    gemm(false, true, n, i, h, T(1), x.data(), h, w + i * h, h, T(0), up.data(),
         i);
    a.resize(size_t(n * i));
    for (int64_t q = 0; q < n * i; ++q)
      a[size_t(q)] = gate[size_t(q)] * sigmoid(gate[size_t(q)]) * up[size_t(q)];
    y.assign(size_t(n * h), T(0));
    gemm(false, true, n, h, i, T(1), a.data(), i, down + e * h * i, i, T(0),
         y.data(), h);
  }
};

template <typename T>
void topkRows(const Tensor &input, int64_t k, const Tensor &values,
              const Tensor &indices) {
  const int64_t n = input.dim(input.rank - 1),
                rows = n ? input.numElements() / n : 0;
  const T *in = input.as<T>();
  T *vals = values.as<T>();
  int64_t *idx = indices.as<int64_t>();
  parallelFor(rows, 64, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> order(static_cast<size_t>(n));
    for (int64_t r = begin; r < end; ++r) {
      const T *row = in + r * n;
      std::iota(order.begin(), order.end(), 0);
      auto before = [&](int64_t a, int64_t b) {
        T va = row[a], vb = row[b];
        bool na = std::isnan(va), nb = std::isnan(vb);
        if (na != nb)
          return na;
        if (!na && va != vb)
          return va > vb;
        return a < b;
      };
      std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
      for (int64_t j = 0; j < k; ++j) {
        vals[r * k + j] = row[order[size_t(j)]];
        idx[r * k + j] = order[size_t(j)];
      }
    }
  });
}

template <typename T>
void moeForward(const Routing &r, const Tensor &input, const Tensor &weights,
                const Tensor &gateUp, const Tensor &down,
                const Tensor &result) {
  const int64_t h = r.hidden;
  // Every (token, slot)'s expert output, in the experts' row order.
  std::vector<T> out(size_t(r.offset.back() * h));
  parallelFor(r.experts, 1, [&](int64_t begin, int64_t end) {
    ExpertPass<T> pass;
    for (int64_t e = begin; e < end; ++e) {
      if (!r.count(e))
        continue;
      pass.forward(r, e, input.as<T>(), gateUp.as<T>(), down.as<T>());
      std::copy(pass.y.begin(), pass.y.end(),
                out.begin() + r.offset[size_t(e)] * h);
    }
  });
  combineInExpertOrder(r, r.row.data(), out.data(), h, weights.as<T>(),
                       result.as<T>());
}

template <typename T>
void moeGradients(const Routing &r, const Tensor &input, const Tensor &weights,
                  const Tensor &gateUp, const Tensor &down,
                  const Tensor &gradResult, const Tensor &gradInput,
                  const Tensor &gradWeights, const Tensor &gradGateUp,
                  const Tensor &gradDown) {
  const int64_t h = r.hidden, i = r.inner;
  const T *gy = gradResult.as<T>(), *wts = weights.as<T>();
  // Per (token, slot) in row order: the input gradient its expert gives.
  std::vector<T> gx(size_t(r.offset.back() * h));
  T *gw = gradWeights.as<T>();
  for (int64_t p = 0; p < r.tokens * r.k; ++p)
    if (r.row[size_t(p)] < 0)
      gw[p] = T(0);
  parallelFor(r.experts, 1, [&](int64_t begin, int64_t end) {
    ExpertPass<T> pass;
    std::vector<T> gye, ga, gg, gu;
    for (int64_t e = begin; e < end; ++e) {
      T *gGate = gradGateUp.as<T>() + e * 2 * i * h;
      T *gDown = gradDown.as<T>() + e * h * i;
      int64_t n = r.count(e);
      if (!n) {
        std::fill_n(gGate, 2 * i * h, T(0));
        std::fill_n(gDown, h * i, T(0));
        continue;
      }
      pass.forward(r, e, input.as<T>(), gateUp.as<T>(), down.as<T>());
      // The routing weight's gradient, and the output's scaled by it.
      gye.resize(size_t(n * h));
      for (int64_t q = 0; q < n; ++q) {
        int64_t p = r.slot[size_t(r.offset[size_t(e)] + q)], t = p / r.k;
        const T *g = gy + t * h, *yq = pass.y.data() + q * h;
        T dot = 0;
        for (int64_t c = 0; c < h; ++c) {
          dot += g[c] * yq[c];
          gye[size_t(q * h + c)] = g[c] * wts[p];
        }
        gw[p] = dot;
      }
      // down: gDown = gye^T a; ga = gye down.
      const T *dn = down.as<T>() + e * h * i;
      gemm(true, false, h, i, n, T(1), gye.data(), h, pass.a.data(), i, T(0),
           gDown, i);
      ga.assign(size_t(n * i), T(0));
      gemm(false, false, n, i, h, T(1), gye.data(), h, dn, i, T(0), ga.data(),
           i);
      // a = silu(gate) * up; silu' = s (1 + g (1 - s)).
      gg.resize(size_t(n * i));
      gu.resize(size_t(n * i));
      for (int64_t q = 0; q < n * i; ++q) {
        T g = pass.gate[size_t(q)], s = sigmoid(g);
        gu[size_t(q)] = ga[size_t(q)] * g * s;
        gg[size_t(q)] =
            ga[size_t(q)] * pass.up[size_t(q)] * s * (T(1) + g * (T(1) - s));
      }
      // gate_up: gGate = gg^T x, gUp = gu^T x; the input: gg W_g + gu W_u.
      gemm(true, false, i, h, n, T(1), gg.data(), i, pass.x.data(), h, T(0),
           gGate, h);
      gemm(true, false, i, h, n, T(1), gu.data(), i, pass.x.data(), h, T(0),
           gGate + i * h, h);
      const T *w = gateUp.as<T>() + e * 2 * i * h;
      T *gxe = gx.data() + r.offset[size_t(e)] * h;
      gemm(false, false, n, h, i, T(1), gg.data(), i, w, h, T(0), gxe, h);
      gemm(false, false, n, h, i, T(1), gu.data(), i, w + i * h, h, T(1), gxe,
           h);
    }
  });
  combineInExpertOrder<T>(r, r.row.data(), gx.data(), h, nullptr,
                          gradInput.as<T>());
}

} // namespace

Status lamina::rt::topk(const Tensor &input, int64_t k, const Tensor &values,
                        const Tensor &indices) {
  if (Status s = checkMoEFloats("topk", {&input, &values}); !s.ok())
    return s;
  if (Status s = checkTopK(input, k, values, indices); !s.ok())
    return s;
  if (input.dtype == DType::F64)
    topkRows<double>(input, k, values, indices);
  else
    topkRows<float>(input, k, values, indices);
  return Status::success();
}

Status lamina::rt::moe(const Tensor &input, const Tensor &indices,
                       const Tensor &weights, const Tensor &gateUp,
                       const Tensor &down, const Tensor &result) {
  if (Status s =
          checkMoEFloats("moe", {&input, &weights, &gateUp, &down, &result});
      !s.ok())
    return s;
  Routing r;
  if (Status s = r.build(input, indices, weights, gateUp, down); !s.ok())
    return s;
  if (result.rank != 2 || result.dim(0) != r.tokens ||
      result.dim(1) != r.hidden)
    return Status::error("moe: result " + describe(result) + " for input " +
                         describe(input));
  if (input.dtype == DType::F64)
    moeForward<double>(r, input, weights, gateUp, down, result);
  else
    moeForward<float>(r, input, weights, gateUp, down, result);
  return Status::success();
}

Status lamina::rt::moeBackward(const Tensor &input, const Tensor &indices,
                               const Tensor &weights, const Tensor &gateUp,
                               const Tensor &down, const Tensor &gradResult,
                               const Tensor &gradInput,
                               const Tensor &gradWeights,
                               const Tensor &gradGateUp,
                               const Tensor &gradDown) {
  if (Status s = checkMoEFloats(
          "moe_grad", {&input, &weights, &gateUp, &down, &gradResult,
                       &gradInput, &gradWeights, &gradGateUp, &gradDown});
      !s.ok())
    return s;
  Routing r;
  if (Status s = r.build(input, indices, weights, gateUp, down); !s.ok())
    return s;
  if (Status s =
          checkMoEGradients(input, weights, gateUp, down, gradResult, gradInput,
                            gradWeights, gradGateUp, gradDown);
      !s.ok())
    return s;
  if (input.dtype == DType::F64)
    moeGradients<double>(r, input, weights, gateUp, down, gradResult, gradInput,
                         gradWeights, gradGateUp, gradDown);
  else
    moeGradients<float>(r, input, weights, gateUp, down, gradResult, gradInput,
                        gradWeights, gradGateUp, gradDown);
  return Status::success();
}
