//===- GraphMoEOps.td - mixture-of-experts ops --------------*- tablegen -*-===//
//
// Included by GraphOps.td. docs/moe-design.md.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_GRAPH_MOE_OPS
#define LAMINA_GRAPH_MOE_OPS

def Graph_TopKOp : Graph_Op<"topk", [Pure, Graph_Differentiable]> {
  let summary = "The k largest values of the last dim and their indices";
  let description = [{
    ONNX TopK with `axis = -1`, `largest = 1`, `sorted = 1`: `values` holds
    the `k` largest entries of each row of `input` in descending order,
    `indices` (i64) their positions; equal values keep their order (the
    lower index first). The gradient of `input` is the gradient of `values`
    put back at `indices`, zero elsewhere.
  }];
  let arguments = (ins Graph_FloatTensor:$input, I64Attr:$k);
  let results = (outs Graph_FloatTensor:$values, Graph_IndexTensor:$indices);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Graph_MoEOp : Graph_Op<"moe", [Pure, Graph_Differentiable]> {
  let summary = "The experts of a mixture-of-experts layer: dispatch, gated "
                "MLPs, weighted combine";
  let description = [{
    `input` [T, H] (tokens), `indices` [T, k] (each token's experts, in
    [0, E)) and `weights` [T, k] (their routing weights) from the router;
    `gate_up` [E, 2I, H] and `down` [E, H, I], the experts' weights in the
    layout of Hugging Face's Mixtral, Qwen2-MoE and OLMoE experts (rows
    [0, I) of `gate_up` the gate projection, [I, 2I) the up projection):

        result[t] = sum_j weights[t, j] * down[e] (silu(gate[e] x_t) * up[e] x_t),
                    e = indices[t, j]

    Dropless: every token goes through all of its `k` experts (no capacity
    factor, no token dropped), so the result is PyTorch's eager loop's.
    The kernels group the tokens by expert and run one GEMM per expert.
    An index outside [0, E) is a run-time error.
  }];
  let arguments = (ins Graph_FloatTensor:$input, Graph_IndexTensor:$indices,
                       Graph_FloatTensor:$weights, Graph_FloatTensor:$gate_up,
                       Graph_FloatTensor:$down);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $indices `,` $weights `,` $gate_up `,` $down attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Graph_MoEGradOp : Graph_Op<"moe_grad",
    [Pure, AllTypesMatch<["input", "grad_input"]>,
     AllTypesMatch<["weights", "grad_weights"]>,
     AllTypesMatch<["gate_up", "grad_gate_up"]>,
     AllTypesMatch<["down", "grad_down"]>]> {
  let summary = "The gradients of graph.moe";
  let description = [{
    From graph.moe's operands and the gradient of its result: the
    gradients of `input`, `weights` (each token's expert output dotted with
    the result gradient), `gate_up` and `down` (summed over the tokens each
    expert saw). The experts' activations are recomputed, not kept.
  }];
  let arguments = (ins Graph_FloatTensor:$input, Graph_IndexTensor:$indices,
                       Graph_FloatTensor:$weights, Graph_FloatTensor:$gate_up,
                       Graph_FloatTensor:$down, Graph_FloatTensor:$grad_result);
  let results = (outs Graph_FloatTensor:$grad_input,
                      Graph_FloatTensor:$grad_weights,
                      Graph_FloatTensor:$grad_gate_up,
                      Graph_FloatTensor:$grad_down);
  let assemblyFormat = [{
    $input `,` $indices `,` $weights `,` $gate_up `,` $down `,` $grad_result
    attr-dict `:` functional-type(operands, results)
  }];
}

#endif // LAMINA_GRAPH_MOE_OPS
