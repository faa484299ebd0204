//===- GraphOps.td - graph dialect ops ----------------------*- tablegen -*-===//
//
// Op families: elementwise (unary, binary with numpy broadcasting, compare,
// select, cast), contraction (matmul), normalisation (softmax, layer/RMS
// norm), reductions, data movement (reshape, transpose, slice, concat,
// broadcast, tile, gather/scatter) and constants. Result types are inferred
// wherever the operands and attributes determine them.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_GRAPH_OPS
#define LAMINA_GRAPH_OPS

include "lamina/Dialect/Graph/IR/GraphBase.td"
include "lamina/Dialect/Graph/IR/GraphAttrs.td"
include "lamina/Dialect/Graph/IR/GraphInterfaces.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

//===----------------------------------------------------------------------===//
// Constants
//===----------------------------------------------------------------------===//

def Graph_ConstantOp : Graph_Op<"constant",
    [ConstantLike, Pure, AllTypesMatch<["value", "result"]>]> {
  let summary = "A constant tensor";
  let description = [{
    ```mlir
    %0 = graph.constant dense<[1, 2]> : tensor<2xi64>
    ```
  }];
  let arguments = (ins ElementsAttr:$value);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = "attr-dict $value";
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Elementwise unary
//===----------------------------------------------------------------------===//

class Graph_UnaryOp<string mnemonic, Type type, string desc,
                    list<Trait> extra = [Graph_Differentiable]>
    : Graph_Op<mnemonic, !listconcat([Pure, Elementwise,
                                      SameOperandsAndResultType], extra)> {
  let summary = desc;
  let arguments = (ins type:$input);
  let results = (outs type:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
  let hasFolder = 1;
}

def Graph_NegOp : Graph_UnaryOp<"neg", Graph_Tensor, "Elementwise -x">;
def Graph_AbsOp : Graph_UnaryOp<"abs", Graph_Tensor, "Elementwise |x|">;
def Graph_ExpOp : Graph_UnaryOp<"exp", Graph_FloatTensor, "Elementwise e^x">;
def Graph_LogOp : Graph_UnaryOp<"log", Graph_FloatTensor, "Elementwise ln x">;
def Graph_SqrtOp : Graph_UnaryOp<"sqrt", Graph_FloatTensor, "Elementwise sqrt">;
def Graph_ReciprocalOp
    : Graph_UnaryOp<"reciprocal", Graph_FloatTensor, "Elementwise 1/x">;
def Graph_TanhOp : Graph_UnaryOp<"tanh", Graph_FloatTensor, "Elementwise tanh">;
def Graph_ErfOp : Graph_UnaryOp<"erf", Graph_FloatTensor, "Elementwise erf">;
def Graph_SigmoidOp
    : Graph_UnaryOp<"sigmoid", Graph_FloatTensor, "Elementwise 1/(1+e^-x)">;
def Graph_ReluOp : Graph_UnaryOp<"relu", Graph_Tensor, "Elementwise max(x, 0)">;
def Graph_CosOp : Graph_UnaryOp<"cos", Graph_FloatTensor, "Elementwise cos">;
def Graph_SinOp : Graph_UnaryOp<"sin", Graph_FloatTensor, "Elementwise sin">;
def Graph_NotOp : Graph_UnaryOp<"not", Graph_BoolTensor, "Logical not", []>;

def Graph_GeluOp : Graph_Op<"gelu",
    [Pure, Elementwise, SameOperandsAndResultType, Graph_Differentiable]> {
  let summary = "Gaussian error linear unit";
  let description = [{
    `x * Phi(x)`; with `tanh` set, the tanh approximation
    `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
  }];
  let arguments = (ins Graph_FloatTensor:$input, UnitAttr:$tanh);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
  let hasFolder = 1;
}

def Graph_GeluDerivativeOp : Graph_Op<"gelu_derivative",
    [Pure, Elementwise, SameOperandsAndResultType]> {
  let summary = "The derivative of graph.gelu";
  let description = [{
    `d gelu(x) / dx`: `Phi(x) + x phi(x)`, or with `tanh` that of the tanh
    approximation. graph.gelu's gradient rule builds `g * gelu_derivative(x)`,
    which graph-fuse-elementwise makes one kernel.
  }];
  let arguments = (ins Graph_FloatTensor:$input, UnitAttr:$tanh);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

//===----------------------------------------------------------------------===//
// Elementwise binary, numpy broadcasting
//===----------------------------------------------------------------------===//

class Graph_BroadcastOp<string mnemonic, Type operandType, Type resultType,
                        string desc, list<Trait> extra = []>
    : Graph_Op<mnemonic, !listconcat([Pure, InferTypeOpAdaptor], extra)> {
  let summary = desc;
  let description = [{
    Operands broadcast numpy-style (right-aligned; a dimension of 1 stretches)
    and must share an element type.
  }];
  let arguments = (ins operandType:$lhs, operandType:$rhs);
  let results = (outs resultType:$result);
  let assemblyFormat =
      "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::inferReturnTypes(
        ::mlir::MLIRContext *ctx, std::optional<::mlir::Location> loc,
        Adaptor adaptor, ::llvm::SmallVectorImpl<::mlir::Type> &types) {
      return inferBroadcastResult(loc, adaptor.getOperands(), }]
      # !if(!eq(resultType, Graph_BoolTensor), "true", "false") # [{, types);
    }
  }];
}

class Graph_ArithOp<string mnemonic, string desc>
    : Graph_BroadcastOp<mnemonic, Graph_Tensor, Graph_Tensor, desc,
                        [Graph_Differentiable]>;
def Graph_AddOp : Graph_ArithOp<"add", "Elementwise a + b">;
def Graph_SubOp : Graph_ArithOp<"sub", "Elementwise a - b">;
def Graph_MulOp : Graph_ArithOp<"mul", "Elementwise a * b">;
def Graph_DivOp : Graph_ArithOp<"div",
    "Elementwise a / b (integer division truncates)">;
def Graph_PowOp : Graph_ArithOp<"pow", "Elementwise a ^ b">;
def Graph_MinOp : Graph_ArithOp<"min", "Elementwise min(a, b)">;
def Graph_MaxOp : Graph_ArithOp<"max", "Elementwise max(a, b)">;

class Graph_LogicOp<string mnemonic, string desc>
    : Graph_BroadcastOp<mnemonic, Graph_BoolTensor, Graph_BoolTensor, desc>;
def Graph_AndOp : Graph_LogicOp<"and", "Logical and">;
def Graph_OrOp : Graph_LogicOp<"or", "Logical or">;

class Graph_CompareOp<string mnemonic, string desc>
    : Graph_BroadcastOp<mnemonic, Graph_Tensor, Graph_BoolTensor, desc>;
def Graph_EqualOp : Graph_CompareOp<"equal", "Elementwise a == b">;
def Graph_GreaterOp : Graph_CompareOp<"greater", "Elementwise a > b">;
def Graph_GreaterEqualOp
    : Graph_CompareOp<"greater_equal", "Elementwise a >= b">;
def Graph_LessOp : Graph_CompareOp<"less", "Elementwise a < b">;
def Graph_LessEqualOp : Graph_CompareOp<"less_equal", "Elementwise a <= b">;

def Graph_SelectOp : Graph_Op<"select",
    [Pure, InferTypeOpAdaptor, Graph_Differentiable]> {
  let summary = "Elementwise cond ? a : b, broadcasting all three";
  let arguments = (ins Graph_BoolTensor:$condition, Graph_Tensor:$lhs,
                       Graph_Tensor:$rhs);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat =
      "$condition `,` $lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
}

def Graph_CastOp : Graph_Op<"cast", [Pure, Elementwise, Graph_Differentiable]> {
  let summary = "Elementwise conversion to another element type";
  let description = [{
    Float to integer truncates toward zero; anything to `i1` tests `!= 0`.
  }];
  let arguments = (ins Graph_Tensor:$input);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `to` type($result)";
  let hasFolder = 1;
}

def Graph_FusedElementwiseOp : Graph_Op<"fused_elementwise", [Pure]> {
  let summary = "A chain of float elementwise ops computed in one pass";
  let description = [{
    Made by `graph-fuse-elementwise` after autodiff, for the backends'
    `fusedElementwise` kernels. Registers `0..n-1` hold the `n` inputs
    (1 to 4), each broadcast numpy-style to the result's shape; step `i`
    (1 to 16 steps) applies `ops[i]` to registers `lhs[i]` (and `rhs[i]`
    for a binary op; `-1` for a unary one) and writes register `n + i`;
    the last step's register is the result. `ops` are graph op names:
    unary `neg abs relu exp log sqrt reciprocal tanh erf sigmoid gelu
    gelu_tanh cos sin gelu_derivative gelu_tanh_derivative`, binary `add sub mul div pow min max`. Each input
    and the result is f32, f16 or bf16, independently: inputs are widened
    to f32 on load (exact), values stay f32 between steps, and the last
    register is rounded once to the result's type on store. So a chain of
    one type computes its ops without the per-op roundings of f16/bf16,
    and `graph-fuse-elementwise` absorbs the casts around an f32 chain
    exactly: a widening cast of an input, or a narrowing cast of the
    result.

    ```mlir
    // gelu(x + b)
    %r = graph.fused_elementwise %x, %b {ops = ["add", "gelu"],
           lhs = array<i64: 0, 2>, rhs = array<i64: 1, -1>}
           : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
    // cast to bf16 of gelu(cast to f32 of %y + %b), %y bf16, %b f32
    %s = graph.fused_elementwise %y, %b {ops = ["add", "gelu"],
           lhs = array<i64: 0, 2>, rhs = array<i64: 1, -1>}
           : (tensor<4x8xbf16>, tensor<8xf32>) -> tensor<4x8xbf16>
    ```

    With a second result `sum` (f32, the result's trailing dims), the
    kernel also sums the last register's f32 values (before the result's
    rounding) over the result's leading dims: what `graph.reduce_sum` of
    the f32 chain over those axes gives, in the same pass. A bias gradient
    and the narrowed operand of its matmuls then cost one read of the
    chain's inputs, not an f32 tensor written and read twice
    (`graph-fuse-elementwise` makes it). With a sum, the chain may have no
    steps and one input: the input itself, narrowed and summed in one read.

    ```mlir
    %r, %db = graph.fused_elementwise %d, %y {ops = ["mul"],
           lhs = array<i64: 0>, rhs = array<i64: 1>}
           : (tensor<4x8xf32>, tensor<4x8xf32>) -> (tensor<4x8xbf16>, tensor<8xf32>)
    ```
  }];
  let arguments = (ins Variadic<Graph_FloatTensor>:$inputs,
                       StrArrayAttr:$ops, DenseI64ArrayAttr:$lhs,
                       DenseI64ArrayAttr:$rhs);
  let results = (outs Graph_FloatTensor:$result,
                      Optional<Graph_FloatTensor>:$sum);
  let assemblyFormat =
      "$inputs attr-dict `:` functional-type($inputs, results)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    static constexpr int kMaxInputs = 4;
    static constexpr int kMaxSteps = 16;
    /// Whether `name` is a step op, and if so whether it is binary.
    static bool isStepOp(::llvm::StringRef name, bool &binary);
    /// The step `op` is, as the fused kernel computes it (its name), or ""
    /// when `op` is not one (graph-fuse-elementwise's members; what
    /// graph-fuse-epilogues expects a chain to widen on load).
    static ::llvm::StringRef stepOf(::mlir::Operation *op);
  }];
}

//===----------------------------------------------------------------------===//
// Contraction and normalisation
//===----------------------------------------------------------------------===//

def Graph_MatMulOp : Graph_Op<"matmul",
    [Pure, InferTypeOpAdaptor, Graph_Differentiable]> {
  let summary = "Batched matrix product with broadcast batch dimensions";
  let description = [{
    `[..., m, k] x [..., k, n] -> [..., m, n]`; both operands have rank >= 2
    (the importer reshapes ONNX's rank-1 operands) and the leading dimensions
    broadcast numpy-style. The result has the operands' element type, or
    f32 for f16/bf16 operands: products accumulate in f32 either way, and an
    f32 result stores the accumulator unrounded (what `graph.cast` to f32 of
    the narrow result would give, less one rounding; graph-fold-matmul-casts
    makes it).
  }];
  let arguments = (ins Graph_FloatTensor:$lhs, Graph_FloatTensor:$rhs);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat =
      "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
  let extraClassDeclaration = [{
    static bool isCompatibleReturnTypes(::mlir::TypeRange inferred,
                                        ::mlir::TypeRange actual);
  }];
}

def Graph_FusedMatMulOp : Graph_Op<"fused_matmul",
    [Pure, AttrSizedOperandSegments]> {
  let summary = "A matmul with a bias and an addend in its epilogue";
  let description = [{
    `lhs x rhs + bias + addend`: graph.matmul's product (the same operand
    and result types) plus, each optional, `bias` broadcast over the rows
    (shape `[n]` or `[1, ..., 1, n]`) and `addend` (the result's shape),
    both of the result's element type, added to the f32 (f64) accumulator
    and rounded once to the result type. Made by
    graph-fuse-epilogues after autodiff (no gradient rule), for the
    BLAS call's own epilogue: cuBLASLt's bias epilogue and `beta = 1`
    with the addend as C; the host's sgemm with `beta = 1` over a C that
    starts as addend + bias. Neither add is then a pass over memory. The
    bias has the result's type because cuBLASLt's bias epilogue reads it
    in the output's type.

    ```mlir
    // x W + b + r, in f32 (the residual add after an output projection)
    %y = graph.fused_matmul %x, %w bias %b addend %r
           : (tensor<8x64xbf16>, tensor<64x64xbf16>, tensor<64xf32>,
              tensor<8x64xf32>) -> tensor<8x64xf32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$lhs, Graph_FloatTensor:$rhs,
                       Optional<Graph_FloatTensor>:$bias,
                       Optional<Graph_FloatTensor>:$addend);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs (`bias` $bias^)? (`addend` $addend^)? attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

class Graph_SoftmaxBase<string mnemonic, string desc>
    : Graph_Op<mnemonic, [Pure, SameOperandsAndResultType,
                          Graph_Differentiable]> {
  let summary = desc;
  let arguments = (ins Graph_FloatTensor:$input, I64Attr:$axis);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
  let hasVerifier = 1;
}
def Graph_SoftmaxOp : Graph_SoftmaxBase<"softmax", "Softmax along one axis">;
def Graph_LogSoftmaxOp
    : Graph_SoftmaxBase<"log_softmax", "Log-softmax along one axis">;

// The backward ops below, like the norms' and cross-entropy's, are built by
// graph-autodiff so that every backend runs one kernel per gradient.
class Graph_SoftmaxGradBase<string mnemonic, string desc>
    : Graph_Op<mnemonic, [Pure, AllTypesMatch<["result", "grad_result",
                                               "grad_input"]>]> {
  let summary = desc;
  let arguments = (ins Graph_FloatTensor:$result,
                       Graph_FloatTensor:$grad_result, I64Attr:$axis);
  let results = (outs Graph_FloatTensor:$grad_input);
  let assemblyFormat = "$result `,` $grad_result attr-dict `:` type($result)";
  let hasVerifier = 1;
}
def Graph_SoftmaxGradOp : Graph_SoftmaxGradBase<"softmax_grad",
    "The gradient of graph.softmax from its result: y (g - sum(g y))">;
def Graph_LogSoftmaxGradOp : Graph_SoftmaxGradBase<"log_softmax_grad",
    "The gradient of graph.log_softmax from its result: g - exp(y) sum(g)">;

def Graph_LayerNormOp : Graph_Op<"layer_norm",
    [Pure, Graph_Differentiable]> {
  let summary = "Layer normalisation over the trailing dimensions from `axis`";
  let description = [{
    `(x - mean) / sqrt(var + epsilon) * scale + bias`, statistics over
    dimensions `axis..rank-1`; `scale` and `bias` have those dimensions' shape.
    The result has the input's type, or (f32 input) its shape in f16/bf16:
    the f32 value rounded once, as a cast of the f32 result would
    (graph-fold-matmul-casts makes it; printed `-> type` when it differs).
  }];
  let arguments = (ins Graph_FloatTensor:$input, Graph_FloatTensor:$scale,
                       Optional<Graph_FloatTensor>:$bias, I64Attr:$axis,
                       F64Attr:$epsilon);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $scale (`,` $bias^)? attr-dict `:` type($input) `,` type($scale)
    (`,` type($bias)^)? `` custom<NormResult>(type($result), ref(type($input)))
  }];
  let hasVerifier = 1;
}

def Graph_RMSNormOp : Graph_Op<"rms_norm",
    [Pure, Graph_Differentiable]> {
  let summary = "RMS normalisation over the trailing dimensions from `axis`";
  let description = [{
    `x / sqrt(mean(x^2) + epsilon) * scale`; the result type as
    graph.layer_norm's.
  }];
  let arguments = (ins Graph_FloatTensor:$input, Graph_FloatTensor:$scale,
                       I64Attr:$axis, F64Attr:$epsilon);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $scale attr-dict `:` type($input) `,` type($scale) ``
    custom<NormResult>(type($result), ref(type($input)))
  }];
  let hasVerifier = 1;
}

