//===- OptimizerTest.cpp - SGD, AdamW, clipping, LR schedules -------------===//
//
// Reference values come from the torch.optim formulas evaluated in numpy
// float32 (the script is below), checked by hand for the first step:
// AdamW step 1 from p = 1, g = 0.1, lr = 0.01, wd = 0.1:
// p = 0.999, m = 0.01, v = 1e-5, m^ = 0.1, sqrt(v^) = 0.1, p -= 0.01 -> 0.989.
//
//   def adamw(p, grads, lr, wd, b1=0.9, b2=0.999, eps=1e-8):
//     m = v = zeros
//     for t, g in enumerate(grads, 1):
//       p = p * f32(1 - lr * wd); m = m + f32(1 - b1) * (g - m)
//       v = v * f32(b2) + f32(1 - b2) * g * g
//       denom = sqrt(v) / f32(sqrt(1 - b2**t)) + f32(eps)
//       p = p + f32(-lr / (1 - b1**t)) * m / denom
//   def sgd(p, grads, lr, mom, wd, nesterov):
//     for t, g in enumerate(grads, 1):
//       d = g + wd * p
//       buf = d if t == 1 else mom * buf + d
//       p = p - lr * (d + mom * buf if nesterov else buf)
//
//===----------------------------------------------------------------------===//

#include "lamina/Runtime/Optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

using namespace lamina::rt;

namespace {

/// Runs `grads.size()` steps on one parameter and returns it after each.
std::vector<std::vector<float>> steps(const OptimizerConfig &config, float lr,
                                      std::vector<float> p,
                                      const std::vector<std::vector<float>> &grads) {
  std::vector<int64_t> shape{int64_t(p.size())};
  Optimizer opt;
  EXPECT_TRUE(opt.init(config, {"w"}, {shape}).ok());
  std::vector<std::vector<float>> out;
  for (auto g : grads) {
    Tensor pt{p.data(), DType::F32, 1, shape.data()};
    Tensor gt{g.data(), DType::F32, 1, shape.data()};
    Status s = opt.step(lr, &pt, &gt, 1);
    EXPECT_TRUE(s.ok()) << s.message();
    out.push_back(p);
  }
  EXPECT_EQ(opt.stepCount(), int64_t(grads.size()));
  return out;
}

void expectNear(const std::vector<std::vector<float>> &got,
                const std::vector<std::vector<double>> &want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t s = 0; s < got.size(); ++s)
    for (size_t i = 0; i < want[s].size(); ++i)
      EXPECT_NEAR(got[s][i], want[s][i], 2e-7 * std::max(1.0, std::fabs(want[s][i])))
          << "step " << s + 1 << " element " << i;
}

const std::vector<std::vector<float>> kSgdGrads = {
    {0.5f, 0.25f}, {-0.25f, 1.0f}, {0.125f, -0.5f}};

TEST(OptimizerTest, PlainSgd) {
  expectNear(steps(OptimizerConfig::sgd(), 0.1f, {1, -2}, kSgdGrads),
             {{0.95, -2.025}, {0.975, -2.125}, {0.9625, -2.075}});
}

TEST(OptimizerTest, SgdMomentumWeightDecay) {
  expectNear(steps(OptimizerConfig::sgd(0.9f, 0.1f), 0.1f, {1, -2}, kSgdGrads),
             {{0.94, -2.005}, {0.9016, -2.08945}, {0.845524, -2.0945606}});
}

TEST(OptimizerTest, SgdNesterov) {
  expectNear(
      steps(OptimizerConfig::sgd(0.9f, 0.1f, true), 0.1f, {1, -2}, kSgdGrads),
      {{0.886, -2.0095}, {0.86806595, -2.16536951}, {0.7971561, -2.09759545}});
}

TEST(OptimizerTest, AdamWMatchesTorchFormulas) {
  expectNear(steps(OptimizerConfig::adamw(0.1f), 0.01f, {1.0f, -0.5f, 2.0f},
                   {{0.1f, -0.2f, 0.3f}, {0.2f, 0.1f, -0.1f}, {-0.3f, 0.05f, 0.0f}}),
             {{0.98900002, -0.48950002, 1.98800004},
              {0.97835922, -0.48634714, 1.98200989},
              {0.97804683, -0.4852469, 1.97693419}});
}

