//===- MoE.cu - top-k and the mixture-of-experts layer on CUDA ------------===//
//
// The host kernels' algorithm (MoE.cpp, docs/moe-design.md) on the device:
// the (token, pick) pairs are grouped by expert on the host (MoERouting.h:
// the indices are copied back, so a call waits for the stream, as
// Megatron-Core's token dispatcher waits for its per-expert counts), then
// the experts' rows run through cuBLAS grouped GEMMs (one call per
// product for every expert, GroupedGemm.cpp), the SiLU gating and the
// weighted combine are kernels, and each token's rows are summed in expert
// order, as the host sums them. f32. The host wait cannot be captured in a CUDA
// graph: under LAMINA_CUDA_GRAPHS these calls are an error naming them.
//
//===----------------------------------------------------------------------===//

#include "../MoERouting.h"
#include "Common.h"

#include <cmath>
#include <vector>

using namespace lamina::rt;
using namespace lamina::rt::cuda;
using namespace lamina::rt::cuda::detail;
using lamina::rt::detail::Routing;

namespace {

/// Picks in ONNX TopK's order: NaN first, larger values, lower indices.
__device__ inline bool before(float va, int64_t a, float vb, int64_t b) {
  bool na = va != va, nb = vb != vb;
  if (na != nb)
    return na;
  if (!na && va != vb)
    return va > vb;
  return a < b;
}

/// One thread per row: pick j is the first element after pick j-1 in that
/// order (k small: the experts per token).
__global__ void topkKernel(const float *in, int64_t rows, int64_t n, int64_t k,
                           float *values, int64_t *indices) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < rows;
       r += int64_t(gridDim.x) * blockDim.x) {
    const float *row = in + r * n;
    int64_t prev = -1;
    for (int64_t j = 0; j < k; ++j) {
      int64_t best = -1;
      for (int64_t e = 0; e < n; ++e) {
        if (prev >= 0 && !before(row[prev], prev, row[e], e))
          continue; // at or before the previous pick
        if (best < 0 || before(row[e], e, row[best], best))
          best = e;
      }
      values[r * k + j] = row[best];
      indices[r * k + j] = best;
      prev = best;
    }
  }
}

/// rows[q] = input[token of row q] (slot / k), H wide.
__global__ void gatherRowsKernel(const float *input, const int64_t *slot,
                                 int64_t k, int64_t hidden, float *rows,
                                 int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t q = i / hidden, c = i % hidden;
    rows[i] = input[(slot[q] / k) * hidden + c];
  }
}

/// rows[q] = input[token of pair source[q]] (zero when source[q] < 0).
__global__ void dispatchKernel(const float *input, const int64_t *source,
                               int64_t k, int64_t hidden, float *rows,
                               int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t q = i / hidden, c = i % hidden, p = source[q];
    rows[i] = p < 0 ? 0.0f : input[(p / k) * hidden + c];
  }
}

__device__ inline float sigmoidOf(float g) { return 1.0f / (1.0f + expf(-g)); }

/// a[q, c] = silu(gate) * up from gu[q] = [gate (I), up (I)].
__global__ void gateKernel(const float *gu, int64_t inner, float *a,
                           int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t q = i / inner, c = i % inner;
    float g = gu[q * 2 * inner + c], u = gu[q * 2 * inner + inner + c];
    a[i] = g * sigmoidOf(g) * u;
  }
}

/// The gate and up products' gradients from a's, in place of gu's.
__global__ void gateGradKernel(float *gu, const float *ga, int64_t inner,
                               int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t q = i / inner, c = i % inner;
    float g = gu[q * 2 * inner + c], u = gu[q * 2 * inner + inner + c];
    float s = sigmoidOf(g), d = ga[i];
    gu[q * 2 * inner + c] = d * u * s * (1.0f + g * (1.0f - s));
    gu[q * 2 * inner + inner + c] = d * g * s;
  }
}

