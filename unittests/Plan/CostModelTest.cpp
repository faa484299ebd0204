//===- CostModelTest.cpp - the cost model against METHODS.md --------------===//

#include "lamina/Plan/CostModel.h"
#include "lamina/Plan/Synthetic.h"

#include "PlanTestUtil.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace lamina::plan;
using namespace lamina::plan::test;
using lamina::schedule::ScheduleKind;

namespace {

Plan evaluate(const ModelDesc &d, const PlanConfig &c,
              const Hardware &hw = unitHardware()) {
  auto p = evaluatePlan(d, c, hw);
  EXPECT_TRUE(p.ok()) << describeConfig(c) << ": " << p.error();
  return p.ok() ? *p : Plan();
}

// Unit forward, backward 2 (no recompute), free communication: the
// simulated bubbles equal METHODS.md section 2's formulas counted in units
// of one module's forward + backward.
TEST(CostModel, BubbleFormulas) {
  for (int p : {2, 4})
    for (int m : {4, 8, 12})
      for (int k : {1, 2, 3}) { // modules per rank
        const int L = k * p;
        ModelDesc d = uniformLayers(L);
        SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m) +
                     " L=" + std::to_string(L));
        for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB}) {
          Plan pl = evaluate(d, config(kind, p, m));
          EXPECT_NEAR(pl.bubbleFraction, (p - 1.0) / (m + p - 1), 1e-9);
          EXPECT_DOUBLE_EQ(pl.stepTime, (m + p - 1) * k * 3.0);
        }
        if (m % p == 0) {
          Plan pl = evaluate(d, config(ScheduleKind::Interleaved1F1B, p, m));
          const int v = k;
          EXPECT_NEAR(pl.bubbleFraction, (p - 1.0) / (v * m + p - 1), 1e-9);
        }
        Plan bf = evaluate(d, config(ScheduleKind::BreadthFirst, p, m));
        EXPECT_NEAR(bf.bubbleFraction, (p - 1.0) / (double(L) / p * m + p - 1),
                    1e-9);
      }
  Plan layered = evaluate(uniformLayers(4), config(ScheduleKind::Layered, 1, 3));
  EXPECT_DOUBLE_EQ(layered.bubbleFraction, 0);
  EXPECT_DOUBLE_EQ(layered.stepTime, 4 * 3 * 3.0);
}

// Interleaved 1F1B with explicit chunks groups layers: v = 2 chunks of 2
// layers each on p = 2 gives (p-1)/(v m + p-1).
TEST(CostModel, InterleavedChunks) {
  PlanConfig c = config(ScheduleKind::Interleaved1F1B, 2, 4);
  c.chunks = 2;
  Plan pl = evaluate(uniformLayers(8), c);
  EXPECT_EQ(pl.stages.size(), 4u);
  EXPECT_NEAR(pl.bubbleFraction, 1.0 / (2 * 4 + 1), 1e-9);
}

// METHODS.md section 4: per-rank ring volume of the data-parallel traffic.
TEST(CostModel, DataParallelVolumes) {
  const int L = 4, p = 2, d = 4;
  const int64_t N = 1000; // parameters per layer
  ModelDesc desc = uniformLayers(L, 1, N, 64);
  const double Nrank = 2 * N; // two layers per rank
  for (ScheduleKind kind : {ScheduleKind::OneFOneB, ScheduleKind::BreadthFirst})
    for (int zero = 0; zero <= 2; ++zero) {
      Plan pl = evaluate(desc, config(kind, p, 4, d, zero));
      for (const RankStats &r : pl.ranks)
        EXPECT_DOUBLE_EQ(r.traffic.dataParallel,
                         2.0 * (d - 1) / d * Nrank * 2 /*bytes*/)
            << "zero " << zero;
    }
  // Level 3, LGA: 2 all-gathers + 1 reduce-scatter per module, whatever m.
  for (int m : {2, 4, 8}) {
    Plan pl = evaluate(desc, config(ScheduleKind::BreadthFirst, p, m, d, 3));
    for (const RankStats &r : pl.ranks)
      EXPECT_DOUBLE_EQ(r.traffic.dataParallel, 3.0 * (d - 1) / d * Nrank * 2)
          << "m " << m;
  }
  Plan l2 = evaluate(desc, config(ScheduleKind::Layered, 1, 2, d, 3));
  Plan l8 = evaluate(desc, config(ScheduleKind::Layered, 1, 8, d, 3));
  EXPECT_DOUBLE_EQ(l2.ranks[0].traffic.dataParallel,
                   l8.ranks[0].traffic.dataParallel);
  // Depth-first at level 3 gathers per micro-batch: it grows with m.
  Plan df2 = evaluate(desc, config(ScheduleKind::OneFOneB, p, 2, d, 3));
  Plan df8 = evaluate(desc, config(ScheduleKind::OneFOneB, p, 8, d, 3));
  EXPECT_GT(df8.ranks[0].traffic.dataParallel,
            2 * df2.ranks[0].traffic.dataParallel);
  EXPECT_DOUBLE_EQ(df8.ranks[0].traffic.dataParallel,
                   3.0 * 8 * (d - 1) / d * Nrank * 2);
}

