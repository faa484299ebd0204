//===- Passes.td - rt dialect passes -----------------------*- tablegen -*-===//
//
// The decisions of a compiled distributed step, made on the step functions
// that convert-dist-to-rt writes with every wait at its latest correct
// point: where receives are posted, where sends and gradient reductions
// are waited for, whether the waits of all ranks can deadlock, and where
// what the step holds lies in its step buffer. docs/distributed.md, "The
// compiled step".
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_RT_PASSES
#define LAMINA_RT_PASSES

include "mlir/Pass/PassBase.td"

def RtPostReceives : Pass<"rt-post-receives", "mlir::func::FuncOp"> {
  let summary = "Posts a step's receives ahead of their waits";
  let description = [{
    On a step function (`rt.step_pp`), every `rt.step_recv` that no
    `rt.step_post_recv` starts yet gets one: the first receive from each
    peer at the start of the step (ascending peers), each later one right
    before the previous receive from that peer is waited for. A transfer
    then runs while the work before its use does, and each pair's transfers
    are posted in the order they are sent (NCCL matches them in order).
    Two receives per peer are outstanding at most.
    (`lamina::schedule::postReceives`.)

    ```mlir
    // before
    rt.step_call %s @fwd_0[0]
    rt.step_send %s 0, 0 to 1
    rt.step_recv %s gradient 0, 0 from 1
    rt.step_recv %s gradient 0, 1 from 1
    // after
    rt.step_post_recv %s gradient 0, 0 from 1
    rt.step_call %s @fwd_0[0]
    rt.step_send %s 0, 0 to 1
    rt.step_post_recv %s gradient 0, 1 from 1
    rt.step_recv %s gradient 0, 0 from 1
    rt.step_recv %s gradient 0, 1 from 1
    ```
  }];
}

def RtWaitSends : Pass<"rt-wait-sends", "mlir::func::FuncOp"> {
  let summary = "Waits for each send after the compute call it overlaps";
  let description = [{
    convert-dist-to-rt waits for every send at the end of the step. This
    pass moves each `rt.step_wait_send` to right before the second forward
    or backward after its `rt.step_send`: the send overlaps the call in
    between, and its part of the step buffer is free for what follows, so
    the step buffer holds fewer values at once. A send that no second
    compute call follows is still waited for at the end.
    (`lamina::schedule::waitSends`.) Run `rt-verify-steps` after it: a wait
    placed before the peer can post its receive would deadlock.
  }];
}

def RtRetireReductions : Pass<"rt-retire-reductions", "mlir::func::FuncOp"> {
  let summary = "ZeRO 2-3: waits for older reduce-scatters while the next "
                "backward runs";
  let description = [{
    At ZeRO levels 2-3 (`rt.step_zero`) a module's gradient for a run of
    its backwards lies whole in the step buffer until its reduce-scatter is
    waited for. convert-dist-to-rt waits for them all right before the
    optimizer. This pass moves the waits: when an `rt.step_accumulate`
    starts a new full gradient (the module's first of the step, or its first
    after its reduce-scatter), every reduce-scatter in flight but the
    newest is waited for right before it, oldest first. The wait follows
    the backward's compute, which the older reduce-scatter overlapped, and
    a rank holds at most two full gradients at once: the step buffer
    shrinks by the rest. (`lamina::schedule::retireReductions`.)

    ```mlir
    rt.step_call %s @bwd_1[0]
    rt.step_accumulate %s 1
    rt.step_reduce_scatter %s 1
    rt.step_call %s @bwd_0[0]
    rt.step_wait_gradients %s 1   // moved here from before the optimizer
    rt.step_accumulate %s 0
    ```
  }];
}

def RtVerifySteps : Pass<"rt-verify-steps", "mlir::ModuleOp"> {
  let summary = "Proves that the step functions' waits cannot deadlock";
  let description = [{
    Runs the step functions of every pipeline rank (the training steps, then
    the evaluation steps) against each other: an `rt.step_recv` waits for
    the peer's send, an `rt.step_wait_send` for the peer to post (or wait
    for) the receive, the wait of a shared parameter's sum or gather for
    every holder to start it. Fails, naming the calls that would wait on
    each other forever. (`lamina::schedule::checkStepsComplete`.)
  }];
}

def RtPlanStepBuffers : Pass<"rt-plan-step-buffers", "mlir::ModuleOp"> {
  let summary = "Places what each step holds between its calls in one "
                "step buffer per rank";
  let description = [{
    After the passes that place the waits: the boundary values a forward
    writes or a receive brings, their gradients, the residuals a forward
    keeps for its backward, ZeRO 3's gathered weights, and levels 2-3's
    full gradients and reduce-scatter parts each live from the call that
    writes them to their last reader (a backward, an evaluation forward,
    the wait for a send or for a reduce-scatter, the end of a run). The
    greedy-by-size planner of the module functions' arenas places them in
    one buffer per step function (`lamina::schedule::planStepBuffers`).
    The calls get the offsets (`in`/`res`/`cot`/`out`, `at`, `into`,
    `from`/`part`), the function `rt.step_buffer_bytes`.

    Sizes come from the module functions' signatures (boundary values,
    residuals) and, for ZeRO's buffers, from each module's flat parameter
    layout (`rt.dist` `flat_params`) cut over the `dp` replicas the way
    `target`'s collectives cut it: MPI's cut on the host, NCCL's equal,
    padded chunks on cuda.

    ```mlir
    func.func @lamina_step_0(%s: !rt.step) attributes {rt.step_buffer_bytes = 256 : i64, rt.step_pp = 0 : i64, rt.step_zero = 0 : i64} {
      rt.step_post_recv %s gradient 0, 0 from 1 at 0
      rt.step_call %s @fwd_0[0] out 64
      rt.step_send %s 0, 0 to 1 at 64
      ...
    ```
  }];
  let options = [
    Option<"target", "target", "std::string", /*default=*/"\"host\"",
           "host (MPI's shard layout) or cuda (NCCL's)">,
  ];
}

#endif // LAMINA_RT_PASSES
