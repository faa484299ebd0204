//===- CudaOptimizerTest.cpp - device optimizer step and clipping ---------===//
//
// cuda::optimizerStep against the host Optimizer over three steps (SGD with
// momentum, dampening, Nesterov and weight decay; AdamW), and sumOfSquares /
// scaleInPlace / clipGradNorm against the host clipGradNorm, and the
// weighted accumulation of --grad-accum; the parameter's low-precision copy
// the update stores (ArgKind::ParamCopy) against the cast kernel.
//
//===----------------------------------------------------------------------===//

#include "CudaTestUtil.h"
#include "lamina/Runtime/Cuda/Optimizer.h"
#include "lamina/Runtime/Device.h"

#include <cmath>
#include <cstring>
#include <memory>

using namespace lamina::rt;
using namespace lamina::rt::test;

namespace {

#define ASSERT_OK_STATUS(expr)                                                 \
  do {                                                                         \
    ::lamina::rt::Status st_ = (expr);                                         \
    ASSERT_TRUE(st_.ok()) << st_.message();                                    \
  } while (0)

/// The host may fuse a*b+c into an FMA (-march=native); the device rounds
/// every operation. An ulp or so per step, and a value that shrinks keeps
/// the absolute difference it had (an ulp of 2 is 2.4e-7).
constexpr double kRel = 1e-6, kAbs = 1e-6;

void checkOptimizer(cudaStream_t stream, const OptimizerConfig &cfg,
                    float lr) {
  std::vector<std::vector<int64_t>> shapes = {{33, 17}, {5000}, {1}};
  Optimizer host;
  ASSERT_OK_STATUS(host.init(cfg, {"w", "b", "s"}, shapes));
  int slots = host.numSlots();
  std::vector<Buf> params;
  std::vector<std::unique_ptr<Dev>> dparams, dstate;
  for (const auto &s : shapes) {
    params.push_back(randomF32(s));
    dparams.push_back(std::make_unique<Dev>(params.back()));
    for (int k = 0; k < slots; ++k)
      dstate.push_back(std::make_unique<Dev>(DType::F32, s)); // zeroed
  }
  for (int64_t step = 1; step <= 3; ++step) {
    std::vector<Buf> grads;
    std::vector<Tensor> pv, gv;
    for (size_t i = 0; i < shapes.size(); ++i) {
      grads.push_back(randomF32(shapes[i]));
      pv.push_back(params[i].view());
    }
    for (Buf &g : grads)
      gv.push_back(g.view());
    ASSERT_OK_STATUS(host.step(lr, pv.data(), gv.data(), int(pv.size())));
    for (size_t i = 0; i < shapes.size(); ++i) {
      Dev dg(grads[i]);
      Tensor st[2];
      for (int k = 0; k < slots; ++k)
        st[k] = dstate[i * slots + k]->view();
      EXPECT_OK(cu::optimizerStep(cfg, lr, step, dparams[i]->view(),
                                  dg.view(), slots ? st : nullptr, stream));
      EXPECT_OK(cu::deviceStatus(stream));
    }
    for (size_t i = 0; i < shapes.size(); ++i) {
      EXPECT_TRUE(allClose(dparams[i]->download(), params[i], kRel, kAbs))
          << "parameter " << i << " after step " << step;
      for (int k = 0; k < slots; ++k) {
        Tensor hs = host.state(int(i), k);
        Buf want(DType::F32, shapes[i]);
        std::memcpy(want.bytes.data(), hs.data, want.bytes.size());
        EXPECT_TRUE(allClose(dstate[i * slots + k]->download(), want, kRel,
                             kAbs))
            << host.slotName(k) << " of " << i << " after step " << step;
      }
    }
  }
}

TEST_F(CudaKernel, SgdMatchesHostOptimizer) {
  checkOptimizer(stream, OptimizerConfig::sgd(), 0.1f);
  checkOptimizer(stream, OptimizerConfig::sgd(0.9f), 0.05f);
  checkOptimizer(stream, OptimizerConfig::sgd(0.9f, 0.01f), 0.05f);
  checkOptimizer(stream, OptimizerConfig::sgd(0.9f, 0.01f, true), 0.05f);
  OptimizerConfig damp = OptimizerConfig::sgd(0.8f, 0.001f);
  damp.dampening = 0.3f;
  checkOptimizer(stream, damp, 0.02f);
}

TEST_F(CudaKernel, AdamWMatchesHostOptimizer) {
  checkOptimizer(stream, OptimizerConfig::adamw(), 1e-3f);
  checkOptimizer(stream, OptimizerConfig::adamw(0.1f), 3e-2f);
  OptimizerConfig c = OptimizerConfig::adamw(0.0f);
  c.beta1 = 0.4f; // lerp weight 1 - beta1 >= 0.5: the other formula
  c.beta2 = 0.95f;
  checkOptimizer(stream, c, 1e-2f);
}

/// With a copy, the update computes the same parameter, and stores it in
/// the copy with the cast kernel's rounding, bit for bit: odd sizes (the
/// scalar kernels) and multiples of 4 (AdamW's 4-wide kernel), bf16 and f16.
TEST_F(CudaKernel, UpdateStoresTheParametersCopyAsTheCastRoundsIt) {
  for (const OptimizerConfig &cfg :
       {OptimizerConfig::adamw(0.1f), OptimizerConfig::sgd(0.9f, 0.01f)})
    for (DType copyType : {DType::BF16, DType::F16})
      for (std::vector<int64_t> shape :
           {std::vector<int64_t>{33, 17}, std::vector<int64_t>{5000}}) {
        int slots = optimizerSlots(cfg);
        Buf init = randomF32(shape);
        Dev plain(init), withCopy(init), copy(copyType, shape),
            cast(copyType, shape);
        std::vector<std::unique_ptr<Dev>> state;
        for (int k = 0; k < 2 * slots; ++k)
          state.push_back(std::make_unique<Dev>(DType::F32, shape));
        for (int64_t step = 1; step <= 2; ++step) {
          Dev g(randomF32(shape));
          Tensor a[2], b[2];
          for (int k = 0; k < slots; ++k) {
            a[k] = state[size_t(k)]->view();
            b[k] = state[size_t(slots + k)]->view();
          }
          Tensor cv = copy.view();
          EXPECT_OK(cu::optimizerStep(cfg, 0.05f, step, plain.view(), g.view(),
                                      slots ? a : nullptr, stream));
          EXPECT_OK(cu::optimizerStep(cfg, 0.05f, step, withCopy.view(),
                                      g.view(), slots ? b : nullptr, stream,
                                      &cv));
          EXPECT_OK(cu::cast(withCopy.view(), cast.view(), stream));
          EXPECT_OK(cu::deviceStatus(stream));
          EXPECT_EQ(withCopy.download().bytes, plain.download().bytes)
              << "step " << step;
          EXPECT_EQ(copy.download().bytes, cast.download().bytes)
              << "step " << step << ", " << shape.size() << "-d";
        }
      }
}

/// The kernels `enqueue` (returning a Status) launches on `stream`,
/// counted in a graph captured from it; the graph then runs to the end.
template <typename F> size_t launchesOf(cudaStream_t stream, F &&enqueue) {
  cudaGraph_t graph = nullptr;
  size_t nodes = 0;
  EXPECT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
            cudaSuccess);
  EXPECT_OK(enqueue());
  EXPECT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  EXPECT_EQ(cudaGraphGetNodes(graph, nullptr, &nodes), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  EXPECT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  EXPECT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return nodes;
}

/// One parameter of an optimizerSteps test on its own device buffers.
struct UpdateCase {
  OptimizerConfig cfg;
  std::vector<int64_t> shape;
  DType copyType = DType::F32; ///< F32: no copy
  bool misaligned = false;     ///< the parameter one element off
};

struct UpdateBuffers {
  std::unique_ptr<Dev> param, copy;
  std::unique_ptr<MisalignedDev> shifted;
  std::vector<std::unique_ptr<Dev>> state;
  Tensor stateViews[2], copyView;

