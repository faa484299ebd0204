//===- Passes.td - graph dialect passes ---------------------*- tablegen -*-===//
#ifndef LAMINA_GRAPH_PASSES
#define LAMINA_GRAPH_PASSES

include "mlir/Pass/PassBase.td"

def GraphVerifyImported : Pass<"graph-verify-imported", "mlir::ModuleOp"> {
  let summary = "Checks phase contract 1: the importer's output";
  let description = [{
    After import every function is a `func.func` over the `graph` dialect,
    every value has a static ranked tensor type, no shape arithmetic survives
    (no op whose operands are all constants), and every argument carries a
    `graph.name` and a `graph.kind`. The pass changes nothing; it fails with
    a diagnostic at the first offending op.

    ```mlir
    // Rejected: a shape computation that should have been folded.
    %c = graph.constant dense<[2, 3]> : tensor<2xi64>
    %d = graph.mul %c, %c : (tensor<2xi64>, tensor<2xi64>) -> tensor<2xi64>
    ```
  }];
  let statistics = [
    Statistic<"numOps", "ops", "Ops checked">,
  ];
}

def GraphFuseGelu : Pass<"graph-fuse-gelu", "mlir::ModuleOp"> {
  let summary = "Recognise GELU written out as elementwise ops";
  let description = [{
    Exporters spell GELU as a chain of elementwise ops: the tanh form
    `0.5 x (1 + tanh(0.7978845608 (x + 0.044715 x^3)))` (GPT-2) and the erf
    form `0.5 x (1 + erf(x / 1.4142135))` (BERT), with the factors in any of
    the orders PyTorch's exporters write. Each chain whose intermediate
    values have no other use becomes one `graph.gelu` (`tanh` for the first
    form), so backends run one kernel instead of seven passes over memory.

    ```mlir
    %t = graph.tanh %c ...
    %d = graph.add %t, %one ...
    %r = graph.mul %half_x, %d ...
    // becomes
    %r = graph.gelu %x {tanh} : tensor<4x128x3072xf32>
    ```
  }];
  let statistics = [
    Statistic<"numFused", "fused", "GELU chains replaced by graph.gelu">,
  ];
}

#endif