/// y[t] = sum over token t's pairs in expert order (order[t k + j], -1:
/// none) of rows[row[p]] (times weights[p] when given).
__global__ void combineKernel(const float *rows, const int64_t *order,
                              const int64_t *row, const float *weights,
                              int64_t k, int64_t hidden, float *y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t t = i / hidden, c = i % hidden;
    float acc = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      int64_t p = order[t * k + j];
      if (p < 0)
        break;
      float w = weights ? weights[p] : 1.0f;
      acc += rows[row[p] * hidden + c] * w;
    }
    y[i] = acc;
  }
}

/// Per pair p (row q = row[p]): gw[p] = gy[t] . y[q], gye[q] = gy[t] w[p];
/// gw of a pair routed nowhere is 0 (gye's rows no pair reads untouched).
__global__ void routingGradKernel(const float *gy, const float *y,
                                  const float *weights, const int64_t *row,
                                  int64_t k, int64_t hidden, float *gye,
                                  float *gw, int64_t pairs) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < pairs;
       p += int64_t(gridDim.x) * blockDim.x) {
    int64_t q = row[p];
    if (q < 0) {
      gw[p] = 0.0f;
      continue;
    }
    const float *g = gy + (p / k) * hidden, *yq = y + q * hidden;
    float dot = 0.0f, w = weights[p];
    for (int64_t c = 0; c < hidden; ++c) {
      dot += g[c] * yq[c];
      gye[q * hidden + c] = g[c] * w;
    }
    gw[p] = dot;
  }
}

/// Device tables of a routing: the slot of each row, the row of each pair,
/// each token's pairs in expert order.
struct DeviceRouting {
  Routing r;
  Scratch slot, row, order;
  explicit DeviceRouting(cudaStream_t s) : slot(s), row(s), order(s) {}
};

Status upload(const char *op, Scratch &to, const std::vector<int64_t> &v,
              cudaStream_t stream) {
  size_t bytes = std::max<size_t>(v.size(), 1) * sizeof(int64_t);
  if (Status s = cudaCheck(op, cudaMallocAsync(&to.ptr, bytes, stream));
      !s.ok())
    return s;
  return v.empty()
             ? Status::success()
             : cudaCheck(op, cudaMemcpyAsync(to.ptr, v.data(),
                                             v.size() * sizeof(int64_t),
                                             cudaMemcpyHostToDevice, stream));
}

/// `op`'s f32 operands.
Status checkF32(const char *op, std::initializer_list<const Tensor *> ts) {
  for (const Tensor *t : ts)
    if (t->dtype != DType::F32)
      return Status::error(std::string(op) + " on CUDA: f32 only, got " +
                           describe(*t));
  return Status::success();
}

/// An i64 device tensor copied to `host` (a wait for the stream; refused
/// while a CUDA graph captures it); `view` is it over that copy.
Status toHost(const char *op, const Tensor &t, cudaStream_t stream,
              std::vector<int64_t> &host, Tensor &view) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) == cudaSuccess &&
      capture != cudaStreamCaptureStatusNone)
    return Status::error(std::string(op) +
                         ": routes the tokens on the host, which a CUDA "
                         "graph cannot capture (unset LAMINA_CUDA_GRAPHS)");
  if (t.dtype != DType::I64)
    return Status::error(std::string(op) + " on CUDA: i64 indices, got " +
                         describe(t));
  host.resize(size_t(t.numElements()));
  if (Status s =
          cudaCheck(op, cudaMemcpyAsync(host.data(), t.data, t.byteSize(),
                                        cudaMemcpyDeviceToHost, stream));
      !s.ok())
    return s;
  if (Status s = cudaCheck(op, cudaStreamSynchronize(stream)); !s.ok())
    return s;
  view = t;
  view.data = host.data();
  return Status::success();
}

/// Each token's pairs in expert order (-1 past them): what combineKernel
/// sums.
std::vector<int64_t> expertOrder(const Routing &r) {
  std::vector<int64_t> order(size_t(r.tokens * r.k), -1), slots;
  for (int64_t t = 0; t < r.tokens; ++t) {
    r.slotsInExpertOrder(t, slots);
    std::copy(slots.begin(), slots.end(), order.begin() + t * r.k);
  }
  return order;
}

