//===- import_fuzzer.cpp - libFuzzer target over the ONNX importer --------===//
//
// Feeds each input to lamina::onnx::importModelBytes twice: once with no
// symbolic-dim bindings and once with a fixed `--dim` set, both with an empty
// base directory (external data is refused, nothing is read from disk). A
// module that comes back is verified and printed to a null stream.
//
// What counts as a finding (libFuzzer stops and writes an artifact):
//   * any crash, ASan or UBSan report, abort/llvm_unreachable/fatal error;
//   * a leak (LeakSanitizer, on by default; keep -detect_leaks=1);
//   * an input that takes longer than -timeout or more than -rss_limit_mb;
//   * a non-null module that fails mlir::verify (the importer must verify
//     what it returns).
//
// Not a finding by default, but logged once per distinct message: the
// importer building IR that its own final mlir::verify rejects (the user gets
// an op-verifier message instead of an importer one). With
// LAMINA_FUZZ_STRICT_VERIFY=1 these abort too; with LAMINA_FUZZ_VERIFIER_DIR
// set, the first input for each distinct message is saved there.
//
// Known bugs keep coming back while they are unfixed. LAMINA_FUZZ_SKIP, a
// comma-separated list of byte strings (e.g. "CumSum,ReduceProd"), makes the
// target ignore every input that contains one of them, so a run can look
// for other bugs; it also hides other bugs in those ops, so unset it once the
// bugs are fixed.
//
// Build and run: see README.md (scripts/fuzz.sh does everything).
//
//===----------------------------------------------------------------------===//

#include "lamina/Target/ONNX/ONNXImporter.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SHA1.h"
#include "llvm/Support/raw_ostream.h"

#include <google/protobuf/stubs/logging.h>

#include <cstdio>
#include <cstdlib>
#include <string>

using namespace mlir;

