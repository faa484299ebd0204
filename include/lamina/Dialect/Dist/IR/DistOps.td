//===- DistOps.td - dist dialect operations -----------------*- tablegen -*-===//
//
// A training step's schedule as IR: `dist.schedule` holds one `dist.rank` per
// global rank, each an ordered list of action ops (the schedule library's
// `Action`s, docs/schedules.md). dist-schedule writes compute-only lists,
// dist-insert-comm adds the transfers and collectives, dist-verify-schedule
// proves them complete and deadlock-free, and code generation reads them.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_DIST_OPS
#define LAMINA_DIST_OPS

include "lamina/Dialect/Dist/IR/DistAttrs.td"
include "mlir/IR/OpBase.td"
include "mlir/IR/CommonAttrConstraints.td"

// An i64 attribute read as a signed value, so a negative index reaches the
// range checks as itself.
def Dist_I64Attr : TypedSignlessIntegerAttrBase<I64, "int64_t",
                                                "64-bit signless integer attribute"> {
  let convertFromStorage = "$_self.getValue().getSExtValue()";
}

class Dist_Op<string mnemonic, list<Trait> traits = []>
    : Op<Dist_Dialect, mnemonic, traits>;

def Dist_TransferPayload : I32EnumAttr<"TransferPayload",
    "what a point-to-point transfer carries", [
    I32EnumAttrCase<"Activation", 0, "activation">,
    I32EnumAttrCase<"Gradient", 1, "gradient">,
  ]> {
  let cppNamespace = "::lamina::ir::dist";
}

def Dist_ScheduleOp : Dist_Op<"schedule", [NoTerminator, SingleBlock,
                                          NoRegionArguments]> {
  let summary = "The per-rank action lists of one training step";
  let description = [{
    A schedule for `modules` (`L`) modules on `pp` pipeline ranks times `dp`
    data-parallel replicas, `micro_batches` (`m`) per replica and step, at
    ZeRO sharding level `zero` (0-3). `placement[l]` is the pipeline rank of
    module `l`. `kind` names the schedule that produced it (`gpipe`, `1f1b`,
    `interleaved-1f1b`, `breadth-first`, `layered`).

    The body holds exactly one `dist.rank` per global rank `g = dp_index * pp
    + pp_index`, in any order. The verifier checks the attributes and that
    the rank ids are unique and complete; `dist-verify-schedule` checks that
    the lists are complete and cannot deadlock.

    ```mlir
    dist.schedule "gpipe" modules = 2, pp = 2, dp = 1,
        micro_batches = 1, zero = 0, placement = [0, 1] {
      dist.rank 0 {
        dist.forward 0, 0
        dist.send activation 0, 0 to 1
        dist.recv gradient 0, 0 from 1
        dist.backward 0, 0
        dist.optimizer_step
      }
      dist.rank 1 {
        dist.recv activation 0, 0 from 0
        dist.forward 1, 0
        dist.backward 1, 0
        dist.send gradient 0, 0 to 0
        dist.optimizer_step
      }
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
    /// pp * dp.
    int64_t getNumRanks() { return getPp() * getDp(); }
  }];
}

def Dist_RankOp : Dist_Op<"rank", [NoTerminator, SingleBlock,
                                  NoRegionArguments,
                                  HasParent<"ScheduleOp">]> {
  let summary = "The ordered actions of one global rank";
  let description = [{
    `rank` is the global rank `g`; its pipeline rank is `g mod pp`, its
    data-parallel replica `g / pp`. The body lists the rank's actions in the
    order it runs them.

    ```mlir
    dist.rank 1 {
      dist.recv activation 0, 0 from 0
      dist.forward 1, 0
    }
    ```
  }];
  let arguments = (ins Dist_I64Attr:$rank);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$rank attr-dict-with-keyword $body";
  let hasVerifier = 1;
}

// Forwards, backwards and transfers appear in dist.rank lists only (a
// dist.step has dist.call and dist.p2p_* over values); the collectives and
// the optimizer step in both.
class Dist_ActionOp<string mnemonic,
                    Trait parent = HasParent<"RankOp">>
    : Dist_Op<mnemonic, [parent]> {
  let hasVerifier = 1;
}

class Dist_ComputeOp<string mnemonic, string what>
    : Dist_ActionOp<mnemonic> {
  let summary = "The " # what # " of a module for one micro-batch";
  let description = [{
    Runs the }] # what # [{ of module `module` (`< modules`) on micro-batch
    `mb` (`< micro_batches`). The module must be placed on this rank's
    pipeline rank, and its inputs available: the previous module's forward
    (or a `dist.recv`) for a forward, this micro-batch's forward and the
    output gradient for a backward (`dist-verify-schedule` checks both).

    ```mlir
    dist.}] # mnemonic # [{ 3, 1   // module 3, micro-batch 1
    ```
  }];
  let arguments = (ins Dist_I64Attr:$module, Dist_I64Attr:$mb);
  let assemblyFormat = "$module `,` $mb attr-dict";
}

def Dist_ForwardOp : Dist_ComputeOp<"forward", "forward pass">;
def Dist_BackwardOp : Dist_ComputeOp<"backward", "backward pass">;

class Dist_TransferOp<string mnemonic, string dir, string verb>
    : Dist_ActionOp<mnemonic> {
  let summary = verb # " a boundary activation or its gradient";
  let description = [{
    }] # verb # [{ the `payload` (`activation`: module `boundary`'s output,
    which module `boundary + 1` reads; `gradient`: the gradient of that
    output) of micro-batch `mb`, }] # dir # [{ global rank `peer`. Sends are
    buffered; a receive blocks until its send has run. A send and a receive
    match by (sender, receiver, payload, boundary, micro-batch).

    ```mlir
    dist.send activation 2, 0 to 1     // boundary 2, micro-batch 0, to rank 1
    dist.recv gradient 2, 0 from 3     // its gradient, from rank 3
    ```
  }];
  let arguments = (ins Dist_TransferPayload:$payload, Dist_I64Attr:$boundary,
                   Dist_I64Attr:$mb, Dist_I64Attr:$peer);
  let assemblyFormat =
      "$payload $boundary `,` $mb `" # !if(!eq(mnemonic, "send"), "to", "from") #
      "` $peer attr-dict";
}

