//===- ModelDesc.h - what the planner knows about a model -------*- C++ -*-===//
//
// The planner's view of a model: the chain of modules (embedding, layers,
// head) with what each costs for one micro-batch. It is produced from the
// graph IR (include/lamina/Dialect/Dist/Transforms/DescribeModel.h, which
// reads the ops' CostOpInterface) and consumed by the cost model
// (include/lamina/Plan/), which has no MLIR dependency so it can be unit
// tested on hand-written descriptions and reused by code generation.
//
// All per-micro-batch figures are measured at `microBatchSize` samples of
// `seqLen` tokens (the dims the model was imported with); the cost model
// scales them linearly to other micro-batch sizes.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_PLAN_MODELDESC_H
#define LAMINA_PLAN_MODELDESC_H

#include <cstdint>
#include <string>
#include <vector>

namespace lamina::plan {

enum class ModuleRole : unsigned char { Embedding, Layer, Head };

struct ModuleDesc {
  std::string name; ///< "embedding", "layer.0", ..., "head"
  ModuleRole role = ModuleRole::Layer;
  /// Index of the shared body: modules with the same body are isomorphic
  /// (identical layers); -1 when the module has its own.
  int body = -1;
  /// Parameters owned by the module (elements, trainable and frozen), and
  /// their size in the model's own element types.
  int64_t params = 0;
  int64_t paramBytes = 0;
  /// Forward FLOPs and bytes accessed (CostOpInterface sums) for one
  /// micro-batch. Backward is costed as twice the forward until autodiff
  /// lands; recompute as one more forward.
  double forwardFlops = 0;
  double forwardBytes = 0;
  /// FLOPs of the GEMMs alone (matmuls), the quantity Megatron counts and
  /// the part tensor parallelism splits.
  double matmulFlops = 0;
  /// Bytes accessed by those matmuls (part of forwardBytes). The rest of
  /// forwardBytes is charged at memory bandwidth by the cost model; leave 0
  /// when unknown (every byte is then charged, an upper bound).
  double matmulBytes = 0;
  /// Bytes of the value handed to the next module (the residual stream,
  /// b*s*h for a transformer layer) for one micro-batch; 0 for the last.
  int64_t outputBytes = 0;
  /// Bytes of the module's input(s) from the previous module (what full
  /// recompute keeps per micro-batch).
  int64_t inputBytes = 0;
  /// Bytes of every intermediate value the backward needs without
  /// recompute (sum of the op results inside the module) per micro-batch.
  int64_t activationBytes = 0;
  /// Largest single intermediate (working set during recompute/backward).
  int64_t peakTransientBytes = 0;
  /// Mixture-of-experts layers (graph.moe): the experts' weights among
  /// `params` (elements), the experts per layer and per token (E, k; of
  /// the module's last MoE layer), and the bytes of every (token, pick)
  /// pair's input row for one micro-batch (T k H values): what one
  /// expert-parallel all-to-all moves in all, to every rank.
  int64_t expertParams = 0;
  int64_t experts = 0, expertsPerToken = 0;
  int64_t routedBytes = 0;
};

/// A parameter read by more than one module that is not one copy per layer:
/// a tied LM head reads the embedding's table. Its elements are counted in
/// the first reader's `params` only. When its readers land on different
/// schedule stages, training keeps it whole on every pipeline rank that
/// reads it (never sharded) and sums its gradient with one all-reduce over
/// all of them in every replica (docs/distributed.md, "Shared (tied)
/// parameters"); the cost model prices it that way.
struct SharedParam {
  std::string name;
  int64_t params = 0;       ///< elements
  std::vector<int> readers; ///< module indices, ascending (the owner first)
};

struct ModelDesc {
  std::string name;            ///< model file stem
  int64_t microBatchSize = 1;  ///< samples per micro-batch the costs are for
  int64_t seqLen = 1;          ///< tokens per sample (1 when unknown)
  int64_t hidden = 0;          ///< residual-stream width when known, else 0
  std::vector<ModuleDesc> modules; ///< in chain order
  /// Values every layer reads that are not part of the chain (masks, rotary
  /// tables, position ids): names, for the report.
  std::vector<std::string> sharedInputs;
  /// Tied parameters (see SharedParam).
  std::vector<SharedParam> sharedParams;
  /// How the modules were found: "names", "metadata", "structure", "regex".
  std::string discovery;

  int64_t totalParams() const {
    int64_t n = 0;
    for (const ModuleDesc &m : modules)
      n += m.params;
    return n;
  }
  /// The parameters one token runs through: the experts' weights count
  /// by the k of E each token picks.
  double activeParams() const {
    double n = 0;
    for (const ModuleDesc &m : modules)
      n += double(m.params - m.expertParams) +
           (m.experts ? double(m.expertParams) * double(m.expertsPerToken) /
                            double(m.experts)
                      : 0.0);
    return n;
  }
  /// The experts' GEMM FLOPs of module `m` for one micro-batch: each of
  /// the T k (token, pick) rows of its MoE layers runs through one
  /// expert's weights, 2 FLOPs a weight, with T = microBatchSize x seqLen
  /// tokens (graph.moe's SiLU gating and weighted sum, 6 I + 2 H a row,
  /// aside). Part of `m.matmulFlops`.
  double expertFlops(const ModuleDesc &m) const {
    return m.experts ? 2.0 * double(microBatchSize) * double(seqLen) *
                           double(m.expertsPerToken) * double(m.expertParams) /
                           double(m.experts)
                     : 0.0;
  }
  /// Modules with mixture-of-experts layers.
  int moeModules() const {
    int n = 0;
    for (const ModuleDesc &m : modules)
      n += m.expertParams > 0;
    return n;
  }
};

} // namespace lamina::plan

#endif // LAMINA_PLAN_MODELDESC_H
