//===- lamina-translate.cpp - ONNX -> MLIR, and MLIR (EmitC) -> C++ -------===//

#include "lamina/Target/ONNX/ONNXImporter.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllTranslations.h" // registerToCppTranslation
#include "mlir/Tools/mlir-translate/MlirTranslateMain.h"
#include "mlir/Tools/mlir-translate/Translation.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"

static llvm::cl::list<std::string>
    dims("dim", llvm::cl::desc("bind a symbolic dim: NAME=VALUE (--import-onnx)"),
         llvm::cl::value_desc("NAME=VALUE"));

int main(int argc, char **argv) {
  mlir::registerToCppTranslation();
  mlir::TranslateToMLIRRegistration importONNX(
      "import-onnx", "import an ONNX model into the graph dialect",
      [](llvm::SourceMgr &sourceMgr,
         mlir::MLIRContext *context) -> mlir::OwningOpRef<mlir::Operation *> {
        lamina::onnx::ImportOptions options;
        llvm::BumpPtrAllocator alloc;
        llvm::StringSaver saver(alloc);
        if (std::string err = lamina::onnx::parseDimBindings(dims, options, saver);
            !err.empty()) {
          mlir::emitError(mlir::UnknownLoc::get(context)) << err;
          return nullptr;
        }
        const llvm::MemoryBuffer *buffer =
            sourceMgr.getMemoryBuffer(sourceMgr.getMainFileID());
        llvm::StringRef name = buffer->getBufferIdentifier();
        llvm::StringRef dir = llvm::sys::path::parent_path(name);
        bool fromStdin = name == "<stdin>";
        return lamina::onnx::importModelBytes(
            *context, buffer->getBuffer(), fromStdin ? "" : (dir.empty() ? "." : dir),
            name, options);
      },
      [](mlir::DialectRegistry &registry) {
        lamina::onnx::registerImportDialects(registry);
      });
  return mlir::failed(mlir::mlirTranslateMain(argc, argv, "Lamina translate\n"));
}
