//===- lamina.cpp - the Lamina driver -------------------------------------===//
//
// `lamina <command> ...`. Each command lives in its own file and registers
// its options on its own llvm::cl::SubCommand.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/raw_ostream.h"

namespace lamina::tool {
extern llvm::cl::SubCommand importCommand;
extern llvm::cl::SubCommand compileCommand;
extern llvm::cl::SubCommand planCommand;
} // namespace lamina::tool

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  // LLVM's libraries register hundreds of code generator options at the top
  // level; `lamina --help` lists only the commands (each has its own --help).
  for (auto &entry :
       llvm::cl::getRegisteredOptions(llvm::cl::SubCommand::getTopLevel()))
    if (entry.first != "help" && entry.first != "version")
      entry.second->setHiddenFlag(llvm::cl::ReallyHidden);
  llvm::cl::ParseCommandLineOptions(
      argc, argv,
      "Lamina: compile ONNX models into distributed training programs\n\n"
      "  lamina import MODEL.onnx [--dim NAME=VALUE]... [-o OUT.mlir] [--summary]\n"
      "  lamina compile MODEL.onnx --mode train --loss causal-lm --logits "
      "NAME [--target host|cuda] [--pp P] [--dp D] -o OUTDIR\n"
      "  lamina compile MODEL.onnx --mode inference [--dim NAME=VALUE]... "
      "-o OUTDIR\n"
      "  lamina plan MODEL.onnx --pp P --dp D [--tp T] --micro-batches M "
      "--schedule S ... (see docs/plan.md)\n\n"
      "  lamina COMMAND --help lists a command's options.\n");
  if (lamina::tool::importCommand)
    return lamina::tool::runImport();
  if (lamina::tool::compileCommand)
    return lamina::tool::runCompile();
  if (lamina::tool::planCommand)
    return lamina::tool::runPlan();
  llvm::errs() << "lamina: no command given; try 'lamina --help'\n";
  return 2;
}
