//===- lamina-eval.cpp - run an ONNX model on the host kernels ------------===//
//
//   lamina-eval MODEL.onnx [--dim N=V]... --input [NAME=]FILE... --output-dir DIR
//
// Imports the model, reads its initializers, runs @forward with the
// reference evaluator (lib/Eval) and writes `<output name>.npy` per output
// (named as generated programs name them: rt::outputFileName). FILE is a
// .npy file or a serialized ONNX TensorProto (.pb, as the backend node
// tests store them). Without NAME=, a .pb file is matched by its name field,
// anything else (or an unnamed .pb) by its position among the --input flags.
//
// With a loss (the flags of `lamina compile --mode train`: --loss causal-lm
// --logits NAME, --loss cross-entropy --logits NAME --labels NAME, or
// --loss-output NAME), graph-add-loss and graph-autodiff run first and
// @train_step is evaluated instead: `loss.npy` and one `grad:<param>` file
// per trainable initializer (written `grad%3A<param>.npy`), every
// initializer trainable. This is how Lamina's gradients are compared with an
// independent reference (test/e2e/reference-grads.test).
//
//===----------------------------------------------------------------------===//

#include "lamina/Dialect/Graph/IR/GraphDialect.h"
#include "lamina/Dialect/Graph/Transforms/Passes.h"
#include "lamina/Eval/Evaluator.h"
#include "lamina/Runtime/Kernels.h"
#include "lamina/Runtime/Program.h" // outputFileName
#include "lamina/Runtime/RestoreParameters.h"
#include "lamina/Target/ONNX/ONNXImporter.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/Timing.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace lamina;
namespace cl = llvm::cl;

// Only these in --help: LLVM's libraries register hundreds more.
static cl::OptionCategory evalCategory("lamina-eval options");
static cl::opt<std::string> modelPath(cl::Positional, cl::desc("MODEL.onnx"),
                                      cl::Required, cl::cat(evalCategory));
static cl::list<std::string> dims("dim", cl::desc("bind a symbolic dim"),
                                  cl::value_desc("NAME=VALUE"),
                                  cl::cat(evalCategory));
static cl::list<std::string> inputs("input",
                                    cl::desc("an input value (.npy or .pb)"),
                                    cl::value_desc("[NAME=]FILE"),
                                    cl::cat(evalCategory));
static cl::opt<std::string> outputDir("output-dir",
                                      cl::desc("write NAME.npy here"),
                                      cl::value_desc("DIR"), cl::Required,
                                      cl::cat(evalCategory));
static cl::opt<int> threads("eval-threads",
                            cl::desc("kernel threads (0: all cores)"),
                            cl::init(0), cl::cat(evalCategory));
static cl::opt<bool> timing("timing", cl::desc("print phase times to stderr"),
                            cl::cat(evalCategory));
static cl::opt<std::string>
    lossKind("loss",
             cl::desc("evaluate @train_step with this loss added: "
                      "causal-lm or cross-entropy"),
             cl::value_desc("KIND"), cl::cat(evalCategory));
static cl::opt<std::string> logitsName("logits",
                                       cl::desc("--loss: the logits output"),
                                       cl::value_desc("NAME"),
                                       cl::cat(evalCategory));
static cl::opt<std::string>
    labelsName("labels", cl::desc("--loss cross-entropy: the labels input"),
               cl::value_desc("NAME"), cl::cat(evalCategory));
static cl::opt<std::string> lossOutput(
    "loss-output",
    cl::desc("evaluate @train_step for the model's own scalar output"),
    cl::value_desc("NAME"), cl::cat(evalCategory));

static cl::opt<bool> asExported(
    "as-exported",
    cl::desc("--loss: the initializers exactly as the file has them (no "
             "parameters restored, inv_freq trained), as lamina compile's "
             "--as-exported"),
    cl::cat(evalCategory));

