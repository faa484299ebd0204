//===- PlanCommand.cpp - lamina plan --------------------------------------===//
//
// Imports a model (structure only: weights whose external data is missing
// are fine), describes its module chain and prices a parallel configuration
// with LaminaPlan; or searches for the fastest one. MODEL may also be a
// synthetic GPT shape, `gpt:layers=96,hidden=12288,...`, to plan published
// shapes without a file. docs/plan.md documents every flag and output.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"

#include "lamina/Dialect/Dist/IR/DistDialect.h"
#include "lamina/Dialect/Dist/Transforms/DescribeModel.h"
#include "lamina/Dialect/Dist/Transforms/ModuleFunctions.h"
#include "lamina/Dialect/Graph/Transforms/Passes.h"
#include "lamina/Dialect/Graph/Transforms/ShardingInterfaceImpl.h"
#include "lamina/Dialect/Rt/Transforms/StepIR.h"
#include "lamina/Pipeline/Pipeline.h"
#include "lamina/Plan/CostModel.h"
#include "lamina/Plan/Report.h"
#include "lamina/Plan/Search.h"
#include "lamina/Plan/Synthetic.h"
#include "lamina/Runtime/RestoreParameters.h"
#include "lamina/Target/ONNX/ONNXImporter.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Regex.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>

using namespace mlir;
namespace cl = llvm::cl;

