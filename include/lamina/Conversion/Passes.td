//===- Passes.td - Lamina conversion passes ----------------*- tablegen -*-===//

#ifndef LAMINA_CONVERSION_PASSES
#define LAMINA_CONVERSION_PASSES

include "mlir/Pass/PassBase.td"

def ConvertGraphToRt : Pass<"convert-graph-to-rt", "mlir::func::FuncOp"> {
  let summary = "Bufferize a graph function onto a planned arena and call the "
                "runtime's kernels";
  let description = [{
    Turns a `func.func` of graph ops into one that takes an `!rt.arena`
    first, then its arguments as memrefs, and returns memrefs. Every result
    of a graph op becomes an `rt.view` of the arena at an offset chosen by a
    static memory plan, and the op becomes an `rt.call` of its host kernel.
    The plan is computed first; then a dialect conversion (tensors to
    memrefs, one pattern per op family) rewrites the function in place.
    A graph function calls no other (the `dist` ops that name functions are
    outside them), so each is lowered on its own, in parallel.

    The memory plan: each value lives from the op that defines it to its last
    use (results to the end). Values are placed largest first at the lowest
    offset that no value live at the same time occupies (64-byte aligned).
    Two values share storage on purpose: a reshape result aliases its input,
    and an elementwise op whose operand dies at the op writes its result
    over that operand (the kernels allow it). The function gets
    `rt.arena_bytes` (the plan's peak) and `rt.tensor_bytes` (the sum of all
    values, what no reuse would need).

    Before:
    ```mlir
    func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
      %0 = graph.exp %x : tensor<4xf32>
      return %0 : tensor<4xf32>
    }
    ```
    After:
    ```mlir
    func.func @forward(%arena: !rt.arena, %x: memref<4xf32>) -> memref<4xf32>
        attributes {rt.arena_bytes = 64 : i64, rt.tensor_bytes = 64 : i64} {
      %0 = rt.view %arena[0] : memref<4xf32>
      rt.call "lamina::rt::unary"(%x, %0) {args = ["lamina::rt::UnaryOp::Exp",
          0 : index, 1 : index], where = "..."} : memref<4xf32>, memref<4xf32>
      return %0 : memref<4xf32>
    }
    ```
    An op without a host kernel is an error naming the op and its ONNX node.

    A tensor-parallel module function (dist-tp-plan, shard-partition) also
    holds upstream `shard` collectives; each becomes an `rt.call` of the
    runtime's tensor-parallel group (`include/lamina/Runtime/TensorParallel.h`):
    `shard.all_reduce` (sum or max; in place when its operand dies there),
    `shard.all_gather`, `shard.reduce_scatter` and `shard.all_slice` with
    their axis, and the member's index
    (`tensor.from_elements(arith.index_cast(shard.process_linear_index))`)
    as one call writing its tensor, the scalar ops without a buffer:
    ```mlir
    rt.call "lamina::rt::tp::allReduce"(%p, %s) {args = [
        "lamina::rt::GroupReduce::Sum", 0 : index, 1 : index], where = "..."}
        : memref<2x8x32xf32>, memref<2x8x32xf32>
    ```
  }];
  let dependentDialects = ["::lamina::ir::rt::RtDialect",
                           "::mlir::memref::MemRefDialect"];
  let statistics = [
    Statistic<"numCalls", "kernel-calls", "Kernel calls emitted">,
    Statistic<"numAliased", "aliased-values",
              "Values stored over another (reshape views, in-place ops)">,
  ];
}