static int fail(const std::string &message) {
  llvm::errs() << "lamina-eval: error: " << message << "\n";
  return 1;
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(evalCategory);
  cl::ParseCommandLineOptions(argc, argv, "Lamina reference evaluator\n");
  rt::setNumThreads(threads);

  DialectRegistry registry;
  onnx::registerImportDialects(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  ScopedDiagnosticHandler diagnostics(&context, [](Diagnostic &diag) {
    // Remarks say what a pass changed (a buffer not trained, a padding
    // index), as lamina compile's summary does.
    if (diag.getSeverity() == DiagnosticSeverity::Remark) {
      llvm::errs() << "lamina-eval: " << diag.str() << "\n";
      return success();
    }
    llvm::errs() << "lamina-eval: "
                 << (diag.getSeverity() == DiagnosticSeverity::Error ? "error"
                                                                     : "note")
                 << ": " << diag.str() << "\n";
    for (Diagnostic &note : diag.getNotes())
      llvm::errs() << "lamina-eval: note: " << note.str() << "\n";
    return success();
  });

  onnx::ImportOptions options;
  llvm::BumpPtrAllocator alloc;
  llvm::StringSaver saver(alloc);
  if (std::string err = onnx::parseDimBindings(dims, options, saver); !err.empty())
    return fail(err);

  DefaultTimingManager tm;
  tm.setEnabled(timing);
  TimingScope root = tm.getRootScope();
  // Training: the parameters the exporter merged, untied or dropped put
  // back, as lamina compile --mode train does, in a copy that lives until
  // the initializers are read.
  bool training = !lossKind.empty() || !lossOutput.empty();
  rt::TemporaryRestore restore;
  std::string importPath = modelPath;
  if (training && !asExported) {
    if (rt::Status s = restore.create(modelPath, /*inlineData=*/true); !s.ok())
      return fail(modelPath + ": " + s.message());
    importPath = restore.path();
    if (restore.what().changed())
      llvm::errs() << "lamina-eval: parameters restored as lamina compile "
                      "--mode train does: "
                   << restore.what().summary() << "\n";
  }
  const rt::RestoredParameters &restored = restore.what();

  TimingScope importTimer = root.nest("import");
  OwningOpRef<ModuleOp> module =
      onnx::importModelFile(context, importPath, options);
  importTimer.stop();
  if (!module)
    return 1;
  func::FuncOp func;
  for (auto f : module->getOps<func::FuncOp>())
    if (f.getName() == options.functionName)
      func = f;
  if (!func)
    return fail("the import produced no @" + options.functionName);

  // Training: the loss and the gradients of every trainable initializer.
  std::string evalFunction = options.functionName;
  if (!lossKind.empty() || !lossOutput.empty()) {
    if (!lossKind.empty() == !lossOutput.empty())
      return fail("give either --loss KIND or --loss-output NAME");
    if (!lossKind.empty() && logitsName.empty())
      return fail("--loss needs --logits NAME");
    // What lamina compile's graph and train phases do before autodiff,
    // without the fusions (the evaluator runs the ops as written).
    PassManager pm(&context);
    if (!asExported) {
      ir::graph::GraphFreezeBuffersOptions buffers;
      buffers.buffers.assign(restored.buffers.begin(), restored.buffers.end());
      pm.addNestedPass<func::FuncOp>(
          ir::graph::createGraphFreezeBuffers(buffers));
      if (!restored.paddingIndices.empty()) {
        ir::graph::GraphMarkPaddingOptions pads;
        for (const auto &[table, index] : restored.paddingIndices)
          pads.knownPaddingIdx.push_back(table + "=" + std::to_string(index));
        pm.addNestedPass<func::FuncOp>(ir::graph::createGraphMarkPadding(pads));
      }
    }
    ir::graph::GraphAddLossOptions lossOptions;
    lossOptions.kind = lossKind.empty() ? std::string("output") : lossKind.getValue();
    lossOptions.logits = logitsName;
    lossOptions.labels = labelsName;
    lossOptions.output = lossOutput;
    pm.addPass(ir::graph::createGraphAddLoss(lossOptions));
    pm.addPass(ir::graph::createGraphAutodiff());
    if (failed(pm.run(*module)))
      return 1;
    evalFunction = "train_step";
  } else if (!logitsName.empty() || !labelsName.empty()) {
    return fail("--logits and --labels go with --loss");
  } else if (asExported) {
    return fail("--as-exported goes with --loss or --loss-output");
  }

  TimingScope loadTimer = root.nest("read initializers and inputs");
  std::map<std::string, eval::HostTensor> args;
  if (std::string err = eval::loadInitializers(*module, importPath, args);
      !err.empty())
    return fail(err);

  // The function's inputs, in order.
  std::vector<std::pair<std::string, Type>> expected;
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    auto kind = func.getArgAttrOfType<StringAttr>(i, ir::graph::kKindAttr);
    auto name = func.getArgAttrOfType<StringAttr>(i, ir::graph::kNameAttr);
    if (kind && name && kind.getValue() == ir::graph::kKindInput)
      expected.emplace_back(name.getValue().str(), func.getArgument(i).getType());
  }
  auto expectedNames = [&] {
    std::string s;
    for (auto &[n, t] : expected)
      s += (s.empty() ? "'" : ", '") + n + "': " + eval::describe(t);
    return s.empty() ? std::string("none") : s;
  };
  std::map<std::string, bool> given;
  for (auto [index, spec] : llvm::enumerate(inputs)) {
    llvm::StringRef text(spec), name, file = text;
    if (text.contains('=') && !llvm::sys::fs::exists(text))
      std::tie(name, file) = text.split('=');
    eval::HostTensor value;
    std::string protoName, err;
    if (file.ends_with(".npy"))
      err = eval::readNpy(file, value);
    else
      err = eval::readTensorProto(&context, file, value, protoName);
    if (!err.empty())
      return fail(err);
    std::string key = name.str();
    if (key.empty())
      key = protoName;
    if (key.empty()) {
      if (index >= expected.size())
        return fail("input #" + std::to_string(index) + " ('" + file.str() +
                    "') is beyond the model's " + std::to_string(expected.size()) +
                    " inputs: " + expectedNames());
      key = expected[index].first;
    }
    auto it = llvm::find_if(expected, [&](auto &e) { return e.first == key; });
    if (it == expected.end())
      return fail("'" + file.str() + "' is for input '" + key +
                  "', which the model does not have; its inputs: " +
                  expectedNames());
    rt::DType dtype;
    auto type = cast<RankedTensorType>(it->second);
    if (!eval::dtypeOf(type.getElementType(), dtype) || dtype != value.dtype ||
        llvm::ArrayRef<int64_t>(value.shape) != type.getShape())
      return fail("input '" + key + "' ('" + file.str() + "'): expected " +
                  eval::describe(type) + ", got " + eval::describe(value));
    if (given[key])
      return fail("input '" + key + "' is given twice");
    given[key] = true;
    args[key] = std::move(value);
  }
  for (auto &[n, t] : expected)
    if (!given[n])
      return fail("no value for input '" + n + "' (" + eval::describe(t) +
                  "); give it with --input " + n + "=FILE");
  loadTimer.stop();

  TimingScope evalTimer = root.nest("evaluate");
  std::vector<std::pair<std::string, eval::HostTensor>> outputs;
  if (std::string err = eval::evaluate(*module, args, outputs, evalFunction);
      !err.empty())
    return fail(err);
  evalTimer.stop();

  TimingScope writeTimer = root.nest("write outputs");
  if (std::error_code ec = llvm::sys::fs::create_directories(outputDir))
    return fail("cannot create '" + outputDir + "': " + ec.message());
  for (auto &[name, value] : outputs) {
    llvm::SmallString<256> path(outputDir);
    llvm::sys::path::append(path, rt::outputFileName(name.c_str()));
    if (std::string err = eval::writeNpy(path, value); !err.empty())
      return fail(err);
  }
  return 0;
}