// Expert parallelism: each GPU holds 1/ep of the experts whole (outside
// the data-parallel collectives, unsharded by ZeRO) and sends (ep-1)/ep of
// each all-to-all's rows and its counts: two all-to-alls forward, two
// backward, two more with recompute.
TEST(CostModel, ExpertParallelism) {
  const int L = 2, d = 4;
  const int64_t N = 1000, experts = 800, rows = 64; // per layer
  ModelDesc desc = uniformLayers(L, 1, N, 64);
  for (ModuleDesc &m : desc.modules) {
    m.expertParams = experts;
    m.experts = 8;
    m.expertsPerToken = 2;
    m.routedBytes = rows * 2; // stored in bf16
  }
  EXPECT_DOUBLE_EQ(desc.activeParams(), L * (N - experts + experts / 4));
  for (bool recompute : {false, true}) {
    PlanConfig c = config(ScheduleKind::Layered, 1, 2, d, 1);
    c.recompute = recompute;
    c.ep = d;
    Plan pl = evaluate(desc, c);
    const RankStats &r = pl.ranks[0];
    const double synced = L * (N - experts), mine = L * experts / d;
    EXPECT_DOUBLE_EQ(r.params, synced + mine);
    EXPECT_DOUBLE_EQ(r.traffic.dataParallel,
                     2.0 * (d - 1) / d * synced * 2 /*bytes*/);
    // ZeRO 1 shards the optimizer state of the synced parameters only.
    EXPECT_DOUBLE_EQ(r.memory.optimizer,
                     (synced / d + mine) *
                         precisionBytes(c.precision).optimizer);
    const double one = rows * 2.0 * (d - 1) / d + 8.0 / d * 8 * (d - 1);
    EXPECT_DOUBLE_EQ(r.traffic.expertParallel,
                     L * (recompute ? 6 : 4) * one * c.microBatches);
  }
  // Groups of 2 of the 4 replicas: each block has 2 holders, which
  // reduce-scatter its gradient and all-gather it after the update (ZeRO
  // >= 1), each keeping half the block's optimizer state.
  PlanConfig half = config(ScheduleKind::Layered, 1, 2, d, 1);
  half.ep = 2;
  Plan ph = evaluate(desc, half);
  const double synced = L * (N - experts), mine = L * experts / 2.0;
  EXPECT_DOUBLE_EQ(ph.ranks[0].params, synced + mine);
  EXPECT_DOUBLE_EQ(ph.ranks[0].traffic.dataParallel,
                   2.0 * (d - 1) / d * synced * 2 + 0.5 * mine * (2 + 2));
  EXPECT_DOUBLE_EQ(ph.ranks[0].memory.optimizer,
                   (synced / d + mine / 2) *
                       precisionBytes(half.precision).optimizer);
  PlanConfig bad = config(ScheduleKind::Layered, 1, 2, d, 1);
  bad.ep = 3;
  EXPECT_FALSE(checkConfig(desc, bad).ok()); // ep must divide dp
  bad.ep = d;
  for (ModuleDesc &m : desc.modules)
    m.experts = 6;
  EXPECT_FALSE(checkConfig(desc, bad).ok()); // 6 experts over 4 ranks
}

