//===- cuda_kernels_bench.cpp - time cuda::matmul, reduce and attention ---===//
//
// Built and run by bench/cuda_kernels_bench.py (see there). Times, with CUDA
// events on one stream, the GEMMs and bias-gradient reductions of one layer
// of the ~1B GPT training step (hidden 2048, seq 2048, batch 4, 16 heads,
// bf16 storage, f32 accumulation): the first call of each GEMM shape (the
// cuBLASLt heuristic and plan creation: host time) and the steady state.
// The fused causal attention forward and backward at the same shape print
// in the GEMMs' format (batch = B*H, m = Sq, n = Sk, k = D; TFLOP/s from the
// causal FLOPs: 2*B*H*S*S*D forward, 2.5 times that backward). The GELU
// backward with its bias gradient, unfused and fused, the layer norm on
// both kernel families, the cross-entropy on f32 and bf16 logits and the
// AdamW update (one launch a parameter against optimizerSteps) close.
// Prints one JSON object per line.
//
//===----------------------------------------------------------------------===//

#include "lamina/Runtime/Cuda/Kernels.h"
#include "lamina/Runtime/Cuda/Optimizer.h"
#include "lamina/Support/Json.h"

#include <cuda_runtime.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace lamina::rt;
namespace cu = lamina::rt::cuda;

namespace {
void die(const char *what, const std::string &msg) {
  std::fprintf(stderr, "%s: %s\n", what, msg.c_str());
  std::exit(1);
}
void check(const char *what, cudaError_t e) {
  if (e != cudaSuccess)
    die(what, cudaGetErrorString(e));
}
void check(const char *what, const Status &s) {
  if (!s.ok())
    die(what, s.message());
}

size_t sizeOf(DType t) { return t == DType::F32 ? 4 : 2; }

/// One result: a JSON object on one line of stdout, printed when it goes out
/// of scope (cuda_kernels_bench.py reads a line a result). Figures keep the
/// digits the report shows.
struct Line {
  std::string text;
  lamina::json::Writer w{text, lamina::json::Layout::Inline};
  explicit Line(const char *kind) { w.beginObject().field("kind", kind); }
  Line &fixed(const char *key, double v, int decimals) {
    w.key(key).fixedValue(v, decimals);
    return *this;
  }
  Line &shape(int64_t rows, int64_t cols) {
    w.key("shape").beginArray().value(rows).value(cols).endArray();
    return *this;
  }
  ~Line() {
    w.endObject();
    std::printf("%s\n", text.c_str());
  }
};

/// `count` values in [-1, 1) of type t (random, not zeros: tensor cores draw
/// less power, and so may clock higher, on zeros).
struct Buffer {
  void *ptr = nullptr;
  Buffer(int64_t count, DType t) {
    size_t bytes = size_t(count) * sizeOf(t);
    check("cudaMalloc", cudaMalloc(&ptr, bytes));
    std::vector<float> f(static_cast<size_t>(count));
    uint32_t x = 12345;
    for (float &v : f) {
      x = x * 1664525u + 1013904223u;
      v = float(x >> 8) / float(1 << 23) - 1.0f;
    }
    std::vector<uint16_t> h;
    const void *src = f.data();
    if (t != DType::F32) { // bf16: the top half; f16 is not benchmarked
      h.resize(f.size());
      for (size_t i = 0; i < f.size(); ++i) {
        uint32_t bits;
        std::memcpy(&bits, &f[i], 4);
        h[i] = uint16_t(bits >> 16);
      }
      src = h.data();
    }
    check("cudaMemcpy", cudaMemcpy(ptr, src, bytes, cudaMemcpyHostToDevice));
  }
  ~Buffer() { cudaFree(ptr); }
};

/// Mean milliseconds per call of f over `reps` calls after `warm` calls.
template <typename F>
double timeIt(cudaStream_t s, int warm, int reps, F &&f) {
  for (int i = 0; i < warm; ++i)
    f();
  cudaEvent_t a, b;
  check("event", cudaEventCreate(&a));
  check("event", cudaEventCreate(&b));
  check("record", cudaEventRecord(a, s));
  for (int i = 0; i < reps; ++i)
    f();
  check("record", cudaEventRecord(b, s));
  check("sync", cudaEventSynchronize(b));
  float ms = 0;
  check("elapsed", cudaEventElapsedTime(&ms, a, b));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return double(ms) / reps;
}

/// Prints a GEMM-format line for `call`: its first call's host time, host
/// time a call after that, and device time a call in the steady state.
template <typename F>
void timeAndPrint(const char *name, DType t, int64_t batch, int64_t m,
                  int64_t n, int64_t k, double flops, cudaStream_t s, int reps,
                  F &&call) {
  auto t0 = std::chrono::steady_clock::now();
  call(); // a GEMM creates its plan here
  double firstHostMs = std::chrono::duration<double, std::milli>(
                           std::chrono::steady_clock::now() - t0)
                           .count();
  check("sync", cudaStreamSynchronize(s));
  auto h0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 100; ++i)
    call();
  double hostUs = std::chrono::duration<double, std::micro>(
                      std::chrono::steady_clock::now() - h0)
                      .count() /
                  100;
  check("sync", cudaStreamSynchronize(s));
  double ms = timeIt(s, 3, reps, call);
  Line line("matmul");
  line.w.field("name", name).field("dtype", dtypeName(t)).field("batch", batch)
      .field("m", m).field("n", n).field("k", k);
  line.fixed("ms", ms, 4).fixed("tflops", flops / ms / 1e9, 1);
  line.fixed("first_call_host_ms", firstHostMs, 3)
      .fixed("host_us_per_call", hostUs, 2);
}

