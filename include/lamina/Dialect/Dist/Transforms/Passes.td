//===- Passes.td - dist dialect passes ----------------------*- tablegen -*-===//
#ifndef LAMINA_DIST_PASSES
#define LAMINA_DIST_PASSES

include "mlir/Pass/PassBase.td"

def DistDiscoverModules : Pass<"dist-discover-modules", "mlir::ModuleOp"> {
  let summary = "Annotates the chain of modules: embedding, layers, head";
  let description = [{
    Splits the function into the chain of modules a pipeline places on
    ranks (docs/modules.md): layers from parameter-name prefixes
    (`transformer.h.3.attn...`, `model.layers.3...`, `encoder.layer.3...`),
    node-name scopes (`/h.3/attn/MatMul`), or, without names, from the
    repeated op sequences between the residual stream's adds. Values every
    layer reads (masks, rotary tables, position ids) are shared inputs and
    do not break the chain. `module-regex` overrides the rules: its first
    capture group, applied to parameter names (then node names), names the
    layer. Isomorphic layers share a body index.

    ```mlir
    // After: every op carries its module, the function the chain.
    func.func @forward(...) attributes {
        dist.chain = [#dist.module<"embedding", embedding>,
                      #dist.module<"layer.0", layer, body = 0>,
                      #dist.module<"layer.1", layer, body = 0>,
                      #dist.module<"head", head>],
        dist.discovery = "names"} {
      %0 = graph.gather %arg0, %arg5 {axis = 0 : i64, dist.module = 0 : i64} ...
    ```
  }];
  let dependentDialects = ["::lamina::ir::dist::DistDialect"];
  let options = [
    Option<"moduleRegex", "module-regex", "std::string", /*default=*/"",
           "Regex whose first capture group names a layer (overrides "
           "automatic discovery)">,
    Option<"functionName", "function", "std::string", /*default=*/"\"forward\"",
           "The function to split">,
  ];
  let statistics = [
    Statistic<"numModules", "modules", "Modules in the chain">,
    Statistic<"numBodies", "bodies", "Distinct layer bodies">,
  ];
}