// Routing imbalance (--moe-imbalance F): the busiest expert-parallel rank
// runs F times the mean rows through its experts and receives and sends
// back F times the mean rows on every all-to-all; every rank waits for it.
// Its time rises by exactly that, the bytes (what distcheck compares with
// a run) and memory do not; F = 1 is the even routing's plan bit for bit.
TEST(CostModel, ExpertImbalance) {
  const int L = 2, d = 4;
  const double flops = 10000, experts = 800, routed = 128;
  ModelDesc desc = uniformLayers(L, flops, 1000, 64);
  desc.seqLen = 16; // T = 16 tokens, k = 2: 32 rows through one expert each
  for (ModuleDesc &m : desc.modules) {
    m.expertParams = int64_t(experts);
    m.experts = 8;
    m.expertsPerToken = 2;
    m.routedBytes = int64_t(routed);
  }
  const double expertFlops = 2.0 * 16 * 2 * experts / 8; // 6400
  EXPECT_DOUBLE_EQ(desc.expertFlops(desc.modules[0]), expertFlops);
  // One byte a second on the all-to-alls, no latency: their time is bytes.
  Hardware hw = unitHardware();
  hw.intraNodeBandwidth = 1;
  hw.intraNodeLatency = 0;
  // One all-to-all of the even routing: (ep-1)/ep of the rows and the
  // counts (E/ep per peer, 8 bytes each).
  const double rows = routed * (d - 1) / d, counts = 8.0 / d * 8 * (d - 1);
  for (bool recompute : {false, true}) {
    SCOPED_TRACE(recompute ? "recompute" : "no recompute");
    PlanConfig c = config(ScheduleKind::Layered, 1, 2, d, 1);
    c.recompute = recompute;
    c.ep = d;
    const Plan even = evaluate(desc, c, hw);
    c.moeImbalance = 2;
    const Plan skewed = evaluate(desc, c, hw);
    const double back = recompute ? 4 : 2; // all-to-alls in the backward
    for (size_t s = 0; s < even.stages.size(); ++s) {
      const Stage &e = even.stages[s], &f = skewed.stages[s];
      // Even routing: the experts' GEMMs are part of the module's FLOPs.
      EXPECT_DOUBLE_EQ(e.expertForward, expertFlops);
      EXPECT_DOUBLE_EQ(e.expertBackward, (recompute ? 3 : 2) * expertFlops);
      EXPECT_DOUBLE_EQ(e.epForward, 2 * (rows + counts));
      EXPECT_DOUBLE_EQ(e.epBackward, back * (rows + counts));
      EXPECT_DOUBLE_EQ(e.forward, flops + e.epForward);
      EXPECT_DOUBLE_EQ(e.backward, (recompute ? 3 : 2) * flops + e.epBackward);
      // F = 2: one more mean share of the experts' GEMMs and of the rows
      // on every all-to-all, the counts as they were.
      EXPECT_DOUBLE_EQ(f.expertForward, 2 * expertFlops);
      EXPECT_DOUBLE_EQ(f.expertBackward, (recompute ? 3 : 2) * 2 * expertFlops);
      EXPECT_DOUBLE_EQ(f.epForward, 2 * (2 * rows + counts));
      EXPECT_DOUBLE_EQ(f.epBackward, back * (2 * rows + counts));
      EXPECT_DOUBLE_EQ(f.forward - e.forward, expertFlops + 2 * rows);
      EXPECT_DOUBLE_EQ(f.backward - e.backward,
                       (recompute ? 3 : 2) * expertFlops + back * rows);
      EXPECT_DOUBLE_EQ(f.epBytes, e.epBytes);
    }
    EXPECT_GT(skewed.stepTime, even.stepTime);
    const RankStats &re = even.ranks[0], &rf = skewed.ranks[0];
    EXPECT_DOUBLE_EQ(rf.traffic.expertParallel, re.traffic.expertParallel);
    EXPECT_DOUBLE_EQ(rf.traffic.expertParallel,
                     L * (2 + back) * (rows + counts) * c.microBatches);
    EXPECT_DOUBLE_EQ(rf.traffic.dataParallel, re.traffic.dataParallel);
    EXPECT_DOUBLE_EQ(rf.memory.total(), re.memory.total());
    EXPECT_DOUBLE_EQ(rf.params, re.params);
    EXPECT_DOUBLE_EQ(skewed.modelFlopsPerStep, even.modelFlopsPerStep);
    // Within what a rank can receive: nothing to warn about.
    for (const std::string &w : skewed.warnings)
      EXPECT_EQ(w.find("--moe-imbalance"), std::string::npos) << w;
  }

  // A rank receives at most every rank's min(k, E/ep) rows per token:
  // min(ep, E/k) = 4 times the mean here; more is priced at that.
  PlanConfig c = config(ScheduleKind::Layered, 1, 2, d, 1);
  c.ep = d;
  c.moeImbalance = 4;
  const Plan four = evaluate(desc, c, hw);
  c.moeImbalance = 6;
  EXPECT_DOUBLE_EQ(moeImbalance(desc.modules[0], c), 4);
  const Plan six = evaluate(desc, c, hw);
  EXPECT_DOUBLE_EQ(six.stepTime, four.stepTime);
  EXPECT_DOUBLE_EQ(six.stages[0].expertForward, 4 * expertFlops);
  ASSERT_FALSE(six.warnings.empty());
  EXPECT_NE(six.warnings.back().find("at most 4 times the mean"),
            std::string::npos)
      << six.warnings.back();

  // One GPU runs every expert (--ep 1): its FLOPs, hence its time, do not
  // depend on the routing.
  PlanConfig one = config(ScheduleKind::Layered, 1, 2, d, 1);
  const Plan oneEven = evaluate(desc, one, hw);
  one.moeImbalance = 2;
  EXPECT_DOUBLE_EQ(moeImbalance(desc.modules[0], one), 1);
  const Plan oneSkewed = evaluate(desc, one, hw);
  EXPECT_DOUBLE_EQ(oneSkewed.stepTime, oneEven.stepTime);
  EXPECT_DOUBLE_EQ(oneSkewed.stages[0].forward, oneEven.stages[0].forward);
  ASSERT_FALSE(oneSkewed.warnings.empty());
  EXPECT_NE(oneSkewed.warnings.back().find("no effect at --ep 1"),
            std::string::npos);

  // Validation: a factor >= 1, finite, above 1 only with experts.
  PlanConfig bad = config(ScheduleKind::Layered, 1, 2, d, 1);
  bad.ep = d;
  for (double f : {0.5, 0.0, -1.0, std::nan(""), HUGE_VAL}) {
    bad.moeImbalance = f;
    lamina::schedule::Status s = checkConfig(desc, bad);
    ASSERT_FALSE(s.ok()) << f;
    EXPECT_EQ(s.message().rfind("--moe-imbalance ", 0), 0u) << s.message();
  }
  ModelDesc dense = uniformLayers(L, flops, 1000, 64);
  PlanConfig plain = config(ScheduleKind::Layered, 1, 2, d, 1);
  plain.moeImbalance = 1.5;
  lamina::schedule::Status s = checkConfig(dense, plain);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "--moe-imbalance 1.5: the model has no "
                         "mixture-of-experts layer");
  plain.moeImbalance = 1;
  EXPECT_TRUE(checkConfig(dense, plain).ok());
}