/// Routes on the host: the indices copied back (a wait for the stream),
/// grouped as the host kernels group them, the tables uploaded.
Status route(const char *op, const Tensor &input, const Tensor &indices,
             const Tensor &weights, const Tensor &gateUp, const Tensor &down,
             cudaStream_t stream, DeviceRouting &d) {
  if (Status s = checkF32(op, {&input, &weights, &gateUp, &down}); !s.ok())
    return s;
  std::vector<int64_t> host;
  Tensor hostIndices;
  if (Status s = toHost(op, indices, stream, host, hostIndices); !s.ok())
    return s;
  if (Status s = d.r.build(input, hostIndices, weights, gateUp, down); !s.ok())
    return s;
  if (Status s = upload(op, d.slot, d.r.slot, stream); !s.ok())
    return s;
  if (Status s = upload(op, d.row, d.r.row, stream); !s.ok())
    return s;
  return upload(op, d.order, expertOrder(d.r), stream);
}

/// f32 scratch of `count` elements.
Status scratch(const char *op, Scratch &s, int64_t count, cudaStream_t stream) {
  return cudaCheck(
      op, cudaMallocAsync(&s.ptr,
                          size_t(std::max<int64_t>(count, 1)) * sizeof(float),
                          stream));
}

const int64_t *i64(const Scratch &s) {
  return static_cast<const int64_t *>(s.ptr);
}
float *f32(const Scratch &s) { return static_cast<float *>(s.ptr); }

/// The experts' forward over the routed rows: x [rows, H] gathered, gu
/// [rows, 2I] (gate, up), a [rows, I], y [rows, H].
struct ExpertsForward {
  Scratch x, gu, a, y;
  explicit ExpertsForward(cudaStream_t s) : x(s), gu(s), a(s), y(s) {}

  Status run(const char *op, const DeviceRouting &d, const Tensor &input,
             const Tensor &gateUp, const Tensor &down, cudaStream_t stream) {
    const Routing &r = d.r;
    const int64_t rows = r.offset.back(), h = r.hidden, i = r.inner;
    for (auto [buf, n] : {std::pair<Scratch *, int64_t>{&x, rows * h},
                          {&gu, rows * 2 * i},
                          {&a, rows * i},
                          {&y, rows * h}})
      if (Status s = scratch(op, *buf, n, stream); !s.ok())
        return s;
    if (rows == 0)
      return Status::success();
    launchKernel(gatherRowsKernel, gridFor(rows * h), 256, 0, stream,
                 input.as<float>(), i64(d.slot), r.k, h, f32(x), rows * h);
    if (Status s = launched(op); !s.ok())
      return s;
    // Each expert's rows against its gate and up rows, then its down
    // projection: one grouped GEMM each.
    std::vector<GemmProblem> gateUps, downs;
    for (int64_t e = 0; e < r.experts; ++e) {
      int64_t n = r.count(e), at = r.offset[size_t(e)];
      gateUps.push_back({f32(x) + at * h, gateUp.as<float>() + e * 2 * i * h,
                         f32(gu) + at * 2 * i, n, 2 * i, h, false, true});
      downs.push_back({f32(a) + at * i, down.as<float>() + e * h * i,
                       f32(y) + at * h, n, h, i, false, true});
    }
    if (Status s = groupedMatmul(gateUps, stream); !s.ok())
      return s;
    launchKernel(gateKernel, gridFor(rows * i), 256, 0, stream, f32(gu), i,
                 f32(a), rows * i);
    if (Status s = launched(op); !s.ok())
      return s;
    return groupedMatmul(downs, stream);
  }
};

Status combine(const char *op, const DeviceRouting &d, const float *rows,
               const float *weights, float *out, cudaStream_t stream) {
  const int64_t n = d.r.tokens * d.r.hidden;
  if (n == 0)
    return Status::success();
  launchKernel(combineKernel, gridFor(n), 256, 0, stream, rows, i64(d.order),
               i64(d.row), weights, d.r.k, d.r.hidden, out, n);
  return launched(op);
}

} // namespace

