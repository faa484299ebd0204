// RUN: lamina-opt %s -graph-add-loss="kind=cross-entropy labels=y ignore-index=-1" -graph-autodiff -graph-verify-train-step | FileCheck %s
// RUN: not lamina-opt %s -graph-add-loss="kind=mse" 2>&1 | FileCheck %s --check-prefix=KIND
// RUN: not lamina-opt %s -graph-add-loss="kind=cross-entropy" 2>&1 | FileCheck %s --check-prefix=NOLABELS
// RUN: not lamina-opt %s -graph-add-loss="kind=cross-entropy labels=z" 2>&1 | FileCheck %s --check-prefix=NOINPUT
// RUN: not lamina-opt %s -graph-add-loss="logits=out" 2>&1 | FileCheck %s --check-prefix=NOLOGITS
// KIND: error: graph-add-loss: unknown kind 'mse' (causal-lm, cross-entropy or output)
// NOLABELS: error: graph-add-loss: cross-entropy needs the 'labels' option naming an input
// NOINPUT: error: graph-add-loss: no input named 'z'
// NOLOGITS: error: graph-add-loss: no output named 'out'

// kind=cross-entropy: the labels input as given (no shift), its own ignore
// index; graph-autodiff then differentiates the new loss output. The module
// records the loss for the passes after it and the generated program.
// CHECK: module attributes {graph.train = #graph.train<loss = cross_entropy, output = "loss", labels = "y", vocab = 8, ignore_index = -1>}
// CHECK-LABEL: func.func @forward
// CHECK-SAME: graph.output_names = ["logits", "loss"]
// CHECK-NOT: graph.slice
// CHECK: graph.constant dense<-1> : tensor<i32>
// CHECK: graph.softmax_cross_entropy %{{.*}}, %arg1 {ignore_index = -1 : i64} : (tensor<2x4x8xf32>, tensor<2x4xi32>) -> tensor<2x4xf32>
// CHECK: graph.equal %arg1
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: graph.output_names = ["loss", "grad:w"]
// CHECK: graph.softmax_cross_entropy_grad %{{.*}}, %arg1, %{{.*}} {ignore_index = -1 : i64} : (tensor<2x4x8xf32>, tensor<2x4xi32>, tensor<2x4xf32>) -> tensor<2x4x8xf32>
func.func @forward(%w: tensor<2x4x8xf32> {graph.kind = "trainable", graph.name = "w"},
                   %y: tensor<2x4xi32> {graph.kind = "input", graph.name = "y"})
    -> tensor<2x4x8xf32> attributes {graph.output_names = ["logits"]} {
  %0 = graph.tanh %w : tensor<2x4x8xf32>
  return %0 : tensor<2x4x8xf32>
}