// METHODS.md section 2: contiguous pipelines send (p-1) m activations and as
// many gradients; breadth-first crosses every one of the L-1 boundaries.
TEST(CostModel, PointToPointVolumes) {
  const int L = 8, p = 4, m = 4;
  const int64_t act = 100;
  ModelDesc desc = uniformLayers(L, 1, 0, act);
  auto total = [](const Plan &pl) {
    double bytes = 0;
    for (const RankStats &r : pl.ranks)
      bytes += r.traffic.p2p;
    return bytes;
  };
  EXPECT_DOUBLE_EQ(total(evaluate(desc, config(ScheduleKind::OneFOneB, p, m))),
                   2.0 * (p - 1) * m * act);
  EXPECT_DOUBLE_EQ(
      total(evaluate(desc, config(ScheduleKind::BreadthFirst, p, m))),
      2.0 * (L - 1) * m * act);
}

TEST(CostModel, MemoryDecreasesWithZeroLevel) {
  ModelDesc desc = uniformLayers(8, 1, 1 << 20, 1 << 10);
  double previous = 1e300;
  for (int zero = 0; zero <= 3; ++zero) {
    Plan pl = evaluate(desc, config(ScheduleKind::BreadthFirst, 2, 4, 8, zero));
    RankMemory mem = pl.ranks[0].memory;
    EXPECT_LT(mem.total(), previous) << "zero " << zero;
    previous = mem.total();
    const double N = 4.0 * (1 << 20); // four layers per rank
    EXPECT_DOUBLE_EQ(mem.optimizer, N * 12 / (zero >= 1 ? 8 : 1));
    // Level 1 keeps the whole gradient, reduce-scattered in place.
    EXPECT_DOUBLE_EQ(mem.grads, N * 2 / (zero >= 2 ? 8 : 1));
    EXPECT_DOUBLE_EQ(mem.weights, N * 2 / (zero >= 3 ? 8 : 1));
  }
}