Status lamina::rt::cuda::topk(const Tensor &input, int64_t k,
                              const Tensor &values, const Tensor &indices,
                              cudaStream_t stream) {
  if (input.dtype != DType::F32 || values.dtype != DType::F32)
    return Status::error("topk on CUDA: f32 only, got " + describe(input));
  if (Status s = lamina::rt::detail::checkTopK(input, k, values, indices);
      !s.ok())
    return s;
  const int64_t n = input.shape[input.rank - 1],
                rows = n ? input.numElements() / n : 0;
  if (rows == 0)
    return Status::success();
  launchKernel(topkKernel, gridFor(rows, 128), 128, 0, stream,
               input.as<float>(), rows, n, k, values.as<float>(),
               indices.as<int64_t>());
  return launched("topk");
}

Status lamina::rt::cuda::moe(const Tensor &input, const Tensor &indices,
                             const Tensor &weights, const Tensor &gateUp,
                             const Tensor &down, const Tensor &result,
                             cudaStream_t stream) {
  DeviceRouting d(stream);
  if (Status s = route("moe", input, indices, weights, gateUp, down, stream, d);
      !s.ok())
    return s;
  if (result.dtype != DType::F32 || result.rank != 2 ||
      result.shape[0] != d.r.tokens || result.shape[1] != d.r.hidden)
    return Status::error("moe: result " + describe(result) + " for input " +
                         describe(input));
  ExpertsForward f(stream);
  if (Status s = f.run("moe", d, input, gateUp, down, stream); !s.ok())
    return s;
  return combine("moe", d, f32(f.y), weights.as<float>(), result.as<float>(),
                 stream);
}

Status lamina::rt::cuda::moeBackward(
    const Tensor &input, const Tensor &indices, const Tensor &weights,
    const Tensor &gateUp, const Tensor &down, const Tensor &gradResult,
    const Tensor &gradInput, const Tensor &gradWeights,
    const Tensor &gradGateUp, const Tensor &gradDown, cudaStream_t stream) {
  const char *op = "moe_grad";
  DeviceRouting d(stream);
  if (Status s = route(op, input, indices, weights, gateUp, down, stream, d);
      !s.ok())
    return s;
  for (const Tensor *t :
       {&gradResult, &gradInput, &gradWeights, &gradGateUp, &gradDown})
    if (t->dtype != DType::F32)
      return Status::error("moe_grad on CUDA: f32 only, got " + describe(*t));
  if (Status s = lamina::rt::detail::checkMoEGradients(
          input, weights, gateUp, down, gradResult, gradInput, gradWeights,
          gradGateUp, gradDown);
      !s.ok())
    return s;
  const Routing &r = d.r;
  const int64_t rows = r.offset.back(), h = r.hidden, i = r.inner;
  ExpertsForward f(stream);
  if (Status s = f.run(op, d, input, gateUp, down, stream); !s.ok())
    return s;
  Scratch gye(stream), ga(stream), gx(stream);
  for (auto [buf, n] : {std::pair<Scratch *, int64_t>{&gye, rows * h},
                        {&ga, rows * i},
                        {&gx, rows * h}})
    if (Status s = scratch(op, *buf, n, stream); !s.ok())
      return s;
  if (r.tokens * r.k > 0) {
    launchKernel(routingGradKernel, gridFor(r.tokens * r.k, 128), 128, 0,
                 stream, gradResult.as<float>(), f32(f.y), weights.as<float>(),
                 i64(d.row), r.k, h, f32(gye), gradWeights.as<float>(),
                 r.tokens * r.k);
    if (Status s = launched(op); !s.ok())
      return s;
  }
  // The experts' weight gradients are sums over their rows: an expert
  // without rows gets zeros, which the grouped GEMMs skip.
  for (const Tensor *t : {&gradGateUp, &gradDown})
    if (Status s =
            cudaCheck(op, cudaMemsetAsync(t->data, 0, t->byteSize(), stream));
        !s.ok())
      return s;
  // Per expert, one grouped GEMM: gDown = gye^T a, ga = gye down.
  std::vector<GemmProblem> first, second;
  for (int64_t e = 0; e < r.experts; ++e) {
    int64_t n = r.count(e), at = r.offset[size_t(e)];
    first.push_back({f32(gye) + at * h, f32(f.a) + at * i,
                     gradDown.as<float>() + e * h * i, h, i, n, true, false});
    first.push_back({f32(gye) + at * h, down.as<float>() + e * h * i,
                     f32(ga) + at * i, n, i, h, false, false});
  }
  if (Status s = groupedMatmul(first, stream); !s.ok())
    return s;
  if (rows * i > 0) {
    launchKernel(gateGradKernel, gridFor(rows * i), 256, 0, stream, f32(f.gu),
                 f32(ga), i, rows * i);
    if (Status s = launched(op); !s.ok())
      return s;
  }
  // gate_up: gGateUp = gg^T x; the rows' input gradient gx = gg gate_up.
  for (int64_t e = 0; e < r.experts; ++e) {
    int64_t n = r.count(e), at = r.offset[size_t(e)];
    second.push_back({f32(f.gu) + at * 2 * i, f32(f.x) + at * h,
                      gradGateUp.as<float>() + e * 2 * i * h, 2 * i, h, n, true,
                      false});
    second.push_back({f32(f.gu) + at * 2 * i,
                      gateUp.as<float>() + e * 2 * i * h, f32(gx) + at * h, n,
                      h, 2 * i, false, false});
  }
  if (Status s = groupedMatmul(second, stream); !s.ok())
    return s;
  return combine(op, d, f32(gx), nullptr, gradInput.as<float>(), stream);
}

