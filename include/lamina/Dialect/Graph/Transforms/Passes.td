//===- Passes.td - graph dialect passes ---------------------*- tablegen -*-===//
#ifndef LAMINA_GRAPH_PASSES
#define LAMINA_GRAPH_PASSES

include "mlir/Pass/PassBase.td"

def GraphVerifyImported : Pass<"graph-verify-imported", "mlir::func::FuncOp"> {
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

def GraphFuseAttention : Pass<"graph-fuse-attention", "mlir::func::FuncOp"> {
  let summary = "Recognise scaled dot-product attention as one graph.attention";
  let description = [{
    Exporters write attention as `matmul(q, k^T)`, a scale (`div` or `mul`
    by a scalar), optional masks (`add` of an additive mask, `select` of a
    boolean one), `softmax` over the keys and `matmul` with `v`. Each such
    chain whose intermediate values have no other use becomes one
    `graph.attention`, so no backend stores the B x H x Sq x Sk scores (in
    the forward or, through its fused gradient, the backward):

    * `k^T` is taken apart: a transpose feeding it is composed with the
      swap of the last two dims (often cancelling it), and the broadcast
      that repeats kv heads for grouped-query attention is dropped (the op
      reads shared kv heads itself).
    * A constant mask that is exactly causal (a boolean `select` filling
      <= -1e30, or an additive 0 / <= -1e30 matrix) becomes the `causal`
      attribute when every query row keeps a key; any other additive mask
      that depends on no trainable parameter is the op's `bias`, and any
      other boolean mask filling <= -1e30 (BERT's padding mask) becomes the
      bias `select(mask, fill, 0)` of its un-broadcast shape (a fill that
      large absorbs every score added to it, so the probabilities are the
      select's). A causal mask filling with a finite large negative
      value (`-1e4` and below: GPT-2's `masked_bias`, onnxruntime's GPT-2
      test models) is causal too: a masked key's probability
      `exp(fill - max)` is exactly 0 in f32 once the row's largest kept
      score exceeds the fill by 104, so the probabilities are the model's
      under that condition, which a remark states. Chains with other masks
      are left alone.
    * Scalar factors on the scores, on q or on `k^T` (DistilBERT divides q)
      multiply into `scale`.
    * When q, k and v are all transposes `[0, 2, 1, 3]` of `[B, S, heads,
      D]` values and every user of the output transposes it back (GPT-2's
      and BERT's exports), the op is `seq_major` on those values and the
      four transposes go (and, after autodiff, their gradients).

    A softmax whose probabilities feed a matmul but whose chain does not
    match gets a remark naming its ONNX node and what stopped the match
    (one per reason, with a count), since the unfused chain stores the
    scores and runs far slower at long sequences; `lamina compile` prints
    these in its summary.

    Run it before `graph-autocast` and `graph-autodiff` (so the backward is
    `graph.attention_grad`); `lamina compile` does, unless
    `--no-fuse-attention`.

    ```mlir
    %s = graph.matmul %q, %kt ...
    %t = graph.div %s, %c8 ...
    %m = graph.select %causal_mask, %neg_big, %t ...
    %p = graph.softmax %m {axis = 3 : i64} ...
    %o = graph.matmul %p, %v ...
    // becomes
    %k = graph.transpose %x {perm = array<i64: 0, 2, 1, 3>} ...
    %o, %lse = graph.attention %q, %k, %v {causal, scale = 0.125 : f64} ...
    ```
  }];
  let statistics = [
    Statistic<"numFused", "fused", "attention chains replaced">,
    Statistic<"numCausal", "causal", "of them with a causal mask">,
    Statistic<"numSeqMajor", "seq-major",
              "of them on [B, S, heads, D] values, head transposes removed">,
  ];
}

def GraphFuseNorms : Pass<"graph-fuse-norms", "mlir::func::FuncOp"> {
  let summary = "Recognise LayerNorm and RMSNorm written out as ops";
  let description = [{
    Exporters write LayerNorm out where the opset has no
    LayerNormalization (TorchScript at opset 14: `d = x - mean(x)`,
    `d / sqrt(mean(d^2) + eps) * w + b`) and RMSNorm always (LLaMA-style
    models: `x * (1 / sqrt(mean(x^2) + eps)) * w`, the reciprocal as
    `Reciprocal` or `1 / s`, the square as `pow(x, 2)` or `x * x`). Each
    chain over the last dim whose intermediate values have no other use
    becomes one `graph.layer_norm` / `graph.rms_norm`: one kernel forward,
    and one fused gradient (`graph.layer_norm_grad`, `graph.rms_norm_grad`)
    instead of the differentiated chain and the intermediates it keeps.

    ```mlir
    %p = graph.pow %x, %two ...
    %m = graph.reduce_mean %p {axes = array<i64: 2>, keepdims = true} ...
    ...
    %y = graph.mul %w, %n ...
    // becomes
    %y = graph.rms_norm %x, %w {axis = 2 : i64, epsilon = 1.0e-06 : f64} ...
    ```
  }];
  let statistics = [
    Statistic<"numLayer", "layer-norms", "chains replaced by graph.layer_norm">,
    Statistic<"numRMS", "rms-norms", "chains replaced by graph.rms_norm">,
  ];
}

def GraphFuseGelu : Pass<"graph-fuse-gelu", "mlir::func::FuncOp"> {
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

def GraphFoldMatMulCasts
    : Pass<"graph-fold-matmul-casts", "mlir::func::FuncOp"> {
  let summary = "Stores f16/bf16 matmuls' f32 accumulators when the result "
                "is cast to f32";
  let description = [{
    `graph.cast` to f32 of an f16/bf16 `graph.matmul` whose result has no
    other use becomes the matmul with an f32 result: the kernels accumulate
    in f32 anyway and store the accumulator unrounded, so one kernel, one
    narrow buffer and one rounding go (the value differs from the cast of
    the rounded product by at most that rounding). Mixed precision makes
    this pattern for every matmul whose result an f32 op reads (after
    `graph-autocast`, forward and backward). Run it after `graph-autodiff`;
    `lamina compile` runs it right before `graph-fuse-elementwise`.

    First, three exact rewrites of the casts autodiff leaves around
    gradients: a `graph.concat` whose inputs are all f32 casts of one narrow
    type (seen through reshapes; q, k and v gradients joined for the fused
    projection) becomes the narrow concat cast once to f32, a narrow cast of
    such a widened value is the narrow value itself, and a `graph.reduce_sum`
    / `graph.reduce_mean` of a widened value reduces the narrow value into
    an f32 result (the fused projection's bias gradient). A
    `graph.layer_norm` / `graph.rms_norm` of an f32 input whose result is
    only cast to f16/bf16 stores that type itself (its f32 value rounded
    once, as the cast rounds it). Ops left unused are removed.

    ```mlir
    %0 = graph.matmul %a, %b : (tensor<4x8xbf16>, tensor<8x2xbf16>) -> tensor<4x2xbf16>
    %1 = graph.cast %0 : tensor<4x2xbf16> to tensor<4x2xf32>
    // becomes
    %1 = graph.matmul %a, %b : (tensor<4x8xbf16>, tensor<8x2xbf16>) -> tensor<4x2xf32>
    ```
  }];
  let statistics = [
    Statistic<"numFolded", "folded-casts", "casts folded into matmuls">,
    Statistic<"numConcats", "concats",
              "concats of widened values made narrow (one cast after)">,
    Statistic<"numRoundTrips", "round-trips",
              "narrow casts of widened narrow values removed">,
    Statistic<"numReductions", "reductions",
              "sums and means reading the narrow value of a widened one">,
    Statistic<"numNorms", "norms", "norms storing their narrowed result">,
  ];
}

def GraphFuseEpilogues : Pass<"graph-fuse-epilogues", "mlir::func::FuncOp"> {
  let summary = "Moves the adds and the narrowing cast after a matmul into "
                "graph.fused_matmul, and gradient accumulations into the "
                "norm gradients";
  let description = [{
    `graph.add` of a `graph.matmul` (or `graph.fused_matmul`) result that
    nothing else reads and a row of the result's type (`[n]`,
    `[1, ..., 1, n]`: a linear layer's bias) or a value of the result's
    type (a residual) becomes a `graph.fused_matmul` with that bias or
    addend; a `graph.cast` to f16/bf16 of such an f32 result, the operands
    being that type, becomes the product stored in that type (its bias
    rounded to it first; an addend only when it is a widened value of that
    type). The backends then run one BLAS call with an epilogue instead of
    a GEMM whose f32 output an elementwise kernel reads and writes again.

    `graph.add` of a `graph.layer_norm_grad` / `graph.rms_norm_grad` input
    gradient that nothing else reads and a value of its type (autodiff
    summing the norm's and the residual connection's contributions to the
    norm's input) becomes that op's `addend`: the norm's gradient kernel
    adds it before storing (the same f32 sum).

    A `graph.cast` to f16/bf16 that is the only use of an f32
    `graph.softmax_cross_entropy_grad` becomes that gradient's own result
    type: the kernel rounds once on store, as the cast would, and the f32
    gradient of the logits (the largest tensor of a language model's step)
    is neither written nor read back.

    A `graph.transpose` of the last two dims of a `graph.matmul` result
    that nothing else reads becomes the product of the transposed operands
    in swapped order (`(a b)^T = b^T a^T`, the same sums): the operands'
    transposes fold into the GEMM's flags, so no kernel transposes the
    result (the tied LM head's weight gradient, [vocab, hidden]).

    Last, a `graph.matmul` or `graph.fused_matmul` without addend whose
    operands are f16/bf16 and whose f32 result is read only by elementwise
    steps (those `graph.fused_elementwise` computes), none of them making a
    function result, stores its result in the operands' type, and each
    reader gets its own widening cast, which `graph-fuse-elementwise`
    absorbs as a widening load: an MLP's hidden pre-activation and the
    gradient of its activation are stored in bf16 (as PyTorch's autocast
    stores them), not in f32. This is one rounding more than the f32
    product, and half the bytes written and read. A product with a
    residual addend, or one summed into a parameter gradient (a tied
    embedding's), stays f32.

    Likewise such a product read only as the `grad_result` of norm
    gradients (`graph.layer_norm_grad`, `graph.rms_norm_grad`: the norm's
    output feeds the matmul whose input gradient this is) is stored narrow,
    and the norm gradient kernels widen it on load, as PyTorch's autocast
    hands a norm's backward the bf16 gradient of that matmul.

    Likewise such a product read only as the logits of
    `graph.softmax_cross_entropy` and of its (f16/bf16) gradient, besides
    function results, is stored narrow: the cross-entropy kernels widen it
    on load and keep the loss and its gradient f32, and a function result
    made of it (the train step's `output:logits`) takes the narrow type. An
    LM head's logits, the step's largest activation, are stored in bf16 as
    PyTorch's autocast stores them.

    Run it after `graph-autodiff` (no gradient rules) and
    `graph-fold-matmul-casts`, before `graph-fuse-elementwise`, as
    `lamina compile` does.

    ```mlir
    %0 = graph.matmul %x, %w : (tensor<8x64xbf16>, tensor<64x64xbf16>) -> tensor<8x64xf32>
    %1 = graph.add %0, %b : (tensor<8x64xf32>, tensor<64xf32>) -> tensor<8x64xf32>
    %2 = graph.add %1, %r : (tensor<8x64xf32>, tensor<8x64xf32>) -> tensor<8x64xf32>
    // becomes
    %2 = graph.fused_matmul %x, %w bias %b addend %r : (tensor<8x64xbf16>,
           tensor<64x64xbf16>, tensor<64xf32>, tensor<8x64xf32>) -> tensor<8x64xf32>
    ```
  }];
  let statistics = [
    Statistic<"numAdds", "adds", "adds moved into a matmul's epilogue">,
    Statistic<"numNarrowed", "narrowed",
              "narrowing casts moved into a matmul's or a cross-entropy "
              "gradient's result type">,
    Statistic<"numNormGrads", "norm-grads",
              "gradient sums moved into a norm's gradient kernel">,
    Statistic<"numSwapped", "swapped",
              "transposed products computed as the swapped product">,
    Statistic<"numActivations", "activations",
              "products read only by elementwise steps stored narrow">,
    Statistic<"numLogits", "logits",
              "products read only by cross-entropy stored narrow">,
    Statistic<"numNormGradients", "norm-gradients",
              "products read only by norm gradients stored narrow">,
  ];
}

def GraphHoistParamCasts : Pass<"graph-hoist-param-casts", "mlir::ModuleOp"> {
  let summary = "The parameters' f16/bf16 copies become arguments";
  let description = [{
    Each `graph.cast` of a trainable f32 argument to f16 or bf16 (the
    weights' copies mixed precision reads, made at every step) is replaced
    by a new argument of the cast's type, named after the parameter, of
    kind `param_copy`. The training driver keeps that copy: it casts the
    parameter once at the start (from the restored parameter after a resume) and then the
    optimizer's kernel stores the rounded parameter with each update
    (lib/Runtime/Program/Train.cpp), which reads the f32 parameter once
    instead of twice, a step's casts gone. The copy holds the bits the cast
    would have produced, so the step computes the same.

    Every function with trainable arguments gets the same new arguments,
    in one order (the union over the functions: the train step and its
    evaluation entry take one argument list). Single-process training
    programs (`lamina compile --mode train` without `--pp`/`--dp`), after
    `graph-autodiff`; dist-hoist-param-casts does the same for a
    distributed program's module functions.

    ```mlir
    func.func @train_step(%w: tensor<8x8xf32> {graph.kind = "trainable", graph.name = "w"}, ...) {
      %wb = graph.cast %w : tensor<8x8xf32> to tensor<8x8xbf16>
    // becomes
    func.func @train_step(%w: tensor<8x8xf32> {...}, ...,
                          %wb: tensor<8x8xbf16> {graph.kind = "param_copy", graph.name = "w"}) {
    ```
  }];
  let options = [
    Option<"everyRead", "every-read", "std::string", /*default=*/"\"\"",
           "bf16 or f16: every trainable f32 argument gets a copy of that "
           "type and every read of it goes through the copy (a gather's "
           "rows widened after gathering, any other read widened at entry), "
           "as FSDP's param_dtype=bf16 reads weights; the f32 arguments "
           "are then unread">,
  ];
  let statistics = [
    Statistic<"numHoisted", "hoisted", "parameter casts replaced by a copy">,
    Statistic<"numFunctions", "functions", "functions given the copies">,
  ];
}

def GraphPackAttention : Pass<"graph-pack-attention", "mlir::func::FuncOp"> {
  let summary = "Attention on a fused q/k/v projection reads it in place";
  let description = [{
    A seq-major `graph.attention` without bias whose q, k and v are the
    three consecutive slices along the last dim of one [B, S, (H + 2 Hk) D]
    tensor (each reshaped to [B, S, heads, D]: a fused q/k/v projection)
    becomes `graph.packed_attention` of that tensor; its
    `graph.attention_grad`, when the three gradients are only reshaped and
    concatenated back in that order (the slices' gradient), becomes
    `graph.packed_attention_grad`, whose result is the concatenation. The
    slices, the reshapes and the concatenation disappear: the CUDA backend
    hands cuDNN the projection with a row stride instead of three copies,
    and writes the gradients into one tensor. An attention whose gradient
    does not have that form is left as it is.

    Run it after `graph-autodiff`, before `graph-fuse-elementwise`;
    `lamina compile --target cuda` does.

    ```mlir
    %q0 = graph.slice %x {starts = array<i64: 0, 0, 0>, sizes = array<i64: 2, 8, 32>, steps = array<i64: 1, 1, 1>} : tensor<2x8x96xbf16> -> tensor<2x8x32xbf16>
    ...
    %q = graph.reshape %q0 : tensor<2x8x32xbf16> to tensor<2x8x4x8xbf16>
    %o, %l = graph.attention %q, %k, %v {causal, scale = 0.35, seq_major} : ...
    // becomes
    %o, %l = graph.packed_attention %x {causal, heads = 4, kv_heads = 4, scale = 0.35} : (tensor<2x8x96xbf16>) -> (tensor<2x8x4x8xbf16>, tensor<2x4x8xf32>)
    ```
  }];
  let statistics = [
    Statistic<"numPacked", "packed", "attention ops reading a packed q/k/v">,
    Statistic<"numPackedGrads", "packed-grads",
              "attention gradients writing a packed q/k/v gradient">,
  ];
}

def GraphFuseElementwise
    : Pass<"graph-fuse-elementwise", "mlir::func::FuncOp"> {
  let summary = "Groups chains of float elementwise ops into "
                "graph.fused_elementwise";
  let description = [{
    Each maximal group of float elementwise ops (`neg abs relu exp log sqrt
    reciprocal tanh erf sigmoid gelu cos sin add sub mul div pow min max`,
    on f32, f16 or bf16, one element type per chain but for the casts
    below) whose intermediate values have no
    use outside the group becomes one `graph.fused_elementwise` at the
    group's last op: the backends then run one kernel that reads the
    inputs once, keeps every intermediate in registers and writes only the
    result, instead of one kernel and one buffer per op. A group is a DAG
    (an intermediate may feed several of its ops) of at most 16 steps and
    4 distinct inputs; every intermediate has the result's shape, so no
    step is computed more often than the op it replaces (inputs broadcast
    to the result). An op whose result is used elsewhere (another op, a
    function result) ends a group; single ops stay as they are.

    Values stay f32 between the steps, so a fused f16/bf16 chain is rounded
    once instead of after every op; f32 chains compute what the ops compute
    one by one. Float casts at an f32 chain's ends join it exactly: a
    widening cast (f16/bf16 to f32) of an input is the f32 load of the
    narrow input, and a narrowing cast may be the group's root (the result
    rounded once on store); a narrowing cast inside a chain ends it. Run it last on the graph (after `graph-autodiff` and
    `graph-autocast`), right before `convert-graph-to-rt`: the fused op has
    no gradient rule. `lamina compile` does, for every target and mode.

    Then an f32 value read by a `graph.reduce_sum` over its leading dims
    (keepdims false) and by a narrowing cast -- the bias gradient and the
    bf16 operand of that bias's matmuls in a mixed-precision backward pass
    -- gets both from one `graph.fused_elementwise` with two results (the
    cast's type, and the sum). When the value has no other use and a chain
    (a group, or a single step op) computes it, the chain joins and the
    f32 tensor is never stored; otherwise (a norm's input gradient, which
    the residual path reads on) the op has no steps and reads the value
    once instead of twice. The sum is that of the unrounded f32 values, so
    nothing changes but the traffic.

    ```mlir
    %0 = graph.add %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
    %1 = graph.gelu %0 : tensor<4x8xf32>
    %2 = graph.mul %1, %s : (tensor<4x8xf32>, tensor<1xf32>) -> tensor<4x8xf32>
    // becomes
    %2 = graph.fused_elementwise %x, %b, %s {ops = ["add", "gelu", "mul"],
           lhs = array<i64: 0, 3, 4>, rhs = array<i64: 1, -1, 2>}
           : (tensor<4x8xf32>, tensor<8xf32>, tensor<1xf32>) -> tensor<4x8xf32>
    ```
  }];
  let statistics = [
    Statistic<"numGroups", "groups", "graph.fused_elementwise ops made">,
    Statistic<"numFusedOps", "fused-ops", "Elementwise ops they replace">,
    Statistic<"numSums", "sums",
              "sums over leading dims (with a narrowing cast) joined to "
              "their chain">,
  ];
}

def GraphAutocast : Pass<"graph-autocast", "mlir::func::FuncOp"> {
  let summary = "Mixed precision: matmuls compute in bf16 (or f16), the rest "
                "stays f32";
  let description = [{
    PyTorch's autocast as a graph rewrite. Every `graph.matmul` whose
    operands are f32 gets its operands cast to the low precision
    (`graph.cast`), computes in it (its result type is bf16 or f16; the
    kernels accumulate in f32 and round the result to nearest even once)
    and its result is cast back to f32. Everything else (norms, softmax,
    losses, reductions, elementwise ops, f64 matmuls) is left as it is.
    The function signatures do not change: a trainable parameter stays an
    f32 argument and is cast inside the function, so in training the
    master weights, their gradients and the optimizer state stay f32.

    Each distinct value is cast once, right before its first matmul, and
    the cast is reused by every later matmul (a weight shared by several
    matmuls, an activation feeding q, k and v). A cast pushes through a
    `graph.transpose` that feeds only matmuls, or that swaps the last two
    dims: the transpose then moves the narrow values and still folds into
    the matmul as a BLAS transposition flag (`convert-graph-to-rt`). A
    matmul operand that is itself the f32 cast of a low-precision value
    (the result of a previous autocast matmul) is used as it is: the round
    trip is exact.

    Run it on `@forward` before `graph-add-loss` and `graph-autodiff`: the
    gradient of a cast is the cast back, so the backward's matmuls
    (`dA = G B^T`, `dB = A^T G`) are low-precision matmuls too, and each
    weight gradient arrives as f32 (like PyTorch's cached weight casts, a
    cast value read by several matmuls gets its gradients summed in the
    low precision before the cast back). `graph.attention` moves likewise
    (q, k, v and out narrow; its scores, softmax and `lse` stay f32 inside
    the kernel). `lamina compile --precision bf16`
    does this for inference, single-process and distributed training.

    ```mlir
    %y = graph.matmul %x, %w : (tensor<8x32xf32>, tensor<32x64xf32>) -> tensor<8x64xf32>
    // becomes (precision=bf16)
    %0 = graph.cast %x : tensor<8x32xf32> to tensor<8x32xbf16>
    %1 = graph.cast %w : tensor<32x64xf32> to tensor<32x64xbf16>
    %2 = graph.matmul %0, %1 : (tensor<8x32xbf16>, tensor<32x64xbf16>) -> tensor<8x64xbf16>
    %y = graph.cast %2 : tensor<8x64xbf16> to tensor<8x64xf32>
    ```
  }];
  let options = [
    Option<"precision", "precision", "std::string", /*default=*/"\"bf16\"",
           "The matmuls' precision: bf16 or f16">,
  ];
  let statistics = [
    Statistic<"numMatMuls", "matmuls", "Matmuls moved to the low precision">,
    Statistic<"numAttentions", "attentions",
              "graph.attention ops moved to the low precision">,
    Statistic<"numCasts", "casts", "Casts to the low precision inserted">,
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
    `["loss", "grad:<param>", ...]` in `graph.output_names`. `@forward` (the
    entry function) stays, and stays the entry. A pass on the module: it
    adds a function.

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
    Option<"keepOutputs", "keep-outputs", "bool", /*default=*/"false",
           "Also return @forward's other outputs (e.g. the logits) after "
           "the gradients, named \"output:NAME\"">,
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

def GraphAddLoss : Pass<"graph-add-loss", "mlir::ModuleOp"> {
  let summary = "Adds a softmax cross-entropy loss output to @forward";
  let description = [{
    Appends a scalar output `loss` to `@forward`: the mean softmax
    cross-entropy of a logits output (`[..., V]`, f32 or f64) against integer
    labels (`[...]`), over the positions whose label is not `ignore-index`
    (the sum over no position is divided by 1, not 0). With
    `kind=causal-lm` the labels are the token input shifted by one: position
    `t` predicts token `t + 1`, so the last position's logits and the first
    token are dropped along the sequence dim (the second to last of the
    logits). With `kind=cross-entropy` the labels are the input argument
    named by `labels`. The other outputs stay, and `graph-autodiff` then
    differentiates the loss (the only scalar output). With `kind=output`
    the model computes its own loss, the scalar output named by `output`,
    and nothing is added.

    Either way the module gets `graph.train` (`#graph.train<...>`): the
    loss kind and output, the labels input, the vocabulary (the logits'
    last dim) and the ignored label, which the later passes and
    `convert-rt-to-emitc` read instead of options. Writing it is why the
    pass runs on the module, not on the function.

    ```mlir
    // kind=causal-lm on logits: tensor<2x8x64xf32>, input_ids: tensor<2x8xi64>
    %l = graph.slice %logits {starts = array<i64: 0, 0, 0>, sizes = array<i64: 2, 7, 64>, ...}
    %t = graph.slice %input_ids {starts = array<i64: 0, 1>, sizes = array<i64: 2, 7>, ...}
    %lp = graph.log_softmax %l {axis = 2 : i64} : tensor<2x7x64xf32>
    %p = graph.gather_nd %lp, %idx {batch_dims = 2 : i64} ...  // log p(label)
    ...                                                      // masked mean, negated
    return %logits, %loss : tensor<2x8x64xf32>, tensor<f32>
    ```
  }];
  let options = [
    Option<"kind", "kind", "std::string", /*default=*/"\"causal-lm\"",
           "causal-lm (labels: the token input shifted by one), "
           "cross-entropy (labels: the input named by 'labels') or output "
           "(the model's own loss output, named by 'output')">,
    Option<"output", "output", "std::string", /*default=*/"\"\"",
           "kind=output: the name of the model's scalar loss output">,
    Option<"logits", "logits", "std::string", /*default=*/"\"\"",
           "Name of the logits output; default: the only float output of "
           "rank >= 2">,
    Option<"labels", "labels", "std::string", /*default=*/"\"\"",
           "Name of the labels input (cross-entropy), or of the token input "
           "(causal-lm; default: the only integer input)">,
    Option<"ignoreIndex", "ignore-index", "int64_t", /*default=*/"-100",
           "Label value that contributes nothing to the loss">,
  ];
}

//===----------------------------------------------------------------------===//
// Training preparation: what `lamina compile --mode train` (and lamina-eval
// --loss) do to an imported export before the loss and autodiff, so both
// train what PyTorch trains (docs/training.md). Each reports what it changed
// as a remark on @forward, which `lamina compile` prints in its summary.
// `@forward` is the entry function: the one marked `graph.entry` (the
// importer marks the function it creates) or, where no function is marked,
// the one named `forward`. The passes on func.func skip every other one.
//===----------------------------------------------------------------------===//

def GraphFillWindowInputs
    : Pass<"graph-fill-window-inputs", "mlir::func::FuncOp"> {
  let summary = "Makes the mask, position and segment inputs of a window of "
                "packed tokens constants";
  let description = [{
    The `[batch, seq]` integer inputs of `@forward` named `attention_mask`,
    `position_ids` and `token_type_ids` (never the one named by `labels`)
    become the constants a window of packed tokens gives them: ones,
    `0..seq-1` in every row, zeros. They leave the signature and the pass
    canonicalizes `@forward` when it filled any, so the masks fold and one
    token input is left for the training driver. Inputs named in `keep`
    stay inputs (`lamina compile --keep-input`: padded batches fed by
    name, `run --data-dir`). Each filled input gets a
    remark
    (`input attention_mask: all ones ...`).

    ```mlir
    func.func @forward(%ids: tensor<2x8xi64> {graph.kind = "input", graph.name = "input_ids"},
                       %mask: tensor<2x8xi64> {graph.kind = "input", graph.name = "attention_mask"})
    // becomes
    func.func @forward(%ids: tensor<2x8xi64> {graph.kind = "input", graph.name = "input_ids"}) {
      %mask = graph.constant dense<1> : tensor<2x8xi64>
    ```
  }];
  let options = [
    Option<"labels", "labels", "std::string", /*default=*/"\"\"",
           "The labels input, which is never filled">,
    ListOption<"keep", "keep", "std::string",
               "Inputs left as inputs (padded batches fed by name)">,
  ];
}

def GraphTpRegroupProjections
    : Pass<"graph-tp-regroup-projections", "mlir::func::FuncOp"> {
  let summary = "A fused projection's weight stored as each tensor-parallel "
                "rank's share of every part";
  let description = [{
    `lamina compile --tp T`, before autodiff: a GEMM with a trainable weight
    (and a trainable bias) whose output is only sliced on its last dim into
    `k >= 2` equal parts (GPT-2's `c_attn`, one `[H, 3H]` weight for q, k
    and v) cannot be split over the group as one block of columns: a rank
    needs a slice of every part. Its weight and bias are stored regrouped,
    the last dim read as `[T, k, n/T]` rather than `[k, T, n/T]`, so that
    rank r's block is its share of each part, and the slices become a
    reshape to `[..., T, k, n/T]`, a slice of part j and a reshape back.
    The arguments get `graph.tp_parts = [dim, k]`; the runtime regroups the ONNX
    initializer as it loads it and back as it exports it
    (`ArgSpec::splitParts`). Autodiff then differentiates the regrouped
    form, and `dist-tp-plan` splits the projection as it splits separate
    q, k and v projections. A weight read by anything else, or parts that
    `tp` does not divide, are left alone. Where `dist-tp-plan` keeps the
    layer whole after all (heads `tp` does not divide, `--tp-replicate`),
    it reads the initializer's layout again (a relayout of the argument,
    and of its gradient).
  }];
  let options = [
    Option<"tp", "tp", "unsigned", /*default=*/"1",
           "The tensor-parallel group size (nothing to do at 1)">,
  ];
  let statistics = [
    Statistic<"numRegrouped", "regrouped", "Fused projections regrouped">,
  ];
}

def GraphEpSplitExperts
    : Pass<"graph-ep-split-experts", "mlir::func::FuncOp"> {
  let summary = "Each mixture-of-experts layer's experts split over the "
                "expert-parallel ranks, with all-to-alls";
  let description = [{
    `lamina compile --ep R`, before autodiff: every `graph.moe` whose
    expert weights are trainable arguments it alone reads becomes

        rows, counts = graph.moe_dispatch(input, indices)
        rows', counts' = graph.moe_exchange(rows, counts)     (all-to-all)
        out = graph.moe(rows', graph.moe_row_experts(counts'), 1, gate_up, down)
        back, _ = graph.moe_exchange(out, counts')            (all-to-all)
        result = graph.moe_combine(back, indices, weights)

    and its weights this rank's block of `E / R` experts (`graph.ep_split
    = R`; the runtime loads that block of the initializer). The rows are
    static buffers of `R` blocks of `T min(k, E / R)` rows (the most one
    rank's `T` tokens send another); only the valid rows travel. Autodiff
    then differentiates the pieces: the backward's all-to-alls are the
    exchanges' gradients. The result equals the unsplit layer's (the
    combine sums in expert order, as `graph.moe` does). A remark names each
    layer; experts that `R` does not divide, and a `@forward` without a
    `graph.moe`, are errors.
  }];
  let options = [
    Option<"ranks", "ranks", "unsigned", /*default=*/"1",
           "The expert-parallel group size (nothing to do at 1)">,
  ];
  let statistics = [
    Statistic<"numSplit", "split", "Mixture-of-experts layers split">,
  ];
}

def GraphAddMoEAuxLoss
    : Pass<"graph-add-moe-aux-loss", "mlir::func::FuncOp"> {
  let summary = "Adds the mixture-of-experts routers' load-balancing loss";
  let description = [{
    `lamina compile --moe-aux-loss COEF`, after graph-add-loss: the
    training loss of `@forward` gains `COEF` times Mixtral's
    `load_balancing_loss_func` over every router (a `graph.topk` whose
    picks a `graph.moe` reads, on `[T, E]` router probabilities):
    `E * sum_{j,e} f[j,e] P[e]`, `f` the fraction of the routed tokens of
    all layers whose pick `j` is expert `e`, `P` their mean probability
    of `e`. What Transformers adds with `output_router_logits=True` and
    `router_aux_loss_coef`. A remark says what was added; a model without
    a router is an error. It reads the module's `graph.train` and changes
    only the entry function.
  }];
  let options = [
    Option<"coef", "coef", "double", /*default=*/"0.0",
           "The loss's coefficient (0: nothing added)">,
  ];
}

def GraphFreeze : Pass<"graph-freeze", "mlir::func::FuncOp"> {
  let summary = "Trainable arguments whose name matches a regex become "
                "constants";
  let description = [{
    `lamina compile --freeze REGEX`: every `trainable` argument of
    `@forward` whose `graph.name` matches `regex` (anywhere in the name)
    becomes `constant`, so autodiff computes no gradient for it and the
    optimizer leaves it alone. A regex that matches nothing, or freezes
    every parameter, is an error.
  }];
  let options = [
    Option<"regex", "regex", "std::string", /*default=*/"\"\"",
           "The names to freeze (llvm::Regex syntax)">,
  ];
}

def GraphFreezeBuffers
    : Pass<"graph-freeze-buffers", "mlir::func::FuncOp"> {
  let summary = "Buffers that exporters write as initializers are not "
                "trained";
  let description = [{
    Trainable arguments of `@forward` that are buffers, not parameters, in
    the PyTorch modules exporters write them from (the rotary embeddings'
    `inv_freq`, BART-style models' `final_logits_bias`, and those named in
    `buffers`: what a dynamo export's
    metadata marks as buffers, such as BART's `final_logits_bias`) become
    `constant`, each with a remark (`not trained: NAME (a buffer, not a
    parameter, in PyTorch)`). `--as-exported` leaves this pass out.
  }];
  let options = [
    ListOption<"buffers", "buffers", "std::string",
               "Initializers the export marks as PyTorch buffers">,
  ];
}

def GraphMarkPadding : Pass<"graph-mark-padding", "mlir::func::FuncOp"> {
  let summary = "Embedding lookups of PyTorch's padding index train nothing";
  let description = [{
    Sets `padding_idx` on every axis-0 `graph.gather` of `@forward` whose
    table is the argument named in a `NAME=INDEX` entry, so the gradient
    skips that row (PyTorch's `nn.Embedding(padding_idx=...)`), with a
    remark per table. Entries of `padding-idx` (the user's flags) must each
    find a lookup; entries of `known-padding-idx` (what the compile found in
    the export's metadata) need not. A table named in `unknown-padding`
    (its lookups carry no metadata, as in TorchScript exports) that no
    entry covers gets a remark: the export cannot say whether PyTorch's
    embedding had a padding index, and `--padding-idx` says it.

    ```mlir
    %e = graph.gather %emb, %ids {axis = 0 : i64} ...
    // padding-idx=emb=0
    %e = graph.gather %emb, %ids {axis = 0 : i64, padding_idx = 0 : i64} ...
    ```
  }];
  let options = [
    ListOption<"paddingIdx", "padding-idx", "std::string",
               "NAME=INDEX: table NAME's lookups of INDEX train nothing; "
               "each must find a lookup">,
    ListOption<"knownPaddingIdx", "known-padding-idx", "std::string",
               "NAME=INDEX found in the export's metadata (may find no "
               "lookup)">,
    ListOption<"unknownPadding", "unknown-padding", "std::string",
               "Tables whose padding index the export does not say "
               "(TorchScript): each one looked up without a padding index "
               "gets a remark naming the flag">,
  ];
}

def GraphEvalStep : Pass<"graph-eval-step", "mlir::ModuleOp"> {
  let summary = "@forward, reduced to its loss, becomes the evaluation entry";
  let description = [{
    After `graph-add-loss` and `graph-autodiff`: `@forward` keeps only its
    loss output (graph.train's, or the option's) and what it reads, and is
    renamed `name`, no longer the entry (`graph.entry` goes). A training
    program computes validation losses with it (`run --eval-data`) without
    the gradients. Renaming a symbol of the module keeps it on the module.
  }];
  let options = [
    Option<"loss", "loss", "std::string", /*default=*/"\"\"",
           "The loss output (default: graph.train's)">,
    Option<"name", "name", "std::string", /*default=*/"\"eval_step\"",
           "The evaluation function's name">,
  ];
}

#endif