struct Gemm {
  const char *name;
  std::vector<int64_t> a, b; // as stored
  bool ta, tb;
};

void benchGemm(const Gemm &g, DType t, cudaStream_t s, int reps) {
  int ra = int(g.a.size()), rb = int(g.b.size());
  int64_t m = g.a[ra - (g.ta ? 1 : 2)], k = g.a[ra - (g.ta ? 2 : 1)];
  int64_t n = g.b[rb - (g.tb ? 2 : 1)];
  std::vector<int64_t> c(g.a.begin(), g.a.end() - 2);
  c.push_back(m);
  c.push_back(n);
  int64_t batch = 1;
  for (size_t i = 0; i + 2 < g.a.size(); ++i)
    batch *= g.a[i];
  auto count = [](const std::vector<int64_t> &v) {
    int64_t r = 1;
    for (int64_t x : v)
      r *= x;
    return r;
  };
  Buffer A(count(g.a), t), B(count(g.b), t), C(count(c), t);
  std::vector<int64_t> sa = g.a, sb = g.b, sc = c;
  Tensor ta{A.ptr, t, ra, sa.data()}, tb{B.ptr, t, rb, sb.data()},
      tc{C.ptr, t, int(sc.size()), sc.data()};
  auto call = [&] {
    check(g.name, cu::matmul(ta, tb, tc, g.ta, g.tb, s));
  };
  double flops = 2.0 * double(batch) * double(m) * double(n) * double(k);
  timeAndPrint(g.name, t, batch, m, n, k, flops, s, reps, call);
}

void benchAttention(cudaStream_t s, int reps) {
  const int64_t B = 4, H = 16, S = 2048, D = 128;
  const DType t = DType::BF16;
  int64_t n = B * H * S * D;
  Buffer q(n, t), k(n, t), v(n, t), o(n, t), dO(n, t), dq(n, t), dk(n, t),
      dv(n, t), lse(B * H * S, DType::F32);
  int64_t shape[] = {B, H, S, D};
  auto view = [&](Buffer &b) { return Tensor{b.ptr, t, 4, shape}; };
  Tensor tq = view(q), tk = view(k), tv = view(v), to = view(o),
         tdo = view(dO), tdq = view(dq), tdk = view(dk), tdv = view(dv),
         tl{lse.ptr, DType::F32, 3, shape};
  double scale = 1.0 / std::sqrt(double(D));
  auto fwd = [&] {
    check("attention",
          cu::attention(tq, tk, tv, nullptr, scale, true, to, tl, s));
  };
  auto bwd = [&] {
    check("attention_grad",
          cu::attentionBackward(tq, tk, tv, nullptr, to, tl, tdo, scale, true,
                                tdq, tdk, tdv, s));
  };
  double flops = 2.0 * double(B * H) * double(S) * double(S) * double(D);
  timeAndPrint("attn_fwd", t, B * H, S, S, D, flops, s, reps, fwd);
  timeAndPrint("attn_bwd", t, B * H, S, S, D, 2.5 * flops, s, reps, bwd);
}

