//===- DistStepOps.td - one pipeline rank's step as values ---*- tablegen -*-===//
//
// What dist-build-steps makes of a verified dist.schedule: a `dist.program`
// with one `dist.step` per pipeline rank, straight-line code over SSA values.
// The micro-batch loop is unrolled (1F1B's warm-up and cool-down make the
// lists aperiodic); a module's forward and backward are `dist.call`s of its
// outlined functions; boundary activations, their gradients, residuals and
// the loss weights are typed values that the transfers send and produce.
// docs/dist-step-design.md.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_DIST_STEP_OPS
#define LAMINA_DIST_STEP_OPS

include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Dist_ProgramOp : Dist_Op<"program", [NoTerminator, SingleBlock,
                                        NoRegionArguments]> {
  let summary = "The per-pipeline-rank steps of one training step";
  let description = [{
    The schedule of a `dist.schedule` (same attributes; `forward_only` for
    the evaluation step) as one `dist.step` per pipeline rank
    `0 <= p < pp`. The `dp` data-parallel replicas of a
    pipeline rank run the same step: transfers name pipeline ranks of the
    sender's own replica, collectives its data-parallel group.

    The verifier checks the attributes, that there is exactly one step per
    pipeline rank, and that transfers pair up: every `dist.p2p_send` from
    `p` to `q` has exactly one `dist.p2p_recv` on `q` from `p` with the same
    payload, boundary and micro-batch, and it produces values of the types
    sent. `dist-verify-schedule` simulates the steps (deadlock freedom).

    ```mlir
    dist.program "gpipe" modules = 2, pp = 2, dp = 1, micro_batches = 1,
        zero = 0, placement = [0, 1] {
      dist.step 0 { ... }
      dist.step 1 { ... }
    }
    ```
  }];
  let arguments = (ins StrAttr:$kind, Dist_I64Attr:$num_modules,
                   Dist_I64Attr:$pp, Dist_I64Attr:$dp,
                   Dist_I64Attr:$micro_batches, Dist_I64Attr:$zero,
                   DenseI64ArrayAttr:$placement, UnitAttr:$forward_only);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $kind (`forward_only` $forward_only^)?
    `modules` `=` $num_modules `,` `pp` `=` $pp `,` `dp` `=` $dp `,`
    `micro_batches` `=` $micro_batches `,` `zero` `=` $zero `,`
    `placement` `=` $placement attr-dict-with-keyword $body
  }];
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
  let extraClassDeclaration = [{
    /// The step of pipeline rank `p`, or null.
    StepOp getStep(int64_t p);
  }];
}

def Dist_StepOp : Dist_Op<"step", [NoTerminator, SingleBlock,
                                  NoRegionArguments,
                                  HasParent<"ProgramOp">]> {
  let summary = "What one pipeline rank runs in a training step, in order";
  let description = [{
    Straight-line code: values come from `dist.batch`, `dist.param`,
    `dist.loss_weight`, `dist.call` and `dist.p2p_recv`, and MLIR's
    dominance check proves that each is produced before it is used. The
    data-parallel collectives (`dist.all_reduce`, `dist.reduce_scatter`,
    `dist.all_gather`) act on the gradient and parameter buffers of a module
    and `dist.optimizer_step` ends the step, as in a `dist.rank`.

    ```mlir
    dist.step 1 {
      %a = dist.p2p_recv activation 0, 0 from 0 : tensor<2x4xf32>
      ...
    }
    ```
  }];
  let arguments = (ins Dist_I64Attr:$pp_rank);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$pp_rank attr-dict-with-keyword $body";
  let hasVerifier = 1;
}

class Dist_StepValueOp<string mnemonic, list<Trait> traits = []>
    : Dist_Op<mnemonic, !listconcat(traits, [Pure, HasParent<"StepOp">])>;

