//===- CompileCommand.cpp - lamina compile --------------------------------===//
//
// ONNX -> import -> the phases of lamina/Pipeline/Pipeline.h (graph, train,
// dist, rt, emitc) -> C++, then the C++ compiler builds OUTDIR/run against
// the runtime libraries of this build (lamina/Config.h says where they
// are). OUTDIR/build.sh is the exact build command, kept so the program can
// be rebuilt by hand. This file maps the flags onto the pipeline's options,
// checks them, and prints what the compile did.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"

#include "lamina/Config.h"
#include "lamina/Conversion/Passes.h"
#include "lamina/Dialect/Dist/IR/DistDialect.h"
#include "lamina/Dialect/Dist/IR/DistOps.h"
#include "lamina/Dialect/Dist/Transforms/Passes.h"
#include "lamina/Dialect/Graph/IR/GraphDialect.h"
#include "lamina/Dialect/Graph/IR/GraphOps.h"
#include "lamina/Dialect/Graph/Transforms/Passes.h"
#include "lamina/Dialect/Graph/Transforms/ShardingInterfaceImpl.h"
#include "lamina/Dialect/Rt/IR/RtOps.h"
#include "lamina/Pipeline/Pipeline.h"
#include "lamina/Runtime/RestoreParameters.h"
#include "lamina/Schedule/Schedule.h"
#include "lamina/Target/ONNX/ONNXImporter.h"

#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/Timing.h"
#include "mlir/Target/Cpp/CppEmitter.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/Regex.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <map>

using namespace mlir;
namespace cl = llvm::cl;

