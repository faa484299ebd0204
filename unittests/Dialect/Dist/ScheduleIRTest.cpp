//===- ScheduleIRTest.cpp - schedules as dist ops, the two generation steps
//===//
//
// generateSchedule = lowerComputeOrder . generateComputeOrder; the passes
// dist-schedule + dist-insert-comm + dist-prefetch-gathers produce exactly
// generateSchedule's lists;
// buildSchedule / readSchedule round-trip through printed IR; the steps
// dist-build-steps makes of the verified schedule run exactly its lists.
//
//===----------------------------------------------------------------------===//

#include "../../Schedule/ScheduleTestUtil.h"
#include "lamina/Dialect/Dist/Transforms/Passes.h"
#include "lamina/Dialect/Dist/Transforms/ScheduleIR.h"
#include "lamina/Schedule/Simulate.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace lamina;
using namespace lamina::schedule;
using lamina::schedule::test::config;
using lamina::schedule::test::kAllKinds;

namespace {

/// Every valid configuration of a small grid, each kind.
std::vector<ScheduleConfig> grid() {
  std::vector<ScheduleConfig> out;
  for (ScheduleKind k : kAllKinds)
    for (int L : {1, 2, 3, 4, 6})
      for (int p : {1, 2, 3})
        for (int m : {1, 2, 3, 4})
          for (int d : {1, 2})
            for (int zero = 0; zero <= 3; ++zero) {
              if (d == 1 && zero > 0)
                continue;
              ScheduleConfig c = config(k, L, p, m, d, zero);
              if (generateSchedule(c).ok())
                out.push_back(c);
            }
  return out;
}

std::string name(const ScheduleConfig &c) {
  return std::string(scheduleKindName(c.kind)) + " L=" +
         std::to_string(c.numModules) + " p=" +
         std::to_string(c.pipelineRanks) + " m=" +
         std::to_string(c.microBatches) + " d=" +
         std::to_string(c.dataParallel) + " zero=" +
         std::to_string(c.zeroLevel);
}

void expectSame(const Schedule &a, const Schedule &b, const std::string &what) {
  EXPECT_EQ(a.config.kind, b.config.kind) << what;
  EXPECT_EQ(a.config.numModules, b.config.numModules) << what;
  EXPECT_EQ(a.config.pipelineRanks, b.config.pipelineRanks) << what;
  EXPECT_EQ(a.config.microBatches, b.config.microBatches) << what;
  EXPECT_EQ(a.config.dataParallel, b.config.dataParallel) << what;
  EXPECT_EQ(a.config.zeroLevel, b.config.zeroLevel) << what;
  EXPECT_EQ(a.placement.numRanks, b.placement.numRanks) << what;
  EXPECT_EQ(a.placement.rankOf, b.placement.rankOf) << what;
  EXPECT_EQ(a.ranks, b.ranks) << what;
}

TEST(ScheduleSplit, ComputeOrderThenLoweringIsGenerateSchedule) {
  std::vector<ScheduleConfig> configs = grid();
  ASSERT_GT(configs.size(), 100u);
  for (const ScheduleConfig &c : configs) {
    Expected<Schedule> compute = generateComputeOrder(c);
    ASSERT_TRUE(compute.ok()) << name(c) << ": " << compute.error();
    ASSERT_EQ(compute->numRanks(), c.pipelineRanks * c.dataParallel);
    for (const std::vector<Action> &list : compute->ranks) {
      ASSERT_FALSE(list.empty());
      EXPECT_EQ(list.back(), Action::optimizerStep()) << name(c);
      for (size_t i = 0; i + 1 < list.size(); ++i)
        EXPECT_TRUE(list[i].kind == ActionKind::Forward ||
                    list[i].kind == ActionKind::Backward)
            << name(c);
    }
    Expected<Schedule> lowered = lowerComputeOrder(*compute);
    ASSERT_TRUE(lowered.ok()) << name(c) << ": " << lowered.error();
    // Level 3's gathers are prefetched after the lowering, one run ahead.
    Schedule prefetched = *lowered;
    bool gathersMove = c.zeroLevel == 3 && c.dataParallel > 1;
    for (std::vector<Action> &list : prefetched.ranks) {
      std::vector<ActionMove> moves = prefetchGathers(list);
      EXPECT_TRUE(gathersMove || moves.empty()) << name(c);
      list = applyMoves(list, moves);
      EXPECT_TRUE(prefetchGathers(list).empty()) << name(c) << ": twice";
    }
    expectSame(prefetched, *generateSchedule(c), name(c));
  }
}

TEST(ScheduleSplit, InvalidConfigurationsFailInBothSteps) {
  ScheduleConfig bad = config(ScheduleKind::BreadthFirst, 4, 2, 1);
  EXPECT_FALSE(generateComputeOrder(bad).ok());
  Expected<Schedule> ok =
      generateComputeOrder(config(ScheduleKind::BreadthFirst, 4, 2, 2));
  ASSERT_TRUE(ok.ok());
  Schedule s = *ok;
  s.config.microBatches = 1; // now breadth-first with m < p
  EXPECT_NE(lowerComputeOrder(s).error().find("m >= p"), std::string::npos);
}

TEST(ScheduleSplit, LoweringRefusesNonComputeLists) {
  Schedule s = *generateSchedule(config(ScheduleKind::GPipe, 2, 2, 1));
  Expected<Schedule> again = lowerComputeOrder(s);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.error().find("a compute order holds only"),
            std::string::npos)
      << again.error();
  Schedule c = *generateComputeOrder(config(ScheduleKind::GPipe, 2, 2, 1));
  c.ranks[0].back() = Action::forward(5, 0);
  EXPECT_FALSE(lowerComputeOrder(c).ok());
  c = *generateComputeOrder(config(ScheduleKind::GPipe, 2, 2, 1));
  c.ranks.pop_back();
  EXPECT_FALSE(lowerComputeOrder(c).ok());
  c = *generateComputeOrder(config(ScheduleKind::GPipe, 2, 2, 1));
  c.placement.rankOf[1] = 7;
  EXPECT_FALSE(lowerComputeOrder(c).ok());
}