def DistPartition : Pass<"dist-partition", "mlir::ModuleOp"> {
  let summary = "Places the chain's modules on pipeline ranks";
  let description = [{
    Reads the `dist.chain` that `dist-discover-modules` wrote and records a
    `dist.placement` over `pp` pipeline ranks:

    * `contiguous`: the layers in `pp` contiguous blocks, the first
      `L mod pp` ranks holding one more; the embedding goes with the first
      layer, the head with the last;
    * `modular`: layer `l` on rank `l mod pp` (interleaved schedules' chunks);
    * `balanced`: contiguous blocks over all modules that minimise the
      largest per-rank forward FLOPs, so a heavy embedding or head takes a
      rank's share of layers.

    No layer is dropped or duplicated whatever `L` and `pp` are: the
    placement has one rank per module and the verifier checks it.

    After `dist-outline-modules` (no `@forward` left, `dist.num_modules` on
    the module) it places the outlined modules instead and records the
    placement on the module op, where `dist-schedule` reads it: the
    program's one placement. `lamina compile` runs it so, with `contiguous`
    for gpipe and 1f1b and `modular` for the other schedules; `balanced`
    weighs each module's forward and backward FLOPs.

    ```mlir
    // 7 layers on 3 ranks, contiguous:
    dist.placement = #dist.placement<pp = 3, contiguous,
                                     ranks = [0, 0, 0, 0, 1, 1, 2, 2, 2]>
    ```
  }];
  let dependentDialects = ["::lamina::ir::dist::DistDialect"];
  let options = [
    Option<"pp", "pp", "int64_t", /*default=*/"1", "Pipeline ranks">,
    Option<"placement", "placement", "std::string", /*default=*/"\"contiguous\"",
           "contiguous, modular or balanced">,
    Option<"functionName", "function", "std::string", /*default=*/"\"forward\"",
           "The function to partition">,
  ];
}

def DistDescribeModel : Pass<"dist-describe-model", "mlir::ModuleOp"> {
  let summary = "Prints the planner's view of the model (its module chain)";
  let description = [{
    Takes the function's chain (its `dist.chain` when one is recorded and no
    `module-regex` is given, else module discovery) and prints, per module,
    what the cost model receives (`lamina::plan::ModelDesc`): forward FLOPs (matmul
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

def DistSchedule : Pass<"dist-schedule", "mlir::ModuleOp"> {
  let summary = "Writes the compute order of a training step as a dist.schedule";
  let description = [{
    Generates, with the schedule library (docs/schedules.md), the per-rank
    order of forwards and backwards of `schedule` over `pp`
    pipeline ranks, `dp` data-parallel replicas and `micro-batches`
    micro-batches, and appends it to the top-level module as a `dist.schedule`
    with one `dist.rank` per global rank: compute actions only, then
    `dist.optimizer_step`. `dist-insert-comm` adds the communication.

    The modules stay where the module's `dist.placement` puts them
    (`dist-partition` after `dist-outline-modules`); a placement the
    schedule cannot run (not contiguous for gpipe and 1f1b, not modular for
    the others) is an error. Without one, the schedule's own rule places
    them (contiguous or modular), as `lamina plan` does.

    `modules` is the number of modules `L`; 0 takes the layers of the
    `dist.chain` on `@function` (written by `dist-discover-modules`; an
    embedding and a head ride with the first and last layer). A
    configuration the generator refuses (breadth-first with fewer
    micro-batches than pipeline ranks, interleaved-1f1b with `L` or `m` not
    a multiple of `pp`, layered with `pp > 1`, fewer modules than pipeline
    ranks) is an error that names the options.

    With `eval`, a second, `forward_only` schedule follows: the evaluation
    (validation loss) step over the same placement, complete with its
    transfers (`generateEvalSchedule`: each rank's modules in order, every
    micro-batch through one before the next, a gather per module at ZeRO
    3); `dist-insert-comm` leaves it as it is.

    ```mlir
    // -dist-schedule="schedule=gpipe pp=2 micro-batches=1 modules=2"
    dist.schedule "gpipe" modules = 2, pp = 2, dp = 1,
        micro_batches = 1, zero = 0, placement = [0, 1] {
      dist.rank 0 {
        dist.forward 0, 0
        dist.backward 0, 0
        dist.optimizer_step
      }
      dist.rank 1 {
        dist.forward 1, 0
        dist.backward 1, 0
        dist.optimizer_step
      }
    }
    ```
  }];
  let dependentDialects = ["::lamina::ir::dist::DistDialect"];
  let options = [
    Option<"scheduleKind", "schedule", "std::string",
           /*default=*/"\"breadth-first\"",
           "gpipe, 1f1b, interleaved-1f1b, breadth-first or layered">,
    Option<"pp", "pp", "int64_t", /*default=*/"1", "Pipeline ranks">,
    Option<"dp", "dp", "int64_t", /*default=*/"1", "Data-parallel replicas">,
    Option<"microBatches", "micro-batches", "int64_t", /*default=*/"1",
           "Micro-batches per replica and step">,
    Option<"zero", "zero", "int64_t", /*default=*/"0",
           "Data-parallel sharding level (0-3)">,
    Option<"modules", "modules", "int64_t", /*default=*/"0",
           "Number of modules L (0: dist.num_modules after "
           "dist-outline-modules, else the layers of @function's "
           "dist.chain)">,
    Option<"functionName", "function", "std::string", /*default=*/"\"forward\"",
           "The function whose chain gives L when modules is 0">,
    Option<"eval", "eval", "bool", /*default=*/"false",
           "Also write the evaluation step (a forward_only dist.schedule "
           "over the same placement, with its transfers)">,
  ];
}

def DistInsertComm : Pass<"dist-insert-comm", "mlir::ModuleOp"> {
  let summary = "Adds transfers and data-parallel collectives to a schedule";
  let description = [{
    Lowers every compute-only `dist.schedule` of the module with the
    schedule library's common lowering (`lowerComputeOrder`): a
    `dist.recv` before each compute whose input lives on another pipeline
    rank, a `dist.send` after each compute whose output is needed there
    (peers in the rank's own replica), and, when `dp > 1`, the collectives
    of the sharding level (`all_reduce` at 0; `reduce_scatter` and, after
    the optimizer step, `all_gather` at 1-2; per-run `all_gather` and
    `reduce_scatter` at 3). The result equals the library's
    `generateSchedule` for the same configuration. A list that already holds
    communication, or does not end with one `dist.optimizer_step`, is an
    error.

    ```mlir
    // after dist-insert-comm, rank 0 of the dist-schedule example:
    dist.rank 0 {
      dist.forward 0, 0
      dist.send activation 0, 0 to 1
      dist.recv gradient 0, 0 from 1
      dist.backward 0, 0
      dist.optimizer_step
    }
    ```
  }];
}

def DistPrefetchGathers : Pass<"dist-prefetch-gathers", "mlir::ModuleOp"> {
  let summary = "ZeRO 3: gathers each run's weights one run ahead";
  let description = [{
    At sharding level 3 each rank holds a shard of its modules' weights and
    gathers a module's full weights for each run of its forwards (or
    backwards); dist-insert-comm places each run's `dist.all_gather` right
    before the run, where the run would wait for it. This pass moves every
    run's gather but the first to right after the previous run's first
    compute (and its send): the gather overlaps the rest of the previous
    run, and at most two modules' full weights are resident at once.
    Training `dist.schedule`s at level 3 with more than one replica only;
    the evaluation step keeps its gathers before each module.
    (`lamina::schedule::prefetchGathers`.)

    ```mlir
    // before (one rank: F0.0 F0.1 then B0.1 B0.0)
    dist.all_gather 0
    dist.forward 0, 0
    dist.forward 0, 1
    dist.all_gather 0
    dist.backward 0, 1
    // after
    dist.all_gather 0
    dist.forward 0, 0
    dist.all_gather 0
    dist.forward 0, 1
    dist.backward 0, 1
    ```
  }];
}

def DistVerifySchedule : Pass<"dist-verify-schedule", "mlir::ModuleOp"> {
  let summary = "Proves every dist.schedule and dist.program complete and "
                "deadlock-free";
  let description = [{
    Reads each `dist.schedule` (and each `dist.program`'s steps, expanded
    to every data-parallel replica) back and runs the schedule library's
    verifier (`verifySchedule`, docs/schedules.md): action fields against
    the placement and sharding level, one send per receive, equal
    collective counts in every data-parallel group, then a simulation with
    buffered sends and blocking receives and collectives that finds missing
    dependencies, collective mismatches and deadlocks. A failure is an error
    with the verifier's text, attached to the action op it names (else to
    the `dist.rank` or `dist.step`, else to the schedule). Always
    terminates. The IR is unchanged.

    ```
    error: deadlock: no rank can progress; 2 of 2 ranks blocked:
      rank 0 (pp 0, dp 0) action #0 Recv(gradient, boundary 0, mb 0, from rank 1) waits for ...
      wait cycle: rank 0 -> rank 1 -> rank 0
    ```
  }];
}

def DistBuildSteps : Pass<"dist-build-steps", "mlir::ModuleOp"> {
  let summary = "Turns the verified dist.schedule into one dist.step per "
                "pipeline rank over values";
  let description = [{
    Replaces the module's `dist.schedule` (after `dist-insert-comm` and
    `dist-verify-schedule`) with a `dist.program` of the same configuration
    holding one `dist.step` per pipeline rank (docs/dist-step-design.md):
    the rank's actions in the schedule's order, over SSA values.

    * a forward is a `dist.call @fwd_k [mb]` of the outlined function, its
      operands taken by the callee's argument kinds: boundaries from the
      previous module's call on the rank or from a `dist.p2p_recv`, inputs
      from `dist.batch`, weights from `dist.param` (one per weight and
      step, at its top);
    * a backward is a `dist.call @bwd_k [mb]` of the forward's operands, its
      residual results and the cotangents (the next module's boundary
      gradients, received ones, or for the last module a
      `dist.loss_weight`); a `dist.accumulate` takes its parameter
      gradients;
    * transfers send and receive those values, peers as pipeline ranks;
      collectives and the optimizer step stay as they are.

    Data-parallel replicas must run the same list with peers in their own
    replica (every generated schedule does); a replica that differs, a
    compute whose operand was never produced on the rank (a backward before
    its forward, a boundary neither computed nor received) or a module
    without its `@fwd_k`/`@bwd_k` is an error naming the action.

    ```mlir
    dist.program "gpipe" modules = 2, pp = 2, dp = 1, micro_batches = 1,
        zero = 0, placement = [0, 1] {
      dist.step 0 {
        %w = dist.param trainable "model.layers.0.w" : tensor<4x4xf32>
        %x = dist.batch "x"[0] : tensor<2x4xf32>
        %b = dist.call @fwd_0 [0] (%w, %x) : (tensor<4x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
        dist.p2p_send activation 0, 0 to 1 (%b) : tensor<2x4xf32>
        %g = dist.p2p_recv gradient 0, 0 from 1 : tensor<2x4xf32>
        %gw = dist.call @bwd_0 [0] (%w, %x, %g) : (...) -> tensor<4x4xf32>
        dist.accumulate %gw : tensor<4x4xf32>
        dist.optimizer_step
      }
      dist.step 1 { ... }
    }
    ```
  }];
  let dependentDialects = ["::lamina::ir::dist::DistDialect"];
}

def DistOutlineModules : Pass<"dist-outline-modules", "mlir::ModuleOp"> {
  let summary = "Splits @forward (with its loss) into per-module forward "
                "and backward functions";
  let description = [{
    The code a pipeline rank runs: for every module `k` of the chain (a
    layer; the embedding joins the first, the head and the loss the last)
    `@fwd_k` and `@bwd_k`, following the contract in
    include/lamina/Runtime/DistProgram.h:

    * `@fwd_k(boundary..., inputs..., params...) -> (boundary..., residuals...)`
      where the boundary values are the activations that cross from module
      `k-1` to `k` (usually the residual stream) and, for the last module,
      the only output is the loss;
    * `@bwd_k(same args..., residuals..., cotangents...) ->
      (grad of each boundary arg..., grad of each trainable param...)`,
      built by the same reverse pass as graph-autodiff.

    With `recompute` (activation checkpointing, the default) `@bwd_k`
    recomputes the module's forward from its boundary inputs and no
    residuals are kept; without it `@fwd_k` returns every forward value the
    backward reads. Values that do not depend on a trainable parameter
    (position ids, masks, rotary tables) are recomputed in every module
    that reads them rather than sent. Needs a `dist.chain` on @forward
    (dist-discover-modules) and the loss as an output named `loss`
    (graph-add-loss); replaces @forward.

    ```mlir
    func.func @fwd_1(%x: tensor<2x16x64xf32> {graph.kind = "boundary", graph.name = "boundary:0:0"},
                     %w: tensor<64x64xf32> {graph.kind = "trainable", graph.name = "h.1.attn.w"}, ...)
        -> tensor<2x16x64xf32> attributes {dist.outlined = #dist.outlined<module = 1, name = "layer.1", num_in = 1, num_out = 1, num_residuals = 0>}
    ```
  }];
  let dependentDialects = ["::lamina::ir::dist::DistDialect"];
  let options = [
    Option<"recompute", "recompute", "bool", /*default=*/"true",
           "Backward functions recompute the module's forward (keep only "
           "module inputs)">,
    Option<"moduleRegex", "module-regex", "std::string", /*default=*/"",
           "Regex whose first capture group names a layer (when @forward "
           "has no dist.chain yet)">,
    Option<"loss", "loss", "std::string", /*default=*/"\"\"",
           "The output that is the loss (default: graph.train's, else "
           "'loss')">,
  ];
  let statistics = [
    Statistic<"numModules", "modules", "Modules outlined">,
    Statistic<"numBoundary", "boundary-values", "Values crossing module boundaries">,
    Statistic<"numCloned", "cloned-ops", "Parameter-free ops recomputed in a later module">,
  ];
}


def DistHoistParamCasts : Pass<"dist-hoist-param-casts", "mlir::ModuleOp"> {
  let summary = "The module functions' f16/bf16 parameter casts become "
                "arguments";
  let description = [{
    graph-hoist-param-casts for a distributed program
    (include/lamina/Runtime/DistProgram.h): every f16/bf16 cast of a
    trainable argument in `@fwd_k` or `@bwd_k` is replaced by an argument
    of kind `param_copy` named after the parameter. Module k's two
    functions get the same copies (those either of them casts), inserted
    after the forward's own arguments: at the end of `@fwd_k`, and in
    `@bwd_k` after its forward-argument prefix, before the residuals and
    cotangents, so the backward still starts with the forward's arguments.
    The runtime (lib/Runtime/Dist) keeps each module's copies: cast from
    the parameters at the start and after a restore, stored by the
    optimizer's kernel with each update (ZeRO 0, and the unsharded tied
    parameters) or cast once after the parameters' all-gather (ZeRO 1 and
    2); a micro-batch's forward, recomputation and backward no longer cast
    every weight. After dist-outline-modules and autocast.

    With `every-read=bf16` (or f16), every weight a module reads gets a
    copy and every read goes through it (ir::graph::hoistParamCasts); both
    functions' `#dist.outlined` then say `copies_only = true`, and
    the runtime leaves the f32 weight arguments unbound. That is what lets
    ZeRO 3 all-gather the copies (half the bytes of f32) instead of the
    f32 weights.
  }];
  let options = [
    Option<"everyRead", "every-read", "std::string", /*default=*/"\"\"",
           "bf16 or f16: every read of a weight goes through its copy">,
  ];
  let statistics = [
    Statistic<"numHoisted", "hoisted", "parameter casts replaced by a copy">,
    Statistic<"numModules", "modules", "modules given copies">,
  ];
}

