//===- GraphInterfaces.td - graph op interfaces -------------*- tablegen -*-===//
#ifndef LAMINA_GRAPH_INTERFACES
#define LAMINA_GRAPH_INTERFACES

include "mlir/IR/OpBase.td"

def Graph_CostOpInterface : OpInterface<"CostOpInterface"> {
  let cppNamespace = "::lamina::graph";
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
      return ::lamina::graph::detail::operandAndResultBytes($_op);
    }]>,
  ];
}

#endif // LAMINA_GRAPH_INTERFACES
