//===- Commands.h - lamina subcommands --------------------------*- C++ -*-===//
#ifndef LAMINA_TOOLS_LAMINA_COMMANDS_H
#define LAMINA_TOOLS_LAMINA_COMMANDS_H

#include <string>
#include <vector>

namespace mlir {
class MLIRContext;
} // namespace mlir

namespace lamina {
struct CompileOptions;
namespace rt {
struct RestoredParameters;
} // namespace rt
} // namespace lamina

namespace lamina::tool {
/// Each command runs when its subcommand was selected and returns the exit
/// code.
int runImport();  // ImportCommand.cpp
int runCompile(); // CompileCommand.cpp
int runPlan();    // PlanCommand.cpp

/// Prints the context's diagnostics as "lamina: error: <message>" (the
/// message names the ONNX node; notes follow); remarks (what a pass
/// changed) go to `remarks` when given. Diagnostics.cpp.
void installDiagnosticPrinter(mlir::MLIRContext &context,
                              std::vector<std::string> *remarks = nullptr);

/// The pipeline options of what the parameter restore found in the
/// export's metadata: padding indices (known and unknown) and buffers
/// (CompileCommand.cpp; lamina plan runs the compile's phases too).
void setRestoredParameters(CompileOptions &o,
                           const rt::RestoredParameters &known);
} // namespace lamina::tool

#endif
