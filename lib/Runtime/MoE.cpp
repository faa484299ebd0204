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

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

using namespace lamina::rt;
using namespace lamina::rt::detail;

namespace {

Status checkF32(const char *op, std::initializer_list<const Tensor *> ts) {
  for (const Tensor *t : ts)
    if (t->dtype != DType::F32)
      return Status::error(std::string(op) + ": expects f32 tensors, got " +
                           describe(*t));
  return Status::success();
}

float silu(float g) { return g / (1.0f + std::exp(-g)); }

/// Who each expert serves: rows [offset[e], offset[e+1]) of `slot` are the
/// (token * k + j) pairs routed to expert e, in token order; `row` maps a
/// pair back to its row.
struct Routing {
  int64_t tokens = 0, k = 0, experts = 0, hidden = 0, inner = 0;
  std::vector<int64_t> offset, slot, row;

  Status build(const Tensor &input, const Tensor &indices,
               const Tensor &weights, const Tensor &gateUp,
               const Tensor &down) {
    if (input.rank != 2 || indices.rank != 2 || weights.rank != 2 ||
        gateUp.rank != 3 || down.rank != 3)
      return Status::error("moe: expects input [T, H], indices and weights "
                           "[T, k], gate_up [E, 2I, H] and down [E, H, I]");
    tokens = input.dim(0), hidden = input.dim(1), k = indices.dim(1);
    experts = gateUp.dim(0), inner = down.dim(2);
    if (indices.dim(0) != tokens || weights.dim(0) != tokens ||
        weights.dim(1) != k || gateUp.dim(1) != 2 * inner ||
        gateUp.dim(2) != hidden || down.dim(0) != experts ||
        down.dim(1) != hidden)
      return Status::error("moe: inconsistent shapes " + describe(input) +
                           ", " + describe(indices) + ", " +
                           describe(weights) + ", " + describe(gateUp) +
                           ", " + describe(down));
    if (indices.dtype != DType::I32 && indices.dtype != DType::I64)
      return Status::error("moe: indices must be i32 or i64, got " +
                           describe(indices));
    std::vector<int64_t> expert(size_t(tokens * k));
    offset.assign(size_t(experts + 1), 0);
    for (int64_t p = 0; p < tokens * k; ++p) {
      int64_t e = indices.dtype == DType::I64
                      ? indices.as<int64_t>()[p]
                      : int64_t(indices.as<int32_t>()[p]);
      if (e < 0 || e >= experts)
        return Status::error("moe: expert index " + std::to_string(e) +
                             " of token " + std::to_string(p / k) +
                             " is outside [0, " + std::to_string(experts) +
                             ")");
      expert[size_t(p)] = e;
      ++offset[size_t(e + 1)];
    }
    std::partial_sum(offset.begin(), offset.end(), offset.begin());
    slot.assign(size_t(tokens * k), 0);
    row.assign(size_t(tokens * k), 0);
    std::vector<int64_t> next(offset.begin(), offset.end() - 1);
    for (int64_t p = 0; p < tokens * k; ++p) {
      int64_t r = next[size_t(expert[size_t(p)])]++;
      slot[size_t(r)] = p;
      row[size_t(p)] = r;
    }
    return Status::success();
  }
  int64_t count(int64_t e) const {
    return offset[size_t(e + 1)] - offset[size_t(e)];
  }
  /// Token t's slots in expert order (what the sum runs over).
  void slotsInExpertOrder(int64_t t, std::vector<int64_t> &out) const {
    out.resize(size_t(k));
    std::iota(out.begin(), out.end(), t * k);
    std::sort(out.begin(), out.end(), [&](int64_t a, int64_t b) {
      return row[size_t(a)] < row[size_t(b)];
    });
  }
};

/// One expert's forward over its rows: x [n, H] gathered, gate and up [n,
/// I], a = silu(gate) * up, y = a down^T [n, H].
struct ExpertPass {
  int64_t n = 0;
  std::vector<float> x, gate, up, a, y;

