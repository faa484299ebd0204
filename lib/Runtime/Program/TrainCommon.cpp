//===- TrainCommon.cpp - flags and helpers of the training drivers --------===//
//
// TrainCommon.h: shared by trainMain (Train.cpp) and distTrainMain
// (lib/Runtime/Dist).
//
//===----------------------------------------------------------------------===//

#include "TrainCommon.h"

#include "Args.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sys/stat.h>

using namespace lamina::rt;

namespace {

const char *const kUsage =
    "usage: run (--data FILE | --data-dir DIR) --steps N [options]\n"
    "\n"
    "Trains the compiled model. The batch size and the inputs' shapes are\n"
    "the compiled ones (set them when compiling, e.g. with --dim); they\n"
    "cannot change here.\n"
    "\n"
    "  --data FILE            flat file of little-endian token ids, no header,\n"
    "                         cut into examples by --recipe\n"
    "  --data-dtype T         uint16 (default) or uint32\n"
    "  --recipe R             causal-lm (default), masked-lm or seq2seq with\n"
    "                         --data; classification with --data-dir\n"
    "  --mask-rate X          masked-lm: share of positions chosen (0.15)\n"
    "  --mask-token ID        masked-lm: the mask token's id\n"
    "  --decoder-start-token ID  seq2seq: the decoder's first input id\n"
    "  --vocab N              ids lie below N (when the program does not\n"
    "                         know its vocabulary)\n"
    "  --data-dir DIR         one DIR/<input>.npy per model input, [N, ...]:\n"
    "                         N examples, sampled in shuffled epochs\n"
    "  --steps N              train until step N (required)\n"
    "  --lr X                 peak learning rate (default 1e-3)\n"
    "  --lr-schedule S        after the warm-up: constant (default), cosine\n"
    "                         or linear (decay to --min-lr at the last step),\n"
    "                         or wsd (constant, then a linear --cooldown)\n"
    "  --warmup N             linear warm-up steps (default 0)\n"
    "  --min-lr X             final learning rate (default 0)\n"
    "  --cooldown N           wsd: the decay's last N steps (default 20%)\n"
    "  --optimizer O          adamw (default) or sgd\n"
    "  --weight-decay X       default 0.01 (adamw) or 0 (sgd)\n"
    "  --no-decay-vectors     no weight decay on biases and norm scales\n"
    "                         (parameters of rank < 2)\n"
    "  --momentum X           sgd momentum (default 0)\n"
    "  --clip X               clip the global gradient norm to X (default: "
    "off)\n"
    "  --seed N               batch sampling seed (default 0)\n"
    "  --log-every N          log every N steps (default 10)\n"
    "  --checkpoint-dir DIR   where checkpoints are written\n"
    "  --checkpoint-every N   checkpoint every N steps (and at the end)\n"
    "  --resume               continue from the newest checkpoint in DIR\n"
    "  --eval-data PATH       validation data of the training data's form\n"
    "                         (a token file or a folder): their mean\n"
    "                         loss before the first step, every\n"
    "                         --eval-every steps and after the last\n"
    "  --eval-every N         steps between evaluations (default: only\n"
    "                         before the first and after the last)\n"
    "  --eval-batches N       batches per evaluation, the same windows each\n"
    "                         time (default 20)\n"
    "  --export FILE.onnx     write the model with the trained weights\n"
    "                         (FILE.safetensors: the weights alone, under\n"
    "                         the initializers' names)\n"
    "  --model FILE           ONNX file to read the initial weights from\n"
    "                         (default: the model compiled from)\n"
    "  --threads N            kernel threads (default: all cores)\n"
    "  --kernels              print what runs the kernels (device, threads,\n"
    "                         the GEMM kernel family picked for this CPU)\n"
    "                         and exit\n";

const char *const kSingleUsage =
    "  --grad-accum N         sum the gradients of N batches into each\n"
    "                         update (a batch N times the compiled one)\n"
    "  --dump-outputs DIR     after training, run the next batch with the\n"
    "                         trained weights (no update) and write its token\n"
    "                         ids and the model's outputs (e.g. logits) as "
    ".npy\n";

const char *const kDistUsage =
    "\n"
    "Distributed programs (launch with mpirun; docs/distributed.md) also take:\n"
    "  --trace FILE           write a Chrome trace (chrome://tracing, Perfetto)\n"
    "  --stats FILE           write the per-rank statistics as JSON\n"
    "  --comm-timeout S       seconds to wait for a peer before giving up\n"
    "                         (default 60)\n";

bool parseReal(const std::string &s, double &out) {
  if (s.empty())
    return false;
  char *end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return end && *end == 0 && std::isfinite(out) && out >= 0;
}

} // namespace

