//===- Commands.h - lamina subcommands --------------------------*- C++ -*-===//
#ifndef LAMINA_TOOLS_LAMINA_COMMANDS_H
#define LAMINA_TOOLS_LAMINA_COMMANDS_H

namespace mlir {
class MLIRContext;
} // namespace mlir

namespace lamina::tool {
/// Each command runs when its subcommand was selected and returns the exit
/// code.
int runImport();  // ImportCommand.cpp
int runCompile(); // CompileCommand.cpp
int runPlan();    // PlanCommand.cpp

/// Prints the context's diagnostics as "lamina: error: <message>" (the
/// message names the ONNX node; notes follow). Diagnostics.cpp.
void installDiagnosticPrinter(mlir::MLIRContext &context);
} // namespace lamina::tool

#endif
