// The module's rt.dist (convert-dist-to-rt) makes the mode dist (graph.train
// says the model computes its own loss; dist.outlined that the backwards
// recompute): the outlined module functions, each pipeline rank's step
// function (here gpipe over 2 pipeline ranks, 2 micro-batches; each call
// with its step-buffer offsets, -1 where it has none) and the
// DistSpec tables naming them.
// RUN: lamina-opt %s -graph-add-loss="kind=output output=loss" -dist-outline-modules -dist-schedule="schedule=gpipe pp=2 micro-batches=2 eval=true" -dist-insert-comm -dist-verify-schedule -dist-build-steps -convert-graph-to-rt -convert-dist-to-rt -rt-post-receives -rt-wait-sends -rt-retire-reductions -rt-verify-steps -rt-plan-step-buffers -convert-rt-to-emitc=model-path=/m.onnx | lamina-translate --mlir-to-cpp | FileCheck %s
// RUN: not lamina-opt %s -graph-add-loss="kind=output output=loss" -dist-outline-modules -convert-graph-to-rt -convert-rt-to-emitc=mode=dist 2>&1 | FileCheck %s --check-prefix=NOSCHED
// Rank 1 waiting for micro-batch 1's activation before micro-batch 0's
// (the two receives swapped): MPI matches by tag, so the host program is
// fine; NCCL matches a pair's transfers in order, so target=cuda refuses.
// RUN: lamina-opt %s -graph-add-loss="kind=output output=loss" -dist-outline-modules -dist-schedule="schedule=gpipe pp=2 micro-batches=2" -dist-insert-comm -dist-verify-schedule -dist-build-steps -convert-graph-to-rt -convert-dist-to-rt -rt-post-receives -rt-wait-sends -rt-retire-reductions -rt-verify-steps -rt-plan-step-buffers | sed -e '/rt.step_recv/{s/0, 0 from 0/X/;s/0, 1 from 0/0, 0 from 0/;s/X/0, 1 from 0/}' > %t.swapped.mlir
// RUN: lamina-opt %t.swapped.mlir -convert-rt-to-emitc=model-path=/m.onnx | lamina-translate --mlir-to-cpp | FileCheck %s --check-prefix=SWAPPED
// RUN: not lamina-opt %t.swapped.mlir -convert-rt-to-emitc="model-path=/m.onnx target=cuda" 2>&1 | FileCheck %s --check-prefix=ORDER
// Step functions whose step buffer was not planned are refused.
// RUN: not lamina-opt %s -graph-add-loss="kind=output output=loss" -dist-outline-modules -dist-schedule="schedule=gpipe pp=2 micro-batches=2" -dist-insert-comm -dist-build-steps -convert-graph-to-rt -convert-dist-to-rt -convert-rt-to-emitc=model-path=/m.onnx 2>&1 | FileCheck %s --check-prefix=UNPLANNED
// UNPLANNED: step function @lamina_step_0 has no rt.step_buffer_bytes (run rt-plan-step-buffers)