/// dist-schedule for `c`, dist-insert-comm, dist-prefetch-gathers,
/// dist-verify-schedule.
void addSchedulePasses(PassManager &pm, const ScheduleConfig &c) {
  ir::dist::DistScheduleOptions options;
  options.scheduleKind = scheduleKindName(c.kind);
  options.pp = c.pipelineRanks;
  options.dp = c.dataParallel;
  options.microBatches = c.microBatches;
  options.zero = c.zeroLevel;
  options.modules = c.numModules;
  pm.addPass(ir::dist::createDistSchedule(options));
  pm.addPass(ir::dist::createDistInsertComm());
  pm.addPass(ir::dist::createDistPrefetchGathers());
  pm.addPass(ir::dist::createDistVerifySchedule());
}

class ScheduleIRTest : public ::testing::Test {
protected:
  ScheduleIRTest() {
    ctx.loadDialect<ir::dist::DistDialect, func::FuncDialect>();
  }
  MLIRContext ctx;
};

TEST_F(ScheduleIRTest, BuildPrintParseRead) {
  for (const ScheduleConfig &c : grid()) {
    Schedule s = *generateSchedule(c);
    OpBuilder b(&ctx);
    OwningOpRef<ModuleOp> module = ModuleOp::create(b.getUnknownLoc());
    b.setInsertionPointToEnd(module->getBody());
    ir::dist::buildSchedule(b, b.getUnknownLoc(), s);
    std::string text;
    llvm::raw_string_ostream os(text);
    module->print(os);
    OwningOpRef<ModuleOp> parsed = parseSourceString<ModuleOp>(text, &ctx);
    ASSERT_TRUE(parsed) << name(c);
    auto op = *parsed->getOps<ir::dist::ScheduleOp>().begin();
    FailureOr<Schedule> read = ir::dist::readSchedule(op);
    ASSERT_TRUE(succeeded(read)) << name(c);
    expectSame(*read, s, name(c));
  }
}

TEST_F(ScheduleIRTest, PassesEqualGenerateSchedule) {
  for (const ScheduleConfig &c : grid()) {
    OwningOpRef<ModuleOp> module = ModuleOp::create(UnknownLoc::get(&ctx));
    PassManager pm(&ctx);
    addSchedulePasses(pm, c);
    ASSERT_TRUE(succeeded(pm.run(*module))) << name(c);
    auto op = *module->getOps<ir::dist::ScheduleOp>().begin();
    FailureOr<Schedule> read = ir::dist::readSchedule(op);
    ASSERT_TRUE(succeeded(read)) << name(c);
    expectSame(*read, *generateSchedule(c), name(c));
  }
}