namespace {
/// Expert parallelism's layout for `rows` [R C, H] from the device
/// `indices`, routed on the host (MoERouting.h's RowLayout) with the pair
/// of each row (-1: none) and each pair's row uploaded.
struct DeviceRows {
  lamina::rt::detail::RowLayout l;
  Scratch source, row;
  explicit DeviceRows(cudaStream_t s) : source(s), row(s) {}

  Status build(const char *op, const Tensor &rows, const Tensor &indices,
               int64_t experts, int64_t ranks, cudaStream_t stream) {
    std::vector<int64_t> host;
    Tensor hostIndices;
    if (Status s = toHost(op, indices, stream, host, hostIndices); !s.ok())
      return s;
    if (Status s = l.build(op, rows, hostIndices, experts, ranks); !s.ok())
      return s;
    std::vector<int64_t> pairOf(size_t(rows.shape[0]), -1);
    for (size_t p = 0; p < l.row.size(); ++p)
      if (l.row[p] >= 0)
        pairOf[size_t(l.row[p])] = int64_t(p);
    if (Status s = upload(op, source, pairOf, stream); !s.ok())
      return s;
    return upload(op, row, l.row, stream);
  }
};
} // namespace

Status lamina::rt::cuda::moeDispatch(const Tensor &input, const Tensor &indices,
                                     int64_t experts, int64_t ranks,
                                     const Tensor &rows, const Tensor &counts,
                                     cudaStream_t stream) {
  const char *op = "moe_dispatch";
  if (Status s = checkF32(op, {&input, &rows}); !s.ok())
    return s;
  DeviceRows d(stream);
  if (Status s = d.build(op, rows, indices, experts, ranks, stream); !s.ok())
    return s;
  const Routing &r = d.l.r;
  if (input.rank != 2 || input.shape[0] != r.tokens ||
      input.shape[1] != r.hidden || counts.dtype != DType::I64 ||
      counts.numElements() != experts)
    return Status::error("moe_dispatch: " + describe(input) + " and " +
                         describe(counts) + " do not match " + describe(rows));
  std::vector<int64_t> perExpert(static_cast<size_t>(experts));
  for (int64_t e = 0; e < experts; ++e)
    perExpert[size_t(e)] = r.count(e);
  if (Status s = cudaCheck(op, cudaMemcpyAsync(counts.data, perExpert.data(),
                                               counts.byteSize(),
                                               cudaMemcpyHostToDevice, stream));
      !s.ok())
    return s;
  const int64_t n = rows.numElements();
  if (n == 0)
    return Status::success();
  launchKernel(dispatchKernel, gridFor(n), 256, 0, stream, input.as<float>(),
               i64(d.source), r.k, r.hidden, rows.as<float>(), n);
  return launched(op);
}

