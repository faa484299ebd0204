// RUN: lamina-opt %s --pass-pipeline='builtin.module(func.func(graph-ep-split-experts{ranks=2}))' --split-input-file --verify-diagnostics | FileCheck %s

// A mixture-of-experts layer (lamina compile --ep 2): 4 experts, 2 on each
// rank; 8 tokens' top-2 picks sent to the ranks holding them (blocks of
// 8 min(2, 2) = 16 rows), this rank's experts over the rows received, the
// results sent back and combined.
// CHECK-LABEL: func.func @layer
// CHECK-SAME: %[[GU:[^:]*]]: tensor<2x12x6xf32> {graph.ep_split = 2 : i64, graph.kind = "trainable", graph.name = "gate_up"}
// CHECK-SAME: %[[D:[^:]*]]: tensor<2x6x6xf32> {graph.ep_split = 2 : i64, graph.kind = "trainable", graph.name = "down"}
// CHECK: %[[ROWS:.*]], %[[N:.*]] = graph.moe_dispatch %{{.*}}, %[[I:.*]] {experts = 4 : i64, ranks = 2 : i64} : (tensor<8x6xf32>, tensor<8x2xi64>) -> (tensor<32x6xf32>, tensor<2x2xi64>)
// CHECK: %[[THERE:.*]], %[[GOT:.*]] = graph.moe_exchange %[[ROWS]], %[[N]]
// CHECK: %[[E:.*]] = graph.moe_row_experts %[[GOT]] : (tensor<2x2xi64>) -> tensor<32x1xi64>
// CHECK: %[[ONE:.*]] = graph.constant dense<1.000000e+00> : tensor<32x1xf32>
// CHECK: %[[OUT:.*]] = graph.moe %[[THERE]], %[[E]], %[[ONE]], %[[GU]], %[[D]]
// CHECK: %[[BACK:.*]], %{{.*}} = graph.moe_exchange %[[OUT]], %[[GOT]]
// CHECK: graph.moe_combine %[[BACK]], %[[I]], %{{.*}} {experts = 4 : i64, ranks = 2 : i64} : (tensor<32x6xf32>, tensor<8x2xi64>, tensor<8x2xf32>) -> tensor<8x6xf32>
// CHECK-NOT: graph.moe %{{.*}} : (tensor<8x6xf32>
func.func @layer(%x: tensor<8x6xf32> {graph.kind = "input", graph.name = "x"},
                 %i: tensor<8x2xi64> {graph.kind = "input", graph.name = "i"},
                 %w: tensor<8x2xf32> {graph.kind = "input", graph.name = "w"},
                 %gu: tensor<4x12x6xf32> {graph.kind = "trainable", graph.name = "gate_up"},
                 %d: tensor<4x6x6xf32> {graph.kind = "trainable", graph.name = "down"}) -> tensor<8x6xf32> {
  // expected-remark @+1 {{--ep 2: 2 of the 4 experts on each rank}}
  %y = graph.moe %x, %i, %w, %gu, %d : (tensor<8x6xf32>, tensor<8x2xi64>, tensor<8x2xf32>, tensor<4x12x6xf32>, tensor<4x6x6xf32>) -> tensor<8x6xf32>
  return %y : tensor<8x6xf32>
}

// -----
// Experts the ranks do not divide.
func.func @uneven(%x: tensor<8x6xf32> {graph.kind = "input", graph.name = "x"},
                  %i: tensor<8x2xi64> {graph.kind = "input", graph.name = "i"},
                  %w: tensor<8x2xf32> {graph.kind = "input", graph.name = "w"},
                  %gu: tensor<3x12x6xf32> {graph.kind = "trainable", graph.name = "gate_up"},
                  %d: tensor<3x6x6xf32> {graph.kind = "trainable", graph.name = "down"}) -> tensor<8x6xf32> {
  // expected-error @+1 {{--ep 2: the 3 experts of this mixture-of-experts layer do not split evenly over the ranks}}
  %y = graph.moe %x, %i, %w, %gu, %d : (tensor<8x6xf32>, tensor<8x2xi64>, tensor<8x2xf32>, tensor<3x12x6xf32>, tensor<3x6x6xf32>) -> tensor<8x6xf32>
  return %y : tensor<8x6xf32>
}

// -----
// Experts' weights something else reads stay whole: an error.
func.func @shared_weights(%x: tensor<8x6xf32> {graph.kind = "input", graph.name = "x"},
                          %i: tensor<8x2xi64> {graph.kind = "input", graph.name = "i"},
                          %w: tensor<8x2xf32> {graph.kind = "input", graph.name = "w"},
                          %gu: tensor<4x12x6xf32> {graph.kind = "trainable", graph.name = "gate_up"},
                          %d: tensor<4x6x6xf32> {graph.kind = "trainable", graph.name = "down"}) -> (tensor<8x6xf32>, tensor<4x6x6xf32>) {
  // expected-error @+1 {{--ep: the experts' weights of this mixture-of-experts layer must be trainable initializers that only it reads}}
  %y = graph.moe %x, %i, %w, %gu, %d : (tensor<8x6xf32>, tensor<8x2xi64>, tensor<8x2xf32>, tensor<4x12x6xf32>, tensor<4x6x6xf32>) -> tensor<8x6xf32>
  %n = graph.neg %d : tensor<4x6x6xf32>
  return %y, %n : tensor<8x6xf32>, tensor<4x6x6xf32>
}
