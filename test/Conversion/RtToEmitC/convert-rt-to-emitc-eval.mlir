// A training module (graph.train) with @eval_step: the loss-only function
// becomes a second ProgramSpec, emitted before the train step's, that the
// TrainSpec points to (`run --eval-data`); it must take the train step's
// arguments.
// RUN: lamina-opt %s -split-input-file -convert-graph-to-rt -convert-rt-to-emitc=model-path=/m.onnx -verify-diagnostics | lamina-translate --mlir-to-cpp | FileCheck %s

// CHECK: static void lamina_eval_step(
// CHECK: static const lamina::rt::ProgramSpec lamina_eval_program = {"/m.onnx", lamina_eval_args, 2, lamina_eval_outputs, 1, {{[0-9]+}}, lamina_eval_step};
// CHECK: static void lamina_train_step(
// CHECK: static const lamina::rt::ProgramSpec lamina_program = {"/m.onnx", lamina_args, 2, lamina_outputs, 2, {{[0-9]+}}, lamina_train_step};
// CHECK: static const lamina::rt::TrainSpec lamina_train = {nullptr, 0, &lamina_eval_program, lamina::rt::LossKind::CausalLM, int64_t(-100LL)};
// CHECK: lamina::rt::trainMain({{.*}}, lamina_program, lamina_train);
module attributes {graph.train = #graph.train<loss = causal_lm, output = "loss">} {
func.func @eval_step(%x: tensor<4xf32> {graph.name = "x", graph.kind = "input"},
                     %w: tensor<4xf32> {graph.name = "w", graph.kind = "trainable"})
    -> tensor<f32> attributes {graph.output_names = ["loss"]} {
  %p = graph.mul %x, %w : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %l = graph.reduce_sum %p {axes = array<i64: 0>, keepdims = false} : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}
func.func @train_step(%x: tensor<4xf32> {graph.name = "x", graph.kind = "input"},
                      %w: tensor<4xf32> {graph.name = "w", graph.kind = "trainable"})
    -> (tensor<f32>, tensor<4xf32>) attributes {graph.output_names = ["loss", "grad:w"]} {
  %p = graph.mul %x, %w : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %l = graph.reduce_sum %p {axes = array<i64: 0>, keepdims = false} : tensor<4xf32> -> tensor<f32>
  return %l, %x : tensor<f32>, tensor<4xf32>
}
}

// -----

module attributes {graph.train = #graph.train<loss = causal_lm, output = "loss">} {
// expected-error @+1 {{argument #1 of the evaluation entry @eval_step differs from @train_step's in 'graph.kind'}}
func.func @eval_step(%x: tensor<4xf32> {graph.name = "x", graph.kind = "input"},
                     %w: tensor<4xf32> {graph.name = "w", graph.kind = "constant"})
    -> tensor<f32> attributes {graph.output_names = ["loss"]} {
  %p = graph.mul %x, %w : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %l = graph.reduce_sum %p {axes = array<i64: 0>, keepdims = false} : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}
func.func @train_step(%x: tensor<4xf32> {graph.name = "x", graph.kind = "input"},
                      %w: tensor<4xf32> {graph.name = "w", graph.kind = "trainable"})
    -> (tensor<4xf32>, tensor<4xf32>) attributes {graph.output_names = ["loss", "grad:w"]} {
  return %x, %w : tensor<4xf32>, tensor<4xf32>
}
}
