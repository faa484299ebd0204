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
    A negative index sends its row to no expert (an expert-parallel rank's
    empty rows, graph.moe_row_experts); one at or past E is a run-time
    error.
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

//===----------------------------------------------------------------------===//
// Expert parallelism (graph-ep-split-experts, docs/moe-design.md): the E
// experts split over the R ranks of the expert-parallel group, E / R each
// (rank q holds experts [q E/R, (q+1) E/R)). A graph.moe becomes
//
//   rows, counts = moe_dispatch(input, indices)     each pair's row, by rank
//   rows', counts' = moe_exchange(rows, counts)      all-to-all
//   out = moe(rows', moe_row_experts(counts'), 1, gate_up_local, down_local)
//   back, _ = moe_exchange(out, counts')             all-to-all back
//   result = moe_combine(back, indices, weights)
//
// Buffers are static: each rank's block of C = T min(k, E/R) rows is the
// most its T tokens can send one rank; rows past a block's count are zero
// and never sent.
//===----------------------------------------------------------------------===//

def Graph_MoEDispatchOp : Graph_Op<"moe_dispatch", [Pure, Graph_Differentiable]> {
  let summary = "Each (token, pick) pair's input row, grouped by the rank "
                "that holds its expert";
  let description = [{
    `input` [T, H], `indices` [T, k] in [0, E) with `E = experts`: the
    pairs `(t, j)` sorted by expert (tokens in order within an expert);
    rank q's pairs (experts `[q E/R, (q+1) E/R)`, `R = ranks`) fill rows
    `[q C, q C + n_q)` of `rows` [R C, H] with `input[t]`, the rest zero;
    `counts` [R, E/R] (i64) holds how many pairs go to each expert (a
    negative index sends its pair nowhere, as in graph.moe). The
    gradient of `input` sums each token's rows back (graph.moe_combine with
    unit weights).
  }];
  let arguments = (ins Graph_FloatTensor:$input, Graph_IndexTensor:$indices,
                       I64Attr:$experts, I64Attr:$ranks);
  let results = (outs Graph_FloatTensor:$rows, Graph_IndexTensor:$counts);
  let assemblyFormat = "$input `,` $indices attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Graph_MoEExchangeOp : Graph_Op<"moe_exchange", [Pure, Graph_Differentiable]> {
  let summary = "All-to-all over the expert-parallel group: each rank's "
                "block of rows to that rank";
  let description = [{
    `rows` [R C, ...] in R blocks of C rows, `counts` [R, n] (i64): block q
    holds `sum(counts[q])` valid rows for rank q of the group. Rank q's
    result block p is rank p's block q (its valid rows, then zeros), and
    `received[p]` is rank p's `counts[q]`. The rows' gradient is the
    exchange back: graph.moe_exchange of the result's gradient with
    `received`.
  }];
  let arguments = (ins Graph_FloatTensor:$rows, Graph_IndexTensor:$counts);
  let results = (outs Graph_FloatTensor:$result, Graph_IndexTensor:$received);
  let assemblyFormat = "$rows `,` $counts attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Graph_MoERowExpertsOp : Graph_Op<"moe_row_experts", [Pure]> {
  let summary = "The local expert of each received row";
  let description = [{
    `counts` [R, n] (i64): block q of `result` [R C, 1] (i64) holds
    `counts[q, 0]` rows of expert 0, then `counts[q, 1]` of expert 1, ...,
    then -1 (no expert) up to C rows: graph.moe's indices for the rows
    graph.moe_exchange delivered.
  }];
  let arguments = (ins Graph_IndexTensor:$counts);
  let results = (outs Graph_IndexTensor:$result);
  let assemblyFormat = "$counts attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Graph_MoECombineOp : Graph_Op<"moe_combine", [Pure, Graph_Differentiable]> {
  let summary = "Each token's expert outputs, weighted and summed";
  let description = [{
    `rows` [R C, H] in graph.moe_dispatch's layout for `indices` [T, k]
    (with `experts` and `ranks` as there), `weights` [T, k]:
    `result[t] = sum_j weights[t, j] * rows[row(t, j)]`, summed in expert
    order (as graph.moe sums, so the results agree bit for bit).
  }];
  let arguments = (ins Graph_FloatTensor:$rows, Graph_IndexTensor:$indices,
                       Graph_FloatTensor:$weights, I64Attr:$experts,
                       I64Attr:$ranks);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$rows `,` $indices `,` $weights attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Graph_MoECombineGradOp : Graph_Op<"moe_combine_grad",
    [Pure, AllTypesMatch<["rows", "grad_rows"]>,
     AllTypesMatch<["weights", "grad_weights"]>]> {
  let summary = "The gradients of graph.moe_combine";
  let description = [{
    `grad_rows[row(t, j)] = weights[t, j] * grad_result[t]` (zero on empty
    rows) and `grad_weights[t, j] = rows[row(t, j)] . grad_result[t]`.
  }];
  let arguments = (ins Graph_FloatTensor:$rows, Graph_IndexTensor:$indices,
                       Graph_FloatTensor:$weights,
                       Graph_FloatTensor:$grad_result, I64Attr:$experts,
                       I64Attr:$ranks);
  let results = (outs Graph_FloatTensor:$grad_rows,
                      Graph_FloatTensor:$grad_weights);
  let assemblyFormat = [{
    $rows `,` $indices `,` $weights `,` $grad_result attr-dict `:`
    functional-type(operands, results)
  }];
}

#endif // LAMINA_GRAPH_MOE_OPS
