// A training module: graph.train (graph-add-loss's record of the loss)
// makes the mode train, the entry @train_step, and gives the TrainSpec its
// labels input, vocabulary and ignored label; main hands it to trainMain.
// RUN: lamina-opt %s -convert-graph-to-rt -convert-rt-to-emitc=model-path=/models/m.onnx | lamina-translate --mlir-to-cpp | FileCheck %s

// CHECK: static const lamina::rt::ProgramSpec lamina_program =
// CHECK: static const lamina::rt::TrainSpec lamina_train = {"y", 50, nullptr, lamina::rt::LossKind::CrossEntropy, int64_t(7LL)};
// CHECK: main(
// CHECK: lamina::rt::trainMain({{.*}}, lamina_program, lamina_train);
// CHECK-NOT: programMain
module attributes {graph.train = #graph.train<loss = cross_entropy, output = "loss", labels = "y", vocab = 50, ignore_index = 7>} {
func.func @train_step(%x: tensor<4xf32> {graph.name = "x", graph.kind = "input"},
                      %y: tensor<4xi64> {graph.name = "y", graph.kind = "input"},
                      %w: tensor<4xf32> {graph.name = "w", graph.kind = "trainable"})
    -> (tensor<f32>, tensor<4xf32>) attributes {graph.output_names = ["loss", "grad:w"]} {
  %p = graph.mul %x, %w : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %l = graph.reduce_sum %p {axes = array<i64: 0>, keepdims = false} : tensor<4xf32> -> tensor<f32>
  return %l, %x : tensor<f32>, tensor<4xf32>
}
}