void benchReduce(int64_t rows, int64_t cols, DType t, cudaStream_t s,
                 int reps) {
  Buffer in(rows * cols, t), out(cols, t);
  int64_t si[] = {rows, cols}, so[] = {cols};
  Tensor ti{in.ptr, t, 2, si}, to{out.ptr, t, 1, so};
  int64_t axis = 0;
  double ms = timeIt(s, 3, reps, [&] {
    check("reduce", cu::reduce(ReduceOp::Sum, ti, &axis, 1, false, to, s));
  });
  double bytes = double(rows * cols + cols) * double(sizeOf(t));
  Line line("reduce");
  line.shape(rows, cols);
  line.w.key("axes").beginArray().value(0).endArray();
  line.w.field("dtype", dtypeName(t));
  line.fixed("ms", ms, 4).fixed("gbps", bytes / ms / 1e6, 1);
}
/// The GELU backward of a [rows, cols] activation with its bias gradient
/// and the bf16 operand of its matmuls (what graph-fuse-elementwise makes
/// of them): unfused -- the f32 chain written, reduce(Sum) and cast reading
/// it back -- against one fusedElementwise with a sum. Same bits.
void benchFusedSum(int64_t rows, int64_t cols, cudaStream_t s, int reps) {
  Buffer pre(rows * cols, DType::F32), dy(rows * cols, DType::F32),
      wide(rows * cols, DType::F32), narrow(rows * cols, DType::BF16),
      sum(cols, DType::F32);
  int64_t full[] = {rows, cols}, bias[] = {cols};
  Tensor tp{pre.ptr, DType::F32, 2, full}, td{dy.ptr, DType::F32, 2, full},
      tw{wide.ptr, DType::F32, 2, full}, tn{narrow.ptr, DType::BF16, 2, full},
      ts{sum.ptr, DType::F32, 1, bias};
  cu::FusedStep steps[] = {{false, uint8_t(UnaryOp::GeluDerivative), 0, 0},
                           {true, uint8_t(BinaryOp::Mul), 2, 1}};
  Tensor ins[] = {tp, td};
  int64_t axis = 0;
  double unfused = timeIt(s, 3, reps, [&] {
    check("fused", cu::fusedElementwise(ins, 2, steps, 2, tw, nullptr, s));
    check("reduce", cu::reduce(ReduceOp::Sum, tw, &axis, 1, false, ts, s));
    check("cast", cu::cast(tw, tn, s));
  });
  double fused = timeIt(s, 3, reps, [&] {
    check("fused_sum", cu::fusedElementwise(ins, 2, steps, 2, tn, &ts, s));
  });
  // Bytes the fused kernel must move: two f32 inputs, the bf16 result.
  double bytes = double(rows * cols) * 10;
  Line line("fused_sum");
  line.shape(rows, cols).fixed("unfused_ms", unfused, 4);
  line.fixed("fused_ms", fused, 4).fixed("gbps", bytes / fused / 1e6, 1);
}

/// The 1B step's layer norm at [rows, n]: the forward (f32 in, bf16 out)
/// and the backward (f32 x, dy and the residual's gradient added, dx and
/// both parameter gradients), on the packed kernels and on the
/// one-block-a-row ones (LAMINA_CUDA_NORM=rows, read at each call). GB/s
/// counts the bytes each must move once: 6 an element forward, 16 back.
void benchNorm(int64_t rows, int64_t n, cudaStream_t s, int reps) {
  Buffer x(rows * n, DType::F32), y(rows * n, DType::BF16),
      dy(rows * n, DType::F32), add(rows * n, DType::F32),
      dx(rows * n, DType::F32), g(n, DType::F32), b(n, DType::F32),
      dg(n, DType::F32), db(n, DType::F32);
  int64_t full[] = {rows, n}, param[] = {n};
  Tensor tx{x.ptr, DType::F32, 2, full}, ty{y.ptr, DType::BF16, 2, full},
      tdy{dy.ptr, DType::F32, 2, full}, tadd{add.ptr, DType::F32, 2, full},
      tdx{dx.ptr, DType::F32, 2, full}, tg{g.ptr, DType::F32, 1, param},
      tb{b.ptr, DType::F32, 1, param}, tdg{dg.ptr, DType::F32, 1, param},
      tdb{db.ptr, DType::F32, 1, param};
  for (const char *path : {"packed", "rows"}) {
    if (std::strcmp(path, "rows") == 0)
      setenv("LAMINA_CUDA_NORM", "rows", 1);
    else
      unsetenv("LAMINA_CUDA_NORM");
    double fwd = timeIt(s, 3, reps, [&] {
      check("layer_norm", cu::layerNorm(tx, tg, &tb, 1, 1e-5, ty, s));
    });
    double bwd = timeIt(s, 3, reps, [&] {
      check("layer_norm_grad", cu::layerNormBackward(tx, tg, tdy, 1, 1e-5, tdx,
                                                     &tdg, &tdb, &tadd, s));
    });
    double elements = double(rows * n);
    Line line("norm");
    line.w.field("path", path);
    line.shape(rows, n).fixed("fwd_ms", fwd, 4).fixed("bwd_ms", bwd, 4);
    line.fixed("fwd_gbps", elements * 6 / fwd / 1e6, 1)
        .fixed("bwd_gbps", elements * 16 / bwd / 1e6, 1);
  }
  unsetenv("LAMINA_CUDA_NORM");
}