  UpdateBuffers(const UpdateCase &c, const Buf &init) {
    if (c.misaligned)
      shifted = std::make_unique<MisalignedDev>(init);
    else
      param = std::make_unique<Dev>(init);
    if (c.copyType != DType::F32) {
      copy = std::make_unique<Dev>(c.copyType, c.shape);
      copyView = copy->view();
    }
    for (int k = 0; k < optimizerSlots(c.cfg); ++k) {
      state.push_back(std::make_unique<Dev>(DType::F32, c.shape));
      stateViews[k] = state.back()->view();
    }
  }
  Tensor paramView() { return shifted ? shifted->view() : param->view(); }
  ParamUpdate update(const UpdateCase &c, Dev &grad) {
    return {&c.cfg, paramView(), grad.view(),
            state.empty() ? nullptr : stateViews, copy ? &copyView : nullptr};
  }
  /// The parameter, its state and its copy, for comparing bits.
  std::vector<Buf> contents() const {
    std::vector<Buf> all{shifted ? shifted->download() : param->download()};
    for (const auto &s : state)
      all.push_back(s->download());
    if (copy)
      all.push_back(copy->download());
    return all;
  }
};

/// The updates one optimizerSteps call makes: 71 4-wide AdamW updates with
/// one set of coefficients and bf16 copies (two launches of at most 64),
/// three with other coefficients (no weight decay; one launch), one with
/// no copy and one with an f16 copy (one each), and four that launch alone
/// (odd size, misaligned, SGD) or not at all (empty).
std::vector<UpdateCase> updateCases() {
  std::vector<UpdateCase> cases;
  OptimizerConfig decay = OptimizerConfig::adamw(0.1f);
  for (int i = 0; i < 70; ++i)
    cases.push_back({decay, {int64_t(4 * (1 + 13 * i))}, DType::BF16});
  cases.push_back({decay, {3000, 4}, DType::BF16}); // 4 groups a thread
  for (int i = 0; i < 3; ++i)
    cases.push_back({OptimizerConfig::adamw(0.0f), {2048}, DType::BF16});
  cases.push_back({decay, {1024}});
  cases.push_back({decay, {64, 64}, DType::F16});
  cases.push_back({decay, {33, 17}, DType::BF16});
  cases.push_back({decay, {400}, DType::F32, /*misaligned=*/true});
  cases.push_back({decay, {0}, DType::BF16});
  cases.push_back({OptimizerConfig::sgd(0.9f, 0.01f), {5000}});
  return cases;
}
constexpr size_t kUpdateLaunches = 2 + 1 + 1 + 1 + 3;

/// optimizerSteps computes what one optimizerStep per parameter computes,
/// bit for bit (parameters, state, copies), in fewer launches: the graph
/// captured from it has kUpdateLaunches kernels for 81 parameters.
TEST_F(CudaKernel, OptimizerStepsMatchOneStepPerParameter) {
  std::vector<UpdateCase> cases = updateCases();
  std::vector<std::unique_ptr<UpdateBuffers>> one, many;
  for (const UpdateCase &c : cases) {
    Buf init = randomF32(c.shape);
    one.push_back(std::make_unique<UpdateBuffers>(c, init));
    many.push_back(std::make_unique<UpdateBuffers>(c, init));
  }
  const float lr = 0.03f;
  for (int64_t step = 1; step <= 2; ++step) {
    std::vector<std::unique_ptr<Dev>> grads;
    std::vector<ParamUpdate> updates;
    for (size_t i = 0; i < cases.size(); ++i) {
      grads.push_back(std::make_unique<Dev>(randomF32(cases[i].shape)));
      ParamUpdate u = one[i]->update(cases[i], *grads.back());
      EXPECT_OK(cu::optimizerStep(*u.cfg, lr, step, u.param, u.grad, u.state,
                                  stream, u.copy));
      updates.push_back(many[i]->update(cases[i], *grads.back()));
    }
    sync();
    // Captured, to count its launches, then run.
    EXPECT_EQ(launchesOf(stream,
                         [&] {
                           return cu::optimizerSteps(lr, step, updates.data(),
                                                     int(updates.size()),
                                                     stream);
                         }),
              kUpdateLaunches);
    sync();
    for (size_t i = 0; i < cases.size(); ++i) {
      std::vector<Buf> a = one[i]->contents(), b = many[i]->contents();
      ASSERT_EQ(a.size(), b.size());
      for (size_t k = 0; k < a.size(); ++k)
        EXPECT_TRUE(a[k].bytes == b[k].bytes)
            << "update " << i << " buffer " << k << " step " << step;
    }
  }
}

/// Every update is checked before the first launch: a bad one at the end
/// leaves the others untouched.
TEST_F(CudaKernel, OptimizerStepsCheckEveryUpdateFirst) {
  UpdateCase good{OptimizerConfig::adamw(), {1024}, DType::BF16};
  Buf init = randomF32(good.shape);
  UpdateBuffers a(good, init);
  Dev g(randomF32(good.shape));
  std::vector<ParamUpdate> updates{a.update(good, g), a.update(good, g)};
  updates[1].state = nullptr;
  EXPECT_ERROR(cu::optimizerSteps(0.1f, 1, updates.data(), 2, stream),
               "state buffers expected");
  updates[1] = a.update(good, g);
  updates[1].cfg = nullptr;
  EXPECT_ERROR(cu::optimizerSteps(0.1f, 1, updates.data(), 2, stream),
               "update 1 has no configuration");
  sync();
  EXPECT_TRUE(a.contents()[0].bytes == init.bytes);
}

/// Tensors of assorted sizes: empty, tiny, several blocks, and more than one
/// launch's worth (70 > 64 tensors).
std::vector<Buf> gradients(float scale) {
  std::vector<Buf> g;
  g.push_back(randomF32({0}));
  g.push_back(randomF32({3}, -scale, scale));
  g.push_back(randomF32({300000}, -scale, scale));
  for (int i = 0; i < 67; ++i)
    g.push_back(randomF32({int64_t(1 + 97 * i)}, -scale, scale));
  return g;
}

TEST_F(CudaKernel, ClipGradNormMatchesHost) {
  for (float maxNorm : {1.0f, 1e6f}) { // clips, does not clip
    std::vector<Buf> host = gradients(0.5f);
    std::vector<std::unique_ptr<Dev>> dev;
    std::vector<Tensor> hv, dv;
    for (Buf &b : host) {
      dev.push_back(std::make_unique<Dev>(b));
      dv.push_back(dev.back()->view());
      hv.push_back(b.view());
    }
    double hostSum = 0;
    for (Buf &b : host)
      for (float x : b.values<float>())
        hostSum += double(x) * double(x);
    double *dnorm = nullptr;
    ASSERT_EQ(cudaMalloc(&dnorm, sizeof(double)), cudaSuccess);
    EXPECT_OK(cu::sumOfSquares(dv.data(), int(dv.size()), dnorm, stream));
    sync();
    double first = 0, second = 0;
    ASSERT_EQ(cudaMemcpy(&first, dnorm, 8, cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_TRUE(close(first, hostSum, 1e-10)); // 520k terms, another order
    // Deterministic: the same bits again.
    EXPECT_OK(cu::sumOfSquares(dv.data(), int(dv.size()), dnorm, stream));
    sync();
    ASSERT_EQ(cudaMemcpy(&second, dnorm, 8, cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_EQ(std::memcmp(&first, &second, 8), 0);

    double hostNorm = 0;
    EXPECT_OK(clipGradNorm(hv.data(), int(hv.size()), maxNorm, hostNorm));
    EXPECT_OK(cu::clipGradNorm(dv.data(), int(dv.size()), maxNorm, dnorm,
                               stream));
    sync();
    double devNorm = 0;
    ASSERT_EQ(cudaMemcpy(&devNorm, dnorm, 8, cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_TRUE(close(devNorm, hostNorm, 1e-10));
    for (size_t i = 0; i < host.size(); ++i)
      ASSERT_TRUE(allClose(dev[i]->download(), host[i], 1e-7, 0))
          << "tensor " << i << " max norm " << maxNorm;
    cudaFree(dnorm);
  }
}

TEST_F(CudaKernel, ScaleInPlaceSkipsNonFiniteNorms) {
  Buf g = randomF32({1000});
  Dev dg(g);
  Tensor v = dg.view();
  double *dnorm = nullptr;
  ASSERT_EQ(cudaMalloc(&dnorm, sizeof(double)), cudaSuccess);
  for (double norm : {double(NAN), double(INFINITY), 0.5}) {
    ASSERT_EQ(cudaMemcpy(dnorm, &norm, 8, cudaMemcpyHostToDevice),
              cudaSuccess);
    EXPECT_OK(cu::scaleInPlace(&v, 1, dnorm, 1.0f, stream));
    sync();
    EXPECT_EQ(dg.download().bytes, g.bytes) << "norm " << norm;
  }
  cudaFree(dnorm);
}

TEST_F(CudaKernel, AccumulateScaledRoundsAsWritten) {
  // dst + scale * src, each operation rounded once: a micro-batch's
  // weighted gradient (run --grad-accum).
  Buf dst = randomF32({5001}), src = randomF32({5001});
  Dev ddst(dst), dsrc(src);
  const float scale = 0.37f;
  EXPECT_OK(cu::accumulateScaled(static_cast<float *>(ddst.ptr),
                                 static_cast<const float *>(dsrc.ptr), 5001,
                                 scale, stream));
  sync();
  Buf got = ddst.download();
  for (int64_t i = 0; i < dst.count(); ++i) {
    volatile float product = scale * src.data<float>()[i];
    float want = dst.data<float>()[i] + product;
    ASSERT_EQ(got.data<float>()[i], want) << "element " << i;
  }
}

/// What accumulateMany's sums are checked against, one call at a time:
/// accumulateScaled, or binary Add for scale 1 (after a fill for intoZeros).
void addOne(const GradientSum &s, cudaStream_t stream) {
  if (s.intoZeros) {
    EXPECT_EQ(cudaMemsetAsync(s.dst, 0, size_t(s.n) * sizeof(float), stream),
              cudaSuccess);
  }
  if (s.scale != 1.0f) {
    EXPECT_OK(cu::accumulateScaled(s.dst, s.src, s.n, s.scale, stream));
  } else if (s.n) {
    int64_t shape[] = {s.n};
    Tensor d{s.dst, DType::F32, 1, shape},
        g{const_cast<float *>(s.src), DType::F32, 1, shape};
    EXPECT_OK(cu::binary(BinaryOp::Add, d, g, d, stream));
  }
}

/// The first of a step's gradients (--grad-accum's first batch, the
/// distributed executor's first micro-batch): a sum intoZeros leaves the
/// bits a zero fill and an accumulation leave (scaled, and scale 1's plain
/// sum, which turns -0 into +0) in a buffer it neither fills nor reads, on
/// the device and on the host device.
TEST_F(CudaKernel, AccumulateIntoZerosIsAFillAndAnAccumulate) {
  Buf src = randomF32({5001});
  src.data<float>()[7] = -0.0f;
  src.data<float>()[8] = 1e-40f; // subnormal
  Dev dsrc(src);
  const int64_t n = src.count();
  const auto *g = static_cast<const float *>(dsrc.ptr);
  for (float scale : {0.37f, 1.0f}) {
    Dev filled(randomF32({n})), direct(randomF32({n}));
    addOne({static_cast<float *>(filled.ptr), g, n, true, scale}, stream);
    GradientSum sum{static_cast<float *>(direct.ptr), g, n, true, scale};
    EXPECT_OK(cu::accumulateMany(&sum, 1, stream));
    sync();
    Buf want = filled.download(), got = direct.download();
    EXPECT_TRUE(got.bytes == want.bytes) << "scale " << scale;
    EXPECT_EQ(std::signbit(got.data<float>()[7]), false);

    Buf hostFilled(DType::F32, {n}), hostDirect = randomF32({n});
    Device &host = hostDevice();
    EXPECT_OK(
        host.accumulate(hostFilled.data<float>(), src.data<float>(), n, scale));
    GradientSum hostSum{hostDirect.data<float>(), src.data<float>(), n, true,
                        scale};
    EXPECT_OK(host.accumulateMany(&hostSum, 1));
    EXPECT_TRUE(hostDirect.bytes == hostFilled.bytes)
        << "host, scale " << scale;
  }
}

/// accumulateMany: each sum as addOne computes it, bit for bit, 64 sums a
/// launch (71 non-empty sums, onto zeros or not, scaled or not, one empty:
/// 2 kernels in the captured graph).
TEST_F(CudaKernel, AccumulateManyMatchesOneSumAtATime) {
  std::vector<std::unique_ptr<Dev>> srcs, one, many;
  std::vector<GradientSum> sums;
  for (int i = 0; i < 72; ++i) {
    int64_t n = i == 5 ? 0 : int64_t(1 + 61 * i) + (i == 9 ? 70000 : 0);
    Buf init = randomF32({n});
    srcs.push_back(std::make_unique<Dev>(randomF32({n})));
    one.push_back(std::make_unique<Dev>(init));
    many.push_back(std::make_unique<Dev>(init));
    auto *src = static_cast<const float *>(srcs.back()->ptr);
    bool zeros = i % 3 == 0;
    float scale = i % 4 == 1 ? 0.37f : 1.0f;
    addOne({static_cast<float *>(one.back()->ptr), src, n, zeros, scale},
           stream);
    sums.push_back(
        {static_cast<float *>(many.back()->ptr), src, n, zeros, scale});
  }
  EXPECT_EQ(launchesOf(stream,
                       [&] {
                         return cu::accumulateMany(sums.data(),
                                                   int(sums.size()), stream);
                       }),
            2u);
  sync();
  for (size_t i = 0; i < sums.size(); ++i)
    EXPECT_TRUE(one[i]->download().bytes == many[i]->download().bytes)
        << "sum " << i;
  GradientSum bad{nullptr, nullptr, 4, false};
  EXPECT_ERROR(cu::accumulateMany(&bad, 1, stream), "sum 0 has no buffers");
}

//===----------------------------------------------------------------------===//
// Argument checks: no device needed
//===----------------------------------------------------------------------===//

TEST(CudaChecks, OptimizerChecks) {
  int64_t s4[] = {4};
  float dummy[4];
  Tensor p{dummy, DType::F32, 1, s4}, h{dummy, DType::F16, 1, s4};
  cudaStream_t s = nullptr;
  OptimizerConfig nesterov = OptimizerConfig::sgd(0, 0, true);
  EXPECT_ERROR(cu::optimizerStep(nesterov, 0.1f, 1, p, p, nullptr, s),
               "Nesterov momentum needs momentum > 0");
  EXPECT_ERROR(cu::optimizerStep(OptimizerConfig::sgd(), 0.1f, 1, h, h,
                                 nullptr, s),
               "must be f32");
  EXPECT_ERROR(cu::optimizerStep(OptimizerConfig::adamw(), 0.1f, 1, p, p,
                                 nullptr, s),
               "state buffers expected");
  EXPECT_ERROR(cu::optimizerStep(OptimizerConfig::sgd(), 0.1f, 0, p, p,
                                 nullptr, s),
               "must be >= 1");
  EXPECT_ERROR(cu::optimizerStep(OptimizerConfig::sgd(), -1.0f, 1, p, p,
                                 nullptr, s),
               "invalid learning rate");
  EXPECT_ERROR(
      cu::optimizerStep(OptimizerConfig::sgd(), 0.1f, 1, p, p, nullptr, s, &p),
      "must be f16 or bf16 of the parameter's shape");
  EXPECT_ERROR(cu::sumOfSquares(&h, 1, nullptr, s), "expected f32");
  EXPECT_ERROR(cu::scaleInPlace(&p, 1, nullptr, 0.0f, s),
               "max norm must be positive");
}

} // namespace