  void forward(const Routing &r, int64_t e, const float *input,
               const float *gateUp, const float *down) {
    n = r.count(e);
    const int64_t h = r.hidden, i = r.inner;
    x.resize(size_t(n * h));
    for (int64_t q = 0; q < n; ++q) {
      int64_t t = r.slot[size_t(r.offset[size_t(e)] + q)] / r.k;
      std::copy_n(input + t * h, h, x.data() + q * h);
    }
    const float *w = gateUp + e * 2 * i * h;
    gate.assign(size_t(n * i), 0.0f);
    up.assign(size_t(n * i), 0.0f);
    gemm(false, true, n, i, h, 1.0f, x.data(), h, w, h, 0.0f, gate.data(), i);
    gemm(false, true, n, i, h, 1.0f, x.data(), h, w + i * h, h, 0.0f,
         up.data(), i);
    a.resize(size_t(n * i));
    for (int64_t q = 0; q < n * i; ++q)
      a[size_t(q)] = silu(gate[size_t(q)]) * up[size_t(q)];
    y.assign(size_t(n * h), 0.0f);
    gemm(false, true, n, h, i, 1.0f, a.data(), i, down + e * h * i, i, 0.0f,
         y.data(), h);
  }
};

float weightOf(const Tensor &weights, int64_t p) {
  return weights.as<float>()[p];
}

} // namespace