/// The 1B step's cross-entropy over [rows, v] logits, forward and backward
/// (the gradient stored bf16), with f32 logits and with the bf16 logits
/// graph-fuse-epilogues now stores (an f32 loss and loss gradient). GB/s
/// counts the logits read once forward and once backward, and the bf16
/// gradient written.
void benchCrossEntropy(int64_t rows, int64_t v, cudaStream_t s, int reps) {
  Buffer grad(rows * v, DType::BF16), loss(rows, DType::F32),
      gradLoss(rows, DType::F32), labels(rows, DType::F32);
  // Labels in [0, v): i32 values written over the random floats.
  std::vector<int32_t> ids(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    ids[size_t(r)] = int32_t((r * 7919) % v);
  check("cudaMemcpy", cudaMemcpy(labels.ptr, ids.data(), ids.size() * 4,
                                 cudaMemcpyHostToDevice));
  int64_t full[] = {rows, v}, row[] = {rows};
  Tensor tg{grad.ptr, DType::BF16, 2, full}, tl{loss.ptr, DType::F32, 1, row},
      tgl{gradLoss.ptr, DType::F32, 1, row},
      tlab{labels.ptr, DType::I32, 1, row};
  for (DType t : {DType::F32, DType::BF16}) {
    Buffer logits(rows * v, t);
    Tensor tx{logits.ptr, t, 2, full};
    double fwd = timeIt(s, 3, reps, [&] {
      check("cross_entropy", cu::softmaxCrossEntropy(tx, tlab, -100, tl, s));
    });
    double bwd = timeIt(s, 3, reps, [&] {
      check("cross_entropy_grad",
            cu::softmaxCrossEntropyBackward(tx, tlab, tgl, -100, tg, s));
    });
    double elements = double(rows * v), size = double(sizeOf(t));
    Line line("cross_entropy");
    line.w.field("logits", dtypeName(t));
    line.shape(rows, v).fixed("fwd_ms", fwd, 4).fixed("bwd_ms", bwd, 4);
    line.fixed("fwd_gbps", elements * size / fwd / 1e6, 1)
        .fixed("bwd_gbps", elements * (size + 2) / bwd / 1e6, 1);
  }
}
/// The AdamW update after the 1B step, its 196 parameters' shapes (97 with
/// a bf16 copy: the matrices and the two biases a layer that GEMM
/// epilogues read), one optimizerStep launch per parameter against
/// optimizerSteps' multi-tensor launches. Zero-filled buffers (the update
/// streams memory whatever the values). GB/s counts 28 bytes a parameter,
/// 30 with a copy.
void benchAdamW(cudaStream_t s, int reps) {
  struct Shape {
    int64_t rows, cols;
    bool copy;
  };
  const int64_t H = 2048, F = 4 * H, V = 50304;
  std::vector<Shape> shapes = {{V, H, true}, {H, H, false}};
  for (int l = 0; l < 16; ++l) {
    const Shape layer[] = {{1, H, false},    {1, H, false}, {H, 3 * H, true},
                           {1, 3 * H, true}, {H, H, true},  {1, H, false},
                           {1, H, false},    {1, H, false}, {H, F, true},
                           {1, F, true},     {F, H, true},  {1, H, false}};
    shapes.insert(shapes.end(), std::begin(layer), std::end(layer));
  }
  shapes.push_back({1, H, false});
  shapes.push_back({1, H, false});
  std::vector<void *> owned;
  auto zeros = [&](int64_t count, size_t size) {
    void *p = nullptr;
    check("cudaMalloc", cudaMalloc(&p, size_t(count) * size));
    check("cudaMemset", cudaMemset(p, 0, size_t(count) * size));
    owned.push_back(p);
    return p;
  };
  std::vector<std::array<int64_t, 2>> dims(shapes.size());
  std::vector<std::array<Tensor, 2>> state(shapes.size());
  std::vector<Tensor> copies(shapes.size());
  std::vector<ParamUpdate> updates;
  OptimizerConfig cfg = OptimizerConfig::adamw(0.1f);
  double params = 0, bytes = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Shape &sh = shapes[i];
    int64_t n = sh.rows * sh.cols;
    dims[i] = {sh.rows, sh.cols};
    auto f32 = [&] {
      return Tensor{zeros(n, 4), DType::F32, 2, dims[i].data()};
    };
    state[i] = {f32(), f32()};
    ParamUpdate u{&cfg, f32(), f32(), state[i].data(), nullptr};
    if (sh.copy) {
      copies[i] = Tensor{zeros(n, 2), DType::BF16, 2, dims[i].data()};
      u.copy = &copies[i];
    }
    updates.push_back(u);
    params += double(n);
    bytes += double(n) * (sh.copy ? 30 : 28);
  }
  int64_t step = 1;
  double perTensor = timeIt(s, 2, reps, [&] {
    for (const ParamUpdate &u : updates)
      check("adamw", cu::optimizerStep(*u.cfg, 1e-4f, step, u.param, u.grad,
                                       u.state, s, u.copy));
  });
  double multi = timeIt(s, 2, reps, [&] {
    check("adamw", cu::optimizerSteps(1e-4f, step, updates.data(),
                                      int(updates.size()), s));
  });
  {
    Line line("adamw");
    line.w.field("tensors", updates.size());
    line.fixed("params", params, 0).fixed("per_tensor_ms", perTensor, 4);
    line.fixed("multi_ms", multi, 4)
        .fixed("per_tensor_gbps", bytes / perTensor / 1e6, 1)
        .fixed("multi_gbps", bytes / multi / 1e6, 1);
  }
  for (void *p : owned)
    cudaFree(p);
}
} // namespace