namespace lamina::tool {
cl::SubCommand compileCommand("compile",
                              "Compile an ONNX model into an executable program");
static cl::opt<std::string> modelPath(cl::Positional, cl::desc("MODEL.onnx"),
                                      cl::Required, cl::sub(compileCommand));
static cl::opt<std::string>
    target("target",
           cl::desc("host (CPU kernels, BLAS) or cuda (one GPU: CUDA kernels, "
                    "cuBLASLt; built with nvcc)"),
           cl::init("host"), cl::sub(compileCommand));
static cl::opt<std::string> mode("mode", cl::desc("inference or train"),
                                 cl::init("inference"), cl::sub(compileCommand));
static cl::opt<std::string>
    lossKind("loss",
             cl::desc("--mode train: add a softmax cross-entropy loss: "
                      "causal-lm (labels = inputs shifted) or cross-entropy"),
             cl::sub(compileCommand));
static cl::opt<std::string> logitsName("logits",
                                       cl::desc("--mode train: the logits output"),
                                       cl::sub(compileCommand));
static cl::opt<std::string>
    labelsName("labels", cl::desc("--mode train --loss cross-entropy: the "
                                  "labels input"),
               cl::sub(compileCommand));
static cl::opt<std::string>
    lossOutput("loss-output",
               cl::desc("--mode train: the model's own scalar loss output"),
               cl::sub(compileCommand));
static cl::opt<std::string>
    freezeRegex("freeze",
                cl::desc("--mode train: initializers whose name matches this "
                         "regex (anywhere in the name) are not trained"),
                cl::value_desc("REGEX"), cl::sub(compileCommand));
static cl::opt<int64_t>
    ignoreIndex("ignore-index",
                cl::desc("--mode train: label value that adds nothing to "
                         "the loss"),
                cl::init(-100), cl::sub(compileCommand));
static cl::list<std::string> dims("dim", cl::desc("bind a symbolic dim"),
                                  cl::value_desc("NAME=VALUE"),
                                  cl::sub(compileCommand));
static cl::opt<std::string> outDir("o", cl::desc("output folder (OUTDIR/run)"),
                                   cl::value_desc("OUTDIR"), cl::Required,
                                   cl::sub(compileCommand));
static cl::opt<int> tensorParallel(
    "tp",
    cl::desc("--mode train: tensor-parallel ranks per group; each module's "
             "layers are split over them (Megatron's placement from the "
             "dataflow, docs/tp-design.md); --compile-to dist shows the "
             "split IR"),
    cl::init(1), cl::sub(compileCommand));
static cl::opt<int> expertParallel(
    "ep",
    cl::desc("--mode train: expert-parallel ranks; each mixture-of-experts "
             "layer's experts are split over groups of this many "
             "data-parallel replicas (--dp defaults to it; it must divide "
             "--dp), tokens sent to them and back by all-to-alls "
             "(docs/moe-design.md)"),
    cl::init(1), cl::sub(compileCommand));
static cl::opt<double> moeAuxLoss(
    "moe-aux-loss",
    cl::desc("--mode train: add COEF times the mixture-of-experts routers' "
             "load-balancing loss (Mixtral's, over all layers) to the loss; "
             "single-process programs only"),
    cl::value_desc("COEF"), cl::init(0.0), cl::sub(compileCommand));
static cl::opt<std::string> tpReplicate(
    "tp-replicate",
    cl::desc("with --tp: keep whole on every rank the layers (column/row "
             "GEMM groups) with a weight whose name matches this regex"),
    cl::value_desc("REGEX"), cl::sub(compileCommand));
static cl::opt<bool> sequenceParallel(
    "sequence-parallel",
    cl::desc("with --tp: Megatron's sequence parallelism (norms and residual "
             "adds on sequence shards, all-gathered before each "
             "column-parallel GEMM, reduce-scattered after each row-parallel "
             "one)"),
    cl::init(false), cl::sub(compileCommand));
static cl::opt<int> pipelineRanks(
    "pp", cl::desc("--mode train: pipeline ranks (distributed program)"),
    cl::init(1), cl::sub(compileCommand));
static cl::opt<int> dataParallel(
    "dp", cl::desc("--mode train: data-parallel replicas (distributed program)"),
    cl::init(1), cl::sub(compileCommand));
static cl::opt<int> microBatches(
    "micro-batches",
    cl::desc("--mode train: micro-batches per step and replica; the compiled "
             "batch dim is the micro-batch size"),
    cl::init(1), cl::sub(compileCommand));
static cl::opt<std::string> scheduleName(
    "schedule",
    cl::desc("--mode train: gpipe, 1f1b, interleaved-1f1b, breadth-first "
             "(default) or layered"),
    cl::init("breadth-first"), cl::sub(compileCommand));
static cl::opt<int> zeroLevel(
    "zero", cl::desc("--mode train: data-parallel sharding level 0-3"),
    cl::init(0), cl::sub(compileCommand));
static cl::opt<std::string> recomputeMode(
    "recompute",
    cl::desc("--mode train, distributed: modules (keep module inputs, "
             "recompute in the backward; default for breadth-first and "
             "layered) or none (keep every activation; default otherwise)"),
    cl::sub(compileCommand));
static cl::opt<std::string> precision(
    "precision",
    cl::desc("f32 (default), bf16 or f16: matmuls compute in bf16/f16 with "
             "f32 accumulation (a result only elementwise ops read is stored "
             "in bf16/f16, as PyTorch's autocast does); weights, optimizer "
             "state and every other op stay f32 (graph-autocast)"),
    cl::init("f32"), cl::sub(compileCommand));
static cl::opt<bool> paramCopies(
    "param-copies",
    cl::desc("--mode train with --precision bf16/f16: keep the weights' "
             "low-precision copies between steps, stored by the optimizer's "
             "update (default), instead of casting them in every step (and, "
             "distributed, every micro-batch); =false for A/B comparisons. "
             "With =false, --zero 3 gathers the f32 weights"),
    cl::init(true), cl::sub(compileCommand));
static cl::opt<std::string> paramReads(
    "param-reads",
    cl::desc("--mode train with --precision bf16/f16: which reads of a "
             "weight go through its low-precision copy. autocast: the "
             "matmuls' (norms, embeddings and other f32 ops read the f32 "
             "weight); copies: every read, widened where an op computes in "
             "f32 (as FSDP's param_dtype=bf16 and Megatron's bf16 models "
             "read weights), so --zero 3 all-gathers the copies (half the "
             "bytes). Default: copies under --zero 3, autocast otherwise"),
    cl::init(""), cl::sub(compileCommand));
static cl::opt<bool> cudaEmulator(
    "cuda-emulator",
    cl::desc("with --target cuda: link the program against the CPU kernel "
             "emulator (lamina_cuda_emulated) instead of CUDA, so it runs the "
             "CUDA kernels, slowly, on a machine without a GPU; with "
             "--pp/--dp its ranks talk through the NCCL emulator, one process "
             "per rank (docs/cuda.md, \"The kernel emulator\")"),
    cl::sub(compileCommand));
static cl::opt<std::string> compileTo(
    "compile-to",
    cl::desc("stop after PHASE (graph, train, fuse, dist, rt or emitc) and print "
             "its IR, with locations, on stdout instead of building a "
             "program; lamina-opt's --lamina-PHASE pipelines continue from "
             "it"),
    cl::value_desc("PHASE"), cl::sub(compileCommand));
static cl::opt<bool> noBuild("no-build",
                             cl::desc("write model.cpp and build.sh only"),
                             cl::sub(compileCommand));
static cl::opt<bool> timing("timing", cl::desc("print the time of each phase"),
                            cl::sub(compileCommand));
static cl::opt<bool> quiet("quiet", cl::desc("print nothing on success"),
                           cl::sub(compileCommand));
static cl::opt<bool> noFuseAttention(
    "no-fuse-attention",
    cl::desc("keep attention as the model writes it (matmul, softmax, matmul) "
             "instead of one graph.attention (graph-fuse-attention)"),
    cl::sub(compileCommand));

static cl::list<std::string> keepInputs(
    "keep-input",
    cl::desc("--mode train: keep the input NAME (attention_mask, "
             "position_ids or token_type_ids) as an input the data feeds "
             "(padded batches, run --data-dir) instead of the constant a "
             "window of packed tokens gives it"),
    cl::value_desc("NAME"), cl::sub(compileCommand));

static cl::list<std::string> paddingIdx(
    "padding-idx",
    cl::desc("--mode train: embedding table NAME had padding_idx INDEX in "
             "PyTorch: lookups of INDEX do not train its row (found by itself "
             "in dynamo exports' metadata; TorchScript exports do not say it)"),
    cl::value_desc("NAME=INDEX"), cl::sub(compileCommand));

static cl::opt<bool> asExported(
    "as-exported",
    cl::desc("--mode train: train the initializers exactly as the file has "
             "them: no parameters split off the ones the exporter merged, no "
             "LM head tied back to its embedding, rotary inv_freq buffers "
             "trained (docs/training.md, \"Parameters the exporters merge\")"),
    cl::sub(compileCommand));

static std::string humanBytes(int64_t bytes) {
  const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(bytes);
  int i = 0;
  while (v >= 1024 && i < 4) {
    v /= 1024;
    ++i;
  }
  std::string s;
  llvm::raw_string_ostream(s) << llvm::format(i ? "%.1f %s" : "%.0f %s", v, unit[i]);
  return s;
}

/// What the memory plan and the lowering produced, for the summary.
struct PlanFigures {
  int64_t arenaBytes = 0, tensorBytes = 0, weightBytes = 0, calls = 0;
  /// The parameters' low-precision copies (graph-hoist-param-casts).
  int64_t copyBytes = 0;
  /// A training program's @eval_step (it shares the train step's arena
  /// and weights).
  int64_t evalCalls = 0, evalArenaBytes = 0;
};

static PlanFigures readFigures(ModuleOp module) {
  PlanFigures f;
  module.walk([&](func::FuncOp func) {
    if (func.getName() == "eval_step") {
      if (auto a = func->getAttrOfType<IntegerAttr>(ir::rt::kArenaBytesAttr))
        f.evalArenaBytes = a.getInt();
      func.walk([&](ir::rt::CallOp) { ++f.evalCalls; });
      return;
    }
    if (auto a = func->getAttrOfType<IntegerAttr>(ir::rt::kArenaBytesAttr))
      f.arenaBytes += a.getInt();
    if (auto a = func->getAttrOfType<IntegerAttr>(ir::rt::kTensorBytesAttr))
      f.tensorBytes += a.getInt();
    for (unsigned i = 1; i < func.getNumArguments(); ++i) {
      auto kind = func.getArgAttrOfType<StringAttr>(i, ir::graph::kKindAttr);
      auto type = dyn_cast<MemRefType>(func.getArgumentTypes()[i]);
      if (!kind || kind.getValue() == ir::graph::kKindInput || !type)
        continue;
      int64_t bytes = type.getNumElements() *
                      std::max<int64_t>(1, type.getElementTypeBitWidth() / 8);
      (kind.getValue() == ir::graph::kKindParamCopy ? f.copyBytes
                                                    : f.weightBytes) += bytes;
    }
    func.walk([&](ir::rt::CallOp) { ++f.calls; });
  });
  return f;
}

/// Per pipeline rank of a distributed program: its modules, the arena it
/// needs (the largest of its functions': they run one at a time) and its
/// training step's buffer (convert-dist-to-rt's plan).
static std::string describeDistProgram(ModuleOp module) {
  std::map<int64_t, std::pair<std::string, int64_t>> modules; // name, arena
  std::map<int64_t, int64_t> stepBytes;                       // per rank
  module.walk([&](func::FuncOp f) {
    if (auto bytes = f->getAttrOfType<IntegerAttr>("rt.step_buffer_bytes"))
      if (auto p = f->getAttrOfType<IntegerAttr>("rt.step_pp");
          p && !f->hasAttr("rt.forward_only"))
        stepBytes[p.getInt()] = bytes.getInt();
    auto outlined = f->getAttrOfType<ir::dist::OutlinedAttr>(
        ir::dist::DistDialect::kOutlinedAttr);
    auto arena = f->getAttrOfType<IntegerAttr>(ir::rt::kArenaBytesAttr);
    if (!outlined || !arena)
      return;
    auto &entry = modules[outlined.getModule()];
    entry.first = outlined.getName().str();
    entry.second = std::max(entry.second, arena.getInt());
  });
  std::string out;
  llvm::raw_string_ostream os(out);
  // The placement convert-dist-to-rt recorded (the evaluation step runs on
  // the same one).
  if (auto dist = module->getAttrOfType<ir::rt::DistAttr>(ir::rt::kDistAttr)) {
    ArrayRef<int64_t> placement = dist.getPlacement().asArrayRef();
    int64_t ranks = 0;
    for (int64_t r : placement)
      ranks = std::max(ranks, r + 1);
    for (int64_t r = 0; r < ranks; ++r) {
      int64_t arena = 0;
      std::string names;
      for (auto [k, rank] : llvm::enumerate(placement))
        if (rank == r) {
          names += (names.empty() ? "" : ", ") + modules[k].first;
          arena = std::max(arena, modules[k].second);
        }
      os << "  pipeline rank " << r << ": " << names << "; arena "
         << humanBytes(arena);
      if (stepBytes.count(r))
        os << ", step buffer " << humanBytes(stepBytes[r]);
      os << "\n";
    }
  }
  return out;
}

/// A single-quoted sh word.
static std::string shellQuote(StringRef s) {
  std::string out = "'";
  for (char c : s)
    out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

static std::string buildScript(bool dist, bool cuda) {
  std::string link, includes, script;
  SmallVector<StringRef> libs, dirs;
#ifdef LAMINA_CUDA_EMULATED_LINK_LIBRARIES
  // The emulator stands in for the device runtime, libcudart and cuBLASLt;
  // the host compiler builds the program as for the host target.
  // Distributed: the NCCL emulator and its driver come first, the kernel
  // emulator they call after the distributed libraries.
  SmallVector<StringRef> emulated;
  if (cuda && cudaEmulator) {
#ifdef LAMINA_DIST_CUDA_EMULATED_LINK_LIBRARIES
    if (dist)
      StringRef(LAMINA_DIST_CUDA_EMULATED_LINK_LIBRARIES)
          .split(libs, ';', -1, false);
#endif
    StringRef(LAMINA_CUDA_EMULATED_LINK_LIBRARIES)
        .split(dist ? emulated : libs, ';', -1, false);
    StringRef(LAMINA_CUDA_INCLUDE_DIRS).split(dirs, ';', -1, false);
    cuda = false;
  }
#endif
#ifdef LAMINA_DIST_CUDA_LINK_LIBRARIES
  if (dist && cuda)
    StringRef(LAMINA_DIST_CUDA_LINK_LIBRARIES).split(libs, ';', -1, false);
#endif
#ifdef LAMINA_DIST_LINK_LIBRARIES
  if (dist) {
    StringRef(LAMINA_DIST_LINK_LIBRARIES).split(libs, ';', -1, false);
    StringRef(LAMINA_DIST_INCLUDE_DIRS).split(dirs, ';', -1, false);
  }
#endif
#ifdef LAMINA_CUDA_EMULATED_LINK_LIBRARIES
  libs.append(emulated.begin(), emulated.end());
#endif
#ifdef LAMINA_CUDA_LINK_LIBRARIES
  if (cuda)
    StringRef(LAMINA_CUDA_LINK_LIBRARIES).split(libs, ';', -1, false);
#endif
  StringRef(LAMINA_PROGRAM_LINK_LIBRARIES).split(libs, ';', -1, false);
#ifdef LAMINA_CUDA_LINK_LIBRARIES
  if (cuda)
    StringRef(LAMINA_CUDA_SYSTEM_LIBRARIES).split(libs, ';', -1, false);
#endif
  std::string rpath;
#ifdef LAMINA_DIST_CUDA_LINK_LIBRARIES
  if (dist && cuda) {
    libs.push_back(LAMINA_NCCL_LIBRARY);
    rpath = std::string(" -Xlinker -rpath=") + shellQuote(LAMINA_NCCL_LIBRARY_DIR);
  }
#endif
  for (StringRef lib : libs)
    link += " " + shellQuote(lib);
  for (StringRef dir : dirs)
    includes += " -I" + shellQuote(dir);
  script = std::string("#!/bin/sh\n"
                       "# Written by lamina compile: builds ./run from "
                       "model.cpp.\n"
                       "set -e\n"
                       "cd \"$(dirname \"$0\")\"\n"
                       "CXX=${CXX:-") +
           shellQuote(LAMINA_CXX_COMPILER) + "}\n";
#ifdef LAMINA_CUDA_LINK_LIBRARIES
  if (cuda) {
    // nvcc drives the host compiler and links the device runtime, whose
    // kernels were compiled for these architectures (cuobjdump --list-elf
    // run lists them).
    std::string gencode;
    SmallVector<StringRef> archs;
    StringRef(LAMINA_CUDA_ARCHITECTURES).split(archs, ';', -1, false);
    for (StringRef a : archs)
      gencode += (" -gencode arch=compute_" + a + ",code=sm_" + a).str();
    return script + "NVCC=${NVCC:-" + shellQuote(LAMINA_NVCC) +
           "}\n"
           "\"$NVCC\" -ccbin \"$CXX\" -std=c++17 -O2" + gencode +
           " -cudart shared -I" + shellQuote(LAMINA_RUNTIME_INCLUDE_DIR) +
           includes + " model.cpp -o run.tmp" + link +
           " -Xlinker -rpath=" + shellQuote(LAMINA_CUDA_LIBRARY_DIR) + rpath +
           " -lpthread\n"
           "mv -f run.tmp run\n";
  }
#endif
  return script + "\"$CXX\" -std=c++17 -O2 -I" +
         shellQuote(LAMINA_RUNTIME_INCLUDE_DIR) + includes +
         " model.cpp -o run.tmp" + link +
         " -lpthread\n"
         "mv -f run.tmp run\n";
}

static bool writeFile(StringRef path, StringRef contents) {
  if (llvm::Error err = llvm::writeToOutput(path, [&](llvm::raw_ostream &os) {
        os << contents;
        return llvm::Error::success();
      })) {
    llvm::errs() << "lamina compile: cannot write '" << path
                 << "': " << llvm::toString(std::move(err)) << "\n";
    return false;
  }
  return true;
}

/// The --mode train flags agree with each other; "" when they do.
static std::string checkTrainFlags(bool train) {
  bool any = !lossKind.empty() || !logitsName.empty() || !labelsName.empty() ||
             !lossOutput.empty() || !freezeRegex.empty() ||
             ignoreIndex.getNumOccurrences() || !paddingIdx.empty() ||
             !keepInputs.empty() || asExported;
  if (!train)
    return any ? "--loss, --logits, --labels, --loss-output, --freeze, "
                 "--ignore-index, --padding-idx, --keep-input and "
                 "--as-exported need --mode train"
               : "";
  if (!lossOutput.empty()) {
    if (!lossKind.empty() || !logitsName.empty() || !labelsName.empty())
      return "--loss-output names the model's own loss; it does not go with "
             "--loss, --logits or --labels";
    return "";
  }
  if (lossKind.empty())
    return "--mode train needs a loss: --loss causal-lm --logits NAME, "
           "--loss cross-entropy --logits NAME --labels NAME, or "
           "--loss-output NAME";
  if (lossKind != "causal-lm" && lossKind != "cross-entropy")
    return "unknown --loss '" + lossKind +
           "' (expected causal-lm or cross-entropy)";
  if (logitsName.empty())
    return "--loss " + lossKind + " needs --logits NAME (the logits output)";
  if (lossKind == "cross-entropy" && labelsName.empty())
    return "--loss cross-entropy needs --labels NAME (the labels input)";
  if (lossKind == "causal-lm" && !labelsName.empty())
    return "--loss causal-lm takes its labels from the inputs; --labels "
           "goes with --loss cross-entropy";
  if (!freezeRegex.empty()) {
    std::string err;
    if (!llvm::Regex(freezeRegex).isValid(err))
      return "--freeze '" + freezeRegex + "' is not a valid regex: " + err;
  }
  return "";
}

/// Any of the distributed flags makes a distributed (SPMD, MPI) program.
static bool isDistributed() {
  return pipelineRanks.getNumOccurrences() ||
         dataParallel.getNumOccurrences() || tensorParallel > 1 ||
         expertParallel > 1 || microBatches.getNumOccurrences() ||
         scheduleName.getNumOccurrences() || zeroLevel.getNumOccurrences() ||
         recomputeMode.getNumOccurrences();
}

/// The distributed flags agree with each other; "" when they do. The
/// schedule generator checks the rest (m < p for breadth-first, ...) once
/// the number of modules is known.
static std::string checkDistFlags(bool train, bool dist) {
  if (!dist)
    return "";
  if (!train)
    return tensorParallel > 1 ? "--tp needs --mode train"
           : expertParallel > 1
               ? "--ep needs --mode train"
               : "--pp, --dp, --micro-batches, --schedule, --zero and "
                 "--recompute need --mode train";
  if (pipelineRanks < 1)
    return "--pp must be at least 1";
  if (dataParallel < 1)
    return "--dp must be at least 1";
  if (expertParallel < 1)
    return "--ep must be at least 1";
  // The experts are split over groups of a stage's replicas.
  if (expertParallel > 1 && dataParallel.getNumOccurrences() &&
      dataParallel % expertParallel != 0)
    return "--ep " + std::to_string(expertParallel) + " with --dp " +
           std::to_string(dataParallel) +
           ": the expert-parallel groups are made of data-parallel "
           "replicas, so --ep must divide --dp";
  if (microBatches < 1)
    return "--micro-batches must be at least 1";
  if (zeroLevel < 0 || zeroLevel > 3)
    return "--zero must be 0, 1, 2 or 3";
  if (!schedule::parseScheduleKind(scheduleName))
    return "unknown --schedule '" + scheduleName +
           "' (expected gpipe, 1f1b, interleaved-1f1b, breadth-first or "
           "layered)";
  if (!recomputeMode.empty() && recomputeMode != "modules" &&
      recomputeMode != "none")
    return "--recompute must be modules or none, got '" + recomputeMode + "'";
#ifndef LAMINA_DIST_LINK_LIBRARIES
  return "this lamina was built without MPI; distributed programs need it "
         "(scripts/install-deps.sh installs OpenMPI)";
#endif
  return "";
}

/// --param-reads agrees with the other flags; "" when it does.
static std::string checkParamReads(bool train) {
  if (paramReads.empty())
    return "";
  if (paramReads != "autocast" && paramReads != "copies")
    return "--param-reads must be autocast or copies, got '" + paramReads + "'";
  if (!train || precision == "f32")
    return "--param-reads needs --mode train and --precision bf16 or f16";
  if (paramReads == "copies" && !paramCopies)
    return "--param-reads=copies reads the copies --param-copies=false "
           "drops";
  return "";
}

void setRestoredParameters(CompileOptions &o,
                           const rt::RestoredParameters &known) {
  std::vector<std::string> found;
  for (const auto &[table, index] : known.paddingIndices)
    found.push_back(table + "=" + std::to_string(index));
  o.knownPaddingIdx = ArrayRef<std::string>(found);
  o.unknownPadding = ArrayRef<std::string>(known.unknownPaddingIndex);
  o.knownBuffers = ArrayRef<std::string>(known.buffers);
}

/// The flags as the pipeline's options; `known` adds the padding indices
/// the restore found in the export's metadata.
static void setPipelineOptions(CompileOptions &o, bool dist,
                               StringRef modelFile,
                               const rt::RestoredParameters &known) {
  o.mode = mode;
  o.target = target;
  o.precision = precision;
  o.fuseAttention = !noFuseAttention;
  o.loss = lossKind;
  o.logits = logitsName;
  o.labels = labelsName;
  o.lossOutput = lossOutput;
  o.ignoreIndex = ignoreIndex;
  o.freeze = freezeRegex;
  o.keepInputs = ArrayRef<std::string>(keepInputs);
  o.paddingIdx = ArrayRef<std::string>(paddingIdx);
  setRestoredParameters(o, known);
  o.asExported = asExported;
  o.distributed = dist;
  o.schedule = scheduleName;
  o.pp = pipelineRanks;
  o.dp = expertParallel > 1 && !dataParallel.getNumOccurrences()
             ? int(expertParallel)
             : int(dataParallel);
  o.tp = tensorParallel;
  o.ep = expertParallel;
  o.sequenceParallel = sequenceParallel;
  o.tpReplicate = tpReplicate;
  o.moeAuxLoss = moeAuxLoss;
  o.microBatches = microBatches;
  o.zero = zeroLevel;
  o.recompute = recomputeMode;
  o.paramCopies = paramCopies;
  o.paramReads = paramReads;
  o.modelPath = modelFile.str();
}

int runCompile() {
  const bool cuda = target == "cuda";
  if (target != "host" && !cuda) {
    llvm::errs() << "lamina compile: unknown --target '" << target
                 << "' (expected host or cuda)\n";
    return 2;
  }

  if (mode != "inference" && mode != "train") {
    llvm::errs() << "lamina compile: unknown --mode '" << mode
                 << "' (expected inference or train)\n";
    return 2;
  }
  if (precision != "f32" && precision != "bf16" && precision != "f16") {
    llvm::errs() << "lamina compile: unknown --precision '" << precision
                 << "' (expected f32, bf16 or f16)\n";
    return 2;
  }
  bool train = mode == "train";
  if (std::string err = checkTrainFlags(train); !err.empty()) {
    llvm::errs() << "lamina compile: " << err << "\n";
    return 2;
  }
  if (std::string err = checkParamReads(train); !err.empty()) {
    llvm::errs() << "lamina compile: " << err << "\n";
    return 2;
  }
  const bool dist = isDistributed();
  if (std::string err = checkDistFlags(train, dist); !err.empty()) {
    llvm::errs() << "lamina compile: " << err << "\n";
    return 2;
  }
  if (cudaEmulator && !cuda) {
    llvm::errs() << "lamina compile: --cuda-emulator needs --target cuda\n";
    return 2;
  }
  std::optional<Phase> stopAfter;
  if (!compileTo.empty() && !(stopAfter = parsePhase(compileTo))) {
    llvm::errs() << "lamina compile: unknown --compile-to '" << compileTo
                 << "' (expected " << phaseNames() << ")\n";
    return 2;
  }
  if (tensorParallel < 1) {
    llvm::errs() << "lamina compile: --tp must be at least 1\n";
    return 2;
  }
  if (sequenceParallel && tensorParallel < 2) {
    llvm::errs() << "lamina compile: --sequence-parallel needs --tp 2 or "
                    "more\n";
    return 2;
  }
  if (moeAuxLoss != 0.0 && (!train || isDistributed())) {
    llvm::errs() << "lamina compile: --moe-aux-loss needs --mode train and "
                    "a single-process program (the loss over all layers' "
                    "routers is not split over pipeline stages or replicas "
                    "yet)\n";
    return 2;
  }
  if (!tpReplicate.empty()) {
    std::string err;
    if (tensorParallel < 2) {
      llvm::errs() << "lamina compile: --tp-replicate needs --tp 2 or more\n";
      return 2;
    }
    if (!llvm::Regex(tpReplicate).isValid(err)) {
      llvm::errs() << "lamina compile: --tp-replicate '" << tpReplicate
                   << "' is not a valid regex: " << err << "\n";
      return 2;
    }
  }
  // Tensor-parallel programs run in f32 (their collectives move f32); the
  // refusal comes before anything is written.
  if (tensorParallel > 1 && precision != "f32" &&
      (!stopAfter || int(*stopAfter) > int(Phase::Dist))) {
    llvm::errs() << "lamina compile: --tp " << tensorParallel
                 << " does not generate programs for --precision bf16/f16 "
                    "(the collectives move f32 only); --compile-to train, "
                    "fuse or dist prints the split modules "
                    "(docs/tp-design.md)\n";
    return 1;
  }
  if (expertParallel > 1 && precision != "f32") {
    llvm::errs() << "lamina compile: --ep runs f32 programs only (the "
                    "experts' kernels and the all-to-all move f32; "
                    "docs/moe-design.md)\n";
    return 1;
  }
  if (cuda) {
#ifndef LAMINA_CUDA_LINK_LIBRARIES
    llvm::errs() << "lamina compile: this lamina was built without the CUDA "
                    "backend (nvcc and the CUDA toolkit were not found when "
                    "it was configured; see docs/cuda.md)\n";
    return 1;
#endif
#ifndef LAMINA_DIST_CUDA_LINK_LIBRARIES
    if (dist) {
      llvm::errs() << "lamina compile: this lamina was built without NCCL; "
                      "distributed CUDA programs (--pp, --dp, ...) need it "
                      "(LAMINA_ENABLE_NCCL, docs/cuda.md)\n";
      return 1;
    }
#endif
  }
  onnx::ImportOptions options;
  llvm::BumpPtrAllocator alloc;
  llvm::StringSaver saver(alloc);
  if (std::string err = onnx::parseDimBindings(dims, options, saver); !err.empty()) {
    llvm::errs() << "lamina compile: " << err << "\n";
    return 2;
  }
  SmallString<256> absModel(modelPath);
  if (std::error_code ec = llvm::sys::fs::make_absolute(absModel)) {
    llvm::errs() << "lamina compile: cannot resolve '" << modelPath
                 << "': " << ec.message() << "\n";
    return 1;
  }

  DialectRegistry registry;
  onnx::registerImportDialects(registry);
  registry.insert<ir::rt::RtDialect, emitc::EmitCDialect>();
  // --tp: upstream's sharding passes over the graph ops' rules.
  ir::graph::registerShardingInterfaceExternalModels(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  // What the passes changed (filled inputs, frozen buffers, padding
  // indices) comes back as remarks, printed in the summary.
  std::vector<std::string> remarks;
  installDiagnosticPrinter(context, &remarks);
  // A diagnostic names the ONNX node or the flag; a dump of the whole
  // module would bury it.
  context.printOpOnDiagnostic(false);

  DefaultTimingManager tm;
  tm.setEnabled(timing);
  TimingScope root = tm.getRootScope();
  // Training: the parameters the exporter merged or untied are put back in
  // a copy of the model, which the program then reads and exports.
  rt::RestoredParameters restored;
  // The copy goes again if the compile fails: no half-written output.
  struct RemoveUnlessKept {
    std::string path;
    bool keep = false;
    /// The output directory when this compile created it for the copy:
    /// removed too on failure (when nothing else is in it).
    std::string dir;
    ~RemoveUnlessKept() {
      if (!keep && !path.empty()) {
        llvm::sys::fs::remove(path);
        llvm::sys::fs::remove(path + ".data");
      }
      if (!keep && !dir.empty())
        llvm::sys::fs::remove(dir);
    }
  } restoredCopy;
  std::string importPath = modelPath;
  if (train && !asExported) {
    TimingScope restoreTimer = root.nest("restore parameters");
    SmallString<256> restoredPath(outDir);
    llvm::sys::path::append(restoredPath, "model.onnx");
    if (!llvm::sys::fs::equivalent(restoredPath, absModel)) {
      // A copy from an earlier compile must not be read instead, nor its
      // program outlive it if this compile fails.
      SmallString<256> stale(outDir);
      llvm::sys::path::append(stale, "run");
      llvm::sys::fs::remove(stale);
      llvm::sys::fs::remove(restoredPath);
      llvm::sys::fs::remove(restoredPath + ".data");
    }
    bool existed = llvm::sys::fs::exists(outDir);
    if (std::error_code ec = llvm::sys::fs::create_directories(outDir)) {
      llvm::errs() << "lamina compile: cannot create '" << outDir
                   << "': " << ec.message() << "\n";
      return 1;
    }
    if (!existed)
      restoredCopy.dir = outDir;
    if (llvm::sys::fs::make_absolute(restoredPath)) {
      llvm::errs() << "lamina compile: cannot resolve '" << restoredPath
                   << "'\n";
      return 1;
    }
    if (rt::Status s = rt::restoreParameters(
            std::string(absModel), std::string(restoredPath), restored);
        !s.ok()) {
      llvm::errs() << "lamina compile: " << modelPath << ": " << s.message()
                   << "\n";
      return 1;
    }
    if (restored.changed()) {
      importPath = std::string(restoredPath);
      absModel = restoredPath;
      restoredCopy.path = importPath;
    }
  }
  TimingScope importTimer = root.nest("import");
  OwningOpRef<ModuleOp> module =
      onnx::importModelFile(context, importPath, options);
  importTimer.stop();
  if (!module)
    return 1;

  // The phases, one pass manager each: the timing and the summary read the
  // IR between them, and --compile-to stops after one.
  CompileOptions pipeline;
  setPipelineOptions(pipeline, dist, absModel, restored);
  PlanFigures figures;
  std::string distSummary;
  for (int p = int(Phase::Graph); p <= int(Phase::EmitC); ++p) {
    Phase phase = Phase(p);
    TimingScope phaseTimer = root.nest(("phase " + phaseName(phase)).str());
    PassManager pm(&context);
    pm.enableTiming(phaseTimer);
    addPhasePasses(pm, phase, pipeline);
    if (failed(pm.run(*module)))
      return 1;
    phaseTimer.stop();
    if (stopAfter == phase) {
      // With the locations (the ONNX node names): later phases name them
      // in diagnostics and in the program's kernel checks.
      module->print(llvm::outs(), OpPrintingFlags().enableDebugInfo());
      llvm::outs() << "\n";
      // What the passes changed goes to stderr, the IR alone to stdout.
      for (const std::string &remark : remarks)
        llvm::errs() << "lamina compile: " << remark << "\n";
      restoredCopy.keep = true;
      return 0;
    }
    if (phase == Phase::Rt) {
      figures = readFigures(*module);
      distSummary = dist ? describeDistProgram(*module) : "";
    }
  }
  TimingScope emitTimer = root.nest("emit C++");
  std::string cpp;
  llvm::raw_string_ostream cppStream(cpp);
  if (failed(emitc::translateToCpp(*module, cppStream)))
    return 1;
  emitTimer.stop();

  if (std::error_code ec = llvm::sys::fs::create_directories(outDir)) {
    llvm::errs() << "lamina compile: cannot create '" << outDir
                 << "': " << ec.message() << "\n";
    return 1;
  }
  SmallString<256> cppPath(outDir), scriptPath(outDir), runPath(outDir),
      logPath(outDir);
  llvm::sys::path::append(cppPath, "model.cpp");
  llvm::sys::path::append(scriptPath, "build.sh");
  llvm::sys::path::append(runPath, "run");
  llvm::sys::path::append(logPath, "build.log");
  // A stale program must not survive a failed rebuild.
  llvm::sys::fs::remove(runPath);
  if (!writeFile(cppPath, "// Generated by lamina compile from " +
                              std::string(absModel) + "\n" + cpp) ||
      !writeFile(scriptPath, buildScript(dist, cuda)))
    return 1;

  double buildSeconds = 0;
  if (!noBuild) {
    TimingScope buildTimer = root.nest("build (C++ compiler)");
    auto start = std::chrono::steady_clock::now();
    std::optional<StringRef> redirects[] = {std::nullopt, StringRef(logPath),
                                            StringRef(logPath)};
    std::string err;
    int rc = llvm::sys::ExecuteAndWait("/bin/sh", {"/bin/sh", scriptPath},
                                       std::nullopt, redirects, 0, 0, &err);
    buildSeconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - start)
                       .count();
    if (rc != 0) {
      llvm::errs() << "lamina compile: building the program failed"
                   << (err.empty() ? "" : ": " + err) << "; see " << logPath
                   << "\n";
      if (auto log = llvm::MemoryBuffer::getFile(logPath))
        llvm::errs() << (*log)->getBuffer().take_back(4000);
      return 1;
    }
  }

  if (!quiet) {
    llvm::outs()
        << "lamina compile: " << modelPath << " -> "
        << (noBuild ? cppPath : runPath)
        << (!train ? " (" + target + ", inference)\n"
            : dist
                ? llvm::formatv(
                      " ({7}, train, {0} rank{11}: {1} {8}pp {2} x "
                      "dp {3}{9}, {4} micro-batch{10}, zero {5}, "
                      "recompute {6})\n",
                      pipelineRanks * int64_t(pipeline.dp) * tensorParallel,
                      scheduleName, pipelineRanks, int64_t(pipeline.dp),
                      microBatches, zeroLevel,
                      pipeline.recomputeModules() ? "modules" : "none",
                      std::string(target),
                      tensorParallel > 1
                          ? llvm::formatv(
                                "tp {0}{1} x ", tensorParallel,
                                sequenceParallel ? " (sequence-parallel)" : "")
                                .str()
                          : std::string(),
                      expertParallel > 1
                          ? " (experts over groups of " +
                                std::to_string(expertParallel) + ")"
                          : std::string(),
                      microBatches == 1 ? "" : "es",
                      pipelineRanks * int64_t(pipeline.dp) * tensorParallel == 1
                          ? ""
                          : "s")
                      .str()
                : " (" + target + ", train)\n");
    llvm::outs() << distSummary;
    if (restored.changed()) {
      llvm::outs() << "  parameters restored in " << absModel
                   << " (the program reads and exports it; --as-exported "
                      "trains the file as it is): "
                   << restored.summary() << "\n";
      for (const auto *list :
           {&restored.untied, &restored.tied, &restored.restored})
        for (size_t i = 0; i < list->size(); ++i) {
          if (i == 3) {
            llvm::outs() << "    ... " << list->size() - 3 << " more\n";
            break;
          }
          llvm::outs() << "    " << (*list)[i] << "\n";
        }
    }
    for (const std::string &remark : remarks)
      llvm::outs() << "  " << remark << "\n";
    if (cuda && cudaEmulator)
      llvm::outs() << "  built against the CPU kernel emulator "
                      "(--cuda-emulator): the CUDA kernels, slowly, no GPU\n";
    llvm::outs() << "  kernel calls: " << figures.calls << "\n";
    std::string everyRead = pipeline.everyRead();
    int effectiveZero = pipeline.effectiveZero();
    bool copiesOnly = train && !everyRead.empty() && figures.copyBytes;
    if (precision != "f32")
      llvm::outs() << "  precision: " << precision
                   << " matmuls (f32 accumulation; results only elementwise "
                      "ops or the cross-entropy read stored "
                   << precision << "); "
                   << (copiesOnly ? "weights read as their " + precision +
                                        " copies (--param-reads=copies); "
                                        "every other op f32\n"
                                  : "weights and every other op f32\n");
    if (dist && precision != "f32") {
      llvm::outs() << "  the weights' " << precision << " copies: ";
      std::string zero = "ZeRO " + std::to_string(effectiveZero) + ": ";
      if (figures.copyBytes)
        llvm::outs() << "kept between steps, stored by the optimizer's update"
                     << (effectiveZero == 3
                             ? " (" + zero +
                                   "all-gathered for each run instead of "
                                   "the f32 weights: half the bytes)"
                         : effectiveZero > 0 && copiesOnly
                             ? " (" + zero +
                                   "all-gathered once a step instead of "
                                   "the f32 parameters: half the bytes)"
                         : effectiveZero > 0
                             ? " (" + zero +
                                   "cast once a step, after the "
                                   "parameters' all-gather)"
                             : std::string())
                     << "\n";
      else
        llvm::outs() << "cast in every forward and backward ("
                     << (paramCopies ? "ZeRO 3 gathers the f32 weights for "
                                       "--param-reads=autocast"
                                     : "--param-copies=false")
                     << ")\n";
    }
    if (!dist) {
      llvm::outs() << "  memory plan: arena " << humanBytes(figures.arenaBytes)
                   << " (peak, " << figures.arenaBytes << " bytes) for "
                   << humanBytes(figures.tensorBytes)
                   << " of intermediate values";
      if (figures.arenaBytes > 0)
        llvm::outs() << llvm::format(" (%.1fx reuse)",
                                     double(figures.tensorBytes) /
                                         double(figures.arenaBytes));
      llvm::outs() << "\n  weights: " << humanBytes(figures.weightBytes)
                   << ", read from the model at start-up";
      if (figures.copyBytes)
        llvm::outs() << "; their " << precision << " copies: "
                     << humanBytes(figures.copyBytes)
                     << ", stored by the optimizer";
      llvm::outs() << "\n";
      if (figures.evalCalls)
        llvm::outs() << "  evaluation (run --eval-data): the forward and "
                        "loss, "
                     << figures.evalCalls << " kernel calls, arena "
                     << humanBytes(figures.evalArenaBytes)
                     << " (one arena, the larger of the two)\n";
    }
    if (!noBuild)
      llvm::outs() << llvm::format("  build: %.1f s\n", buildSeconds);
  }
  restoredCopy.keep = true;
  return 0;
}
} // namespace lamina::tool