Status lamina::rt::cuda::moeCombine(const Tensor &rows, const Tensor &indices,
                                    const Tensor &weights, int64_t experts,
                                    int64_t ranks, const Tensor &result,
                                    cudaStream_t stream) {
  const char *op = "moe_combine";
  if (Status s = checkF32(op, {&rows, &weights, &result}); !s.ok())
    return s;
  DeviceRows d(stream);
  if (Status s = d.build(op, rows, indices, experts, ranks, stream); !s.ok())
    return s;
  const Routing &r = d.l.r;
  if (weights.numElements() != r.tokens * r.k ||
      result.numElements() != r.tokens * r.hidden)
    return Status::error("moe_combine: " + describe(weights) + " and " +
                         describe(result) + " do not match " +
                         describe(indices));
  Scratch order(stream);
  if (Status s = upload(op, order, expertOrder(r), stream); !s.ok())
    return s;
  const int64_t n = r.tokens * r.hidden;
  if (n == 0)
    return Status::success();
  launchKernel(combineKernel, gridFor(n), 256, 0, stream, rows.as<float>(),
               i64(order), i64(d.row), weights.as<float>(), r.k, r.hidden,
               result.as<float>(), n);
  return launched(op);
}

Status lamina::rt::cuda::moeCombineBackward(
    const Tensor &rows, const Tensor &indices, const Tensor &weights,
    const Tensor &gradResult, int64_t experts, int64_t ranks,
    const Tensor &gradRows, const Tensor &gradWeights, cudaStream_t stream) {
  const char *op = "moe_combine_grad";
  if (Status s =
          checkF32(op, {&rows, &weights, &gradResult, &gradRows, &gradWeights});
      !s.ok())
    return s;
  DeviceRows d(stream);
  if (Status s = d.build(op, rows, indices, experts, ranks, stream); !s.ok())
    return s;
  const Routing &r = d.l.r;
  if (weights.numElements() != r.tokens * r.k ||
      gradWeights.numElements() != r.tokens * r.k ||
      gradResult.numElements() != r.tokens * r.hidden ||
      gradRows.numElements() != rows.numElements())
    return Status::error("moe_combine_grad: gradients shaped unlike their "
                         "values");
  // The rows no pair reads get no gradient.
  if (Status s = cudaCheck(
          op, cudaMemsetAsync(gradRows.data, 0, gradRows.byteSize(), stream));
      !s.ok())
    return s;
  const int64_t pairs = r.tokens * r.k;
  if (pairs == 0)
    return Status::success();
  launchKernel(routingGradKernel, gridFor(pairs, 128), 128, 0, stream,
               gradResult.as<float>(), rows.as<float>(), weights.as<float>(),
               i64(d.row), r.k, r.hidden, gradRows.as<float>(),
               gradWeights.as<float>(), pairs);
  return launched(op);
}

Status lamina::rt::cuda::moeRowExperts(const Tensor &counts,
                                       const Tensor &result,
                                       cudaStream_t stream) {
  const char *op = "moe_row_experts";
  // The host kernel over the counts copied back (R x E/R numbers).
  std::vector<int64_t> hostCounts, hostResult(size_t(result.numElements()));
  Tensor countsView;
  if (Status s = toHost(op, counts, stream, hostCounts, countsView); !s.ok())
    return s;
  Tensor resultView = result;
  resultView.data = hostResult.data();
  if (result.dtype != DType::I64)
    return Status::error("moe_row_experts: " + describe(counts) +
                         " cannot give " + describe(result));
  if (Status s = lamina::rt::moeRowExperts(countsView, resultView); !s.ok())
    return s;
  return cudaCheck(op, cudaMemcpyAsync(result.data, hostResult.data(),
                                       result.byteSize(),
                                       cudaMemcpyHostToDevice, stream));
}
