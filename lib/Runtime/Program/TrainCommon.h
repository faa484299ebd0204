//===- TrainCommon.h - what trainMain and distTrainMain share ---*- C++ -*-===//
//
// The training flags (one parser, one usage text), the optimizer and
// learning-rate schedule they configure, the checks of an initializer
// against the compiled signature, and small file helpers. Private to the
// runtime libraries (lamina_program, lamina_dist); implemented in
// TrainCommon.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_LIB_RUNTIME_PROGRAM_TRAINCOMMON_H
#define LAMINA_LIB_RUNTIME_PROGRAM_TRAINCOMMON_H

#include "lamina/Runtime/Optimizer.h"
#include "lamina/Runtime/Program.h"
#include "lamina/Runtime/Status.h"
#include "lamina/Runtime/TensorIO.h"
#include "lamina/Runtime/TokenData.h"

#include <cstdlib>
#include <stdint.h>
#include <string>
#include <vector>

namespace lamina::rt {

struct TrainOptions {
  std::string data, dataDtype = "uint16", schedule = "constant",
                    optimizer = "adamw", checkpointDir, exportPath, model;
  int64_t steps = -1, warmup = 0, cooldown = -1, seed = 0, logEvery = 10,
          checkpointEvery = 0, threads = 0;
  double lr = 1e-3, minLr = 0, weightDecay = -1, momentum = 0, clip = 0;
  bool resume = false, help = false, noDecayVectors = false;
  bool kernels = false; // --kernels: print what runs the kernels, exit
  // Validation: --eval-batches batches of --eval-data, before the first
  // step, every --eval-every steps and after the last.
  std::string evalData;
  int64_t evalEvery = 0, evalBatches = 20;
  // Where batches come from (Batches.h): a token file and a recipe, or a
  // folder of one .npy per input; the masked-LM and seq2seq recipes'
  // settings; the vocabulary when the program does not know it.
  std::string dataDir, recipe;
  double maskRate = 0.15;
  int64_t maskToken = -1, decoderStart = -1, vocab = 0;
  // Single-process programs only: after training, run one more batch
  // without updating and write its inputs and the model's outputs here;
  // batches whose gradients sum into one update.
  std::string dumpOutputs;
  int64_t gradAccum = 1;
  // Distributed programs only (parseTrainOptions with dist = true).
  std::string trace, stats;
  double commTimeout = 60;
};

/// The usage text of `run` for a training program; `dist` adds the flags
/// of distributed programs.
std::string trainUsage(bool dist);

/// Parses argv into `o`; returns "" or the error. The flags of distributed
/// programs (--trace, --stats, --comm-timeout) are accepted only when
/// `dist` is set.
std::string parseTrainOptions(int argc, char **argv, TrainOptions &o,
                              bool dist);

/// The optimizer and schedule the flags select (validated).
OptimizerConfig optimizerConfig(const TrainOptions &o);
/// The optimizer for a parameter of rank `rank`: --no-decay-vectors
/// exempts biases and norm scales (rank < 2) from weight decay, as
/// nanoGPT and Hugging Face's Trainer do.
inline OptimizerConfig optimizerConfigFor(const TrainOptions &o, int rank) {
  OptimizerConfig cfg = optimizerConfig(o);
  if (o.noDecayVectors && rank < 2)
    cfg.weightDecay = 0;
  return cfg;
}
Status lrSchedule(const TrainOptions &o, LrSchedule &out);

/// The vocabulary ids are checked against: the compiled one, else the
/// largest the token dtype can hold.
int64_t tokenVocab(int64_t compiled, DType tokenType);

/// Each of `rows / rowsPerPart` parts' share of the loss over the
/// `counted.shape[0]` rows of a batch: its labels not equal to
/// `ignoreIndex` over all of them (`counted`: the labels input, or a causal
/// LM's tokens, whose first position labels nothing: `skipFirst`), so that
/// the weighted sum of the parts' mean losses, and of their gradients, is
/// the mean over all rows. The model's own loss (Output) is weighed so
/// when `countsLabels` (its labels input: exact for a token-mean
/// cross-entropy with that ignore index, as Transformers' models compute),
/// else uniformly (`counted` then only gives the rows). Zero everywhere
/// when no label counts.
std::vector<float> lossWeights(LossKind loss, const Tensor &counted,
                               bool skipFirst, int64_t rowsPerPart,
                               int64_t ignoreIndex, bool countsLabels = true);

/// When a training driver validates (--eval-data): before a fresh run's
/// first step, after every --eval-every-th step and after the last, once
/// per step. It adds up the evaluations' seconds (which the logged
/// throughput leaves out) and writes their log line.
class EvalSchedule {
public:
  explicit EvalSchedule(const TrainOptions &o) : o(o) {}
  bool atStart(int64_t step) const { return on() && step == 0; }
  bool after(int64_t done) const {
    return on() && o.evalEvery > 0 && done % o.evalEvery == 0;
  }
  bool atEnd(int64_t step) const { return on() && last != step; }
  /// An evaluation at `step` took `took` seconds; `print`: log its loss.
  void record(int64_t step, double loss, double took, bool print);
  double seconds = 0;

private:
  bool on() const { return !o.evalData.empty(); }
  const TrainOptions &o;
  int64_t last = -1;
};

/// The evaluation's batch sampler: seeded alike at every evaluation and
/// in every run (not by --seed), so validation losses compare.
inline SplitMix64 evalSampler() { return SplitMix64(0x5EED); }

/// The initializer `a` names, from `inits`, with a's dtype and shape; an
/// error naming the model otherwise.
Status checkInitializer(const ArgSpec &a, const OwnedTensor *init,
                        const std::string &modelPath);

/// The --model path, else the compiled one.
inline std::string modelPathOf(const TrainOptions &o, const char *compiled) {
  return !o.model.empty() ? o.model : compiled ? compiled : "";
}

/// mkdir -p.
Status makeDirs(const std::string &dir);

struct FreeDeleter {
  void operator()(void *p) const { std::free(p); }
};

} // namespace lamina::rt

#endif // LAMINA_LIB_RUNTIME_PROGRAM_TRAINCOMMON_H