TEST(OptimizerTest, StateIsVisibleAndRestorable) {
  // Two optimizers: the second gets the first's state after step 1 and
  // must then produce the same step 2 (what a checkpoint relies on).
  std::vector<int64_t> shape{2};
  Optimizer a, b;
  ASSERT_TRUE(a.init(OptimizerConfig::adamw(), {"w"}, {shape}).ok());
  ASSERT_TRUE(b.init(OptimizerConfig::adamw(), {"w"}, {shape}).ok());
  EXPECT_EQ(a.numSlots(), 2);
  EXPECT_STREQ(a.slotName(1), "exp_avg_sq");
  std::vector<float> p{1, 2}, g1{0.5f, -1}, g2{0.25f, 3};
  Tensor pt{p.data(), DType::F32, 1, shape.data()};
  Tensor g1t{g1.data(), DType::F32, 1, shape.data()};
  Tensor g2t{g2.data(), DType::F32, 1, shape.data()};
  ASSERT_TRUE(a.step(0.1f, &pt, &g1t, 1).ok());
  std::vector<float> q = p;
  Tensor qt{q.data(), DType::F32, 1, shape.data()};
  for (int s = 0; s < 2; ++s)
    std::copy_n(a.state(0, s).as<float>(), 2, b.state(0, s).as<float>());
  b.setStepCount(a.stepCount());
  ASSERT_TRUE(a.step(0.1f, &pt, &g2t, 1).ok());
  ASSERT_TRUE(b.step(0.1f, &qt, &g2t, 1).ok());
  EXPECT_EQ(p, q);
}

TEST(OptimizerTest, Errors) {
  Optimizer opt;
  OptimizerConfig bad = OptimizerConfig::sgd(0, 0, /*nesterov=*/true);
  Status s = opt.init(bad, {"w"}, {{2}});
  EXPECT_NE(s.message().find("Nesterov"), std::string::npos) << s.message();
  OptimizerConfig beta = OptimizerConfig::adamw();
  beta.beta2 = 1.0f;
  EXPECT_NE(opt.init(beta, {"w"}, {{2}}).message().find("beta2"),
            std::string::npos);

  ASSERT_TRUE(opt.init(OptimizerConfig::adamw(), {"w"}, {{2}}).ok());
  int64_t shape[] = {2}, other[] = {3};
  uint16_t half[2] = {};
  float f[3] = {};
  Tensor p16{half, DType::F16, 1, shape}, p3{f, DType::F32, 1, other};
  Tensor g{f, DType::F32, 1, shape};
  s = opt.step(0.1f, &p16, &g, 1);
  EXPECT_NE(s.message().find("parameter 'w' must be f32 [2]"),
            std::string::npos)
      << s.message();
  EXPECT_FALSE(opt.step(0.1f, &p3, &g, 1).ok());
  EXPECT_FALSE(opt.step(0.1f, &g, &g, 2).ok());
  EXPECT_FALSE(opt.step(-1.0f, &g, &g, 1).ok());
  EXPECT_EQ(opt.stepCount(), 0) << "a refused step must not count";
}

TEST(OptimizerTest, ClipGradNorm) {
  int64_t shape[] = {2};
  std::vector<float> a{3, 0}, b{0, 4};
  Tensor g[] = {{a.data(), DType::F32, 1, shape}, {b.data(), DType::F32, 1, shape}};
  double norm = 0;
  ASSERT_TRUE(clipGradNorm(g, 2, 10.0f, norm).ok());
  EXPECT_DOUBLE_EQ(norm, 5.0);
  EXPECT_EQ(a[0], 3.0f) << "under the limit: unchanged";
  ASSERT_TRUE(clipGradNorm(g, 2, 1.0f, norm).ok());
  EXPECT_DOUBLE_EQ(norm, 5.0);
  EXPECT_FLOAT_EQ(a[0], float(3.0 / (5.0 + 1e-6)));
  EXPECT_FLOAT_EQ(b[1], float(4.0 / (5.0 + 1e-6)));

  a[0] = NAN;
  std::vector<float> before = b;
  ASSERT_TRUE(clipGradNorm(g, 2, 1.0f, norm).ok());
  EXPECT_TRUE(std::isnan(norm));
  EXPECT_EQ(b, before) << "a non-finite norm leaves the gradients alone";
  EXPECT_FALSE(clipGradNorm(g, 2, 0.0f, norm).ok());
}