def ConvertDistToRt : Pass<"convert-dist-to-rt", "mlir::ModuleOp"> {
  let summary = "Lower each pipeline rank's dist.step to an rt step function";
  let description = [{
    After convert-graph-to-rt: every `dist.step` of a `dist.program`
    (dist-build-steps) becomes a `func.func @lamina_step_P` (the
    `forward_only` program's: `@lamina_eval_step_P`) taking the rank's
    `!rt.step`, with `rt.step_pp = P` and its effective ZeRO level `rt.step_zero` (0 with
    one replica). Its body is the step's actions in schedule order as
    `rt.step_*` ops (`lamina::schedule::directStep`), with every wait at
    the latest point that is correct and no overlap decided yet:

    * each receive is posted where it is waited for (`rt.step_recv`);
    * each send is waited for (`rt.step_wait_send`) at the end of the step;
    * at ZeRO 3, `rt.step_use_weights k` before the first call of each run
      of module k's forwards or backwards: the wait for the all-gather the
      schedule started;
    * each backward is followed by the `rt.step_accumulate` of its
      parameter gradients;
    * every gradient reduction the schedule started is waited for
      (`rt.step_wait_gradients k`) right before the optimizer, then the
      shared parameters' gradient sums started and waited for; at the
      end, levels 1-2's parameter all-gathers and the shared parameters'.

    The rt passes then decide the overlap on these ops: `rt-post-receives`,
    `rt-wait-sends`, `rt-retire-reductions`, `rt-verify-steps` (the waits
    of all ranks cannot deadlock) and `rt-plan-step-buffers` (the offsets
    in each rank's step buffer).

    `dist.call @f[mb]` becomes `rt.step_call %s @f[mb]` (a backward's
    `dist.accumulate` an `rt.step_accumulate`), the transfers and
    collectives their `rt.step_*` twins. The training program's settings
    go to the module's `rt.dist`, a `#rt.dist` (kind, modules, pp, dp,
    micro_batches, zero, placement, and each module's flat parameter count
    `flat_params`; `tp`, the size of dist-tp-plan's grid `@tp`, for a
    tensor-parallel program, whose grid then goes) and the `dist.program`s
    are erased.

    ```mlir
    func.func @lamina_step_0(%s: !rt.step) attributes {rt.step_pp = 0 : i64, rt.step_zero = 0 : i64} {
      rt.step_call %s @fwd_0[0]
      rt.step_send %s 0, 0 to 1
      rt.step_recv %s gradient 0, 0 from 1
      rt.step_call %s @bwd_0[0]
      rt.step_accumulate %s 0
      rt.step_optimizer %s
      rt.step_wait_send %s 0, 0 to 1
      return
    }
    ```
  }];
  let dependentDialects = ["::lamina::ir::rt::RtDialect",
                           "::mlir::func::FuncDialect"];
}

def ConvertRtToEmitC : Pass<"convert-rt-to-emitc", "mlir::ModuleOp"> {
  let summary = "Lower rt functions to EmitC: one C++ program per module";
  let description = [{
    Each rt function becomes an `emitc.func` taking
    `(const lamina::rt::Tensor *args, void *arena)`: buffers are
    `lamina::rt::Tensor` views (argument `i` is `args[i]`, a view is
    `lamina::rt::gen::view(arena, offset, dtype, rank, shape)`), shapes and
    integer arrays are static globals, constants are static word arrays, and
    each `rt.call` is a call checked by `lamina::rt::checkKernel`. The module
    also gets the `lamina::rt::ProgramSpec` tables (argument names, kinds,
    types, output offsets, arena size) and a `main` that hands them to
    `lamina::rt::programMain`, so `mlir-translate --mlir-to-cpp` of the
    result is a complete program.

    `mode=dist` lowers every function of dist-outline-modules (`@fwd_k`,
    `@bwd_k`) and every step function of convert-dist-to-rt instead: each
    `rt.step_*` op becomes a call of the runtime's step library
    (`lamina::rt::step::forward(s, module, mb)`, `send`, `postRecv`,
    `recv`, `allGather`, ...). It emits the `lamina::rt::DistSpec` tables
    (include/lamina/Runtime/DistProgram.h): per module its two functions,
    per pipeline rank its step function (and its evaluation step's), and
    the pairs of pipeline ranks the steps send over; `main` calls
    `lamina::rt::distTrainMain`. With `target=cuda` it refuses steps whose
    transfers between two ranks are received in another order than sent
    (NCCL matches them in order).

    `target=cuda` (inference and train) emits the same program for the CUDA
    backend: every kernel call goes to its `lamina::rt::cuda::` twin
    (include/lamina/Runtime/Cuda/Kernels.h, the host arguments plus a
    trailing `cudaStream_t`, the stream the entry runs on), constants are
    copied to the device once (`lamina::rt::cuda::gen::constant`), and
    `main` hands `lamina::rt::cuda::device()` to the driver, which keeps
    arguments, arena and optimizer state in device memory.

    A training program's loss settings (its kind, the labels input, the
    vocabulary token ids are checked against, the ignored label) come from
    the module's `graph.train` (graph-add-loss), and whether the backwards
    recompute from `dist.outlined` (dist-outline-modules): the IR, not
    options, carries them.

    Splat constants of more than 64 bytes are not written out: the program
    holds their one element and `gen::splat` fills a shared buffer on first
    use (a 1B GPT's training graph has gigabytes of zeros). A function with
    more than `calls-per-function` kernel calls is split into non-inlined
    parts called in order, each re-deriving the views it uses, so the C++
    compiler's optimiser never sees thousands of calls in one function.
  }];
  let dependentDialects = ["::mlir::emitc::EmitCDialect"];
  let options = [
    Option<"modelPath", "model-path", "std::string", /*default=*/"\"\"",
           "The ONNX file the program reads its weights from (recorded in "
           "the program; its --model flag overrides it)">,
    Option<"entryName", "entry", "std::string", /*default=*/"\"\"",
           "The function that becomes the program's entry (default: "
           "@train_step for a training program, else @forward)">,
    Option<"evalEntryName", "eval-entry", "std::string", /*default=*/"\"\"",
           "mode=train: a function computing only the loss, with the "
           "entry's arguments, that becomes the program's evaluation "
           "entry (`run --eval-data`; default: @eval_step when the module "
           "has one)">,
    Option<"mode", "mode", "std::string", /*default=*/"\"\"",
           "inference: `main` calls lamina::rt::programMain; train: the "
           "entry is a train step and `main` calls lamina::rt::trainMain; "
           "dist: the outlined modules and their step functions. Default: "
           "dist when the module has `rt.dist` (convert-dist-to-rt), train "
           "when it has "
           "graph.train, else inference">,
    Option<"target", "target", "std::string", /*default=*/"\"host\"",
           "host (CPU kernels) or cuda (device kernels on a stream; "
           "inference and train modes)">,
    Option<"callsPerFunction", "calls-per-function", "int64_t",
           /*default=*/"128",
           "Most kernel calls one emitted C++ function holds; longer "
           "functions are split into parts (GCC -O2 is superlinear in "
           "function size)">,
  ];
}

#endif // LAMINA_CONVERSION_PASSES
