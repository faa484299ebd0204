//===- RtStepOps.td - rt dialect: a rank's distributed step -*- tablegen -*-===//
//
// convert-dist-to-rt turns each pipeline rank's dist.step into a function
// of these ops, in schedule order; the rt passes (Rt/Transforms/Passes.td)
// place its posts and waits and plan its step buffer; convert-rt-to-emitc
// lowers each op to a call of the runtime's step library
// (include/lamina/Runtime/DistProgram.h, namespace lamina::rt::step).
// docs/distributed.md, "The compiled step".
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_RT_STEP_OPS
#define LAMINA_RT_STEP_OPS

include "mlir/IR/SymbolInterfaces.td"

def Rt_StepType : TypeDef<Rt_Dialect, "Step"> {
  let mnemonic = "step";
  let summary = "one rank's state in a distributed step";
  let description = [{
    The argument of a step function (a `func.func` with `rt.step_pp`): the rank's parameters,
    gradients, optimizer, its step buffer (of `rt.step_buffer_bytes`) and
    its communicator, held by the runtime.
  }];
}

class Rt_StepOp<string mnemonic, list<Trait> traits = []>
    : Rt_Op<mnemonic, traits> {
  let hasVerifier = 1;
}

def Rt_StepCallOp : Rt_StepOp<"step_call",
    [DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "a module's forward or backward on one micro-batch";
  let description = [{
    Runs the rt function `callee` (an outlined `@fwd_k` or `@bwd_k`, with
    its `dist.outlined`) on micro-batch `mb`. What it reads and writes
    besides the inputs and parameters lies in the step buffer at the
    offsets the compiler planned (`rt.step_buffer_bytes` on the function):
    `in` the boundary values it reads (module k-1's outputs), `res` the
    residuals (a forward writes them, its backward reads them), `cot` the
    gradient of its outputs (a backward), `out` what it writes for the next
    module (a forward's boundary values, a backward's gradient of its
    inputs). A backward's parameter gradients stay in the rank's arena for
    the `rt.step_accumulate` that follows it.

    ```mlir
    rt.step_call %s @fwd_1[0] in 0 res 4096 out 12288
    rt.step_call %s @bwd_1[0] in 0 res 4096 cot 12288 out 16384
    ```
  }];
  let arguments = (ins Rt_StepType:$state, FlatSymbolRefAttr:$callee,
                   I64Attr:$mb, OptionalAttr<I64Attr>:$input,
                   OptionalAttr<I64Attr>:$residuals,
                   OptionalAttr<I64Attr>:$cotangent,
                   OptionalAttr<I64Attr>:$output);
  let assemblyFormat = [{
    $state $callee `[` $mb `]` (`in` $input^)? (`res` $residuals^)?
    (`cot` $cotangent^)? (`out` $output^)? attr-dict
  }];
}

class Rt_StepTransferOp<string mnemonic, string dir, string what>
    : Rt_StepOp<mnemonic> {
  let summary = what # " boundary values of one micro-batch";
  let arguments = (ins Rt_StepType:$state, UnitAttr:$gradient,
                   I64Attr:$boundary, I64Attr:$mb, I64Attr:$peer,
                   OptionalAttr<I64Attr>:$offset);
  // The offset is rt-plan-step-buffers' (convert-dist-to-rt writes none).
  let assemblyFormat = "$state (`gradient` $gradient^)? $boundary `,` $mb `"
                       # dir # "` $peer (`at` $offset^)? attr-dict";
}

def Rt_StepSendOp : Rt_StepTransferOp<"step_send", "to", "Sends"> {
  let description = [{
    Starts sending boundary `boundary`'s activations (its gradients with
    `gradient`) of micro-batch `mb`, at `offset` in the step buffer, to
    pipeline rank `peer` of this replica. The buffer stays the send's until
    the `rt.step_wait_send` of the transfer.

    ```mlir
    rt.step_send %s 0, 1 to 1 at 4096
    ```
  }];
}

def Rt_StepWaitSendOp : Rt_StepOp<"step_wait_send"> {
  let summary = "waits for a send to complete";
  let description = [{
    After it the send's part of the step buffer may hold other values.

    ```mlir
    rt.step_wait_send %s 0, 1 to 1
    ```
  }];
  let arguments = (ins Rt_StepType:$state, UnitAttr:$gradient,
                   I64Attr:$boundary, I64Attr:$mb, I64Attr:$peer);
  let assemblyFormat = "$state (`gradient` $gradient^)? $boundary `,` $mb "
                       "`to` $peer attr-dict";
}

def Rt_StepPostRecvOp
    : Rt_StepTransferOp<"step_post_recv", "from", "Starts receiving"> {
  let description = [{
    Posts the receive (into the step buffer at `offset`) that a later
    `rt.step_recv` of the same transfer waits for, so the transfer runs
    while the work between them does.

    ```mlir
    rt.step_post_recv %s gradient 0, 1 from 1 at 8192
    ```
  }];
}

def Rt_StepRecvOp : Rt_StepTransferOp<"step_recv", "from", "Waits for"> {
  let description = [{
    Waits for a receive (posting it first if no `rt.step_post_recv` did);
    the values at `offset` are then the boundary arguments (or cotangents)
    of the calls of micro-batch `mb`.

    ```mlir
    rt.step_recv %s gradient 0, 1 from 1 at 8192
    ```
  }];
}