def Dist_BatchOp : Dist_StepValueOp<"batch"> {
  let summary = "A model input's rows for one micro-batch";
  let description = [{
    Micro-batch `mb` of the model input named `input` (its rows of the
    replica's batch), as the module functions take it.

    ```mlir
    %x = dist.batch "input_ids"[1] : tensor<2x16xi64>
    ```
  }];
  let arguments = (ins StrAttr:$input, Dist_I64Attr:$mb);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input `[` $mb `]` attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Dist_ParamOp : Dist_StepValueOp<"param"> {
  let summary = "A parameter or constant the rank holds";
  let description = [{
    The initializer `param_name` as the module functions read it: `kind` is
    the argument's `graph.kind` (`trainable`, `constant`, or `param_copy`,
    the low-precision copy the optimizer writes). The rank holds it whole
    (at ZeRO 3, once gathered by the module's `dist.all_gather`).

    ```mlir
    %w = dist.param trainable "h.0.attn.w" : tensor<32x96xf32>
    ```
  }];
  let arguments = (ins StrAttr:$kind, StrAttr:$param_name);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$kind $param_name attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Dist_LossWeightOp : Dist_StepValueOp<"loss_weight"> {
  let summary = "The seed of the last module's backward for a micro-batch";
  let description = [{
    The weight of micro-batch `mb`'s mean loss in the global batch's:
    `count_mb / count_total` of the labels that count (not the ignore
    index), so that the summed gradients equal one process's
    (include/lamina/Runtime/DistProgram.h).

    ```mlir
    %s = dist.loss_weight [0] : tensor<f32>
    ```
  }];
  let arguments = (ins Dist_I64Attr:$mb);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "`[` $mb `]` attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Dist_CallOp : Dist_Op<"call", [HasParent<"StepOp">,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "A module's forward or backward on one micro-batch";
  let description = [{
    Calls the outlined function `callee` (`@fwd_k` or `@bwd_k`, with its
    `dist.outlined`) on micro-batch `mb`. The module must be placed on the
    step's pipeline rank; operands and results match the callee's
    arguments and results in shape and element type (the callee's tensors,
    or, after convert-graph-to-rt, its buffers after the arena). A
    backward's results are the gradients of its boundary arguments, then
    of its trainable parameters (which a `dist.accumulate` adds up).

    ```mlir
    %b, %r = dist.call @fwd_0 [1] (%x, %w) : (tensor<2x16xi64>, tensor<64x32xf32>)
        -> (tensor<2x16x32xf32>, tensor<2x16x32xf32>)
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$callee, Dist_I64Attr:$mb,
                   Variadic<AnyRankedTensor>:$args);
  let results = (outs Variadic<AnyRankedTensor>:$results);
  let assemblyFormat = [{
    $callee `[` $mb `]` `(` $args `)` attr-dict `:`
    functional-type($args, $results)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The callee's `dist.outlined` module index and whether it is a
    /// backward (`bwd_k`), once verified.
    int64_t getModule();
    bool isBackward();
  }];
}

def Dist_AccumulateOp : Dist_Op<"accumulate", [HasParent<"StepOp">]> {
  let summary = "Adds a backward's parameter gradients to the module's";
  let description = [{
    The parameter gradients of one backward `dist.call` (its results after
    the boundary gradients, all of them, in order), added into the
    module's gradient buffers, which the collectives reduce and the
    optimizer reads.

    ```mlir
    dist.accumulate %gw0, %gw1 : tensor<64x32xf32>, tensor<32xf32>
    ```
  }];
  let arguments = (ins Variadic<AnyRankedTensor>:$grads);
  let assemblyFormat = "$grads attr-dict `:` type($grads)";
  let hasVerifier = 1;
}

class Dist_P2POp<string mnemonic> : Dist_Op<mnemonic, [HasParent<"StepOp">]> {
  let hasVerifier = 1;
}

def Dist_P2PSendOp : Dist_P2POp<"p2p_send"> {
  let summary = "Sends boundary values to another pipeline rank";
  let description = [{
    Sends `values` (the `payload` of boundary `boundary`, micro-batch `mb`:
    module `boundary`'s outputs, or the gradients of module
    `boundary + 1`'s boundary arguments) to pipeline rank `peer` of the same
    replica. Buffered: it does not wait for the receive.

    ```mlir
    dist.p2p_send activation 0, 1 to 1 (%b) : tensor<2x16x32xf32>
    ```
  }];
  let arguments = (ins Dist_TransferPayload:$payload, Dist_I64Attr:$boundary,
                   Dist_I64Attr:$mb, Dist_I64Attr:$peer,
                   Variadic<AnyRankedTensor>:$values);
  let assemblyFormat = [{
    $payload $boundary `,` $mb `to` $peer ` ` `(` $values `)` attr-dict `:`
    type($values)
  }];
}

def Dist_P2PRecvOp : Dist_P2POp<"p2p_recv"> {
  let summary = "Receives boundary values from another pipeline rank";
  let description = [{
    Blocks until the matching `dist.p2p_send` of pipeline rank `peer` has
    run, and produces its values.

    ```mlir
    %g = dist.p2p_recv gradient 0, 1 from 1 : tensor<2x16x32xf32>
    ```
  }];
  let arguments = (ins Dist_TransferPayload:$payload, Dist_I64Attr:$boundary,
                   Dist_I64Attr:$mb, Dist_I64Attr:$peer);
  let results = (outs Variadic<AnyRankedTensor>:$values);
  let assemblyFormat = [{
    $payload $boundary `,` $mb `from` $peer attr-dict `:` type($values)
  }];
}

#endif // LAMINA_DIST_STEP_OPS
