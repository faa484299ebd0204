//===- ReportTest.cpp - outputs, comparison and search --------------------===//

#include "lamina/Plan/Report.h"
#include "lamina/Plan/Search.h"
#include "lamina/Plan/Synthetic.h"

#include "PlanTestUtil.h"

#include <gtest/gtest.h>

using namespace lamina::plan;
using namespace lamina::plan::test;
using lamina::schedule::ScheduleKind;

namespace {

ModelDesc smallGpt() {
  GptShape g;
  g.layers = 8;
  g.hidden = 1024;
  g.heads = 16;
  g.seqLen = 1024;
  g.vocab = 32000;
  return syntheticGpt(g);
}

Plan smallPlan(ScheduleKind kind = ScheduleKind::BreadthFirst) {
  PlanConfig c;
  c.pp = 2;
  c.dp = 2;
  c.tp = 2;
  c.microBatches = 4;
  c.schedule = kind;
  auto p = evaluatePlan(smallGpt(), c, *hardwarePreset("h100-sxm"));
  EXPECT_TRUE(p.ok()) << p.error();
  return *p;
}

TEST(Report, SummarizesModuleRuns) {
  ModelDesc d = smallGpt();
  EXPECT_EQ(summarizeModules(d, {0, 1, 2, 3}), "embedding, layer.0-2");
  EXPECT_EQ(summarizeModules(d, {1, 3, 5, 9}), "layer.0..4 step 2, head");
  EXPECT_EQ(summarizeModules(d, {}), "(none)");
}

TEST(Report, TextNamesEverySection) {
  ModelDesc d = smallGpt();
  std::string t = formatTextReport(smallPlan(), d);
  for (const char *s : {"step time:", "bubble:", "MFU:", "rank 0: embedding",
                        "rank 1: layer.1..7 step 2, head", "transient"})
    EXPECT_NE(t.find(s), std::string::npos) << s << "\n" << t;
}

TEST(Report, JsonHasVersionAndTimeline) {
  ModelDesc d = smallGpt();
  Plan p = smallPlan();
  std::string j = formatJson(p, d);
  EXPECT_NE(j.find("\"schema\": \"lamina-plan\""), std::string::npos);
  EXPECT_NE(j.find("\"version\": 1"), std::string::npos);
  EXPECT_NE(j.find("\"timeline\": ["), std::string::npos);
  EXPECT_NE(j.find("\"action\": \"F0.0\""), std::string::npos);
}

// The precision is part of the configuration in both reports.
TEST(Report, NamesThePrecision) {
  ModelDesc d = smallGpt();
  Plan p = smallPlan();
  EXPECT_NE(formatJson(p, d).find("\"precision\": \"bf16-mixed\""),
            std::string::npos);
  EXPECT_EQ(formatTextReport(p, d).find("values:"), std::string::npos);
  PlanConfig c = p.config;
  c.precision = Precision::Fp32;
  auto fp = evaluatePlan(d, c, *hardwarePreset("h100-sxm"));
  ASSERT_TRUE(fp.ok()) << fp.error();
  EXPECT_NE(formatJson(*fp, d).find("\"precision\": \"fp32\""),
            std::string::npos);
  EXPECT_NE(formatTextReport(*fp, d).find("bytes are costed as fp32"),
            std::string::npos);
  EXPECT_GT(fp->peakMemory, p.peakMemory);
}

TEST(Report, TraceHasOneSlicePerTimedAction) {
  Plan p = smallPlan();
  std::string t = formatChromeTrace(p);
  size_t slices = 0;
  for (size_t at = 0; (at = t.find("\"ph\":\"X\"", at)) != std::string::npos;
       ++at)
    ++slices;
  size_t expected = 0;
  for (int r = 0; r < p.config.pp; ++r) {
    int g = p.schedule.globalRank(r, 0);
    for (size_t i = 0; i < p.schedule.ranks[g].size(); ++i)
      if (p.schedule.ranks[g][i].kind != lamina::schedule::ActionKind::Recv ||
          p.timeline.times[g][i].end > p.timeline.times[g][i].start)
        ++expected;
  }
  EXPECT_EQ(slices, expected);
  EXPECT_NE(t.find("pipeline rank 1"), std::string::npos);
}

TEST(Report, DotAndHtmlAreSelfContained) {
  ModelDesc d = smallGpt();
  Plan p = smallPlan();
  std::string dot = formatDot(p, d);
  EXPECT_EQ(dot.rfind("digraph plan {", 0), 0u);
  EXPECT_NE(dot.find("m1 -> m2 [style=bold"), std::string::npos);
  std::string html = formatHtml(p, d);
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("src="), std::string::npos);
  EXPECT_EQ(html.find("href="), std::string::npos);
}