// Full recompute keeps only each module's input per micro-batch in flight;
// 1F1B holds at most p - r micro-batches on rank r, GPipe all m.
TEST(CostModel, ActivationsFollowTheSchedule) {
  const int L = 4, p = 2, m = 8;
  const int64_t act = 1000;
  ModelDesc desc = uniformLayers(L, 1, 0, act);
  PlanConfig c = config(ScheduleKind::GPipe, p, m);
  c.recompute = true;
  Plan gpipe = evaluate(desc, c);
  c.schedule = ScheduleKind::OneFOneB;
  Plan ofob = evaluate(desc, c);
  // GPipe: 2 modules x m checkpoints, plus one module's full activations.
  EXPECT_DOUBLE_EQ(gpipe.ranks[0].memory.activations, 2.0 * m * act + 10 * act);
  EXPECT_DOUBLE_EQ(ofob.ranks[0].memory.activations, 2.0 * p * act + 10 * act);
  EXPECT_EQ(ofob.ranks[0].peakInFlight, 2 * p);
  c.recompute = false;
  Plan none = evaluate(desc, c);
  EXPECT_DOUBLE_EQ(none.ranks[0].memory.activations, 2.0 * p * 10 * act);
  // Recompute costs one more forward: backward 3 units instead of 2.
  EXPECT_DOUBLE_EQ(ofob.stages[0].backward, 3);
  EXPECT_DOUBLE_EQ(none.stages[0].backward, 2);
}

TEST(CostModel, FlagsWhatDoesNotFit) {
  Hardware hw = *hardwarePreset("a100-80g");
  GptShape g;
  g.layers = 96;
  g.hidden = 12288;
  g.heads = 96;
  g.seqLen = 2048;
  g.vocab = 51200;
  ModelDesc desc = syntheticGpt(g);
  PlanConfig c = config(ScheduleKind::OneFOneB, 8, 8, 1);
  Plan big = evaluate(desc, c, hw); // 22B parameters per GPU at 16 B each
  EXPECT_FALSE(big.fits);
  bool named = false;
  for (const std::string &w : big.warnings)
    named |= w.find("needs") != std::string::npos;
  EXPECT_TRUE(named);
  c.tp = 8;
  Plan ok = evaluate(desc, c, hw);
  EXPECT_TRUE(ok.fits) << ok.peakMemory;
}

TEST(CostModel, WarnsWhenThePipelineNeverFills) {
  Plan pl = evaluate(uniformLayers(4), config(ScheduleKind::OneFOneB, 4, 2));
  ASSERT_FALSE(pl.warnings.empty());
  EXPECT_NE(pl.warnings[0].find("micro-batches (2) < pipeline ranks (4)"),
            std::string::npos);
}

// Megatron: GEMMs split by t, two all-reduces of the activation per layer
// per direction on the critical path.
TEST(CostModel, TensorParallelism) {
  Hardware hw = unitHardware();
  hw.intraNodeBandwidth = 100;
  ModelDesc desc = uniformLayers(2, 8, 0, 100);
  desc.modules.back().outputBytes = 100;
  PlanConfig c = config(ScheduleKind::Layered, 1, 1);
  c.tp = 4;
  Plan pl = evaluate(desc, c, hw);
  const double ar = 2.0 * 3 / 4 * 100 / 100; // ring all-reduce of 100 bytes
  EXPECT_DOUBLE_EQ(pl.stages[0].forward, 8.0 / 4 + 2 * ar);
  EXPECT_DOUBLE_EQ(pl.stages[0].backward, 2 * 8.0 / 4 + 2 * ar);
  EXPECT_DOUBLE_EQ(pl.ranks[0].traffic.tensorParallel, 2 * 4 * 0.75 * 2 * 100);
}

