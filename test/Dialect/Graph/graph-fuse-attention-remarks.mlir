// graph-fuse-attention says what it did not fuse and why, and when it took
// a finite causal fill (-1e4, GPT-2's masked_bias) as -inf.
// RUN: lamina-opt %s -split-input-file --mlir-print-op-on-diagnostic=false -graph-fuse-attention 2>&1 >/dev/null | FileCheck %s --check-prefix=REMARK
// RUN: lamina-opt %s -split-input-file -graph-fuse-attention 2>/dev/null | FileCheck %s

// A boolean causal mask selecting -10000 (Transformers' classic GPT-2) and
// an additive causal -10000 mask are causal attention.
// REMARK: remark: 2 attention chains fused with a causal mask filling -10000 taken as -inf: the probabilities are the model's while every row's largest kept score exceeds the fill by 104 (exp underflows to 0 in f32)
// CHECK-LABEL: func.func @masked_bias
// CHECK-COUNT-2: graph.attention {{.*}}{causal,
// CHECK-NOT: graph.softmax
func.func @masked_bias(%q: tensor<1x2x4x8xf32>, %kt: tensor<1x2x8x4xf32>, %v: tensor<1x2x4x8xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) {
  %keep = graph.constant dense<[[true, false, false, false], [true, true, false, false], [true, true, true, false], [true, true, true, true]]> : tensor<4x4xi1>
  %s = graph.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %fill = graph.constant dense<-1.000000e+04> : tensor<f32>
  %m = graph.select %keep, %s, %fill : (tensor<4x4xi1>, tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %p = graph.softmax %m {axis = 3 : i64} : tensor<1x2x4x4xf32>
  %o = graph.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  %add = graph.constant dense<[[0.0, -1.0e+04, -1.0e+04, -1.0e+04], [0.0, 0.0, -1.0e+04, -1.0e+04], [0.0, 0.0, 0.0, -1.0e+04], [0.0, 0.0, 0.0, 0.0]]> : tensor<4x4xf32>
  %s2 = graph.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %m2 = graph.add %s2, %add : (tensor<1x2x4x4xf32>, tensor<4x4xf32>) -> tensor<1x2x4x4xf32>
  %p2 = graph.softmax %m2 {axis = 3 : i64} : tensor<1x2x4x4xf32>
  %o2 = graph.matmul %p2, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o, %o2 : tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>
}

// -----

// A fill above -1e4 is no mask: the chain stays, and the remark says why.
// REMARK: remark: attention at node 'h.0/Softmax' not fused: a mask fills with -100, above -1e4: its keys keep weight; it runs as matmul, softmax, matmul and keeps the [batch, heads, queries, keys] scores
// CHECK-LABEL: func.func @weak_fill
// CHECK: graph.softmax
func.func @weak_fill(%q: tensor<1x2x4x8xf32>, %kt: tensor<1x2x8x4xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %keep = graph.constant dense<[[true, false, false, false], [true, true, false, false], [true, true, true, false], [true, true, true, true]]> : tensor<4x4xi1>
  %s = graph.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %fill = graph.constant dense<-1.000000e+02> : tensor<f32>
  %m = graph.select %keep, %s, %fill : (tensor<4x4xi1>, tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %p = graph.softmax %m {axis = 3 : i64} : tensor<1x2x4x4xf32> loc("h.0/Softmax")
  %o = graph.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// The probabilities returned as an output (output_attentions), in two
// layers: one remark with a count. A non-causal boolean mask filling -1e4
// would change fully masked rows if added as a bias: left, with the reason.
// A softmax that is not attention's (a classifier) is not reported.
// REMARK-DAG: remark: attention at node 'l0/Softmax' (and 1 more) not fused: the probabilities are read elsewhere too (the model returns or reuses them); it runs as matmul, softmax, matmul and keeps the [batch, heads, queries, keys] scores
// REMARK-DAG: remark: attention at node 'pad/Softmax' not fused: a boolean mask that is not causal fills with -10000, above -1e30 (use the dtype's minimum or -inf)
// REMARK-NOT: remark
// CHECK-LABEL: func.func @reported
func.func @reported(%q: tensor<1x2x4x8xf32>, %kt: tensor<1x2x8x4xf32>, %v: tensor<1x2x4x8xf32>, %pad: tensor<1x1x1x4xi1>, %logits: tensor<2x5xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>, tensor<2x5xf32>) {
  %s = graph.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %p = graph.softmax %s {axis = 3 : i64} : tensor<1x2x4x4xf32> loc("l0/Softmax")
  %o = graph.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  %s1 = graph.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %p1 = graph.softmax %s1 {axis = 3 : i64} : tensor<1x2x4x4xf32> loc("l1/Softmax")
  %o1 = graph.matmul %p1, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  %s2 = graph.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %fill = graph.constant dense<-1.000000e+04> : tensor<f32>
  %m2 = graph.select %pad, %fill, %s2 : (tensor<1x1x1x4xi1>, tensor<f32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p2 = graph.softmax %m2 {axis = 3 : i64} : tensor<1x2x4x4xf32> loc("pad/Softmax")
  %o2 = graph.matmul %p2, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  %c = graph.softmax %logits {axis = 1 : i64} : tensor<2x5xf32>
  return %o, %p, %o1, %p1, %o2, %c : tensor<1x2x4x8xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>, tensor<2x5xf32>
}