std::string lamina::rt::parseTrainOptions(int argc, char **argv,
                                          TrainOptions &o, bool dist) {
  ArgReader args(argc, argv);
  std::string value;
  bool evalBatchesGiven = false;
  while (args.next()) {
    const std::string &arg = args.name();
    auto take = [&] { return args.take(value); };
    auto str = [&](std::string &dst) {
      if (!take() || value.empty())
        return "--" + arg.substr(2) + " needs a value";
      dst = value;
      return std::string();
    };
    auto integer = [&](int64_t &dst, int64_t min) {
      if (!take() || !parseCount(value, dst, min))
        return arg + (min > 0 ? " needs a positive integer"
                              : " needs an integer >= 0");
      return std::string();
    };
    auto real = [&](double &dst) {
      if (!take() || !parseReal(value, dst))
        return arg + " needs a number >= 0";
      return std::string();
    };
    std::string err;
    if (arg == "--help" || arg == "-h")
      o.help = true;
    else if (args.isFlag("--resume"))
      o.resume = true;
    else if (args.isFlag("--kernels"))
      o.kernels = true;
    else if (args.isFlag("--no-decay-vectors"))
      o.noDecayVectors = true;
    else if (arg == "--data")
      err = str(o.data);
    else if (arg == "--data-dtype")
      err = str(o.dataDtype);
    else if (arg == "--data-dir")
      err = str(o.dataDir);
    else if (arg == "--recipe")
      err = str(o.recipe);
    else if (arg == "--mask-rate")
      err = real(o.maskRate);
    else if (arg == "--mask-token")
      err = integer(o.maskToken, 0);
    else if (arg == "--decoder-start-token")
      err = integer(o.decoderStart, 0);
    else if (arg == "--vocab")
      err = integer(o.vocab, 1);
    else if (arg == "--lr-schedule")
      err = str(o.schedule);
    else if (arg == "--optimizer")
      err = str(o.optimizer);
    else if (arg == "--checkpoint-dir")
      err = str(o.checkpointDir);
    else if (arg == "--export")
      err = str(o.exportPath);
    else if (arg == "--eval-data")
      err = str(o.evalData);
    else if (arg == "--eval-every")
      err = integer(o.evalEvery, 1);
    else if (arg == "--eval-batches") {
      err = integer(o.evalBatches, 1);
      evalBatchesGiven = true;
    } else if (arg == "--model")
      err = str(o.model);
    else if (arg == "--steps")
      err = integer(o.steps, 0);
    else if (arg == "--warmup")
      err = integer(o.warmup, 0);
    else if (arg == "--cooldown")
      err = integer(o.cooldown, 1);
    else if (arg == "--seed")
      err = integer(o.seed, 0);
    else if (arg == "--log-every")
      err = integer(o.logEvery, 1);
    else if (arg == "--checkpoint-every")
      err = integer(o.checkpointEvery, 1);
    else if (arg == "--threads")
      err = integer(o.threads, 1);
    else if (arg == "--lr")
      err = real(o.lr);
    else if (arg == "--min-lr")
      err = real(o.minLr);
    else if (arg == "--weight-decay")
      err = real(o.weightDecay);
    else if (arg == "--momentum")
      err = real(o.momentum);
    else if (arg == "--clip")
      err = real(o.clip);
    else if (!dist && arg == "--dump-outputs")
      err = str(o.dumpOutputs);
    else if (arg == "--grad-accum") {
      err = integer(o.gradAccum, 1);
      if (err.empty() && dist)
        err = "--grad-accum: a distributed program accumulates over the "
              "micro-batches it was compiled with (--micro-batches)";
    } else if (dist && arg == "--trace")
      err = str(o.trace);
    else if (dist && arg == "--stats")
      err = str(o.stats);
    else if (dist && arg == "--comm-timeout") {
      err = real(o.commTimeout);
      if (err.empty() && !(o.commTimeout > 0))
        err = "--comm-timeout needs a number > 0";
    } else
      return "unknown argument '" + std::string(args.raw()) + "'";
    if (!err.empty())
      return err;
  }
  if (o.help || o.kernels)
    return "";
  if (o.data.empty() == o.dataDir.empty())
    return o.data.empty() ? "--data FILE or --data-dir DIR is required"
                          : "--data and --data-dir do not go together";
  if (!o.recipe.empty() && o.recipe != "causal-lm" &&
      o.recipe != "masked-lm" && o.recipe != "seq2seq" &&
      o.recipe != "classification")
    return "--recipe must be causal-lm, masked-lm, seq2seq or "
           "classification, got '" + o.recipe + "'";
  if (!o.dataDir.empty() && !o.recipe.empty() && o.recipe != "classification")
    return "--recipe " + o.recipe + " cuts a token file (--data); --data-dir "
           "gives every input's values";
  if (o.dataDir.empty() && o.recipe == "classification")
    return "--recipe classification reads arrays: give --data-dir";
  if (o.recipe != "masked-lm" && (o.maskToken >= 0 || o.maskRate != 0.15))
    return "--mask-rate and --mask-token go with --recipe masked-lm";
  if (!(o.maskRate > 0 && o.maskRate <= 1))
    return "--mask-rate must be in (0, 1]";
  if (o.recipe != "seq2seq" && o.decoderStart >= 0)
    return "--decoder-start-token goes with --recipe seq2seq";
  if (o.steps < 0)
    return "--steps is required";
  if (o.dataDtype != "uint16" && o.dataDtype != "uint32")
    return "--data-dtype must be uint16 or uint32, got '" + o.dataDtype + "'";
  if (o.schedule != "constant" && o.schedule != "cosine" &&
      o.schedule != "linear" && o.schedule != "wsd")
    return "--lr-schedule must be constant, cosine, linear or wsd, got '" +
           o.schedule + "'";
  if (o.cooldown > 0 && o.schedule != "wsd")
    return "--cooldown goes with --lr-schedule wsd";
  if (o.optimizer != "adamw" && o.optimizer != "sgd")
    return "--optimizer must be adamw or sgd, got '" + o.optimizer + "'";
  if (o.resume && o.checkpointDir.empty())
    return "--resume needs --checkpoint-dir";
  if (o.checkpointEvery > 0 && o.checkpointDir.empty())
    return "--checkpoint-every needs --checkpoint-dir";
  if (o.evalData.empty() && (o.evalEvery > 0 || evalBatchesGiven))
    return "--eval-every and --eval-batches need --eval-data";
  return "";
}

