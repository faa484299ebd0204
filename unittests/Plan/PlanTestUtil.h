//===- PlanTestUtil.h - hand-written descriptions and hardware ------------===//

#ifndef LAMINA_UNITTESTS_PLAN_PLANTESTUTIL_H
#define LAMINA_UNITTESTS_PLAN_PLANTESTUTIL_H

#include "lamina/Plan/CostModel.h"

namespace lamina::plan::test {

/// A machine where one FLOP takes one second and nothing else costs time
/// unless a test sets it: unit costs come out exact.
inline Hardware unitHardware() {
  Hardware h;
  h.name = "unit";
  h.peakFlops = 1;
  h.gemmEfficiency = 1;
  h.hbmBandwidth = 1e30;
  h.hbmEfficiency = 1;
  h.hbmBytes = 1e30;
  h.intraNodeBandwidth = h.interNodeBandwidth = 1e30;
  h.intraNodeEfficiency = h.interNodeEfficiency = 1;
  h.gpusPerNode = 8;
  return h;
}

/// L identical layers: forward `flops`, `params` parameters, `act` bytes
/// handed on per micro-batch.
inline ModelDesc uniformLayers(int L, double flops = 1, int64_t params = 0,
                               int64_t act = 0) {
  ModelDesc d;
  d.name = "uniform";
  for (int l = 0; l < L; ++l) {
    ModuleDesc m;
    m.name = "layer." + std::to_string(l);
    m.role = ModuleRole::Layer;
    m.body = 0;
    m.params = params;
    m.paramBytes = 2 * params;
    m.forwardFlops = m.matmulFlops = flops;
    m.outputBytes = l + 1 < L ? act : 0;
    m.inputBytes = act;
    m.activationBytes = 10 * act;
    d.modules.push_back(m);
  }
  return d;
}

inline PlanConfig config(schedule::ScheduleKind kind, int p, int m, int d = 1,
                         int zero = 0) {
  PlanConfig c;
  c.schedule = kind;
  c.pp = p;
  c.microBatches = m;
  c.dp = d;
  c.zero = zero;
  c.recompute = false;
  return c;
}

} // namespace lamina::plan::test

#endif
