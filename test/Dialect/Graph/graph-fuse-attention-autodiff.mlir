// RUN: lamina-opt %s -split-input-file -graph-fuse-attention -graph-autodiff -graph-verify-train-step | FileCheck %s
// RUN: lamina-opt %s -split-input-file -graph-fuse-attention -graph-autocast | FileCheck %s --check-prefix=CAST
// RUN: lamina-opt %s -split-input-file -graph-fuse-attention -graph-autocast=precision=f16 -graph-autodiff -graph-verify-train-step | FileCheck %s --check-prefix=F16

// One causal GPT-2 attention over projections of x: the train step runs one
// graph.attention and one graph.attention_grad, which reads the forward's
// operands, its out and lse and the gradient of out; the scores and their
// softmax gradient are never built. Its gradients go back through the
// head split to the three projections.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: graph.output_names = ["loss", "grad:wq", "grad:wk", "grad:wv"]
// CHECK-NOT: graph.softmax
// CHECK: %[[O:.*]], %[[L:.*]] = graph.attention %[[Q:.*]], %[[K:.*]], %[[V:.*]] {causal, scale = 5.000000e-01 : f64} : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> (tensor<1x2x4x4xf32>, tensor<1x2x4xf32>)
// CHECK-NOT: graph.attention
// CHECK-NOT: graph.softmax
// CHECK: %[[GQ:.*]], %[[GK:.*]], %[[GV:.*]] = graph.attention_grad %[[Q]], %[[K]], %[[V]], %[[O]], %[[L]], %{{.*}} {causal, scale = 5.000000e-01 : f64} : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4xf32>, tensor<1x2x4x4xf32>) -> (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>)
// CHECK-NOT: graph.attention
// CHECK-NOT: graph.softmax
// CHECK-DAG: graph.transpose %[[GQ]] {perm = array<i64: 0, 2, 1, 3>}
// CHECK-DAG: graph.transpose %[[GK]] {perm = array<i64: 0, 2, 1, 3>}
// CHECK-DAG: graph.transpose %[[GV]] {perm = array<i64: 0, 2, 1, 3>}
// CHECK: return

// With bf16 autocast (before autodiff, as lamina compile runs them): the
// projections are bf16 matmuls whose narrow results the head split and the
// attention read directly (no cast to f32 and back), the attention runs on
// bf16 with an f32 lse, and its out is cast back to f32 for the f32 ops
// after it.
// CAST-LABEL: func.func @forward
// CAST: %[[QM:.*]] = graph.matmul {{.*}} -> tensor<1x4x8xbf16>
// CAST: %[[KM:.*]] = graph.matmul {{.*}} -> tensor<1x4x8xbf16>
// CAST: %[[VM:.*]] = graph.matmul {{.*}} -> tensor<1x4x8xbf16>
// CAST-NOT: graph.cast
// CAST: %[[QR:.*]] = graph.reshape %[[QM]] : tensor<1x4x8xbf16> to tensor<1x4x2x4xbf16>
// CAST-NEXT: %[[Q:.*]] = graph.transpose %[[QR]] {perm = array<i64: 0, 2, 1, 3>} : tensor<1x4x2x4xbf16> -> tensor<1x2x4x4xbf16>
// CAST-NOT: graph.cast
// CAST: %[[O:.*]], %{{.*}} = graph.attention %[[Q]], %{{.*}}, %{{.*}} {causal, scale = 5.000000e-01 : f64} : (tensor<1x2x4x4xbf16>, tensor<1x2x4x4xbf16>, tensor<1x2x4x4xbf16>) -> (tensor<1x2x4x4xbf16>, tensor<1x2x4xf32>)
// CAST-NEXT: %[[OF:.*]] = graph.cast %[[O]] : tensor<1x2x4x4xbf16> to tensor<1x2x4x4xf32>
// CAST-NEXT: graph.mul %[[OF]], %[[OF]] : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>

