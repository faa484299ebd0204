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

#endif
