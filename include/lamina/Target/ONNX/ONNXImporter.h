//===- ONNXImporter.h - ONNX model to graph dialect -------------*- C++ -*-===//
//
// Imports an ONNX model file into a module holding one `func.func` over the
// graph dialect with static shapes (phase contract 1, docs/architecture.md).
// Errors are reported through the context's diagnostic engine, located at
// the ONNX node they concern.
//
//===----------------------------------------------------------------------===//
#ifndef LAMINA_TARGET_ONNX_ONNXIMPORTER_H
#define LAMINA_TARGET_ONNX_ONNXIMPORTER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/Support/StringSaver.h"

#include <string>

namespace lamina::onnx {

struct ImportOptions {
  /// Values for symbolic dimensions (`--dim NAME=VALUE`).
  llvm::MapVector<llvm::StringRef, int64_t> dims;
  /// Name of the produced function.
  std::string functionName = "forward";
  /// Accept initializers whose external data file does not exist (only
  /// their shapes are imported; `lamina plan` needs nothing more). Small
  /// initializers the importer must read still fail with a diagnostic.
  bool allowMissingExternalData = false;
};

/// Parses `NAME=VALUE` into `options.dims`; returns an error message or "".
std::string parseDimBinding(llvm::StringRef text, ImportOptions &options,
                            llvm::StringSaver &saver);
/// The same for every `--dim` a tool received; stops at the first error.
std::string parseDimBindings(llvm::ArrayRef<std::string> texts,
                             ImportOptions &options, llvm::StringSaver &saver);

/// Imports the ONNX model at `path`. Returns null after emitting diagnostics
/// on failure. Weight data is never read, except for the small integer and
/// scalar initializers the importer folds into constants.
mlir::OwningOpRef<mlir::ModuleOp> importModelFile(mlir::MLIRContext &context,
                                                  llvm::StringRef path,
                                                  const ImportOptions &options);

/// Imports a model held in memory; `baseDir` resolves external data (empty:
/// external data is refused).
mlir::OwningOpRef<mlir::ModuleOp>
importModelBytes(mlir::MLIRContext &context, llvm::StringRef bytes,
                 llvm::StringRef baseDir, llvm::StringRef displayName,
                 const ImportOptions &options);

/// Registers every dialect the importer produces.
void registerImportDialects(mlir::DialectRegistry &registry);

} // namespace lamina::onnx

#endif