static bool sameShape(const std::vector<int64_t> &shape, const int64_t *spec,
                      int rank) {
  if (int(shape.size()) != rank)
    return false;
  for (int i = 0; i < rank; ++i)
    if (shape[size_t(i)] != spec[i])
      return false;
  return true;
}

Status lamina::rt::makeDirs(const std::string &dir) {
  for (size_t pos = dir.find('/', 1);; pos = dir.find('/', pos + 1)) {
    std::string prefix = dir.substr(0, pos);
    if (!prefix.empty() && ::mkdir(prefix.c_str(), 0755) != 0 &&
        errno != EEXIST)
      return Status::error("cannot create '" + prefix +
                           "': " + std::strerror(errno));
    if (pos == std::string::npos)
      break;
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return Status::error("'" + dir + "' is not a folder");
  return Status::success();
}


std::string lamina::rt::trainUsage(bool dist) {
  return std::string(kUsage) + (dist ? kDistUsage : kSingleUsage);
}

OptimizerConfig lamina::rt::optimizerConfig(const TrainOptions &o) {
  return o.optimizer == "sgd"
             ? OptimizerConfig::sgd(float(o.momentum),
                                    float(o.weightDecay < 0 ? 0 : o.weightDecay))
             : OptimizerConfig::adamw(
                   float(o.weightDecay < 0 ? 0.01 : o.weightDecay));
}

Status lamina::rt::lrSchedule(const TrainOptions &o, LrSchedule &sched) {
  sched.kind = o.schedule == "cosine"   ? LrScheduleKind::WarmupCosine
               : o.schedule == "linear" ? LrScheduleKind::Linear
               : o.schedule == "wsd"    ? LrScheduleKind::Wsd
                                        : LrScheduleKind::Constant;
  sched.lr = o.lr;
  sched.minLr = o.minLr;
  sched.warmupSteps = o.warmup;
  sched.decaySteps = o.steps;
  // WSD's usual cooldown: the last fifth of training (at least a step).
  sched.cooldownSteps = o.cooldown > 0
                            ? o.cooldown
                            : std::max<int64_t>(1, (o.steps - o.warmup) / 5);
  if (Status s = sched.validate(); !s.ok())
    return Status::error("--lr-schedule " + o.schedule + ": " + s.message());
  return Status::success();
}

int64_t lamina::rt::tokenVocab(int64_t compiled, DType tokenType) {
  return compiled > 0                ? compiled
         : tokenType == DType::I32 ? int64_t(INT32_MAX) + 1
                                   : int64_t(UINT32_MAX) + 1;
}

Status lamina::rt::checkInitializer(const ArgSpec &a, const OwnedTensor *init,
                                    const std::string &modelPath) {
  if (!init)
    return Status::error("no initializer named '" + std::string(a.name) +
                         "' in '" + modelPath + "' (the program expects " +
                         describeType(a.dtype, a.shape, a.rank) + ")");
  if (init->dtype != a.dtype || !sameShape(init->shape, a.shape, a.rank))
    return Status::error(
        "initializer '" + std::string(a.name) + "' in '" + modelPath +
        "': expected " + describeType(a.dtype, a.shape, a.rank) + ", got " +
        describeType(init->dtype, init->shape.data(), int(init->shape.size())));
  return Status::success();
}

std::vector<float> lamina::rt::lossWeights(LossKind loss, const Tensor &counted,
                                           bool skipFirst, int64_t rowsPerPart,
                                           int64_t ignoreIndex,
                                           bool countsLabels) {
  int64_t rows = counted.shape[0];
  size_t parts = size_t(rows / rowsPerPart);
  if (loss == LossKind::Output && !countsLabels)
    return std::vector<float>(parts, float(1.0 / double(parts)));
  int64_t width = rows ? counted.numElements() / rows : 0;
  std::vector<int64_t> counts(parts, 0);
  int64_t total = 0;
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t col = skipFirst ? 1 : 0; col < width; ++col) {
      int64_t i = row * width + col;
      int64_t v = counted.dtype == DType::I64
                      ? static_cast<const int64_t *>(counted.data)[i]
                      : static_cast<const int32_t *>(counted.data)[i];
      if (v != ignoreIndex) {
        ++counts[size_t(row / rowsPerPart)];
        ++total;
      }
    }
  std::vector<float> w(parts, 0.0f);
  for (size_t j = 0; j < parts && total > 0; ++j)
    w[j] = float(double(counts[j]) / double(total));
  return w;
}

void lamina::rt::EvalSchedule::record(int64_t step, double loss, double took,
                                      bool print) {
  seconds += took;
  last = step;
  if (!print)
    return;
  std::printf("step %lld val loss %.6f (%lld batches, %.1fs)\n",
              (long long)step, loss, (long long)o.evalBatches, took);
  std::fflush(stdout);
}