// f16, then autodiff: the fused gradient runs on f16 too, reading the f32 lse.
// F16-LABEL: func.func @train_step
// F16-NOT: graph.softmax
// F16: %[[O:.*]], %[[L:.*]] = graph.attention {{.*}} -> (tensor<1x2x4x4xf16>, tensor<1x2x4xf32>)
// F16-NOT: graph.softmax
// F16: graph.attention_grad %{{.*}}, %{{.*}}, %{{.*}}, %[[O]], %[[L]], %{{.*}} {causal, scale = 5.000000e-01 : f64} : (tensor<1x2x4x4xf16>, tensor<1x2x4x4xf16>, tensor<1x2x4x4xf16>, tensor<1x2x4x4xf16>, tensor<1x2x4xf32>, tensor<1x2x4x4xf16>) -> (tensor<1x2x4x4xf16>, tensor<1x2x4x4xf16>, tensor<1x2x4x4xf16>)
// F16-NOT: graph.softmax
// F16: return
func.func @forward(%wq: tensor<8x8xf32> {graph.kind = "trainable", graph.name = "wq"},
                   %wk: tensor<8x8xf32> {graph.kind = "trainable", graph.name = "wk"},
                   %wv: tensor<8x8xf32> {graph.kind = "trainable", graph.name = "wv"},
                   %x: tensor<1x4x8xf32> {graph.kind = "input", graph.name = "x"})
    -> tensor<f32> attributes {graph.output_names = ["loss"]} {
  %mask = graph.constant dense<[[false, true, true, true], [false, false, true, true], [false, false, false, true], [false, false, false, false]]> : tensor<4x4xi1>
  %q0 = graph.matmul %x, %wq : (tensor<1x4x8xf32>, tensor<8x8xf32>) -> tensor<1x4x8xf32>
  %k0 = graph.matmul %x, %wk : (tensor<1x4x8xf32>, tensor<8x8xf32>) -> tensor<1x4x8xf32>
  %v0 = graph.matmul %x, %wv : (tensor<1x4x8xf32>, tensor<8x8xf32>) -> tensor<1x4x8xf32>
  %q1 = graph.reshape %q0 : tensor<1x4x8xf32> to tensor<1x4x2x4xf32>
  %q = graph.transpose %q1 {perm = array<i64: 0, 2, 1, 3>} : tensor<1x4x2x4xf32> -> tensor<1x2x4x4xf32>
  %k1 = graph.reshape %k0 : tensor<1x4x8xf32> to tensor<1x4x2x4xf32>
  %kt = graph.transpose %k1 {perm = array<i64: 0, 2, 3, 1>} : tensor<1x4x2x4xf32> -> tensor<1x2x4x4xf32>
  %v1 = graph.reshape %v0 : tensor<1x4x8xf32> to tensor<1x4x2x4xf32>
  %v = graph.transpose %v1 {perm = array<i64: 0, 2, 1, 3>} : tensor<1x4x2x4xf32> -> tensor<1x2x4x4xf32>
  %s = graph.matmul %q, %kt : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %c = graph.constant dense<2.000000e+00> : tensor<f32>
  %t = graph.div %s, %c : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %fill = graph.constant dense<-3.40282347E+38> : tensor<f32>
  %m = graph.select %mask, %fill, %t : (tensor<4x4xi1>, tensor<f32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = graph.softmax %m {axis = 3 : i64} : tensor<1x2x4x4xf32>
  %o = graph.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %sq = graph.mul %o, %o : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %l = graph.reduce_sum %sq {axes = array<i64: 0, 1, 2, 3>, keepdims = false} : tensor<1x2x4x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Grouped-query attention (4 query heads, 2 kv heads, repeat_kv as reshape
// -> broadcast -> reshape) with a padding bias from an input: the fused
// ops read the un-repeated k and v, so their gradients have 2 heads and no
// reduction over the repeats is built; the bias is passed to the gradient
// (it gets none).
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %[[PAD:[^:]*]]: tensor<1x1x1x4xf32> {graph.kind = "input", graph.name = "pad"}
// CHECK-NOT: graph.softmax
// CHECK-NOT: graph.broadcast {{.*}} to tensor<1x2x2x4x2xf32>
// CHECK: %[[O:.*]], %[[L:.*]] = graph.attention %[[Q:.*]], %[[K:.*]], %[[V:.*]], %[[PAD]] {scale = 0.7071067{{[0-9]*}} : f64} : (tensor<1x4x4x2xf32>, tensor<1x2x4x2xf32>, tensor<1x2x4x2xf32>, tensor<1x1x1x4xf32>) -> (tensor<1x4x4x2xf32>, tensor<1x4x4xf32>)
// CHECK-NOT: graph.softmax
// CHECK-NOT: graph.broadcast {{.*}} to tensor<1x2x2x4x2xf32>
// CHECK: graph.attention_grad %[[Q]], %[[K]], %[[V]], %[[O]], %[[L]], %{{.*}}, %[[PAD]] {scale = 0.7071067{{[0-9]*}} : f64} : ({{.*}}) -> (tensor<1x4x4x2xf32>, tensor<1x2x4x2xf32>, tensor<1x2x4x2xf32>)
// CHECK-NOT: graph.softmax
// CHECK-NOT: graph.reduce_sum {{.*}} : tensor<1x2x2x4x2xf32>
// CHECK: return
func.func @forward(%wq: tensor<8x8xf32> {graph.kind = "trainable", graph.name = "wq"},
                   %wk: tensor<8x4xf32> {graph.kind = "trainable", graph.name = "wk"},
                   %wv: tensor<8x4xf32> {graph.kind = "trainable", graph.name = "wv"},
                   %x: tensor<1x4x8xf32> {graph.kind = "input", graph.name = "x"},
                   %pad: tensor<1x1x1x4xf32> {graph.kind = "input", graph.name = "pad"})
    -> tensor<f32> attributes {graph.output_names = ["loss"]} {
  %q0 = graph.matmul %x, %wq : (tensor<1x4x8xf32>, tensor<8x8xf32>) -> tensor<1x4x8xf32>
  %q1 = graph.reshape %q0 : tensor<1x4x8xf32> to tensor<1x4x4x2xf32>
  %q = graph.transpose %q1 {perm = array<i64: 0, 2, 1, 3>} : tensor<1x4x4x2xf32> -> tensor<1x4x4x2xf32>
  %k0 = graph.matmul %x, %wk : (tensor<1x4x8xf32>, tensor<8x4xf32>) -> tensor<1x4x4xf32>
  %k1 = graph.reshape %k0 : tensor<1x4x4xf32> to tensor<1x4x2x2xf32>
  %k = graph.transpose %k1 {perm = array<i64: 0, 2, 1, 3>} : tensor<1x4x2x2xf32> -> tensor<1x2x4x2xf32>
  %v0 = graph.matmul %x, %wv : (tensor<1x4x8xf32>, tensor<8x4xf32>) -> tensor<1x4x4xf32>
  %v1 = graph.reshape %v0 : tensor<1x4x4xf32> to tensor<1x4x2x2xf32>
  %v = graph.transpose %v1 {perm = array<i64: 0, 2, 1, 3>} : tensor<1x4x2x2xf32> -> tensor<1x2x4x2xf32>
  %k5 = graph.reshape %k : tensor<1x2x4x2xf32> to tensor<1x2x1x4x2xf32>
  %kb = graph.broadcast %k5 : tensor<1x2x1x4x2xf32> to tensor<1x2x2x4x2xf32>
  %kr = graph.reshape %kb : tensor<1x2x2x4x2xf32> to tensor<1x4x4x2xf32>
  %v5 = graph.reshape %v : tensor<1x2x4x2xf32> to tensor<1x2x1x4x2xf32>
  %vb = graph.broadcast %v5 : tensor<1x2x1x4x2xf32> to tensor<1x2x2x4x2xf32>
  %vr = graph.reshape %vb : tensor<1x2x2x4x2xf32> to tensor<1x4x4x2xf32>
  %kt = graph.transpose %kr {perm = array<i64: 0, 1, 3, 2>} : tensor<1x4x4x2xf32> -> tensor<1x4x2x4xf32>
  %s = graph.matmul %q, %kt : (tensor<1x4x4x2xf32>, tensor<1x4x2x4xf32>) -> tensor<1x4x4x4xf32>
  %c = graph.constant dense<0.707106769> : tensor<f32>
  %t = graph.mul %s, %c : (tensor<1x4x4x4xf32>, tensor<f32>) -> tensor<1x4x4x4xf32>
  %a = graph.add %t, %pad : (tensor<1x4x4x4xf32>, tensor<1x1x1x4xf32>) -> tensor<1x4x4x4xf32>
  %p = graph.softmax %a {axis = 3 : i64} : tensor<1x4x4x4xf32>
  %o = graph.matmul %p, %vr : (tensor<1x4x4x4xf32>, tensor<1x4x4x2xf32>) -> tensor<1x4x4x2xf32>
  %sq = graph.mul %o, %o : (tensor<1x4x4x2xf32>, tensor<1x4x4x2xf32>) -> tensor<1x4x4x2xf32>
  %l = graph.reduce_sum %sq {axes = array<i64: 0, 1, 2, 3>, keepdims = false} : tensor<1x4x4x2xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A bias that depends on a trainable parameter is not fused (it would need
// a gradient): the backward keeps graph.softmax_grad.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: graph.output_names = ["loss", "grad:q", "grad:rel_bias"]
// CHECK-NOT: graph.attention
// CHECK: graph.softmax
// CHECK-NOT: graph.attention
// CHECK: graph.softmax_grad
func.func @forward(%q: tensor<1x2x4x4xf32> {graph.kind = "trainable", graph.name = "q"},
                   %w: tensor<1x2x4x4xf32> {graph.kind = "trainable", graph.name = "rel_bias"},
                   %k: tensor<1x2x4x4xf32> {graph.kind = "input", graph.name = "k"},
                   %v: tensor<1x2x4x4xf32> {graph.kind = "input", graph.name = "v"})
    -> tensor<f32> attributes {graph.output_names = ["loss"]} {
  %kt = graph.transpose %k {perm = array<i64: 0, 1, 3, 2>} : tensor<1x2x4x4xf32> -> tensor<1x2x4x4xf32>
  %s = graph.matmul %q, %kt : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %a = graph.add %s, %w : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = graph.softmax %a {axis = 3 : i64} : tensor<1x2x4x4xf32>
  %o = graph.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %sq = graph.mul %o, %o : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %l = graph.reduce_sum %sq {axes = array<i64: 0, 1, 2, 3>, keepdims = false} : tensor<1x2x4x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Autocast with q, k and v arguments: each is cast to bf16 once; the matmul
// after the attention reads its bf16 out through the head merge (transpose,
// reshape) without a cast, and the f32 residual add reads out cast back to
// f32.
// CAST: func.func @forward(%[[Q:[^:]*]]: tensor<1x2x4x4xf32> {graph.kind = "input", graph.name = "q"}, %[[K:[^:]*]]: tensor<1x2x4x4xf32> {{.*}}, %[[V:[^:]*]]: tensor<1x2x4x4xf32> {{.*}}, %[[WO:[^:]*]]: tensor<8x8xf32>
// CAST-NEXT: %[[QL:.*]] = graph.cast %[[Q]] : tensor<1x2x4x4xf32> to tensor<1x2x4x4xbf16>
// CAST-NEXT: %[[KL:.*]] = graph.cast %[[K]] : tensor<1x2x4x4xf32> to tensor<1x2x4x4xbf16>
// CAST-NEXT: %[[VL:.*]] = graph.cast %[[V]] : tensor<1x2x4x4xf32> to tensor<1x2x4x4xbf16>
// CAST-NEXT: %[[O:.*]], %{{.*}} = graph.attention %[[QL]], %[[KL]], %[[VL]] {causal, scale = 5.000000e-01 : f64} : (tensor<1x2x4x4xbf16>, tensor<1x2x4x4xbf16>, tensor<1x2x4x4xbf16>) -> (tensor<1x2x4x4xbf16>, tensor<1x2x4xf32>)
// CAST-NEXT: %[[OF:.*]] = graph.cast %[[O]] : tensor<1x2x4x4xbf16> to tensor<1x2x4x4xf32>
// CAST-DAG: %[[OT:.*]] = graph.transpose %[[O]] {perm = array<i64: 0, 2, 1, 3>} : tensor<1x2x4x4xbf16> -> tensor<1x4x2x4xbf16>
// CAST-DAG: %[[OM:.*]] = graph.reshape %[[OT]] : tensor<1x4x2x4xbf16> to tensor<1x4x8xbf16>
// CAST-DAG: %[[WL:.*]] = graph.cast %[[WO]] : tensor<8x8xf32> to tensor<8x8xbf16>
// CAST: %[[Y:.*]] = graph.matmul %[[OM]], %[[WL]] : (tensor<1x4x8xbf16>, tensor<8x8xbf16>) -> tensor<1x4x8xbf16>
// CAST-NOT: graph.cast %{{.*}} : tensor<{{.*}}xf32> to tensor<1x4x8xbf16>
// CAST: return
func.func @forward(%q: tensor<1x2x4x4xf32> {graph.kind = "input", graph.name = "q"},
                   %k: tensor<1x2x4x4xf32> {graph.kind = "input", graph.name = "k"},
                   %v: tensor<1x2x4x4xf32> {graph.kind = "input", graph.name = "v"},
                   %wo: tensor<8x8xf32> {graph.kind = "trainable", graph.name = "wo"})
    -> tensor<f32> attributes {graph.output_names = ["loss"]} {
  %mask = graph.constant dense<[[false, true, true, true], [false, false, true, true], [false, false, false, true], [false, false, false, false]]> : tensor<4x4xi1>
  %kt = graph.transpose %k {perm = array<i64: 0, 1, 3, 2>} : tensor<1x2x4x4xf32> -> tensor<1x2x4x4xf32>
  %s = graph.matmul %q, %kt : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %c = graph.constant dense<2.000000e+00> : tensor<f32>
  %t = graph.div %s, %c : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %fill = graph.constant dense<-3.40282347E+38> : tensor<f32>
  %m = graph.select %mask, %fill, %t : (tensor<4x4xi1>, tensor<f32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = graph.softmax %m {axis = 3 : i64} : tensor<1x2x4x4xf32>
  %o = graph.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %ot = graph.transpose %o {perm = array<i64: 0, 2, 1, 3>} : tensor<1x2x4x4xf32> -> tensor<1x4x2x4xf32>
  %om = graph.reshape %ot : tensor<1x4x2x4xf32> to tensor<1x4x8xf32>
  %y = graph.matmul %om, %wo : (tensor<1x4x8xf32>, tensor<8x8xf32>) -> tensor<1x4x8xf32>
  %r = graph.add %y, %om : (tensor<1x4x8xf32>, tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
  %l = graph.reduce_sum %r {axes = array<i64: 0, 1, 2>, keepdims = false} : tensor<1x4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}