def DistNarrowResiduals : Pass<"dist-narrow-residuals", "mlir::ModuleOp"> {
  let summary = "What a module keeps for its backward is stored in bf16/f16 "
                "where one function would store it so";
  let description = [{
    Without recomputation (`--recompute none`) a module's forward returns
    the values its backward reads as residuals. graph-fuse-epilogues
    stores a bf16 product narrow when only elementwise steps read it (an
    MLP's pre-activation) or only cross-entropy (the logits), but must keep
    a function result's type; this pass narrows the pair: a product
    `@fwd_k` returns as `residual:N` is stored in its operands' type when
    its other readers there and the readers of `@bwd_k`'s argument
    `residual:N` would allow it in one function, and the argument takes the
    type too (ir::graph::narrowResiduals). The module then computes what one
    function computes (a backward recomputing the forward, a single-process
    step), and keeps half the bytes of those values per micro-batch in
    flight: the logits ([tokens, vocabulary], a language model's largest
    activation) and each layer's MLP pre-activation. After
    graph-fuse-epilogues.

    ```mlir
    func.func @fwd_1(...) -> (tensor<f32>, tensor<2x16x64xf32>) {
      %logits = graph.matmul %h, %w : (tensor<2x16x32xbf16>, ...) -> tensor<2x16x64xf32>
      ...
      return %loss, %logits      // graph.output_names = ["loss", "residual:0"]
    // becomes
      %logits = graph.matmul %h, %w : (...) -> tensor<2x16x64xbf16>
    func.func @bwd_1(..., %r: tensor<2x16x64xbf16> {graph.kind = "residual", graph.name = "residual:0"}, ...)
    ```
  }];
  let statistics = [
    Statistic<"numNarrowed", "narrowed", "residual products stored narrow">,
  ];
}

def DistTpPlan : Pass<"dist-tp-plan", "mlir::ModuleOp"> {
  let summary = "Splits each module's layers over a tensor-parallel group "
                "(Megatron's column/row pairs, from the dataflow)";
  let description = [{
    Tensor parallelism's plan (docs/tp-design.md), on the outlined modules
    (after dist-outline-modules). In each module's forward a GEMM with a
    trainable right operand whose output reaches, through ops that carry a
    split (elementwise, reshapes, transposes, slices, concats, attention
    on its heads), only the contraction of other such GEMMs and residual
    outputs is **column-parallel** (its weight split on the output dim),
    and the GEMMs it reaches are **row-parallel** (split on the input dim):
    attention's q/k/v and output projections, an MLP's (gated) first and
    second GEMMs. Names play no part. The vocabulary is split too: an
    embedding table's rows (a gather from a trainable [V, H] table), the
    LM head's columns (a GEMM whose output reaches only the cross-entropy's
    logits) and the cross-entropy over them (VocabParallel.cpp). Norms stay
    replicated; with `sequence-parallel` the boundary values (and a
    vocabulary-parallel embedding's output, as its readers read it) are
    split on the sequence and every GEMM whose weight is split on its output
    dim reads its input whole (an all-gather after partition). Each split
    argument's dim is recorded as `graph.tp_split` (the runtime loads that
    block of the weight).

    The pass writes a `shard.grid @tp` of shape `tp` and pins the seeds
    with `shard.shard` annotations, the boundary outputs replicated; runs
    upstream's `sharding-propagation` on the forward (the graph ops'
    ShardingInterface models: heads, rotary, grouped-query key/value
    heads); then pins the backward to the forward's choices: each weight
    and residual as the forward has it, each weight gradient as its
    weight, the boundary values and their gradients replicated, and
    propagates it. Upstream's `shard-partition` then gives both functions
    one rank's form: shard-shaped weights and activations, one
    `shard.all_reduce` after each row-parallel GEMM forward and on the
    input gradient of each column-parallel group backward.

    ```mlir
    // lamina-opt m.mlir -dist-tp-plan=tp=2 \
    //   --pass-pipeline='builtin.module(func.func(shard-partition))'
    func.func @fwd_1(%x: tensor<2x16x32xf32>, %w1: tensor<64x32xf32>, ...) {
      %h = graph.matmul %x, %w1t : ... -> tensor<2x16x64xf32>
      ...
      %y = graph.matmul %g, %w2t : ... -> tensor<2x16x32xf32>
      %sum = shard.all_reduce %y on @tp grid_axes = [0] ...
    ```

    A weight read by a column- and a row-parallel GEMM is refused naming
    it. A group whose attention has heads the group does not divide
    (grouped-query attention with fewer key/value heads than ranks) stays
    whole on every rank, with a remark naming the attention, as does a
    group with a weight `replicate` matches (`lamina compile
    --tp-replicate`); a width the group does not divide is refused by
    partition, naming the op; a split value an op has no rule for is read
    whole, and a remark names both ops (that part of the layer then runs
    whole on every rank). `tp` 1: nothing changes.
  }];
  let dependentDialects = ["::mlir::shard::ShardDialect"];
  let options = [
    Option<"tp", "tp", "unsigned", /*default=*/"1",
           "Ranks of a tensor-parallel group">,
    Option<"sequenceParallel", "sequence-parallel", "bool",
           /*default=*/"false",
           "Megatron's sequence parallelism: the values between a row- and "
           "the next column-parallel GEMM (boundaries, norms, residual "
           "adds) split on the sequence dim, all-gathered before each "
           "column GEMM and reduce-scattered after each row GEMM">,
    Option<"replicate", "replicate", "std::string", /*default=*/"\"\"",
           "Weights (llvm::Regex, matched anywhere in the name) whose "
           "column/row group stays whole on every rank">,
  ];
  let statistics = [
    Statistic<"numSplit", "split-weights", "weights split over the group">,
  ];
}