TEST(CostModel, RefusesBadConfigurations) {
  ModelDesc desc = uniformLayers(6);
  auto error = [&](PlanConfig c) {
    auto p = evaluatePlan(desc, c, unitHardware());
    return p.ok() ? std::string() : p.error();
  };
  EXPECT_NE(error(config(ScheduleKind::OneFOneB, 8, 8)).find("--pp 8"),
            std::string::npos);
  EXPECT_NE(error(config(ScheduleKind::Interleaved1F1B, 3, 4))
                .find("--micro-batches 4"),
            std::string::npos);
  EXPECT_NE(error(config(ScheduleKind::Layered, 2, 4)).find("--pp 2"),
            std::string::npos);
  PlanConfig z = config(ScheduleKind::OneFOneB, 1, 1);
  z.zero = 4;
  EXPECT_NE(error(z).find("--zero 4"), std::string::npos);
}

// Scaling: costs were measured at the description's micro-batch size.
TEST(CostModel, ScalesWithMicroBatchSize) {
  ModelDesc desc = uniformLayers(2, 5);
  desc.microBatchSize = 2;
  PlanConfig c = config(ScheduleKind::Layered, 1, 1);
  c.microBatchSize = 6;
  Plan pl = evaluate(desc, c);
  EXPECT_DOUBLE_EQ(pl.stages[0].forward, 15);
}

// Training is bf16 mixed precision: an fp32 description's bytes halve.
TEST(CostModel, Fp32DescriptionsAreCostedInBf16) {
  ModelDesc desc = uniformLayers(4, 1, 10, 400);
  for (ModuleDesc &m : desc.modules)
    m.paramBytes = 4 * m.params;
  Plan pl = evaluate(desc, config(ScheduleKind::OneFOneB, 2, 2));
  EXPECT_DOUBLE_EQ(pl.valueScale, 0.5);
  EXPECT_DOUBLE_EQ(pl.stages[0].sendBytes, 200);
  EXPECT_DOUBLE_EQ(pl.ranks[0].traffic.p2p, 2 * 200);
}

// --precision fp32 (the host backend): 4-byte weights, gradients and
// values, 8 bytes of Adam state; the default stays bf16 mixed precision.
TEST(CostModel, PrecisionTable) {
  EXPECT_EQ(parsePrecision("fp32"), Precision::Fp32);
  EXPECT_EQ(parsePrecision("bf16-mixed"), Precision::Bf16Mixed);
  EXPECT_FALSE(parsePrecision("fp16").has_value());
  EXPECT_EQ(parsePrecision("bf16-copies"), Precision::Bf16Copies);
  EXPECT_EQ(precisionNames(), "bf16-mixed, fp32, bf16-copies");
  EXPECT_EQ(PlanConfig().precision, Precision::Bf16Mixed);
  const PrecisionBytes &f = precisionBytes(Precision::Fp32);
  EXPECT_STREQ(f.name, "fp32");
  EXPECT_DOUBLE_EQ(f.weight + f.grad + f.optimizer, 16);

  const int L = 4, p = 2, d = 4;
  const int64_t N = 1000, act = 400; // per layer; act in stored fp32 bytes
  ModelDesc desc = uniformLayers(L, 1, N, act);
  for (ModuleDesc &m : desc.modules)
    m.paramBytes = 4 * m.params;
  const double Nrank = 2 * N;
  for (int zero = 0; zero <= 3; ++zero) {
    PlanConfig c = config(ScheduleKind::BreadthFirst, p, 2, d, zero);
    c.precision = Precision::Fp32;
    Plan pl = evaluate(desc, c);
    EXPECT_DOUBLE_EQ(pl.valueScale, 1);
    EXPECT_DOUBLE_EQ(pl.stages[0].sendBytes, act);
    const RankMemory &mem = pl.ranks[0].memory;
    EXPECT_DOUBLE_EQ(mem.weights, Nrank * 4 / (zero >= 3 ? d : 1));
    EXPECT_DOUBLE_EQ(mem.grads, Nrank * 4 / (zero >= 2 ? d : 1));
    EXPECT_DOUBLE_EQ(mem.optimizer, Nrank * 8 / (zero >= 1 ? d : 1));
    // Breadth-first crosses every layer boundary: per micro-batch rank 0
    // sends layers 0 and 2's outputs and the gradient of layer 2's input.
    EXPECT_DOUBLE_EQ(pl.ranks[0].traffic.p2p, 3.0 * 2 * act);
    const double rings = zero == 3 ? 3 : 2;
    EXPECT_DOUBLE_EQ(pl.ranks[0].traffic.dataParallel,
                     rings * (d - 1) / d * Nrank * 4);
    // The same configuration in bf16 mixed precision: half the bytes.
    c.precision = Precision::Bf16Mixed;
    Plan bf = evaluate(desc, c);
    EXPECT_DOUBLE_EQ(bf.ranks[0].traffic.p2p, pl.ranks[0].traffic.p2p / 2);
    EXPECT_DOUBLE_EQ(bf.ranks[0].traffic.dataParallel,
                     pl.ranks[0].traffic.dataParallel / 2);
    EXPECT_DOUBLE_EQ(bf.ranks[0].memory.optimizer,
                     Nrank * 12 / (zero >= 1 ? d : 1));
    // Lamina's bf16 programs: f32 values and gradient rings, bf16
    // parameter gathers (one a step at levels 1-2, two at level 3).
    c.precision = Precision::Bf16Copies;
    Plan lc = evaluate(desc, c);
    EXPECT_DOUBLE_EQ(lc.ranks[0].traffic.p2p, pl.ranks[0].traffic.p2p);
    const double gathers = zero == 3 ? 2 : zero >= 1 ? 1 : 0;
    EXPECT_DOUBLE_EQ(lc.ranks[0].traffic.dataParallel,
                     pl.ranks[0].traffic.dataParallel -
                         gathers * (d - 1) / d * Nrank * 2);
    EXPECT_DOUBLE_EQ(lc.ranks[0].memory.weights,
                     Nrank * 2 / (zero >= 3 ? d : 1));
    EXPECT_DOUBLE_EQ(lc.ranks[0].memory.grads, mem.grads);
  }
  PlanConfig c = config(ScheduleKind::OneFOneB, 2, 2);
  c.precision = Precision::Fp32;
  EXPECT_NE(describeConfig(c).find(" fp32"), std::string::npos);
  c.precision = Precision::Bf16Mixed;
  EXPECT_EQ(describeConfig(c).find("bf16"), std::string::npos);
}

