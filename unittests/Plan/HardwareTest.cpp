//===- HardwareTest.cpp - presets and hardware files ----------------------===//

#include "lamina/Plan/Hardware.h"

#include <gtest/gtest.h>

using namespace lamina::plan;

namespace {

TEST(Hardware, Presets) {
  for (const std::string &name : hardwarePresetNames()) {
    auto h = hardwarePreset(name);
    ASSERT_TRUE(h.ok()) << name;
    EXPECT_EQ(h->name, name);
    EXPECT_GT(h->gemmEfficiency, 0.5);
    EXPECT_LE(h->gemmEfficiency, 1);
    EXPECT_GT(h->intraNodeBandwidth, h->interNodeBandwidth);
  }
  EXPECT_DOUBLE_EQ(hardwarePreset("a100-80g")->peakFlops, 312e12);
  EXPECT_GT(hardwarePreset("h200")->hbmBytes, hardwarePreset("h100-sxm")->hbmBytes);
  auto bad = hardwarePreset("v100");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("a100-80g"), std::string::npos);
}

TEST(Hardware, JsonOverridesABase) {
  auto h = parseHardwareJson(R"({"base": "a100-80g", "name": "a100-ndr",
                                 "inter_node_bandwidth": 50e9})");
  ASSERT_TRUE(h.ok()) << h.error();
  EXPECT_EQ(h->name, "a100-ndr");
  EXPECT_DOUBLE_EQ(h->interNodeBandwidth, 50e9);
  EXPECT_DOUBLE_EQ(h->peakFlops, 312e12);
}

TEST(Hardware, JsonErrorsAreClear) {
  auto missing = parseHardwareJson(R"({"name": "x"})");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().find("peak_flops"), std::string::npos);
  auto unknown = parseHardwareJson(R"({"base": "h200", "peak_flop": 1})");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().find("unknown hardware field \"peak_flop\""),
            std::string::npos);
  auto syntax = parseHardwareJson("{\"base\": \"h200\",\n \"gpus_per_node\" 8}");
  ASSERT_FALSE(syntax.ok());
  EXPECT_NE(syntax.error().find("line 2"), std::string::npos);
  auto fraction = parseHardwareJson(R"({"base": "h200", "gemm_efficiency": 1.5})");
  ASSERT_FALSE(fraction.ok());
  EXPECT_NE(fraction.error().find("(0, 1]"), std::string::npos);
  auto file = loadHardware("/nonexistent/cluster.json");
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.error().find("cannot read"), std::string::npos);
}

} // namespace