def DistTpCombineSums : Pass<"dist-tp-combine-sums", "mlir::func::FuncOp"> {
  let summary = "One all-reduce for a sum of all-reduced partial sums; a "
                "reduce-scatter for a sliced sum";
  let description = [{
    After `shard-partition`, a column-parallel group's input gradient is
    the sum of its GEMMs' partial products, each all-reduced (attention's
    q, k and v: three). The sum of all-reduces is the all-reduce of the
    sum, so the rewrite pattern
    `add(all_reduce(a), all_reduce(b)) -> all_reduce(add(a, b))` (same
    grid, axes and sum, equal shapes, each all-reduce read only there),
    applied by the greedy driver, leaves one all-reduce per group: the
    backward's two per layer that Megatron-LM issues. Same values up to the
    order of the additions. Under sequence parallelism a sum whose rank
    then keeps a slice, `all_slice(all_reduce(x))`, becomes
    `reduce_scatter(x)` (half the bytes).

    ```mlir
    %0 = shard.all_reduce %a on @tp grid_axes = [0] : ...
    %1 = shard.all_reduce %b on @tp grid_axes = [0] : ...
    %2 = graph.add %0, %1 : ...
    // becomes
    %0 = graph.add %a, %b : ...
    %1 = shard.all_reduce %0 on @tp grid_axes = [0] : ...
    ```
  }];
}

#endif