// A tied parameter (an LM head reading the embedding's table) on stages of
// two pipeline ranks: whole on both, outside the owner's data-parallel
// collectives, one all-reduce over its holders in every replica.
TEST(CostModel, ZeroTwoHoldsFullGradientsUntilTheirReduceScatterRetires) {
  // Four layers of N parameters, d = 2: a run's full gradient lives from
  // its first backward until its reduce-scatter retires, which a later
  // run's first backward waits for (one scatter stays in flight). A
  // stage's first reduce-scatter of the step lands in its shard gradient;
  // later ones (level 3 scatters each run) need a part of N/2.
  const int64_t N = 1000;
  ModelDesc desc = uniformLayers(4, 1, N, 64);
  for (int zero : {2, 3}) {
    SCOPED_TRACE("zero " + std::to_string(zero));
    PlanConfig c = config(ScheduleKind::Layered, 1, 2, 2, zero);
    c.precision = Precision::Fp32;
    // Layered: one layer's full gradient in flight while the next
    // accumulates: 2N f32 values.
    Plan layered = evaluate(desc, c);
    EXPECT_DOUBLE_EQ(layered.ranks[0].memory.gradientBuffers, 2.0 * N * 4);
    EXPECT_DOUBLE_EQ(layered.ranks[0].memory.grads, 4.0 * N * 4 / 2);
    // 1F1B at level 2: every layer accumulates until the last
    // micro-batch's backward: 4N. Level 3 reduce-scatters after each run
    // (each micro-batch's backward here): the second micro-batch's
    // scatters add parts, 2N + N/2 + N/2 at most.
    c.schedule = ScheduleKind::OneFOneB;
    Plan onef = evaluate(desc, c);
    EXPECT_DOUBLE_EQ(onef.ranks[0].memory.gradientBuffers,
                     (zero == 2 ? 4.0 : 3.0) * N * 4);
  }
  // Levels 0-1 keep the whole gradient as state instead.
  Plan z1 = evaluate(desc, config(ScheduleKind::Layered, 1, 2, 2, 1));
  EXPECT_DOUBLE_EQ(z1.ranks[0].memory.gradientBuffers, 0);
}

