//===- GraphBase.td - graph dialect definition -------------*- tablegen -*-===//
//
// The graph dialect: tensor-level ops with static shapes, the IR the ONNX
// importer produces and that autodiff, partitioning and lowering consume.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_GRAPH_BASE
#define LAMINA_GRAPH_BASE

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "lamina/Dialect/Graph/IR/GraphInterfaces.td"

def Graph_Dialect : Dialect {
  let name = "graph";
  let cppNamespace = "::lamina::ir::graph";
  let summary = "Static-shape tensor ops for training programs";
  let description = [{
    The `graph` dialect holds a model as a function of static-shape tensors.
    Many ONNX ops map onto one op family here (Squeeze, Unsqueeze and Flatten
    all become `graph.reshape`; Split becomes `graph.slice`), and opset
    spelling differences live in the importer, not in the dialect.

    Function arguments carry `graph.name` (the ONNX name) and `graph.kind`
    (`input`, `trainable` or `constant`); the function carries
    `graph.output_names`. A training module carries `graph.train`
    (`#graph.train<...>`: the loss the program computes).

    The function the importer creates (the model's forward pass) carries the
    unit attribute `graph.entry`: the passes that prepare it for training
    act on it, not on a function of a given name. In a module none of whose
    functions carries it (IR written by hand), `@forward` is the entry.
  }];
  // graph.entry; the accessors are GraphDialect::getEntryAttrHelper().
  let discardableAttrs = (ins UnitAttr:$entry);
  let useDefaultAttributePrinterParser = 1;
  let hasConstantMaterializer = 1;
  let hasRegionArgAttrVerify = 1;
  let hasOperationAttrVerify = 1;
}

// Every graph op states its cost (GraphInterfaces.td); the cost of each op
// is defined in GraphCost.cpp.
class Graph_Op<string mnemonic, list<Trait> traits = []>
    : Op<Graph_Dialect, mnemonic,
         !listconcat(traits, [DeclareOpInterfaceMethods<Graph_CostOpInterface>])>;

// A differentiable op states its gradient (GraphInterfaces.td); the rules
// are in GraphGradients.cpp.
defvar Graph_Differentiable =
    DeclareOpInterfaceMethods<Graph_GradientOpInterface>;

// Every graph value is a ranked tensor with a static shape (phase contract 1).
def Graph_Tensor : StaticShapeTensorOf<[AnyFloat, AnyInteger]>;
def Graph_FloatTensor : StaticShapeTensorOf<[AnyFloat]>;
def Graph_IndexTensor : StaticShapeTensorOf<[I32, I64]>;
def Graph_BoolTensor : StaticShapeTensorOf<[I1]>;

#endif // LAMINA_GRAPH_BASE
