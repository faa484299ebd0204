//===- Diagnostics.cpp - how every lamina command prints diagnostics ------===//

#include "Commands.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

void lamina::tool::installDiagnosticPrinter(MLIRContext &context,
                                            std::vector<std::string> *remarks) {
  context.getDiagEngine().registerHandler([remarks](Diagnostic &diag) {
    // What a pass changed (a remark) goes to the command's summary.
    if (remarks && diag.getSeverity() == DiagnosticSeverity::Remark) {
      remarks->push_back(diag.str());
      return success();
    }
    auto print = [](Diagnostic &d) {
      const char *severity = d.getSeverity() == DiagnosticSeverity::Error ? "error"
                             : d.getSeverity() == DiagnosticSeverity::Warning
                                 ? "warning"
                                 : "note";
      llvm::errs() << "lamina: " << severity << ": " << d.str() << "\n";
    };
    print(diag);
    for (Diagnostic &note : diag.getNotes())
      print(note);
    return success();
  });
}
