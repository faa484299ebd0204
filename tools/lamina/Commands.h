//===- Commands.h - lamina subcommands --------------------------*- C++ -*-===//
#ifndef LAMINA_TOOLS_LAMINA_COMMANDS_H
#define LAMINA_TOOLS_LAMINA_COMMANDS_H

namespace lamina::tool {
/// `lamina import`: runs when its subcommand was selected; returns the exit
/// code.
int runImport();
} // namespace lamina::tool

#endif