// CHECK: #include "lamina/Runtime/DistProgram.h"
// CHECK: static void lamina_fwd_0(
// CHECK: static const lamina::rt::ArgSpec lamina_bwd_0_args[3] = {{.*}}"model.layers.0.w", lamina::rt::ArgKind::Trainable{{.*}}"x", lamina::rt::ArgKind::Input{{.*}}"grad:boundary:0:0", lamina::rt::ArgKind::Cotangent
// CHECK: static void lamina_bwd_0(
// CHECK: static void lamina_fwd_1(
// CHECK: static const lamina::rt::ArgSpec lamina_bwd_1_args[3] = {{.*}}"boundary:0:0", lamina::rt::ArgKind::Boundary{{.*}}"model.layers.1.w", lamina::rt::ArgKind::Trainable{{.*}}"grad:loss", lamina::rt::ArgKind::Cotangent
// CHECK: static void lamina_bwd_1(
// Each pipeline rank's step: its calls of the step library in schedule
// order. Rank 0: F0.0 Sa0.0>1 F0.1 Sa0.1>1 Rg0.0<1 B0.0 Rg0.1<1 B0.1 OPT,
// the receives posted ahead.
// CHECK-LABEL: static void lamina_step_0(lamina::rt::StepState* v1) {
// CHECK-NEXT:   lamina::rt::step::postRecv(v1, lamina::rt::step::Payload::Gradient, 0, 0, 1, 0);
// CHECK-NEXT:   lamina::rt::step::forward(v1, 0, 0, -1, -1, 64);
// CHECK-NEXT:   lamina::rt::step::send(v1, lamina::rt::step::Payload::Activation, 0, 0, 1, 64);
// CHECK-NEXT:   lamina::rt::step::forward(v1, 0, 1, -1, -1, 128);
// CHECK-NEXT:   lamina::rt::step::send(v1, lamina::rt::step::Payload::Activation, 0, 1, 1, 128);
// CHECK-NEXT:   lamina::rt::step::postRecv(v1, lamina::rt::step::Payload::Gradient, 0, 1, 1, 192);
// CHECK-NEXT:   lamina::rt::step::recv(v1, lamina::rt::step::Payload::Gradient, 0, 0, 1, 0);
// CHECK-NEXT:   lamina::rt::step::waitSend(v1, lamina::rt::step::Payload::Activation, 0, 0, 1);
// CHECK-NEXT:   lamina::rt::step::backward(v1, 0, 0, -1, -1, 0, -1);
// CHECK-NEXT:   lamina::rt::step::accumulate(v1, 0, -1);
// CHECK-NEXT:   lamina::rt::step::recv(v1, lamina::rt::step::Payload::Gradient, 0, 1, 1, 192);
// CHECK-NEXT:   lamina::rt::step::waitSend(v1, lamina::rt::step::Payload::Activation, 0, 1, 1);
// CHECK-NEXT:   lamina::rt::step::backward(v1, 0, 1, -1, -1, 192, -1);
// CHECK-NEXT:   lamina::rt::step::accumulate(v1, 0, -1);
// CHECK-NEXT:   lamina::rt::step::optimizer(v1);
// CHECK-NEXT:   return;
// CHECK-LABEL: static void lamina_step_1(
// CHECK: lamina::rt::step::backward(v1, 1, 1, 64, -1, -1, 0);
// CHECK-NEXT: lamina::rt::step::accumulate(v1, 1, -1);
// CHECK-NEXT: lamina::rt::step::send(v1, lamina::rt::step::Payload::Gradient, 0, 1, 0, 0);
// CHECK-NEXT: lamina::rt::step::optimizer(v1);
// CHECK-NEXT: lamina::rt::step::waitSend(v1, lamina::rt::step::Payload::Gradient, 0, 0, 0);
// CHECK-NEXT: lamina::rt::step::waitSend(v1, lamina::rt::step::Payload::Gradient, 0, 1, 0);
// CHECK-NEXT: return;
// The evaluation step.
// CHECK-LABEL: static void lamina_eval_step_0(
// CHECK-NEXT:   lamina::rt::step::forward(v1, 0, 0, -1, -1, 0);
// CHECK-NEXT:   lamina::rt::step::send(v1, lamina::rt::step::Payload::Activation, 0, 0, 1, 0);
// CHECK-NEXT:   lamina::rt::step::forward(v1, 0, 1, -1, -1, 64);
// CHECK-NEXT:   lamina::rt::step::send(v1, lamina::rt::step::Payload::Activation, 0, 1, 1, 64);
// CHECK-NEXT:   lamina::rt::step::waitSend(v1, lamina::rt::step::Payload::Activation, 0, 0, 1);
// CHECK-NEXT:   lamina::rt::step::waitSend(v1, lamina::rt::step::Payload::Activation, 0, 1, 1);
// CHECK-NEXT:   return;
// CHECK-LABEL: static void lamina_eval_step_1(
// CHECK-NEXT:   lamina::rt::step::postRecv(v1, lamina::rt::step::Payload::Activation, 0, 0, 0, 0);
// CHECK-NEXT:   lamina::rt::step::postRecv(v1, lamina::rt::step::Payload::Activation, 0, 1, 0, 64);
// CHECK-NEXT:   lamina::rt::step::recv(v1, lamina::rt::step::Payload::Activation, 0, 0, 0, 0);
// CHECK-NEXT:   lamina::rt::step::forward(v1, 1, 0, 0, -1, -1);
// CHECK-NEXT:   lamina::rt::step::recv(v1, lamina::rt::step::Payload::Activation, 0, 1, 0, 64);
// CHECK-NEXT:   lamina::rt::step::forward(v1, 1, 1, 64, -1, -1);
// CHECK-NEXT:   return;
// CHECK-NOT: ActionSpec
// CHECK: static const lamina::rt::ModuleSpec lamina_modules[2] = {{[{][{]}}"layer.0", {"fwd_0"
// CHECK: static const lamina::rt::StepFn lamina_steps[2] = {lamina_step_0, lamina_step_1};
// CHECK: static const lamina::rt::StepFn lamina_eval_steps[2] = {lamina_eval_step_0, lamina_eval_step_1};
// CHECK: static const int64_t lamina_step_buffer_bytes[2] = {256LL, 192LL};
// CHECK: static const int64_t lamina_eval_step_buffer_bytes[2] = {128LL, 128LL};
// CHECK: static const int lamina_edges[4] = {0, 1, 1, 0};
// CHECK: static const int lamina_module_rank[2] = {0, 1};
// CHECK: static const int64_t lamina_flat_params[2] = {16LL, 16LL};
// CHECK: static const lamina::rt::DistSpec lamina_dist = {"/m.onnx", lamina_modules, 2, 2, 1, 2, 0, "gpipe", true, lamina_steps, lamina_eval_steps, lamina_step_buffer_bytes, lamina_eval_step_buffer_bytes, lamina_edges, 2, 2, lamina_module_rank, lamina_flat_params, lamina::rt::LossKind::Output, nullptr, int64_t(0LL), int64_t(-100LL)};
// CHECK: lamina::rt::distTrainMain(

// SWAPPED-LABEL: static void lamina_step_1(
// SWAPPED: lamina::rt::step::recv(v1, lamina::rt::step::Payload::Activation, 0, 1, 0, {{[0-9]+}});
// SWAPPED: lamina::rt::step::recv(v1, lamina::rt::step::Payload::Activation, 0, 0, 0, {{[0-9]+}});
// ORDER: convert-rt-to-emitc: the training step sends from pipeline rank 0 to pipeline rank 1 in another order than they are received; NCCL matches transfers in order (compile this schedule for the host)

// NOSCHED: convert-rt-to-emitc: mode=dist needs the module's rt.dist and step functions (run convert-dist-to-rt)

func.func @forward(%w0: tensor<4x4xf32> {graph.kind = "trainable", graph.name = "model.layers.0.w"},
                   %w1: tensor<4x4xf32> {graph.kind = "trainable", graph.name = "model.layers.1.w"},
                   %x: tensor<2x4xf32> {graph.kind = "input", graph.name = "x"})
    -> tensor<f32> attributes {graph.output_names = ["loss"]} {
  %0 = graph.matmul %x, %w0 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %1 = graph.matmul %0, %w1 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %2 = graph.reduce_sum %1 {axes = array<i64: 0, 1>, keepdims = false} : tensor<2x4xf32> -> tensor<f32>
  return %2 : tensor<f32>
}
