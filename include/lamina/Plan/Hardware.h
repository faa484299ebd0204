//===- Hardware.h - what a GPU cluster can do --------------------*- C++ -*-===//
//
// The machine the cost model prices a plan on: one GPU's datasheet figures,
// the links between GPUs, and the fraction of each peak that real kernels
// reach. The fractions are derived in docs/plan.md ("Hardware") from clocks,
// quantisation and protocol overheads, never fitted to a benchmark row.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_PLAN_HARDWARE_H
#define LAMINA_PLAN_HARDWARE_H

#include "lamina/Schedule/Expected.h"

#include <string>
#include <string_view>
#include <vector>

namespace lamina::plan {

struct Hardware {
  std::string name;
  double peakFlops = 0;      ///< dense bf16 tensor-core FLOP/s of one GPU
  double gemmEfficiency = 0; ///< fraction of peakFlops large GEMMs sustain
  double hbmBandwidth = 0;   ///< bytes/s
  double hbmEfficiency = 0;  ///< fraction streaming (elementwise) kernels reach
  double hbmBytes = 0;       ///< memory per GPU
  /// Per GPU, one direction, bytes/s: NVLink/NVSwitch inside a node, the
  /// GPU's share of the network (its own NIC) between nodes.
  double intraNodeBandwidth = 0;
  double interNodeBandwidth = 0;
  double intraNodeEfficiency = 0; ///< fraction NCCL rings reach
  double interNodeEfficiency = 0;
  double intraNodeLatency = 0; ///< seconds per ring step / message
  double interNodeLatency = 0;
  int gpusPerNode = 0;
  /// Bytes of memory the framework and CUDA context keep per GPU (not
  /// available to the plan).
  double reservedBytes = 0;
};

/// "a100-80g", "h100-sxm", "h200".
std::vector<std::string> hardwarePresetNames();
schedule::Expected<Hardware> hardwarePreset(std::string_view name);
/// Parses a hardware description (JSON object; fields in docs/plan.md). A
/// "base" field names a preset whose values the others override.
schedule::Expected<Hardware> parseHardwareJson(std::string_view text);
/// A preset name, or else a path to a JSON file.
schedule::Expected<Hardware> loadHardware(const std::string &nameOrPath);

} // namespace lamina::plan

#endif // LAMINA_PLAN_HARDWARE_H
