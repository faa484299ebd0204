//===- Hardware.cpp - presets and hardware files --------------------------===//
//
// Datasheet figures are exact; each efficiency is a product of factors
// explained in docs/plan.md ("Hardware"):
//   gemm = sustained tensor clock / boost clock   (power cap under GEMM load)
//        x mainloop utilisation                   (operand staging, epilogue)
//        x tile/wave quantisation                 (partial last wave on the SMs)
//   hbm  = what a streaming kernel gets of the DRAM peak (refresh, bank and
//          read/write turnarounds)
//   link = NCCL ring bus bandwidth over the link's raw per-direction rate
//          (packet headers and flow control).
//
//===----------------------------------------------------------------------===//

#include "lamina/Plan/Hardware.h"

#include "lamina/Support/Json.h"

#include <cmath>
#include <fstream>
#include <sstream>

namespace lamina::plan {

using schedule::Expected;
using schedule::Status;

namespace {
constexpr double GB = 1e9, TB = 1e12;
constexpr double GiB = 1024.0 * 1024 * 1024;

Hardware a100() {
  Hardware h;
  h.name = "a100-80g";
  h.peakFlops = 312 * TB; // 108 SMs x 4 TCs x 1024 FLOP/clk x 1.41 GHz
  // 0.90 sustained clock (400 W cap) x 0.85 mainloop x 0.90 quantisation.
  h.gemmEfficiency = 0.90 * 0.85 * 0.90;
  h.hbmBandwidth = 2.039 * TB; // HBM2e, 5 stacks
  h.hbmEfficiency = 0.85;
  h.hbmBytes = 80 * GiB;
  h.intraNodeBandwidth = 300 * GB; // NVLink3: 12 links x 25 GB/s per direction
  h.interNodeBandwidth = 25 * GB;  // one 200 Gb/s HDR NIC per GPU
  h.intraNodeEfficiency = 0.80;    // NCCL bus bandwidth ~240 GB/s on NVSwitch
  h.interNodeEfficiency = 0.90;    // IB payload after headers, ~22.5 GB/s
  h.intraNodeLatency = 5e-6;
  h.interNodeLatency = 10e-6;
  h.gpusPerNode = 8;
  h.reservedBytes = 2 * GiB; // CUDA context, NCCL buffers, allocator slack
  return h;
}

Hardware h100() {
  Hardware h;
  h.name = "h100-sxm";
  h.peakFlops = 989 * TB; // 132 SMs, 4th-gen tensor cores, 1.83 GHz
  // 700 W caps sustained tensor clocks harder than on A100 (0.85).
  h.gemmEfficiency = 0.85 * 0.85 * 0.90;
  h.hbmBandwidth = 3.35 * TB; // HBM3
  h.hbmEfficiency = 0.85;
  h.hbmBytes = 80 * GiB;
  h.intraNodeBandwidth = 450 * GB; // NVLink4: 18 links x 25 GB/s per direction
  h.interNodeBandwidth = 50 * GB;  // one 400 Gb/s NDR NIC per GPU
  h.intraNodeEfficiency = 0.80;
  h.interNodeEfficiency = 0.90;
  h.intraNodeLatency = 4e-6;
  h.interNodeLatency = 8e-6;
  h.gpusPerNode = 8;
  h.reservedBytes = 2 * GiB;
  return h;
}

Hardware h200() {
  Hardware h = h100(); // same GH100 die and links; bigger, faster HBM3e
  h.name = "h200";
  h.hbmBandwidth = 4.8 * TB;
  h.hbmBytes = 141 * GB;
  return h;
}

struct Field {
  const char *name;
  double Hardware::*member;
  bool fraction; ///< must lie in (0, 1]
};

const Field kFields[] = {
    {"peak_flops", &Hardware::peakFlops, false},
    {"gemm_efficiency", &Hardware::gemmEfficiency, true},
    {"hbm_bandwidth", &Hardware::hbmBandwidth, false},
    {"hbm_efficiency", &Hardware::hbmEfficiency, true},
    {"hbm_bytes", &Hardware::hbmBytes, false},
    {"intra_node_bandwidth", &Hardware::intraNodeBandwidth, false},
    {"inter_node_bandwidth", &Hardware::interNodeBandwidth, false},
    {"intra_node_efficiency", &Hardware::intraNodeEfficiency, true},
    {"inter_node_efficiency", &Hardware::interNodeEfficiency, true},
    {"intra_node_latency", &Hardware::intraNodeLatency, false},
    {"inter_node_latency", &Hardware::interNodeLatency, false},
    {"reserved_bytes", &Hardware::reservedBytes, false},
};

Status check(const Hardware &h) {
  for (const Field &f : kFields) {
    double v = h.*f.member;
    bool latencyOrReserve = std::string(f.name).find("latency") !=
                                std::string::npos ||
                            std::string(f.name) == "reserved_bytes";
    if (!std::isfinite(v) || v < 0 || (!latencyOrReserve && v == 0) ||
        (f.fraction && v > 1))
      return Status::error(std::string("hardware field \"") + f.name +
                           "\" is " + json::number(v) + "; it must be " +
                           (f.fraction ? "in (0, 1]"
                            : latencyOrReserve ? ">= 0"
                                               : "> 0"));
  }
  if (h.gpusPerNode < 1)
    return Status::error("hardware field \"gpus_per_node\" must be >= 1");
  return Status::success();
}
} // namespace

std::vector<std::string> hardwarePresetNames() {
  return {"a100-80g", "h100-sxm", "h200"};
}

Expected<Hardware> hardwarePreset(std::string_view name) {
  if (name == "a100-80g")
    return a100();
  if (name == "h100-sxm")
    return h100();
  if (name == "h200")
    return h200();
  return Status::error("unknown hardware preset '" + std::string(name) +
                       "' (presets: a100-80g, h100-sxm, h200; or a .json file)");
}

Expected<Hardware> parseHardwareJson(std::string_view text) {
  Expected<json::Value> doc = json::parse(text);
  if (!doc)
    return Status::error("invalid JSON: " + doc.error());
  if (doc->kind != json::Value::Object)
    return Status::error("the hardware description must be a JSON object");
  Hardware h;
  for (const auto &[k, v] : doc->object)
    if (k == "base") {
      if (v.kind != json::Value::String)
        return Status::error("hardware field \"base\" must be a preset name");
      Expected<Hardware> base = hardwarePreset(v.string);
      if (!base)
        return base.status();
      h = *base;
    }
  bool named = false;
  for (const auto &[k, v] : doc->object) {
    if (k == "base")
      continue;
    if (k == "name") {
      if (v.kind != json::Value::String)
        return Status::error("hardware field \"name\" must be a string");
      h.name = v.string;
      named = true;
      continue;
    }
    if (v.kind != json::Value::Number)
      return Status::error("hardware field \"" + k + "\" must be a number");
    if (k == "gpus_per_node") {
      if (v.number != std::floor(v.number) || v.number < 1 || v.number > 1e6)
        return Status::error("hardware field \"gpus_per_node\" must be a "
                             "positive integer");
      h.gpusPerNode = static_cast<int>(v.number);
      continue;
    }
    const Field *field = nullptr;
    for (const Field &f : kFields)
      if (k == f.name)
        field = &f;
    if (!field) {
      std::string known = "name, base, gpus_per_node";
      for (const Field &f : kFields)
        known += std::string(", ") + f.name;
      return Status::error("unknown hardware field \"" + k + "\" (known: " +
                           known + ")");
    }
    h.*field->member = v.number;
  }
  if (!named && h.name.empty())
    h.name = "custom";
  if (Status s = check(h); !s)
    return s;
  return h;
}

Expected<Hardware> loadHardware(const std::string &nameOrPath) {
  Expected<Hardware> preset = hardwarePreset(nameOrPath);
  if (preset)
    return preset;
  std::ifstream in(nameOrPath, std::ios::binary);
  if (!in) {
    if (nameOrPath.size() > 5 &&
        nameOrPath.compare(nameOrPath.size() - 5, 5, ".json") == 0)
      return Status::error("cannot read hardware file '" + nameOrPath + "'");
    return preset.status();
  }
  std::stringstream buf;
  buf << in.rdbuf();
  Expected<Hardware> h = parseHardwareJson(buf.str());
  if (!h)
    return Status::error("hardware file '" + nameOrPath + "': " + h.error());
  return h;
}

} // namespace lamina::plan