TEST(Report, CompareKeepsFailures) {
  PlanConfig c;
  c.pp = 4;
  c.microBatches = 2;
  Comparison cmp =
      compareSchedules(smallGpt(), c, *hardwarePreset("a100-80g"),
                       {ScheduleKind::OneFOneB, ScheduleKind::BreadthFirst});
  ASSERT_EQ(cmp.entries.size(), 2u);
  EXPECT_TRUE(cmp.entries[0].ok);
  EXPECT_FALSE(cmp.entries[1].ok);
  std::string t = formatComparison(cmp);
  EXPECT_NE(t.find("breadth-first: --micro-batches 2"), std::string::npos) << t;
}

// The search's bound is a true lower bound, so its winner is the fastest
// fitting configuration of an exhaustive evaluation.
TEST(Search, MatchesExhaustiveEvaluation) {
  ModelDesc d = smallGpt();
  Hardware hw = *hardwarePreset("a100-80g");
  SearchOptions o;
  o.gpus = 8;
  o.globalBatch = 16;
  o.top = 3;
  auto r = searchPlans(d, hw, o);
  ASSERT_TRUE(r.ok()) << r.error();
  ASSERT_EQ(r->best.size(), 3u);
  EXPECT_GT(r->enumerated, 100);
  EXPECT_LT(r->simulated, r->enumerated);
  double best = 1e300;
  EvaluateOptions quick;
  quick.exposedComm = false;
  for (int tp : {1, 2, 4, 8})
    for (int pp : {1, 2, 4, 8}) {
      if (8 % (tp * pp))
        continue;
      int dp = 8 / tp / pp;
      for (int64_t b : o.microBatchSizes)
        for (ScheduleKind k : o.schedules)
          for (int zero = 0; zero <= 3; ++zero)
            for (bool rc : {true, false}) {
              if (16 % (dp * b))
                continue;
              PlanConfig c;
              c.tp = tp, c.pp = pp, c.dp = dp, c.microBatchSize = b;
              c.microBatches = int(16 / dp / b), c.schedule = k;
              c.zero = zero, c.recompute = rc;
              auto p = evaluatePlan(d, c, hw, quick);
              if (p && p->fits) {
                auto bound = boundPlan(d, c, hw);
                ASSERT_TRUE(bound.ok());
                EXPECT_LE(bound->stepTime, p->stepTime * (1 + 1e-12));
                EXPECT_LE(bound->memory, p->peakMemory * (1 + 1e-12));
                best = std::min(best, p->stepTime);
              }
            }
    }
  EXPECT_DOUBLE_EQ(r->best[0].stepTime, best);
}

} // namespace

namespace {

// The synthetic GPT reproduces Megatron-LM's own counts.
TEST(Synthetic, MatchesMegatronFormulas) {
  GptShape g;
  g.layers = 96;
  g.hidden = 12288;
  g.heads = 96;
  g.seqLen = 2048;
  g.vocab = 51200;
  ModelDesc d = syntheticGpt(g);
  EXPECT_EQ(d.modules.size(), 98u);
  EXPECT_NEAR(double(d.totalParams()), gptParams(g), 1e-6 * gptParams(g));
  // Megatron counts GEMMs with the layers recomputed (not the head).
  PlanConfig c;
  c.pp = 8;
  c.tp = 8;
  c.recompute = true;
  auto p = evaluatePlan(d, c, *hardwarePreset("a100-80g"));
  ASSERT_TRUE(p.ok()) << p.error();
  EXPECT_NEAR(p->matmulFlopsPerStep, gptMegatronFlopsPerSample(g),
              1e-9 * gptMegatronFlopsPerSample(g));
}

TEST(Synthetic, ParsesSpecs) {
  auto g = parseGptSpec("gpt:layers=4,hidden=256,heads=4,seq=128,vocab=1000");
  ASSERT_TRUE(g.ok()) << g.error();
  EXPECT_EQ(g->layers, 4);
  EXPECT_EQ(g->vocab, 1000);
  EXPECT_NE(parseGptSpec("gpt:layers=0").error().find("positive integer"),
            std::string::npos);
  EXPECT_NE(parseGptSpec("gpt:depth=3").error().find("unknown key 'depth'"),
            std::string::npos);
}

} // namespace