namespace {

const DialectRegistry &registry() {
  static DialectRegistry *r = [] {
    auto *reg = new DialectRegistry;
    lamina::onnx::registerImportDialects(*reg);
    return reg;
  }();
  return *r;
}

/// The `--dim` set of the second import: the names the seed models use.
const lamina::onnx::ImportOptions &boundOptions() {
  static lamina::onnx::ImportOptions *o = [] {
    auto *opts = new lamina::onnx::ImportOptions;
    opts->dims["batch"] = 2;
    opts->dims["seq"] = 8;
    opts->dims["sequence"] = 8;
    opts->dims["batch_size"] = 2;
    opts->dims["seq_len"] = 8;
    opts->dims["sequence_length"] = 8;
    opts->dims["past_seq_len"] = 4;
    opts->dims["past_sequence_length"] = 4;
    opts->dims["total_seq_len"] = 12;
    opts->dims["past"] = 4;
    return opts;
  }();
  return *o;
}

bool strictVerify = false;
const char *verifierDir = nullptr;
llvm::StringSet<> *seenVerifierMessages = nullptr;
llvm::SmallVector<std::string> *skipStrings = nullptr;

/// Op-verifier diagnostics read "'dialect.op' op ..."; the importer's own
/// never start with a quote (they name the node, input or initializer).
bool isVerifierMessage(llvm::StringRef msg) {
  if (!msg.consume_front("'"))
    return false;
  size_t close = msg.find('\'');
  if (close == llvm::StringRef::npos || close == 0)
    return false;
  llvm::StringRef name = msg.take_front(close);
  return name.contains('.') && !name.contains(' ') &&
         msg.drop_front(close).starts_with("' op ");
}

/// A key that merges messages differing only in numbers and quoted names.
std::string messageKey(llvm::StringRef msg) {
  std::string key;
  bool inDigits = false;
  for (char c : msg.take_front(160)) {
    if (c >= '0' && c <= '9') {
      if (!inDigits)
        key += '#';
      inDigits = true;
      continue;
    }
    inDigits = false;
    key += c;
  }
  return key;
}

void reportVerifierMessage(const std::string &msg, const uint8_t *data,
                           size_t size) {
  std::string key = messageKey(msg);
  if (seenVerifierMessages->size() > 200 ||
      !seenVerifierMessages->insert(key).second)
    return;
  llvm::errs() << "[lamina-fuzz] importer built IR that its verifier rejects: "
               << msg << "\n";
  if (verifierDir) {
    auto hash = llvm::SHA1::hash(llvm::ArrayRef<uint8_t>(data, size));
    llvm::SmallString<256> path(verifierDir);
    llvm::sys::path::append(path, "verifier-" + llvm::toHex(hash, true) +
                                      ".onnx");
    if (FILE *f = std::fopen(path.c_str(), "wb")) {
      std::fwrite(data, 1, size, f);
      std::fclose(f);
      llvm::errs() << "[lamina-fuzz]   saved as " << path << "\n";
    }
  }
  if (strictVerify) {
    llvm::errs() << "[lamina-fuzz] LAMINA_FUZZ_STRICT_VERIFY is set: abort\n";
    std::abort();
  }
}

void importOnce(MLIRContext &context, llvm::StringRef bytes,
                const lamina::onnx::ImportOptions &options, const uint8_t *data,
                size_t size) {
  std::string verifierMessage;
  bool printing = false;
  // Drop every diagnostic (the importer reports bad input through them), but
  // remember the first op-verifier one; print them all when the module that
  // came back fails verification below.
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    std::string msg = diag.str();
    if (printing)
      llvm::errs() << "  " << msg << "\n";
    else if (verifierMessage.empty() && isVerifierMessage(msg))
      verifierMessage = msg;
    return success();
  });

  OwningOpRef<ModuleOp> module = lamina::onnx::importModelBytes(
      context, bytes, /*baseDir=*/"", "fuzz.onnx", options);
  if (!module) {
    if (!verifierMessage.empty())
      reportVerifierMessage(verifierMessage, data, size);
    return;
  }
  printing = true;
  if (failed(mlir::verify(*module))) {
    llvm::errs() << "[lamina-fuzz] importModelBytes returned a module that "
                    "fails verification (diagnostics above)\n";
    module->print(llvm::errs(), OpPrintingFlags().printGenericOpForm());
    std::abort();
  }
  // Exercise the custom printers and attribute/type printing as well.
  module->print(llvm::nulls());
  module->print(llvm::nulls(), OpPrintingFlags().printGenericOpForm());
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  // Protobuf logs warnings (e.g. on unknown enum values) to stderr: drop them.
  google::protobuf::SetLogHandler(nullptr);
  const char *strict = std::getenv("LAMINA_FUZZ_STRICT_VERIFY");
  strictVerify = strict && *strict && std::string(strict) != "0";
  verifierDir = std::getenv("LAMINA_FUZZ_VERIFIER_DIR");
  if (verifierDir && !*verifierDir)
    verifierDir = nullptr;
  seenVerifierMessages = new llvm::StringSet<>;
  skipStrings = new llvm::SmallVector<std::string>;
  if (const char *skip = std::getenv("LAMINA_FUZZ_SKIP")) {
    llvm::SmallVector<llvm::StringRef> parts;
    llvm::StringRef(skip).split(parts, ',', -1, /*KeepEmpty=*/false);
    for (llvm::StringRef part : parts)
      skipStrings->push_back(part.str());
    if (!skipStrings->empty())
      llvm::errs() << "[lamina-fuzz] LAMINA_FUZZ_SKIP: ignoring inputs that "
                      "contain any of '"
                   << skip << "'\n";
  }
  (void)registry();
  (void)boundOptions();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef bytes(reinterpret_cast<const char *>(data), size);
  for (const std::string &skip : *skipStrings)
    if (bytes.contains(skip))
      return -1; // libFuzzer: don't add this input to the corpus
  // A fresh context per input: no state (uniqued attributes, types) carries
  // over between inputs, and the leak checker sees everything freed. No
  // thread pool: one thread, deterministic.
  MLIRContext context(registry(), MLIRContext::Threading::DISABLED);
  context.loadAllAvailableDialects();
  static const lamina::onnx::ImportOptions unbound;
  importOnce(context, bytes, unbound, data, size);
  importOnce(context, bytes, boundOptions(), data, size);
  return 0;
}