TEST(CostModel, TiedParametersAreSynchronisedByTheirHolders) {
  const int64_t N = 1000, S = 100;
  const int d = 2;
  ModelDesc desc = uniformLayers(4, 1, N, 64);
  desc.modules[0].params += S; // the owner counts it
  desc.sharedParams.push_back({"wte", S, {0, 3}});
  for (int zero : {0, 3}) {
    PlanConfig c = config(ScheduleKind::BreadthFirst, 2, 2, d, zero);
    c.precision = Precision::Fp32;
    Plan pl = evaluate(desc, c);
    EXPECT_DOUBLE_EQ(pl.stages[0].sharedParams, S);
    const double rings = zero == 3 ? 3 : 2;
    const double n = 2 * d; // two pipeline ranks in each of d replicas
    for (const RankStats &r : pl.ranks) {
      SCOPED_TRACE("zero " + std::to_string(zero) + " rank " +
                   std::to_string(r.pipelineRank));
      EXPECT_DOUBLE_EQ(r.sharedParams, S);
      EXPECT_DOUBLE_EQ(r.traffic.dataParallel,
                       rings * (d - 1) / d * 2 * N * 4 +
                           2 * (n - 1) / n * S * 4);
      EXPECT_DOUBLE_EQ(r.memory.weights,
                       2.0 * N * 4 / (zero == 3 ? d : 1) + S * 4);
      // Each of the n holders keeps the optimizer state of its part at
      // ZeRO >= 1; the f32 weights stay whole (reduce-scatter plus
      // all-gather: the all-reduce's bytes).
      EXPECT_DOUBLE_EQ(r.memory.optimizer,
                       2.0 * N * 8 / (zero ? d : 1) + S * 8 / (zero ? n : 1));
    }
  }
  // One pipeline rank holds every reader: synchronised over the replicas
  // (the f32 reduce-scatter and all-gather: an all-reduce's bytes).
  PlanConfig c = config(ScheduleKind::Layered, 1, 2, d, 3);
  c.precision = Precision::Fp32;
  Plan layered = evaluate(desc, c);
  EXPECT_DOUBLE_EQ(layered.ranks[0].traffic.dataParallel,
                   3.0 * (d - 1) / d * 4 * N * 4 + 2.0 * (d - 1) / d * S * 4);
  // bf16 copies: the f32 gradient's reduce-scatter, the bf16 copy's
  // all-gather (4 + 2 bytes, not the all-reduce's 8).
  c.precision = Precision::Bf16Copies;
  Plan copies = evaluate(desc, c);
  EXPECT_DOUBLE_EQ(copies.ranks[0].traffic.dataParallel,
                   (d - 1.0) / d * 4 * N * (4 + 2 + 2) +
                       (d - 1.0) / d * S * (4 + 2));
  EXPECT_DOUBLE_EQ(copies.ranks[0].memory.optimizer,
                   4.0 * N * 12 / d + S * 12.0 / d);
  // Without data parallelism the runtime does not shard, whatever --zero
  // says: two pipeline holders all-reduce the table's f32 gradient and
  // each keeps its whole optimizer state (not 4 + 2 bytes and a half).
  PlanConfig pipeline = config(ScheduleKind::BreadthFirst, 2, 2, 1, 1);
  pipeline.precision = Precision::Bf16Copies;
  Plan nodp = evaluate(desc, pipeline);
  for (const RankStats &r : nodp.ranks) {
    EXPECT_DOUBLE_EQ(r.traffic.dataParallel, 2.0 * (2 - 1) / 2 * S * 4);
    EXPECT_DOUBLE_EQ(r.memory.optimizer, 2.0 * N * 12 + S * 12.0);
    EXPECT_DOUBLE_EQ(r.memory.grads, 2.0 * N * 4 + S * 4.0);
    EXPECT_DOUBLE_EQ(r.memory.gradientBuffers, 0);
  }
  // Without data parallelism and on one rank there is nothing to sum.
  Plan single = evaluate(desc, config(ScheduleKind::Layered, 1, 2));
  EXPECT_DOUBLE_EQ(single.ranks[0].traffic.dataParallel, 0);
  // Readers on one stage: an ordinary parameter.
  ModelDesc one = desc;
  one.sharedParams[0].readers = {0, 0};
  Plan plain = evaluate(one, config(ScheduleKind::BreadthFirst, 2, 2, d));
  EXPECT_DOUBLE_EQ(plain.stages[0].sharedParams, 0);
}

} // namespace
