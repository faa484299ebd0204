//===- GraphAttrs.td - graph dialect attributes -------------*- tablegen -*-===//
#ifndef LAMINA_GRAPH_ATTRS
#define LAMINA_GRAPH_ATTRS

include "lamina/Dialect/Graph/IR/GraphBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def Graph_LossKind : I32EnumAttr<"LossKind", "what a training program's loss is", [
    I32EnumAttrCase<"CausalLM", 0, "causal_lm">,
    I32EnumAttrCase<"CrossEntropy", 1, "cross_entropy">,
    I32EnumAttrCase<"Output", 2, "output">,
  ]> {
  let cppNamespace = "::lamina::ir::graph";
  let genSpecializedAttr = 0;
}

def Graph_TrainAttr : AttrDef<Graph_Dialect, "Train"> {
  let mnemonic = "train";
  let summary = "What the generated training program needs to know of its loss";
  let description = [{
    Set on the module (`graph.train`) by `graph-add-loss`, read by the
    passes after it (`graph-autodiff`, `dist-outline-modules` take the loss
    output by its name) and by `convert-rt-to-emitc` (the runtime's loss
    kind, labels input, token-id check and ignored label), so the settings
    travel with the IR instead of as conversion options.

    * `loss`: `causal_lm` (labels are the token input shifted),
      `cross_entropy` (labels are the input named `labels`) or `output` (the
      model's own scalar output named `output`);
    * `output`: the loss output's name (`"loss"` for the two built-in
      losses);
    * `vocab`: the logits' last dimension, which token ids are checked
      against (0: unknown);
    * `ignore_index`: the label value that adds nothing to the loss.

    ```mlir
    module attributes {graph.train = #graph.train<loss = causal_lm, output = "loss", vocab = 50257>}
    ```
  }];
  let parameters = (ins
    EnumParameter<Graph_LossKind>:$loss,
    StringRefParameter<"the loss output's name">:$output,
    StringRefParameter<"the labels input (cross_entropy)", "\"\"">:$labels,
    DefaultValuedParameter<"int64_t", "0">:$vocab,
    DefaultValuedParameter<"int64_t", "-100">:$ignore_index
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

#endif // LAMINA_GRAPH_ATTRS
