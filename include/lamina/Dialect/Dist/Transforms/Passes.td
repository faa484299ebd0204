//===- Passes.td - dist dialect passes ----------------------*- tablegen -*-===//
#ifndef LAMINA_DIST_PASSES
#define LAMINA_DIST_PASSES

include "mlir/Pass/PassBase.td"

def DistDescribeModel : Pass<"dist-describe-model", "mlir::ModuleOp"> {
  let summary = "Prints the planner's view of the model (its module chain)";
  let description = [{
    Runs module discovery on the function and prints, per module, what the
    cost model receives (`lamina::plan::ModelDesc`): forward FLOPs (matmul
    FLOPs apart), bytes accessed, parameters, activation bytes and the bytes
    handed to the next module, for one micro-batch. The IR is unchanged.

    ```
    model gpt2: 4 modules by names, micro-batch 2 x seq 16, hidden 64
    shared inputs: /transformer/Cast
    module     role       body  params  fwd_flops  matmul_flops ...
    embedding  embedding  -     9216    ...
    ```
  }];
  let options = [
    Option<"moduleRegex", "module-regex", "std::string", /*default=*/"",
           "Regex whose first capture group names a layer (overrides "
           "automatic discovery)">,
    Option<"functionName", "function", "std::string", /*default=*/"\"forward\"",
           "The function to describe">,
  ];
}

#endif
