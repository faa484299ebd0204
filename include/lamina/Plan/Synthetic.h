//===- Synthetic.h - closed-form model descriptions ------------*- C++ -*-===//
//
// A GPT (Megatron-LM layout: embedding, L pre-norm layers, final norm and
// tied-weight head) described from its shape alone, with the per-op sums a
// graph description would give. The benchmarks use it for published shapes
// without writing ONNX files, and the tests use it as a realistic model.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_PLAN_SYNTHETIC_H
#define LAMINA_PLAN_SYNTHETIC_H

#include "lamina/Plan/ModelDesc.h"
#include "lamina/Schedule/Expected.h"

#include <string_view>

namespace lamina::plan {

struct GptShape {
  int64_t layers = 12, hidden = 768, heads = 12, seqLen = 1024,
          vocab = 50257;
  int64_t microBatchSize = 1;
};

/// Megatron's parameter count: 12 L h^2 (1 + 13/(12h) + (V+s)/(12 L h)).
double gptParams(const GptShape &shape);
/// Megatron's FLOPs per sample with recompute (GEMMs only):
/// 96 s L h^2 (1 + s/(6h) + V/(16 L h)).
double gptMegatronFlopsPerSample(const GptShape &shape);

/// Costs in bf16 for one micro-batch of `shape.microBatchSize` samples;
/// elementwise bytes follow Megatron-LM's fused kernels (docs/plan.md).
ModelDesc syntheticGpt(const GptShape &shape);

/// "gpt:layers=96,hidden=12288,heads=96,seq=2048,vocab=51200[,batch=1]"
/// (omitted keys keep GptShape's defaults), for `lamina plan` on a shape
/// without a model file.
schedule::Expected<GptShape> parseGptSpec(std::string_view spec);

} // namespace lamina::plan

#endif // LAMINA_PLAN_SYNTHETIC_H