int main(int argc, char **argv) {
  int reps = argc > 1 ? std::atoi(argv[1]) : 20;
  if (cu::deviceCount() == 0)
    die("cuda_kernels_bench", "no CUDA device");
  cudaStream_t s;
  check("stream", cudaStreamCreate(&s));
  const int64_t T = 4 * 2048, H = 2048, F = 4 * H, BH = 4 * 16, S = 2048,
                D = H / 16;
  // Forward X W, backward dX = dY W^T and dW = X^T dY, attention batched.
  const Gemm gemms[] = {
      {"qkv", {T, H}, {H, 3 * H}, false, false},
      {"qkv_dx", {T, 3 * H}, {H, 3 * H}, false, true},
      {"qkv_dw", {T, H}, {T, 3 * H}, true, false},
      {"proj", {T, H}, {H, H}, false, false},
      {"fc1", {T, H}, {H, F}, false, false},
      {"fc2", {T, F}, {F, H}, false, false},
      {"fc2_dw", {T, F}, {T, H}, true, false},
      {"scores", {BH, S, D}, {BH, S, D}, false, true},
      {"attn_v", {BH, S, S}, {BH, S, D}, false, false},
      {"attn_v_dp", {BH, S, D}, {BH, S, D}, false, true},
  };
  for (const Gemm &g : gemms)
    benchGemm(g, DType::BF16, s, reps);
  benchGemm(gemms[0], DType::F32, s, reps);
  benchAttention(s, reps);
  for (DType t : {DType::BF16, DType::F32}) {
    benchReduce(T, H, t, s, reps);
    benchReduce(T, F, t, s, reps);
    benchReduce(T, 3 * H, t, s, reps);
  }
  benchFusedSum(T, F, s, reps);
  benchFusedSum(T, H, s, reps);
  benchNorm(T, H, s, reps);
  benchCrossEntropy(T, 50304, s, reps);
  benchAdamW(s, reps);
  check("deviceStatus", cu::deviceStatus(s));
  cudaStreamDestroy(s);
  return 0;
}
