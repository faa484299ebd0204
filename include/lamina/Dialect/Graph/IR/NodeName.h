//===- NodeName.h - the ONNX node an op came from ---------------*- C++ -*-===//
//
// The importer locates every op at NameLoc(<ONNX node name>); later passes
// wrap it in call sites (inlined functions) and fusions. Diagnostics,
// remarks and the program's kernel checks name the node through this.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_DIALECT_GRAPH_IR_NODENAME_H
#define LAMINA_DIALECT_GRAPH_IR_NODENAME_H

#include "mlir/IR/Operation.h"

#include <string>

namespace lamina::ir::graph {
/// "node 'NAME'" for the ONNX node `op` came from, else its location as
/// MLIR prints it.
std::string nodeNameOf(mlir::Operation *op);
} // namespace lamina::ir::graph

#endif // LAMINA_DIALECT_GRAPH_IR_NODENAME_H