def Dist_SendOp : Dist_TransferOp<"send", "to", "Sends">;
def Dist_RecvOp : Dist_TransferOp<"recv", "from", "Receives">;

class Dist_CollectiveOp<string mnemonic, string what>
    : Dist_ActionOp<mnemonic, ParentOneOf<["RankOp", "StepOp"]>> {
  let summary = "Data-parallel " # what # " of one module";
  let description = [{
    The }] # what # [{ of module `module` over the data-parallel group of
    this rank (every rank with the same pipeline rank). Members match calls
    by order, as NCCL does: each must issue the same collectives in the same
    order.

    ```mlir
    dist.}] # mnemonic # [{ 4
    ```
  }];
  let arguments = (ins Dist_I64Attr:$module);
  let assemblyFormat = "$module attr-dict";
}

def Dist_AllGatherOp
    : Dist_CollectiveOp<"all_gather", "all-gather of the parameters">;
def Dist_ReduceScatterOp
    : Dist_CollectiveOp<"reduce_scatter", "reduce-scatter of the gradients">;
def Dist_AllReduceOp
    : Dist_CollectiveOp<"all_reduce", "all-reduce of the gradients">;

def Dist_OptimizerStepOp
    : Dist_ActionOp<"optimizer_step", ParentOneOf<["RankOp", "StepOp"]>> {
  let summary = "The optimizer step of every module on the rank";
  let description = [{
    Updates the parameters of every module placed on this rank's pipeline
    rank (its shard of them at sharding levels 1-3). Once per rank and step,
    after every backward and gradient reduction.

    ```mlir
    dist.optimizer_step
    ```
  }];
  let assemblyFormat = "attr-dict";
  let hasVerifier = 0;
}

include "lamina/Dialect/Dist/IR/DistStepOps.td"

#endif // LAMINA_DIST_OPS