namespace lamina::tool {
cl::SubCommand planCommand(
    "plan", "Price a distributed training configuration (or search for one)");

static cl::opt<std::string> inputPath(
    cl::Positional, cl::desc("MODEL.onnx | gpt:layers=L,hidden=H,..."),
    cl::Required, cl::sub(planCommand));
static cl::list<std::string> dims("dim", cl::desc("bind a symbolic dim"),
                                  cl::value_desc("NAME=VALUE"),
                                  cl::sub(planCommand));
static cl::opt<int> pp("pp", cl::desc("pipeline ranks"), cl::init(1),
                       cl::sub(planCommand));
static cl::opt<int> dp("dp", cl::desc("data-parallel replicas"), cl::init(1),
                       cl::sub(planCommand));
static cl::opt<int> tp("tp",
                       cl::desc("tensor-parallel ranks (with --loss: as "
                                "lamina compile --tp splits the model)"),
                       cl::init(1), cl::sub(planCommand));
static cl::opt<int> ep("ep",
                       cl::desc("expert-parallel ranks: each mixture-of-"
                                "experts layer's experts split over groups "
                                "of this many replicas (as lamina compile "
                                "--ep; --dp defaults to it)"),
                       cl::init(1), cl::sub(planCommand));
static cl::opt<double> moeImbalance(
    "moe-imbalance",
    cl::desc("mixture-of-experts routing: the rows the busiest expert-"
             "parallel rank receives over the mean (>= 1; 1: even). Times "
             "its experts' GEMMs and all-to-alls, not the bytes"),
    cl::value_desc("F"), cl::init(1.0), cl::sub(planCommand));
/// --dp, or --ep's replicas when --dp is not given.
static int replicas() { return ep > 1 && !dp.getNumOccurrences() ? ep : dp; }
static cl::opt<bool> sequenceParallel(
    "sequence-parallel",
    cl::desc("with --tp and --loss: as lamina compile --sequence-parallel"),
    cl::sub(planCommand));
static cl::opt<std::string> tpReplicate(
    "tp-replicate",
    cl::desc("with --tp and --loss: as lamina compile --tp-replicate"),
    cl::value_desc("REGEX"), cl::sub(planCommand));
static cl::opt<int> microBatches("micro-batches",
                                 cl::desc("micro-batches per step per replica"),
                                 cl::init(1), cl::sub(planCommand));
static cl::opt<int> microBatchSize("micro-batch-size",
                                   cl::desc("samples per micro-batch"),
                                   cl::init(1), cl::sub(planCommand));
static cl::opt<std::string> scheduleName(
    "schedule",
    cl::desc("gpipe | 1f1b | interleaved-1f1b | breadth-first | layered"),
    cl::init("1f1b"), cl::sub(planCommand));
static cl::opt<int> chunks("chunks",
                           cl::desc("interleaved-1f1b: chunks per pipeline "
                                    "rank (default: one layer per chunk)"),
                           cl::init(0), cl::sub(planCommand));
static cl::opt<int> zero("zero", cl::desc("data-parallel sharding level 0-3"),
                         cl::init(0), cl::sub(planCommand));
static cl::opt<std::string> recompute("recompute",
                                      cl::desc("full | none"),
                                      cl::init("full"), cl::sub(planCommand));
static cl::opt<std::string>
    target("target",
           cl::desc("host | cuda: lay ZeRO's shards out in the step buffer "
                    "as lamina compile --target does (MPI's cut, NCCL's "
                    "padded chunks)"),
           cl::init("host"), cl::sub(planCommand));
// The training lamina compile builds (its --loss flags): with --recompute
// none the plan takes the residuals from the outlined forwards.
static cl::opt<std::string>
    lossKind("loss",
             cl::desc("as lamina compile's --loss (causal-lm or "
                      "cross-entropy): with --recompute none, the step "
                      "buffer's residuals are the compiled program's; with "
                      "--tp, the tensor-parallel traffic is the compiled "
                      "collectives'"),
             cl::sub(planCommand));
static cl::opt<std::string> logitsName("logits",
                                       cl::desc("as lamina compile's --logits"),
                                       cl::sub(planCommand));
static cl::opt<std::string> labelsName("labels",
                                       cl::desc("as lamina compile's --labels"),
                                       cl::sub(planCommand));
static cl::opt<std::string>
    lossOutput("loss-output", cl::desc("as lamina compile's --loss-output"),
               cl::sub(planCommand));
static cl::opt<bool> noFuseAttention(
    "no-fuse-attention",
    cl::desc("cost attention as the model writes it (scores stored) instead "
             "of fused, as lamina compile runs it by default"),
    cl::sub(planCommand));
static cl::opt<std::string> precisionName(
    "precision",
    cl::desc("bf16-mixed (bf16 values, fp32 master and Adam) | fp32 "
             "(4-byte values, Adam m and v) | bf16-copies (what lamina "
             "compile --precision bf16 --param-reads=copies trains: bf16 "
             "weight copies, f32 values and gradients)"),
    cl::init("bf16-mixed"), cl::sub(planCommand));
static cl::opt<std::string> hardwareName(
    "hardware", cl::desc("a100-80g | h100-sxm | h200 | FILE.json"),
    cl::init("a100-80g"), cl::sub(planCommand));
static cl::opt<std::string> format("format", cl::desc("text | json"),
                                   cl::init("text"), cl::sub(planCommand));
static cl::opt<std::string> tracePath(
    "trace", cl::desc("write a Chrome trace / Perfetto timeline"),
    cl::value_desc("FILE"), cl::sub(planCommand));
static cl::opt<std::string> dotPath("dot",
                                    cl::desc("write the module graph (Graphviz)"),
                                    cl::value_desc("FILE"), cl::sub(planCommand));
static cl::opt<std::string> htmlPath("html",
                                     cl::desc("write a self-contained HTML report"),
                                     cl::value_desc("FILE"), cl::sub(planCommand));
static cl::opt<std::string> compareList(
    "compare", cl::desc("price the configuration under each schedule"),
    cl::value_desc("gpipe,1f1b,..."), cl::sub(planCommand));
static cl::opt<bool> search("search",
                            cl::desc("find the fastest configuration that fits"),
                            cl::sub(planCommand));
static cl::opt<int> gpus("gpus", cl::desc("--search: GPUs to use"), cl::init(0),
                         cl::sub(planCommand));
static cl::opt<long long> globalBatch("global-batch",
                                      cl::desc("--search: samples per step"),
                                      cl::init(0), cl::sub(planCommand));
static cl::opt<int> top("top", cl::desc("--search: configurations shown"),
                        cl::init(10), cl::sub(planCommand));
static cl::opt<std::string> moduleRegex(
    "module-regex",
    cl::desc("override module discovery: the first capture group of this "
             "regex over parameter names names the module"),
    cl::sub(planCommand));
static cl::opt<std::string> outputPath("o", cl::desc("write the report here"),
                                       cl::value_desc("FILE"), cl::init("-"),
                                       cl::sub(planCommand));

namespace {
int usage(const std::string &message) {
  llvm::errs() << "lamina plan: " << message << "\n";
  return 2;
}

bool writeFile(const std::string &path, const std::string &text) {
  if (llvm::Error err = llvm::writeToOutput(path, [&](llvm::raw_ostream &os) {
        os << text;
        return llvm::Error::success();
      })) {
    llvm::errs() << "lamina plan: cannot write '" << path
                 << "': " << llvm::toString(std::move(err)) << "\n";
    return false;
  }
  return true;
}

/// What the compiled forwards keep per module without recompute (the
/// step buffer's residuals) and their boundary outputs, packed; set by
/// describe() when the loss flags ask for them.
std::vector<int64_t> compiledResiduals, compiledBoundaries;

/// With --tp: the compiled modules' tensor-parallel bytes per
/// micro-batch, parameters and boundaries, as one rank has them.
ir::dist::CompiledModules compiledTensorParallel;

/// Whether to outline (and split) the model as lamina compile does: for
/// the residuals without recompute, for the split modules with --tp.
bool wantsCompiledModules() {
  return (recompute == "none" || tp > 1) && !search &&
         (!lossKind.empty() || !lossOutput.empty());
}

/// Runs lamina compile's phases through fuse on `path` (the restored copy)
/// with the plan's training flags, once, and reads what the plan takes
/// from the outlined modules: without recompute each forward's residuals
/// and boundary outputs; with --tp the split modules' facts. False after
/// the pipeline's diagnostics.
bool compileModules(MLIRContext &context, llvm::StringRef path,
                    const onnx::ImportOptions &options,
                    const rt::RestoredParameters &known) {
  OwningOpRef<ModuleOp> module = onnx::importModelFile(context, path, options);
  if (!module)
    return false;
  CompileOptions o;
  o.mode = "train";
  o.target = target;
  // The plan's precisions lamina compile builds; bf16-mixed has none.
  o.precision = precisionName == "bf16-copies" ? "bf16" : "f32";
  if (precisionName == "bf16-copies")
    o.paramReads = "copies";
  o.fuseAttention = !noFuseAttention;
  o.loss = lossKind;
  o.logits = logitsName;
  o.labels = labelsName;
  o.lossOutput = lossOutput;
  setRestoredParameters(o, known);
  o.distributed = true;
  o.schedule = scheduleName;
  o.pp = pp;
  o.dp = replicas();
  o.ep = ep;
  o.microBatches = microBatches;
  o.zero = zero;
  o.recompute = recompute == "full" ? "modules" : "none";
  o.tp = tp;
  o.sequenceParallel = tp > 1 && sequenceParallel;
  o.tpReplicate = tpReplicate;
  // lamina compile's notes (padding indices, restored parameters) are the
  // compile's to give; the plan keeps the errors.
  ScopedDiagnosticHandler quiet(&context, [](Diagnostic &d) {
    return success(d.getSeverity() != DiagnosticSeverity::Error);
  });
  PassManager pm(&context);
  buildCompilePipeline(pm, o, Phase::Graph, Phase::Fuse);
  if (failed(pm.run(*module)))
    return false;
  if (tp > 1)
    compiledTensorParallel = ir::dist::describeCompiledModules(*module);
  if (recompute != "none")
    return true;
  auto modules = (*module)->getAttrOfType<IntegerAttr>(
      ir::dist::DistDialect::kNumModulesAttr);
  if (!modules) {
    llvm::errs() << "lamina plan: the outlined model has no modules\n";
    return false;
  }
  std::vector<int64_t> flat;
  FailureOr<schedule::StepBufferSizes> sizes = ir::rt::stepBufferSizes(
      *module, int(modules.getInt()), 0, 1, false, flat);
  if (failed(sizes))
    return false;
  compiledResiduals = sizes->residual;
  compiledBoundaries = sizes->activation;
  return true;
}

/// The model's description, from an ONNX file or a synthetic shape.
std::optional<plan::ModelDesc> describe() {
  if (llvm::StringRef(inputPath).starts_with("gpt:")) {
    schedule::Expected<plan::GptShape> shape = plan::parseGptSpec(inputPath);
    if (!shape) {
      llvm::errs() << "lamina plan: " << shape.error() << "\n";
      return std::nullopt;
    }
    return plan::syntheticGpt(*shape);
  }
  DialectRegistry registry;
  onnx::registerImportDialects(registry);
  // --tp with the loss flags: upstream's sharding passes over the graph
  // ops' rules, as lamina compile runs them.
  ir::graph::registerShardingInterfaceExternalModels(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  // Diagnostics name the ONNX node or flag; the IR dump is lamina-opt's.
  context.printOpOnDiagnostic(false);
  installDiagnosticPrinter(context);
  onnx::ImportOptions options;
  // Planning needs shapes only: a structure-only model (weights' external
  // data absent) is enough.
  options.allowMissingExternalData = true;
  llvm::BumpPtrAllocator alloc;
  llvm::StringSaver saver(alloc);
  if (std::string err = onnx::parseDimBindings(dims, options, saver);
      !err.empty()) {
    llvm::errs() << "lamina plan: " << err << "\n";
    return std::nullopt;
  }
  // Plan the parameters lamina compile trains: those the exporter merged,
  // untied or dropped put back (a structure-only copy: external data is
  // neither read nor written, and resolves to nothing in the copy's folder).
  rt::TemporaryRestore restored;
  if (rt::Status s = restored.create(inputPath, /*inlineData=*/false);
      !s.ok()) {
    llvm::errs() << "lamina plan: " << inputPath << ": " << s.message() << "\n";
    return std::nullopt;
  }
  if (restored.what().changed())
    llvm::errs() << "lamina plan: parameters restored as lamina compile "
                    "--mode train does: "
                 << restored.what().summary() << "\n";
  OwningOpRef<ModuleOp> module =
      onnx::importModelFile(context, restored.path(), options);
  if (!module)
    return std::nullopt;
  // Cost what lamina compile --mode train runs: its graph phase (buffers
  // not trained, window inputs filled, one graph.attention per attention
  // with no stored scores, one graph.gelu per GELU with no kept chain).
  // The plan prices precision itself, so no autocast here.
  PassManager pm(&context);
  CompileOptions graphOptions;
  graphOptions.mode = "train";
  graphOptions.fuseAttention = !noFuseAttention;
  addPhasePasses(pm, Phase::Graph, graphOptions);
  if (failed(pm.run(*module)))
    return std::nullopt;
  ir::dist::DescribeOptions describeOptions;
  describeOptions.moduleRegex = moduleRegex;
  FailureOr<plan::ModelDesc> desc =
      ir::dist::describeModel(*module, describeOptions);
  if (failed(desc))
    return std::nullopt;
  if (wantsCompiledModules() &&
      !compileModules(context, restored.path(), options, restored.what()))
    return std::nullopt;
  // The model's name is its file's, not the copy's.
  if (desc->name.empty() || restored.path() != inputPath)
    desc->name = llvm::sys::path::stem(inputPath).str();
  return std::move(*desc);
}
} // namespace

int runPlan() {
  // Flags first: a bad flag fails before any work.
  std::optional<schedule::ScheduleKind> kind =
      schedule::parseScheduleKind(scheduleName);
  if (!kind)
    return usage("--schedule " + scheduleName +
                 ": unknown schedule (gpipe, 1f1b, interleaved-1f1b, "
                 "breadth-first, layered)");
  if (recompute != "full" && recompute != "none")
    return usage("--recompute " + recompute + ": must be full or none");
  if (target != "host" && target != "cuda")
    return usage("--target " + target + ": must be host or cuda");
  bool lossFlags = !lossKind.empty() || !lossOutput.empty() ||
                   !logitsName.empty() || !labelsName.empty();
  if (sequenceParallel && (tp < 2 || !lossFlags))
    return usage("--sequence-parallel prices the compiled program: it needs "
                 "--tp 2 or more and --loss");
  if (!tpReplicate.empty()) {
    std::string err;
    if (tp < 2 || !lossFlags)
      return usage("--tp-replicate prices the compiled program: it needs "
                   "--tp 2 or more and --loss");
    if (!llvm::Regex(tpReplicate).isValid(err))
      return usage("--tp-replicate '" + tpReplicate +
                   "' is not a valid regex: " + err);
  }
  if (lossFlags && recompute != "none" && tp <= 1)
    return usage("--loss, --logits, --labels and --loss-output give the "
                 "compiled residuals of --recompute none; with --recompute "
                 "full the step buffer holds none");
  if (lossFlags && lossKind.empty() && lossOutput.empty())
    return usage("--logits and --labels need --loss (or --loss-output)");
  if (lossFlags && (search || compareList.getNumOccurrences()))
    return usage("--loss applies to a single plan, not --search or "
                 "--compare");
  if (lossFlags && llvm::StringRef(inputPath).starts_with("gpt:"))
    return usage("--loss needs an ONNX model (a synthetic shape is not "
                 "compiled)");
  if (lossFlags && precisionName == "bf16-mixed")
    return usage("--loss: lamina compile builds no bf16-mixed program (plan "
                 "--precision fp32 or bf16-copies)");
  std::optional<plan::Precision> precision =
      plan::parsePrecision(precisionName);
  if (!precision)
    return usage("--precision " + precisionName + ": must be one of " +
                 plan::precisionNames());
  if (format != "text" && format != "json")
    return usage("--format " + format + ": must be text or json");
  std::vector<schedule::ScheduleKind> compareKinds;
  if (compareList.getNumOccurrences()) {
    llvm::SmallVector<llvm::StringRef> names;
    llvm::StringRef(compareList).split(names, ',', -1, false);
    for (llvm::StringRef n : names) {
      std::optional<schedule::ScheduleKind> k =
          schedule::parseScheduleKind(n.trim());
      if (!k)
        return usage("--compare: unknown schedule '" + n.trim().str() +
                     "' (gpipe, 1f1b, interleaved-1f1b, breadth-first, "
                     "layered)");
      compareKinds.push_back(*k);
    }
    if (compareKinds.empty())
      return usage("--compare: give a comma-separated list of schedules");
  }
  if (search) {
    if (gpus < 1)
      return usage("--search needs --gpus N with N >= 1");
    if (globalBatch < 1)
      return usage("--search needs --global-batch G with G >= 1");
    if (!compareKinds.empty())
      return usage("--search and --compare cannot be combined");
  } else if (gpus.getNumOccurrences() || globalBatch.getNumOccurrences()) {
    return usage("--gpus and --global-batch only apply with --search");
  }
  if (top < 1)
    return usage("--top " + std::to_string(top) + ": must be >= 1");
  schedule::Expected<plan::Hardware> hw = plan::loadHardware(hardwareName);
  if (!hw)
    return usage("--hardware " + hardwareName + ": " + hw.error());

  std::optional<plan::ModelDesc> desc = describe();
  if (!desc)
    return 1;

  if (search) {
    plan::SearchOptions options;
    options.gpus = gpus;
    options.globalBatch = globalBatch;
    options.top = top;
    options.precision = *precision;
    options.moeImbalance = moeImbalance;
    schedule::Expected<plan::SearchResult> result =
        plan::searchPlans(*desc, *hw, options);
    if (!result)
      return usage(result.error());
    return writeFile(outputPath, format == "json"
                                     ? plan::formatSearchJson(*result)
                                     : plan::formatSearch(*result, *desc))
               ? (result->best.empty() ? 1 : 0)
               : 1;
  }

  plan::PlanConfig config;
  config.pp = pp;
  config.dp = replicas();
  config.tp = tp;
  config.ep = ep;
  config.moeImbalance = moeImbalance;
  config.microBatches = microBatches;
  config.microBatchSize = microBatchSize;
  config.schedule = *kind;
  config.chunks = chunks;
  config.zero = zero;
  config.recompute = recompute == "full";
  config.paddedShards = target == "cuda";
  config.precision = *precision;
  if (schedule::Status s = plan::checkConfig(*desc, config);
      !s && compareKinds.empty())
    return usage(s.message());

  if (!compareKinds.empty()) {
    plan::Comparison cmp =
        plan::compareSchedules(*desc, config, *hw, compareKinds);
    return writeFile(outputPath, format == "json"
                                     ? plan::formatComparisonJson(cmp)
                                     : plan::formatComparison(cmp))
               ? 0
               : 1;
  }

  plan::EvaluateOptions evaluate;
  evaluate.residualBytes = compiledResiduals;
  evaluate.boundaryBytes = compiledBoundaries;
  evaluate.tensorParallelForwardBytes = compiledTensorParallel.forwardTpBytes;
  evaluate.tensorParallelBackwardBytes = compiledTensorParallel.backwardTpBytes;
  evaluate.tensorParallelForwardSteps = compiledTensorParallel.forwardTpSteps;
  evaluate.tensorParallelBackwardSteps = compiledTensorParallel.backwardTpSteps;
  evaluate.tensorParallelParams = compiledTensorParallel.params;
  evaluate.tensorParallelSends = compiledTensorParallel.boundaryBytes;
  schedule::Expected<plan::Plan> result =
      plan::evaluatePlan(*desc, config, *hw, evaluate);
  if (!result)
    return usage(result.error());
  if (!compiledResiduals.empty() && !result->ranks.empty() &&
      !result->ranks.front().memory.stepBuffersExact)
    llvm::errs() << "lamina plan: note: the compiled modules' boundaries "
                    "differ from the plan's (another micro-batch size than "
                    "the model's batch, or other modules): the step "
                    "buffer's residuals are estimated\n";
  bool ok = writeFile(outputPath, format == "json"
                                      ? plan::formatJson(*result, *desc)
                                      : plan::formatTextReport(*result, *desc));
  if (!tracePath.empty())
    ok &= writeFile(tracePath, plan::formatChromeTrace(*result));
  if (!dotPath.empty())
    ok &= writeFile(dotPath, plan::formatDot(*result, *desc));
  if (!htmlPath.empty())
    ok &= writeFile(htmlPath, plan::formatHtml(*result, *desc));
  return ok ? 0 : 1;
}
} // namespace lamina::tool
