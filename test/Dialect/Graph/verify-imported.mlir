// RUN: lamina-opt %s -graph-verify-imported -split-input-file -verify-diagnostics

// A well-formed import passes.
func.func @ok(%w: tensor<4xf32> {graph.name = "w", graph.kind = "trainable"},
              %x: tensor<4xf32> {graph.name = "x", graph.kind = "input"}) -> tensor<4xf32> {
  %0 = graph.mul %w, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----
// Shape arithmetic that should have folded is rejected.
func.func @unfolded() -> tensor<2xi64> {
  %c = graph.constant dense<[2, 3]> : tensor<2xi64>
  // expected-error @+1 {{unfolded constant computation survives import}}
  %d = graph.mul %c, %c : (tensor<2xi64>, tensor<2xi64>) -> tensor<2xi64>
  return %d : tensor<2xi64>
}

// -----
// Every argument says what it is.
// expected-error @+1 {{argument 0 lacks 'graph.name' or 'graph.kind'}}
func.func @unnamed(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