/// Declarations of L outlined modules over one boundary each, as
/// dist-outline-modules writes them (the last one's output is the loss).
std::string outlinedModules(int L) {
  std::string text;
  llvm::raw_string_ostream os(text);
  for (int k = 0; k < L; ++k) {
    std::string boundary =
        k ? "tensor<2x4xf32> {graph.kind = \"boundary\", graph.name = \"b\"}, "
          : "";
    std::string args = boundary +
                       "tensor<2x4xf32> {graph.kind = \"input\", graph.name = "
                       "\"x\"}, tensor<4x4xf32> {graph.kind = \"trainable\", "
                       "graph.name = \"w" +
                       std::to_string(k) + "\"}";
    bool last = k + 1 == L;
    std::string out = last ? "tensor<f32>" : "tensor<2x4xf32>";
    std::string outlined =
        "{dist.outlined = #dist.outlined<module = " + std::to_string(k) +
        ", name = \"layer\", num_in = " + std::to_string(k ? 1 : 0) +
        ", num_out = 1, num_residuals = 1, recompute = "
        "false>}";
    os << "func.func private @fwd_" << k << "(" << args << ") -> (" << out
       << ", tensor<2x4xf32>) attributes " << outlined << "\n";
    os << "func.func private @bwd_" << k << "(" << args
       << ", tensor<2x4xf32> {graph.kind = \"residual\", graph.name = "
          "\"residual:0\"}, "
       << out << " {graph.kind = \"cotangent\", graph.name = \"grad\"}) -> ("
       << (k ? "tensor<2x4xf32>, " : "") << "tensor<4x4xf32>) attributes "
       << outlined << "\n";
  }
  return text;
}

TEST_F(ScheduleIRTest, StepsRunTheSchedule) {
  for (const ScheduleConfig &c : grid()) {
    OwningOpRef<ModuleOp> module =
        parseSourceString<ModuleOp>(outlinedModules(c.numModules), &ctx);
    ASSERT_TRUE(module) << name(c);
    PassManager pm(&ctx);
    addSchedulePasses(pm, c);
    pm.addPass(ir::dist::createDistBuildSteps());
    pm.addPass(ir::dist::createDistVerifySchedule());
    ASSERT_TRUE(succeeded(pm.run(*module))) << name(c);
    EXPECT_TRUE(module->getOps<ir::dist::ScheduleOp>().empty()) << name(c);
    // Printed and parsed back (the verifiers run again), then read.
    std::string text;
    llvm::raw_string_ostream os(text);
    module->print(os);
    OwningOpRef<ModuleOp> parsed = parseSourceString<ModuleOp>(text, &ctx);
    ASSERT_TRUE(parsed) << name(c);
    auto program = *parsed->getOps<ir::dist::ProgramOp>().begin();
    FailureOr<Schedule> read = ir::dist::readSchedule(program);
    ASSERT_TRUE(succeeded(read)) << name(c);
    expectSame(*read, *generateSchedule(c), name(c));
  }
}

TEST_F(ScheduleIRTest, VerifyErrorLandsOnTheNamedAction) {
  Schedule s = *generateSchedule(config(ScheduleKind::GPipe, 2, 2, 1));
  // Drop rank 1's receive of the activation: rank 0's send is unmatched.
  ASSERT_EQ(s.ranks[1][0].kind, ActionKind::Recv);
  s.ranks[1].erase(s.ranks[1].begin());
  Status st = verifySchedule(s);
  ASSERT_FALSE(st.ok());
  OpBuilder b(&ctx);
  OwningOpRef<ModuleOp> module = ModuleOp::create(b.getUnknownLoc());
  b.setInsertionPointToEnd(module->getBody());
  auto op = ir::dist::buildSchedule(b, b.getUnknownLoc(), s);
  Operation *send = ir::dist::findAction(op, 0, 1);
  ASSERT_TRUE(send);
  EXPECT_TRUE(isa<ir::dist::SendOp>(send));
  EXPECT_EQ(ir::dist::findAction(op, 0, 99), nullptr);
  EXPECT_EQ(ir::dist::findAction(op, 7, 0), nullptr);
  send->setLoc(NameLoc::get(b.getStringAttr("the send")));
  Location reported = b.getUnknownLoc();
  std::string message;
  ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &diag) {
    reported = diag.getLocation();
    message = diag.str();
    return success();
  });
  (void)ir::dist::emitScheduleError(op, st.message());
  EXPECT_EQ(reported, send->getLoc());
  EXPECT_EQ(message, st.message());
}
} // namespace
