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

def GraphAutodiff : Pass<"graph-autodiff", "mlir::ModuleOp"> {
  let summary = "Builds @train_step: the loss and its gradient per trainable "
                "parameter";
  let description = [{
    Reads `@forward` and adds `@train_step`, which takes the same arguments,
    recomputes the forward pass and then runs reverse-mode differentiation
    from the loss: each op states its gradient through `GradientOpInterface`,
    so the gradient ops are ordinary graph ops that later phases cost and
    lower. Its results are the loss followed by the gradient of every
    `trainable` argument, in argument order, named
    `["loss", "grad:<param>", ...]` in `graph.output_names`. `@forward` stays.

    Gradients flow only through float values that depend on a trainable
    argument: integer and boolean tensors, indices and conditions are
    non-differentiable. A value used several times (fan-out, a tied weight)
    gets the sum of its gradients; a parameter the loss does not depend on
    gets a zero gradient. An op on the path from a parameter to the loss
    without a gradient rule fails the pass with a diagnostic naming the op
    and its ONNX node.

    ```mlir
    func.func @forward(%w: tensor<3xf32> {graph.kind = "trainable", graph.name = "w"},
                       %x: tensor<3xf32> {graph.kind = "input", graph.name = "x"})
        -> tensor<f32> attributes {graph.output_names = ["loss"]} {
      %0 = graph.mul %w, %x : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
      %1 = graph.reduce_sum %0 {axes = array<i64: 0>, keepdims = false} : tensor<3xf32> -> tensor<f32>
      return %1 : tensor<f32>
    }
    // adds
    func.func @train_step(%w: ..., %x: ...) -> (tensor<f32>, tensor<3xf32>)
        attributes {graph.output_names = ["loss", "grad:w"]} {
      %0 = graph.mul %w, %x ...
      %1 = graph.reduce_sum %0 ...
      %one = graph.constant dense<1.0> : tensor<f32>
      %g0 = graph.reshape %one : tensor<f32> to tensor<1xf32>
      %g1 = graph.broadcast %g0 : tensor<1xf32> to tensor<3xf32>
      %gw = graph.mul %g1, %x ...
      return %1, %gw : tensor<f32>, tensor<3xf32>
    }
    ```
  }];
  let options = [
    Option<"loss", "loss", "std::string", /*default=*/"\"\"",
           "Name (a graph.output_names entry) of the scalar f32/f64 output to "
           "differentiate; default: the function's only scalar output">,
  ];
  let statistics = [
    Statistic<"numGradientOps", "gradient-ops",
              "Ops in @train_step beyond the forward pass">,
  ];
}

def GraphVerifyTrainStep : Pass<"graph-verify-train-step", "mlir::ModuleOp"> {
  let summary = "Checks phase contract 2: one function computes the loss and "
                "every trainable parameter's gradient";
  let description = [{
    After autodiff the module has a `func.func @train_step` over the `graph`
    dialect with static shapes whose results are the loss (a scalar f32 or
    f64 named `loss`) followed by one gradient per `trainable` argument, in
    argument order, each named `grad:<argument name>` and of the argument's
    type. The pass changes nothing; it fails with a diagnostic at the first
    violation.

    ```mlir
    // Rejected: the gradient of "w" is missing.
    func.func @train_step(%w: tensor<4xf32> {graph.kind = "trainable", graph.name = "w"})
        -> tensor<f32> attributes {graph.output_names = ["loss"]}
    ```
  }];
}

#endif
