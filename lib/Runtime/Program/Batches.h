//===- Batches.h - what fills a training program's inputs -------*- C++ -*-===//
//
// A BatchSource fills every input of a train step, [rows, ...] each, from
// either a token file through a recipe (causal-lm, masked-lm, seq2seq:
// `--data FILE --recipe R`) or a folder of one .npy per input, mapped and
// sampled in shuffled epochs (`--data-dir DIR`). Both training drivers
// (Train.cpp, lib/Runtime/Dist) draw their batches through it, so the
// formats, checks and sampler states are the same everywhere.
// docs/training.md ("Training data").
//
// Private to the runtime libraries; implemented in Batches.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_LIB_RUNTIME_PROGRAM_BATCHES_H
#define LAMINA_LIB_RUNTIME_PROGRAM_BATCHES_H

#include "TrainCommon.h"

#include <memory>
#include <string>
#include <vector>

namespace lamina::rt {

/// One model input a batch fills: its name, dtype and the shape of one
/// example (the input's dims after the leading batch dim).
struct BatchSlot {
  std::string name;
  DType dtype = DType::I64;
  std::vector<int64_t> example;
};

/// What the loss says about the inputs: the one holding the labels (""
/// none; for the model's own loss, the input named "labels"), the loss,
/// the classes or vocabulary ids lie below (0: unknown), the ignored label.
struct LabelInfo {
  std::string input;
  LossKind loss = LossKind::CausalLM;
  int64_t vocab = 0;
  int64_t ignoreIndex = -100;
};

/// The labels input for `loss`: the compiled one, or the input named
/// "labels" of a model computing its own loss.
LabelInfo labelInfo(const TrainSpec &ts, const std::vector<BatchSlot> &slots);

class BatchSource {
public:
  virtual ~BatchSource();
  /// Fills `out[i]` ([rows, slot i's example...], slot i's dtype) with the
  /// next `rows` examples.
  virtual Status next(const std::vector<Tensor> &out) = 0;
  /// The sampler's position, for a checkpoint, and back from one.
  virtual std::vector<uint8_t> state() const = 0;
  virtual Status restore(const std::vector<uint8_t> &state) = 0;
  /// To the start every evaluation reads from (the same batches each time).
  virtual void rewind() = 0;
};

/// Opens the training data (--data / --data-dir; `eval`: --eval-data, of
/// the same form) for `slots`. Errors name the input and the file.
Status openBatches(const TrainOptions &o, bool eval,
                   const std::vector<BatchSlot> &slots, const LabelInfo &labels,
                   std::unique_ptr<BatchSource> &out);

/// The slot whose values the loss counts to weigh micro-batches
/// (lossWeights): the labels input (for the model's own loss too, when an
/// integer input is named as its labels), or a causal LM's token input;
/// else -1. `skipFirst`: a causal LM's first position labels nothing.
int countedSlot(const std::vector<BatchSlot> &slots, const LabelInfo &labels,
                bool &skipFirst);

} // namespace lamina::rt

#endif // LAMINA_LIB_RUNTIME_PROGRAM_BATCHES_H