TEST(OptimizerTest, Schedules) {
  LrSchedule constant;
  constant.lr = 0.5;
  EXPECT_EQ(constant.at(0), 0.5);
  EXPECT_EQ(constant.at(1000), 0.5);

  LrSchedule cos{LrScheduleKind::WarmupCosine, 1.0, 4, 14, 0.1};
  ASSERT_TRUE(cos.validate().ok());
  EXPECT_DOUBLE_EQ(cos.at(0), 0.2); // (0 + 1) / (4 + 1)
  EXPECT_DOUBLE_EQ(cos.at(3), 0.8);
  EXPECT_DOUBLE_EQ(cos.at(4), 1.0); // warm-up done: the peak
  EXPECT_DOUBLE_EQ(cos.at(9), 0.55); // half way: 0.1 + 0.5 * 0.9
  EXPECT_NEAR(cos.at(14), 0.1, 1e-15);
  EXPECT_DOUBLE_EQ(cos.at(15), 0.1);
  EXPECT_DOUBLE_EQ(cos.at(1 << 30), 0.1);
  for (int64_t s = 4; s < 14; ++s)
    EXPECT_GT(cos.at(s), cos.at(s + 1)) << "cosine decays monotonically";

  LrSchedule bad = cos;
  bad.decaySteps = 4;
  EXPECT_NE(bad.validate().message().find("decay steps (4)"),
            std::string::npos);
  bad = cos;
  bad.minLr = 2.0;
  EXPECT_FALSE(bad.validate().ok());

  // Every kind warms up; constant then stays at the peak.
  LrSchedule warm{LrScheduleKind::Constant, 1.0, 4, 14, 0.1};
  EXPECT_DOUBLE_EQ(warm.at(0), 0.2);
  EXPECT_DOUBLE_EQ(warm.at(4), 1.0);
  EXPECT_DOUBLE_EQ(warm.at(1 << 30), 1.0);

  LrSchedule lin{LrScheduleKind::Linear, 1.0, 4, 14, 0.1};
  ASSERT_TRUE(lin.validate().ok());
  EXPECT_DOUBLE_EQ(lin.at(3), 0.8);
  EXPECT_DOUBLE_EQ(lin.at(4), 1.0);
  EXPECT_DOUBLE_EQ(lin.at(9), 0.55); // half way
  EXPECT_DOUBLE_EQ(lin.at(11), 0.1 + 0.3 * 0.9);
  EXPECT_NEAR(lin.at(14), 0.1, 1e-15);
  EXPECT_DOUBLE_EQ(lin.at(20), 0.1);

  // Warm-up 4, stable to step 9, a 5-step linear cooldown to step 14.
  LrSchedule wsd{LrScheduleKind::Wsd, 1.0, 4, 14, 0.1, 5};
  ASSERT_TRUE(wsd.validate().ok());
  EXPECT_DOUBLE_EQ(wsd.at(2), 0.6);
  EXPECT_DOUBLE_EQ(wsd.at(4), 1.0);
  EXPECT_DOUBLE_EQ(wsd.at(8), 1.0);
  EXPECT_DOUBLE_EQ(wsd.at(9), 1.0); // the cooldown's first step
  EXPECT_DOUBLE_EQ(wsd.at(10), 0.1 + 0.8 * 0.9);
  EXPECT_DOUBLE_EQ(wsd.at(13), 0.1 + 0.2 * 0.9);
  EXPECT_NEAR(wsd.at(14), 0.1, 1e-15);
  EXPECT_DOUBLE_EQ(wsd.at(15), 0.1);
  bad = wsd;
  bad.cooldownSteps = 11;
  EXPECT_NE(bad.validate().message().find("cooldown steps (11) must be in "
                                          "[1, 10]"),
            std::string::npos);
  bad.cooldownSteps = 0;
  EXPECT_FALSE(bad.validate().ok());
}

} // namespace