class Rt_StepModuleOp<string mnemonic, string what> : Rt_StepOp<mnemonic> {
  let summary = what;
  let arguments = (ins Rt_StepType:$state, I64Attr:$module);
  let assemblyFormat = "$state $module attr-dict";
}

def Rt_StepAllGatherOp : Rt_StepOp<"step_all_gather"> {
  let summary = "starts the data-parallel all-gather of a module's parameters";
  let description = [{
    ZeRO 3: gathers the module's weights (or their copies) for its next
    run into the step buffer at `offset` (an `rt.step_use_weights` waits
    for them; they are read until the run ends); levels 1-2: its
    parameters after the optimizer step, in place.

    ```mlir
    rt.step_all_gather %s 0 at 8192
    ```
  }];
  let arguments = (ins Rt_StepType:$state, I64Attr:$module,
                   OptionalAttr<I64Attr>:$offset);
  let assemblyFormat = "$state $module (`at` $offset^)? attr-dict";
}
def Rt_StepReduceScatterOp : Rt_StepOp<"step_reduce_scatter"> {
  let summary = "starts the data-parallel reduce-scatter of a module's gradients";
  let description = [{
    Levels 2-3: the run's full gradient, at `full` in the step buffer, is
    reduce-scattered into the module's gradient shard or, for a later
    reduce-scatter of the step, into the part at `part` that its
    `rt.step_wait_gradients` adds to it; both stay the collective's until
    then. Levels 0-1: in place, no offsets.

    ```mlir
    rt.step_reduce_scatter %s 1 from 0 part 65536
    ```
  }];
  let arguments = (ins Rt_StepType:$state, I64Attr:$module,
                   OptionalAttr<I64Attr>:$full, OptionalAttr<I64Attr>:$part);
  let assemblyFormat =
      "$state $module (`from` $full^)? (`part` $part^)? attr-dict";
}
def Rt_StepAllReduceOp : Rt_StepModuleOp<"step_all_reduce",
    "starts the data-parallel all-reduce of a module's gradients">;
def Rt_StepUseWeightsOp : Rt_StepModuleOp<"step_use_weights",
    "ZeRO 3: the module's oldest all-gather waited for and read from now on"> {
  let description = [{
    Before the first call of each run of a module's forwards (or
    backwards); the weights of the previous run are freed.
  }];
}

def Rt_StepWaitGradientsOp : Rt_StepModuleOp<"step_wait_gradients",
    "waits for a module's oldest gradient reduction in flight"> {
  let description = [{
    Levels 0-1: the module's all-reduce (or in-place reduce-scatter) of the
    step; levels 2-3: its oldest reduce-scatter, whose part is added to the
    module's gradient shard and whose full gradient is freed. The
    reductions are waited for in the order they started (the runtime
    checks it).
  }];
}
def Rt_StepAccumulateOp : Rt_StepOp<"step_accumulate"> {
  let summary = "adds the last backward's parameter gradients to the module's";
  let description = [{
    Right after module `module`'s backward (waits between them only): its
    parameter gradients, still in the arena, are added to the module's
    gradient -- at levels 2-3 the run's full gradient at `offset` in the
    step buffer, which the run's first accumulate starts -- and to the
    shared parameters'.

    ```mlir
    rt.step_accumulate %s 0 into 16384
    ```
  }];
  let arguments = (ins Rt_StepType:$state, I64Attr:$module,
                   OptionalAttr<I64Attr>:$offset);
  let assemblyFormat = "$state $module (`into` $offset^)? attr-dict";
}

def Rt_StepWaitWeightsOp : Rt_StepModuleOp<"step_wait_weights",
    "levels 1-2: waits for the all-gather of a module's updated parameters"> {
  let description = [{
    At the end of the step: the all-gather the schedule starts after the
    optimizer (of the parameters, or of their low-precision copies), then
    the copies cast from the gathered parameters.
  }];
}

class Rt_StepSharedOp<string mnemonic, string what> : Rt_StepOp<mnemonic> {
  let summary = what;
  let description = [{
    A shared parameter (`param`, read by modules on more than one rank:
    a tied embedding) is kept whole on each of its holders; its gradient is
    summed over all holders and their replicas (an all-reduce, or at ZeRO
    >= 1 a reduce-scatter, each holder then updating its part and the parts
    all-gathered). Every holder issues these in the same order (by name).

    ```mlir
    rt.step_sum_shared %s "transformer.wte.weight"
    ```
  }];
  let arguments = (ins Rt_StepType:$state, StrAttr:$param);
  let assemblyFormat = "$state $param attr-dict";
}

def Rt_StepSumSharedOp : Rt_StepSharedOp<"step_sum_shared",
    "starts the gradient sum of a shared parameter over its holders">;
def Rt_StepWaitSharedSumOp : Rt_StepSharedOp<"step_wait_shared_sum",
    "waits for a shared parameter's gradient sum">;
def Rt_StepGatherSharedOp : Rt_StepSharedOp<"step_gather_shared",
    "ZeRO >= 1: starts the all-gather of a shared parameter's updated parts">;
def Rt_StepWaitSharedGatherOp : Rt_StepSharedOp<"step_wait_shared_gather",
    "waits for a shared parameter's all-gather">;

def Rt_StepOptimizerOp : Rt_StepOp<"step_optimizer"> {
  let summary = "the optimizer step of every module on the rank";
  let arguments = (ins Rt_StepType:$state);
  let assemblyFormat = "$state attr-dict";
}

#endif // LAMINA_RT_STEP_OPS