Status lamina::rt::topk(const Tensor &input, int64_t k, const Tensor &values,
                        const Tensor &indices) {
  if (Status s = checkF32("topk", {&input, &values}); !s.ok())
    return s;
  if (input.rank < 1 || k < 1 || k > input.dim(input.rank - 1) ||
      values.rank != input.rank || indices.rank != input.rank ||
      indices.dtype != DType::I64 || values.dim(values.rank - 1) != k ||
      values.numElements() != indices.numElements() ||
      values.numElements() * input.dim(input.rank - 1) !=
          input.numElements() * k)
    return Status::error("topk: " + describe(input) + " with k " +
                         std::to_string(k) + " cannot give " +
                         describe(values) + " and " + describe(indices));
  const int64_t n = input.dim(input.rank - 1),
                rows = n ? input.numElements() / n : 0;
  const float *in = input.as<float>();
  float *vals = values.as<float>();
  int64_t *idx = indices.as<int64_t>();
  parallelFor(rows, 64, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> order(static_cast<size_t>(n));
    for (int64_t r = begin; r < end; ++r) {
      const float *row = in + r * n;
      std::iota(order.begin(), order.end(), 0);
      auto before = [&](int64_t a, int64_t b) {
        float va = row[a], vb = row[b];
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
  return Status::success();
}

Status lamina::rt::moe(const Tensor &input, const Tensor &indices,
                       const Tensor &weights, const Tensor &gateUp,
                       const Tensor &down, const Tensor &result) {
  if (Status s = checkF32("moe", {&input, &weights, &gateUp, &down, &result});
      !s.ok())
    return s;
  Routing r;
  if (Status s = r.build(input, indices, weights, gateUp, down); !s.ok())
    return s;
  if (result.rank != 2 || result.dim(0) != r.tokens ||
      result.dim(1) != r.hidden)
    return Status::error("moe: result " + describe(result) + " for input " +
                         describe(input));
  const int64_t h = r.hidden;
  // Every (token, slot)'s expert output, in the experts' row order.
  std::vector<float> out(size_t(r.tokens * r.k * h));
  parallelFor(r.experts, 1, [&](int64_t begin, int64_t end) {
    ExpertPass pass;
    for (int64_t e = begin; e < end; ++e) {
      if (!r.count(e))
        continue;
      pass.forward(r, e, input.as<float>(), gateUp.as<float>(),
                   down.as<float>());
      std::copy(pass.y.begin(), pass.y.end(),
                out.begin() + r.offset[size_t(e)] * h);
    }
  });
  float *y = result.as<float>();
  parallelFor(r.tokens, 16, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> slots;
    for (int64_t t = begin; t < end; ++t) {
      float *dst = y + t * h;
      std::fill_n(dst, h, 0.0f);
      r.slotsInExpertOrder(t, slots);
      for (int64_t p : slots) {
        float w = weightOf(weights, p);
        const float *src = out.data() + r.row[size_t(p)] * h;
        for (int64_t c = 0; c < h; ++c)
          dst[c] += src[c] * w;
      }
    }
  });
  return Status::success();
}

Status lamina::rt::moeBackward(const Tensor &input, const Tensor &indices,
                               const Tensor &weights, const Tensor &gateUp,
                               const Tensor &down, const Tensor &gradResult,
                               const Tensor &gradInput,
                               const Tensor &gradWeights,
                               const Tensor &gradGateUp,
                               const Tensor &gradDown) {
  if (Status s = checkF32("moe_grad", {&input, &weights, &gateUp, &down,
                                       &gradResult, &gradInput, &gradWeights,
                                       &gradGateUp, &gradDown});
      !s.ok())
    return s;
  Routing r;
  if (Status s = r.build(input, indices, weights, gateUp, down); !s.ok())
    return s;
  if (gradResult.numElements() != input.numElements() ||
      gradInput.numElements() != input.numElements() ||
      gradWeights.numElements() != weights.numElements() ||
      gradGateUp.numElements() != gateUp.numElements() ||
      gradDown.numElements() != down.numElements())
    return Status::error("moe_grad: gradients shaped unlike their values");
  const int64_t h = r.hidden, i = r.inner;
  const float *gy = gradResult.as<float>();
  // Per (token, slot) in row order: the input gradient its expert gives.
  std::vector<float> gx(size_t(r.tokens * r.k * h));
  float *gw = gradWeights.as<float>();
  parallelFor(r.experts, 1, [&](int64_t begin, int64_t end) {
    ExpertPass pass;
    std::vector<float> gye, ga, gg, gu;
    for (int64_t e = begin; e < end; ++e) {
      float *gGate = gradGateUp.as<float>() + e * 2 * i * h;
      float *gDown = gradDown.as<float>() + e * h * i;
      int64_t n = r.count(e);
      if (!n) {
        std::fill_n(gGate, 2 * i * h, 0.0f);
        std::fill_n(gDown, h * i, 0.0f);
        continue;
      }
      pass.forward(r, e, input.as<float>(), gateUp.as<float>(),
                   down.as<float>());
      // The routing weight's gradient, and the output's scaled by it.
      gye.resize(size_t(n * h));
      for (int64_t q = 0; q < n; ++q) {
        int64_t p = r.slot[size_t(r.offset[size_t(e)] + q)], t = p / r.k;
        const float *g = gy + t * h, *yq = pass.y.data() + q * h;
        float dot = 0, w = weightOf(weights, p);
        for (int64_t c = 0; c < h; ++c) {
          dot += g[c] * yq[c];
          gye[size_t(q * h + c)] = g[c] * w;
        }
        gw[p] = dot;
      }
      // down: gDown = gye^T a; ga = gye down.
      const float *dn = down.as<float>() + e * h * i;
      gemm(true, false, h, i, n, 1.0f, gye.data(), h, pass.a.data(), i, 0.0f,
           gDown, i);
      ga.assign(size_t(n * i), 0.0f);
      gemm(false, false, n, i, h, 1.0f, gye.data(), h, dn, i, 0.0f, ga.data(),
           i);
      // a = silu(gate) * up.
      gg.resize(size_t(n * i));
      gu.resize(size_t(n * i));
      for (int64_t q = 0; q < n * i; ++q) {
        float g = pass.gate[size_t(q)], s = 1.0f / (1.0f + std::exp(-g));
        gu[size_t(q)] = ga[size_t(q)] * g * s;
        gg[size_t(q)] =
            ga[size_t(q)] * pass.up[size_t(q)] * s * (1.0f + g * (1.0f - s));
      }
      // gate_up: gGate = gg^T x, gUp = gu^T x; the input: gg W_g + gu W_u.
      gemm(true, false, i, h, n, 1.0f, gg.data(), i, pass.x.data(), h, 0.0f,
           gGate, h);
      gemm(true, false, i, h, n, 1.0f, gu.data(), i, pass.x.data(), h, 0.0f,
           gGate + i * h, h);
      const float *w = gateUp.as<float>() + e * 2 * i * h;
      float *gxe = gx.data() + r.offset[size_t(e)] * h;
      gemm(false, false, n, h, i, 1.0f, gg.data(), i, w, h, 0.0f, gxe, h);
      gemm(false, false, n, h, i, 1.0f, gu.data(), i, w + i * h, h, 1.0f, gxe,
           h);
    }
  });
  float *gIn = gradInput.as<float>();
  parallelFor(r.tokens, 16, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> slots;
    for (int64_t t = begin; t < end; ++t) {
      float *dst = gIn + t * h;
      std::fill_n(dst, h, 0.0f);
      r.slotsInExpertOrder(t, slots);
      for (int64_t p : slots) {
        const float *src = gx.data() + r.row[size_t(p)] * h;
        for (int64_t c = 0; c < h; ++c)
          dst[c] += src[c];
      }
    }
  });
  return Status::success();
}