// The fused backward and loss ops below are what graph-autodiff and
// graph-add-loss build, so every backend runs one kernel (a row per thread
// block on a GPU) instead of the several elementwise and reduction ops the
// same math decomposes into.

def Graph_LayerNormGradOp : Graph_Op<"layer_norm_grad",
    [Pure, AllTypesMatch<["input", "grad_input"]>,
     AllTypesMatch<["scale", "grad_scale"]>,
     OptionalTypesMatchWith<"addend has the input's type", "input", "addend",
                            "$_self">]> {
  let summary = "The gradients of graph.layer_norm";
  let description = [{
    From the forward op's input, scale and the gradient of its result:
    `grad_input`, `grad_scale` and, when `has_bias`, `grad_bias` (sums over
    the leading dims `0..axis-1`). The statistics are recomputed from the
    input rather than saved by the forward op. `addend` (optional, the
    input's type) is added to `grad_input`: the input's other gradient
    contributions (a residual connection's), which graph-fuse-epilogues
    moves here from the `graph.add` autodiff accumulates them with.
    `grad_result` has the input's type or, for an f32 input, its shape in
    f16/bf16 (a mixed-precision product graph-fuse-epilogues stores
    narrow; widened on load).
  }];
  let arguments = (ins Graph_FloatTensor:$input, Graph_FloatTensor:$scale,
                       Graph_FloatTensor:$grad_result,
                       Optional<Graph_FloatTensor>:$addend, I64Attr:$axis,
                       F64Attr:$epsilon);
  let results = (outs Graph_FloatTensor:$grad_input,
                      Graph_FloatTensor:$grad_scale,
                      Optional<Graph_FloatTensor>:$grad_bias);
  let assemblyFormat = [{
    $input `,` $scale `,` $grad_result (`addend` $addend^)? attr-dict `:`
    type($input) `,` type($scale) ``
    custom<NormGradResult>(type($grad_result), ref(type($input)))
    `->` type(results)
  }];
  let hasVerifier = 1;
}

def Graph_RMSNormGradOp : Graph_Op<"rms_norm_grad",
    [Pure, AllTypesMatch<["input", "grad_input"]>,
     AllTypesMatch<["scale", "grad_scale"]>,
     OptionalTypesMatchWith<"addend has the input's type", "input", "addend",
                            "$_self">]> {
  let summary = "The gradients of graph.rms_norm";
  let description = [{
    `grad_input` and `grad_scale` (summed over the leading dims) from the
    forward op's input, scale and the gradient of its result; `addend` and
    `grad_result`'s type as graph.layer_norm_grad's.
  }];
  let arguments = (ins Graph_FloatTensor:$input, Graph_FloatTensor:$scale,
                       Graph_FloatTensor:$grad_result,
                       Optional<Graph_FloatTensor>:$addend, I64Attr:$axis,
                       F64Attr:$epsilon);
  let results = (outs Graph_FloatTensor:$grad_input,
                      Graph_FloatTensor:$grad_scale);
  let assemblyFormat = [{
    $input `,` $scale `,` $grad_result (`addend` $addend^)? attr-dict `:`
    type($input) `,` type($scale) ``
    custom<NormGradResult>(type($grad_result), ref(type($input)))
  }];
  let hasVerifier = 1;
}

def Graph_SoftmaxCrossEntropyOp : Graph_Op<"softmax_cross_entropy",
    [Pure, Graph_Differentiable]> {
  let summary = "Per-row softmax cross-entropy over the last axis";
  let description = [{
    `loss[...] = logsumexp(logits[..., :]) - logits[..., labels[...]]`, and
    0 where the label equals `ignore_index`; any other label outside
    `[0, V)` is a run-time error. `labels` are integers shaped like the
    logits without their last dim; the loss has that shape and the logits'
    element type, or f32 for f16/bf16 logits (read widened: the
    mixed-precision LM head's logits, which graph-fuse-epilogues stores
    narrow when only cross-entropy reads them).
  }];
  let arguments = (ins Graph_FloatTensor:$logits, Graph_IndexTensor:$labels,
                       I64Attr:$ignore_index);
  let results = (outs Graph_FloatTensor:$loss);
  let assemblyFormat = [{
    $logits `,` $labels attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Graph_SoftmaxCrossEntropyGradOp : Graph_Op<"softmax_cross_entropy_grad",
    [Pure]> {
  let summary = "The gradient of graph.softmax_cross_entropy";
  let description = [{
    `grad_logits[..., i] = (softmax(logits[..., :])[i] - (i == label)) *
    grad_loss[...]`, 0 on rows whose label is `ignore_index`. It has the
    logits' type, or for f32 logits may be f16/bf16: the f32 gradient
    rounded once on store, what a cast of it gives (graph-fuse-epilogues
    moves such a cast here, so that a mixed-precision LM head's gradient
    is written once, narrow, instead of in f32 and again by the cast).
    `grad_loss` has the loss's type.
  }];
  let arguments = (ins Graph_FloatTensor:$logits, Graph_IndexTensor:$labels,
                       Graph_FloatTensor:$grad_loss, I64Attr:$ignore_index);
  let results = (outs Graph_FloatTensor:$grad_logits);
  let assemblyFormat = [{
    $logits `,` $labels `,` $grad_loss attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Graph_AttentionOp : Graph_Op<"attention", [Pure, Graph_Differentiable]> {
  let summary = "Fused scaled dot-product attention";
  let description = [{
    Per batch and head, over `q` [B, H, Sq, D], `k` [B, Hk, Sk, D] and `v`
    [B, Hk, Sk, Dv] of one float type (H a multiple of Hk: query head `h`
    reads kv head `h / (H / Hk)`, grouped-query attention):

      s[i, j] = scale * q[i, :] . k[j, :] + bias[b, h, i, j]
      out[i, :] = sum_j softmax_j(s)[i, j] * v[j, :]

    `bias` (optional) is a float tensor broadcastable to [B, H, Sq, Sk], an
    additive mask; it gets no gradient. With `causal`, keys `j > i + Sk - Sq`
    are left out. `lse` [B, H, Sq] (f32, or f64 for f64 operands) is each
    row's log-sum-exp of `s`, which graph.attention_grad reads instead of the
    probabilities. A row with no key left gives 0 and an `lse` of -inf.
    With `seq_major`, q, k, v and out are [B, S, heads, D] instead (the
    projections' own layout: no head transposes around the op); bias and
    lse keep theirs. graph-fuse-attention builds this op from matmul /
    scale / mask / softmax / matmul chains, so no backend stores the
    Sq x Sk scores, and makes it `seq_major` when the model transposes
    all of q, k, v and out.
  }];
  let arguments = (ins Graph_FloatTensor:$q, Graph_FloatTensor:$k,
                       Graph_FloatTensor:$v,
                       Optional<Graph_FloatTensor>:$bias, F64Attr:$scale,
                       UnitAttr:$causal, UnitAttr:$seq_major);
  let results = (outs Graph_FloatTensor:$out, Graph_FloatTensor:$lse);
  let assemblyFormat = [{
    $q `,` $k `,` $v (`,` $bias^)? attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Graph_AttentionGradOp : Graph_Op<"attention_grad",
    [Pure, AllTypesMatch<["q", "grad_q"]>, AllTypesMatch<["k", "grad_k"]>,
     AllTypesMatch<["v", "grad_v"]>, AllTypesMatch<["out", "grad_out"]>]> {
  let summary = "The gradients of graph.attention";
  let description = [{
    `grad_q`, `grad_k` and `grad_v` from the forward op's operands, its `out`
    and `lse`, and the gradient of `out`; the probabilities are recomputed
    from `lse` (flash attention's backward). Shared kv heads sum the
    gradients of their query heads. `seq_major` as graph.attention's.
  }];
  let arguments = (ins Graph_FloatTensor:$q, Graph_FloatTensor:$k,
                       Graph_FloatTensor:$v, Graph_FloatTensor:$out,
                       Graph_FloatTensor:$lse, Graph_FloatTensor:$grad_out,
                       Optional<Graph_FloatTensor>:$bias, F64Attr:$scale,
                       UnitAttr:$causal, UnitAttr:$seq_major);
  let results = (outs Graph_FloatTensor:$grad_q, Graph_FloatTensor:$grad_k,
                      Graph_FloatTensor:$grad_v);
  let assemblyFormat = [{
    $q `,` $k `,` $v `,` $out `,` $lse `,` $grad_out (`,` $bias^)? attr-dict
    `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Graph_PackedAttentionOp : Graph_Op<"packed_attention", [Pure]> {
  let summary = "graph.attention on q, k and v packed in one projection";
  let description = [{
    `qkv` [B, S, (H + 2 Hk) D] holds each token's H query heads, then its
    Hk key heads, then its Hk value heads, D elements each (a fused q/k/v
    projection's output). The op computes what `graph.attention` (seq-major,
    no bias) computes on those three slices: `out` [B, S, H, D] and `lse`
    [B, H, S]. `graph-pack-attention` makes it for the CUDA backend, whose
    cuDNN path reads the heads where they are (strides) instead of from
    copies.
  }];
  let arguments = (ins Graph_FloatTensor:$qkv, I64Attr:$heads,
                       I64Attr:$kv_heads, F64Attr:$scale, UnitAttr:$causal);
  let results = (outs Graph_FloatTensor:$out, Graph_FloatTensor:$lse);
  let assemblyFormat = "$qkv attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Graph_PackedAttentionGradOp : Graph_Op<"packed_attention_grad",
    [Pure, AllTypesMatch<["qkv", "grad_qkv"]>,
     AllTypesMatch<["out", "grad_out"]>]> {
  let summary = "The gradient of graph.packed_attention";
  let description = [{
    The gradient of `qkv`, packed as `qkv` is: `graph.attention_grad`'s
    grad_q, grad_k and grad_v side by side in each token's row.
  }];
  let arguments = (ins Graph_FloatTensor:$qkv, Graph_FloatTensor:$out,
                       Graph_FloatTensor:$lse, Graph_FloatTensor:$grad_out,
                       I64Attr:$heads, I64Attr:$kv_heads, F64Attr:$scale,
                       UnitAttr:$causal);
  let results = (outs Graph_FloatTensor:$grad_qkv);
  let assemblyFormat = [{
    $qkv `,` $out `,` $lse `,` $grad_out attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

class Graph_ReduceOp<string mnemonic, string desc,
                     list<Trait> extra = [Graph_Differentiable]>
    : Graph_Op<mnemonic, !listconcat([Pure, InferTypeOpAdaptor], extra)> {
  let summary = desc;
  let description = [{
    Reduces the listed `axes` (strictly increasing, non-negative); with
    `keepdims` they stay as size-1 dimensions. The result has the input's
    element type, or f32 for an f16/bf16 input: float reductions
    accumulate in f32 either way, and an f32 result stores the accumulator
    unrounded (what the reduction of the input cast to f32 gives;
    graph-fold-matmul-casts makes it).
  }];
  let arguments = (ins Graph_Tensor:$input, DenseI64ArrayAttr:$axes,
                       BoolAttr:$keepdims);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat =
      "$input attr-dict `:` type($input) `->` type($result)";
  let hasFolder = 1;
  let extraClassDeclaration = [{
    static bool isCompatibleReturnTypes(::mlir::TypeRange inferred,
                                        ::mlir::TypeRange actual) {
      return narrowOrSameResult(inferred, actual);
    }
  }];
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::inferReturnTypes(
        ::mlir::MLIRContext *ctx, std::optional<::mlir::Location> loc,
        Adaptor adaptor, ::llvm::SmallVectorImpl<::mlir::Type> &types) {
      return inferReduceResult(loc, adaptor.getInput(), adaptor.getAxes(),
                               adaptor.getKeepdims(), types);
    }
  }];
}
def Graph_ReduceSumOp : Graph_ReduceOp<"reduce_sum", "Sum over axes">;
def Graph_ReduceMeanOp : Graph_ReduceOp<"reduce_mean", "Mean over axes">;
def Graph_ReduceMaxOp : Graph_ReduceOp<"reduce_max", "Maximum over axes">;
def Graph_ReduceProdOp : Graph_ReduceOp<"reduce_prod", "Product over axes">;

def Graph_CumSumOp : Graph_Op<"cumsum",
    [Pure, SameOperandsAndResultType, Graph_Differentiable]> {
  let summary = "Cumulative sum along one axis";
  let arguments = (ins Graph_Tensor:$input, I64Attr:$axis, UnitAttr:$exclusive,
                       UnitAttr:$reverse);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

def Graph_ReshapeOp : Graph_Op<"reshape", [Pure, Graph_Differentiable]> {
  let summary = "Same elements, row-major order, another static shape";
  let arguments = (ins Graph_Tensor:$input);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `to` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Graph_TransposeOp : Graph_Op<"transpose",
    [Pure, InferTypeOpAdaptor, Graph_Differentiable]> {
  let summary = "Permutes dimensions: result dim i is input dim perm[i]";
  let arguments = (ins Graph_Tensor:$input, DenseI64ArrayAttr:$perm);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasFolder = 1;
  let extraClassDeclaration = [{
    /// The permutation of `rank` dims that swaps the last two and keeps
    /// the others: the transpose a matmul's transposition flag does
    /// (convert-graph-to-rt folds it into the GEMM).
    static ::llvm::SmallVector<int64_t> lastTwoDimsSwap(int64_t rank);
    /// Whether this op's permutation is that one.
    bool swapsLastTwoDims() {
      return getPerm().size() >= 2 &&
             getPerm() == ::llvm::ArrayRef<int64_t>(
                              lastTwoDimsSwap(int64_t(getPerm().size())));
    }
  }];
}

def Graph_ConcatOp : Graph_Op<"concat",
    [Pure, InferTypeOpAdaptor, Graph_Differentiable]> {
  let summary = "Concatenates tensors along one axis";
  let arguments = (ins Variadic<Graph_Tensor>:$inputs, I64Attr:$axis);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat =
      "$inputs attr-dict `:` functional-type($inputs, results)";
  let hasFolder = 1;
}

def Graph_SliceOp : Graph_Op<"slice",
    [Pure, InferTypeOpAdaptor, Graph_Differentiable]> {
  let summary = "Strided static slice";
  let description = [{
    Result dimension `i` has `sizes[i]` elements taken from input index
    `starts[i] + j * steps[i]`; steps may be negative, every index touched is
    in bounds.
  }];
  let arguments = (ins Graph_Tensor:$input, DenseI64ArrayAttr:$starts,
                       DenseI64ArrayAttr:$sizes, DenseI64ArrayAttr:$steps);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasFolder = 1;
}

def Graph_BroadcastOp : Graph_Op<"broadcast", [Pure, Graph_Differentiable]> {
  let summary = "Broadcasts numpy-style to a static result shape";
  let arguments = (ins Graph_Tensor:$input);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `to` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Graph_TileOp : Graph_Op<"tile",
    [Pure, InferTypeOpAdaptor, Graph_Differentiable]> {
  let summary = "Repeats the tensor `repeats[i]` times along dimension i";
  let arguments = (ins Graph_Tensor:$input, DenseI64ArrayAttr:$repeats);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}

def Graph_TriluOp : Graph_Op<"trilu",
    [Pure, SameOperandsAndResultType, Graph_Differentiable]> {
  let summary = "Keeps the upper (or lower) triangle of the last two dims";
  let description = [{
    With `upper`, keeps elements with `j - i >= k`; otherwise `j - i <= k`;
    the rest become zero.
  }];
  let arguments = (ins Graph_Tensor:$input, I64Attr:$k, UnitAttr:$upper);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Graph_GatherOp : Graph_Op<"gather",
    [Pure, InferTypeOpAdaptor, Graph_Differentiable]> {
  let summary = "Takes slices of `data` along `axis` at `indices`";
  let description = [{
    Result shape `data[:axis] + indices + data[axis+1:]`; negative indices
    count from the end. `padding_idx` (axis 0 only) is PyTorch's embedding
    padding index: lookups of it give no gradient to that row.
  }];
  let arguments = (ins Graph_Tensor:$data, Graph_IndexTensor:$indices,
                       I64Attr:$axis, OptionalAttr<I64Attr>:$padding_idx);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat =
      "$data `,` $indices attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
}

def Graph_GatherNDOp : Graph_Op<"gather_nd",
    [Pure, InferTypeOpAdaptor, Graph_Differentiable]> {
  let summary = "ONNX GatherND: index tuples into the leading dims of `data`";
  let arguments = (ins Graph_Tensor:$data, Graph_IndexTensor:$indices,
                       I64Attr:$batch_dims);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat =
      "$data `,` $indices attr-dict `:` functional-type(operands, results)";
}

def Graph_ScatterNDOp : Graph_Op<"scatter_nd",
    [Pure, AllTypesMatch<["data", "result"]>, Graph_Differentiable]> {
  let summary = "ONNX ScatterND: writes `updates` into a copy of `data`";
  let description = [{
    `reduction` is one of `none`, `add`, `mul`, `max`, `min`.
  }];
  let arguments = (ins Graph_Tensor:$data, Graph_IndexTensor:$indices,
                       Graph_Tensor:$updates, StrAttr:$reduction);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat =
      "$data `,` $indices `,` $updates attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Whether `r` names a reduction the op has.
    static bool isReduction(llvm::StringRef r);
    /// The updates' type for `data` and `indices`: indices' dims but the
    /// last (k), then data's from k; null when k exceeds data's rank or
    /// indices have rank 0. The verifier's rule, for the importer too.
    static mlir::RankedTensorType updatesType(mlir::RankedTensorType data,
                                              mlir::RankedTensorType indices);
  }];
}

//===----------------------------------------------------------------------===//
// Vision: convolution and pooling over 1 to 3 spatial dims
//===----------------------------------------------------------------------===//

// The window geometry every op below shares, ONNX's: per spatial dim a
// stride, a dilation and pads (all begins, then all ends). Output position
// o of a spatial dim reads input positions `o * stride - pad_begin + j *
// dilation`, j < kernel; positions outside the input are padding.
defvar Graph_WindowArgs = (ins DenseI64ArrayAttr:$strides,
                               DenseI64ArrayAttr:$dilations,
                               DenseI64ArrayAttr:$pads);

def Graph_ConvOp : Graph_Op<"conv",
    [Pure, InferTypeOpAdaptor, Graph_Differentiable]> {
  let summary = "Grouped, strided, dilated, padded convolution (ONNX Conv)";
  let description = [{
    `input [N, C, S...]` (1 to 3 spatial dims), `weight [M, C/group, K...]`,
    optional `bias [M]`; the result is `[N, M, O...]` with `O = (S +
    pad_begin + pad_end - dilation * (K - 1) - 1) / stride + 1` (floor).
    Output channel `m` reads the `C/group` input channels of group `m /
    (M/group)`. Cross-correlation, as ONNX and PyTorch define it.

    ```mlir
    %y = graph.conv %x, %w, %b {dilations = array<i64: 1, 1>, group = 1 : i64,
           pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>}
         : (tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>)
         -> tensor<2x4x8x8xf32>
    ```
  }];
  let arguments = !con((ins Graph_FloatTensor:$input,
                            Graph_FloatTensor:$weight,
                            Optional<Graph_FloatTensor>:$bias),
                       Graph_WindowArgs, (ins I64Attr:$group));
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight (`,` $bias^)? attr-dict `:`
    functional-type(operands, results)
  }];
}

def Graph_ConvGradInputOp : Graph_Op<"conv_grad_input", [Pure]> {
  let summary = "The input gradient of graph.conv";
  let description = [{
    The transposed convolution of `grad_result` with `weight`: the gradient
    of a graph.conv's input, whose type the result states (strides make
    the input's size ambiguous). The attributes are the forward op's.
  }];
  let arguments = !con((ins Graph_FloatTensor:$weight,
                            Graph_FloatTensor:$grad_result),
                       Graph_WindowArgs, (ins I64Attr:$group));
  let results = (outs Graph_FloatTensor:$grad_input);
  let assemblyFormat = [{
    $weight `,` $grad_result attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Graph_ConvGradWeightOp : Graph_Op<"conv_grad_weight", [Pure]> {
  let summary = "The weight gradient of graph.conv";
  let description = [{
    The correlation of the forward op's `input` with `grad_result`, summed
    over the batch: the gradient of its weight, whose type the result
    states. The attributes are the forward op's.
  }];
  let arguments = !con((ins Graph_FloatTensor:$input,
                            Graph_FloatTensor:$grad_result),
                       Graph_WindowArgs, (ins I64Attr:$group));
  let results = (outs Graph_FloatTensor:$grad_weight);
  let assemblyFormat = [{
    $input `,` $grad_result attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Graph_MaxPoolOp : Graph_Op<"max_pool",
    [Pure, InferTypeOpAdaptor, Graph_Differentiable]> {
  let summary = "Maximum over each window (ONNX MaxPool)";
  let description = [{
    `input [N, C, S...]` (1 to 3 spatial dims, any numeric type) to `[N,
    C, O...]`; padding never wins. `O` is graph.conv's with `kernel_shape` for K, rounded up
    instead of down under `ceil_mode` (a window that would start beyond
    the input and the begin padding is dropped, as PyTorch and onnxruntime
    do).
  }];
  let arguments = !con((ins Graph_Tensor:$input,
                            DenseI64ArrayAttr:$kernel_shape),
                       Graph_WindowArgs, (ins UnitAttr:$ceil_mode));
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}

def Graph_MaxPoolIndicesOp : Graph_Op<"max_pool_indices", [Pure]> {
  let summary = "Where each graph.max_pool window's maximum is (ONNX's Indices)";
  let description = [{
    i64, shaped as graph.max_pool's result: the position of the window's
    first maximum in the whole input flattened, each (image, channel)
    plane row-major or, with `column_major` (ONNX `storage_order` 1), with
    its spatial dims reversed.
  }];
  let arguments = !con((ins Graph_Tensor:$input,
                            DenseI64ArrayAttr:$kernel_shape),
                       Graph_WindowArgs,
                       (ins UnitAttr:$ceil_mode, UnitAttr:$column_major));
  let results = (outs Graph_IndexTensor:$indices);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($indices)";
  let hasVerifier = 1;
}

def Graph_MaxPoolGradOp : Graph_Op<"max_pool_grad",
    [Pure, AllTypesMatch<["input", "grad_input"]>]> {
  let summary = "The gradient of graph.max_pool";
  let description = [{
    Each window's gradient goes to its maximum (the first one, in window
    order, on ties: PyTorch's choice), recomputed from the forward op's
    `input`; windows that overlap add.
  }];
  let arguments = !con((ins Graph_FloatTensor:$input,
                            Graph_FloatTensor:$grad_result,
                            DenseI64ArrayAttr:$kernel_shape),
                       Graph_WindowArgs, (ins UnitAttr:$ceil_mode));
  let results = (outs Graph_FloatTensor:$grad_input);
  let assemblyFormat = [{
    $input `,` $grad_result attr-dict `:` type($input) `,` type($grad_result)
  }];
  let hasVerifier = 1;
}

def Graph_AvgPoolOp : Graph_Op<"avg_pool",
    [Pure, InferTypeOpAdaptor, Graph_Differentiable]> {
  let summary = "Mean over each window (ONNX AveragePool)";
  let description = [{
    The result shape as graph.max_pool's. The divisor counts the window's
    positions inside the input, or with `count_include_pad` those inside
    the padded input (begin pads to end pads; what a `ceil_mode` window
    reads beyond the end pads is never counted, as PyTorch does).
  }];
  let arguments = !con((ins Graph_FloatTensor:$input,
                            DenseI64ArrayAttr:$kernel_shape),
                       Graph_WindowArgs,
                       (ins UnitAttr:$ceil_mode, UnitAttr:$count_include_pad));
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}

def Graph_AvgPoolGradOp : Graph_Op<"avg_pool_grad", [Pure]> {
  let summary = "The gradient of graph.avg_pool";
  let description = [{
    Spreads each window's gradient over its counted positions (divided by
    the forward op's divisor); the result states the input's type.
  }];
  let arguments = !con((ins Graph_FloatTensor:$grad_result,
                            DenseI64ArrayAttr:$kernel_shape),
                       Graph_WindowArgs,
                       (ins UnitAttr:$ceil_mode, UnitAttr:$count_include_pad));
  let results = (outs Graph_FloatTensor:$grad_input);
  let assemblyFormat = [{
    $grad_result attr-dict `:` type($grad_result) `->` type($grad_input)
  }];
  let hasVerifier = 1;
}

include "lamina/Dialect/Graph/IR/GraphMoEOps.td"

#endif // LAMINA_GRAPH_OPS
