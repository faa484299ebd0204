//===- GraphInterfaces.td - graph op interfaces -------------*- tablegen -*-===//
#ifndef LAMINA_GRAPH_INTERFACES
#define LAMINA_GRAPH_INTERFACES

include "mlir/IR/OpBase.td"

def Graph_CostOpInterface : OpInterface<"CostOpInterface"> {
  let cppNamespace = "::lamina::ir::graph";
  let description = [{
    What one execution of the op costs, read by the cost model: floating-point
    operations (a multiply and an add count as two, so a GEMM is `2*M*N*K`)
    and bytes read plus written. Data movement does no arithmetic and is
    charged by bytes only.
  }];
  let methods = [
    InterfaceMethod<"Floating-point operations of one execution.",
                    "int64_t", "getFlops">,
    InterfaceMethod<"Bytes read (operands) and written (results).",
                    "int64_t", "getBytesAccessed", (ins), [{}], [{
      return ::lamina::ir::graph::detail::operandAndResultBytes($_op);
    }]>,
  ];
}

def Graph_GradientOpInterface : OpInterface<"GradientOpInterface"> {
  let cppNamespace = "::lamina::ir::graph";
  let description = [{
    How an op differentiates (reverse mode), read by `graph-autodiff`. Given
    the gradient of the loss with respect to each result (a null Value means
    zero; the pass calls the rule only when some result gradient is
    non-null), the rule builds graph ops at the builder's insertion point that
    compute the gradient with respect to each operand, and appends one Value
    per operand to `operandGradients`: null for operands that are not
    differentiable (integer and boolean tensors, indices, conditions).
    Each gradient has its operand's exact type; broadcasting ops reduce their
    gradients back to the operand shape. The rule may build gradients that
    end up unused (the pass removes dead ops afterwards), so it need not know
    which operands depend on trainable parameters.

    Ops without this interface (and whose results carry a gradient) make the
    pass fail with a diagnostic at the op. The rules live in
    `lib/Dialect/Graph/IR/GraphGradients.cpp`.
  }];
  let methods = [
    InterfaceMethod<"Builds the operand gradients from the result gradients.",
      "::llvm::LogicalResult", "buildGradients",
      (ins "::mlir::OpBuilder &":$builder,
           "::mlir::ValueRange":$resultGradients,
           "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGradients)>,
  ];
}

#endif // LAMINA_GRAPH_INTERFACES
