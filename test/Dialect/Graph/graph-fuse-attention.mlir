// RUN: lamina-opt %s -split-input-file -graph-fuse-attention | FileCheck %s

// GPT-2 as the exporters write it: k^T is transpose(reshape x) with perm
// [0, 2, 3, 1], the scores are divided by sqrt(D), a constant boolean causal
// mask selects -3.4e38. The transpose is rewritten to k's [0, 2, 1, 3], the
// mask and the rest of the chain are gone.
// CHECK-LABEL: func.func @gpt2
// CHECK-SAME: (%[[Q:.*]]: tensor<1x2x4x8xf32>, %[[X:.*]]: tensor<1x4x16xf32>, %[[V:.*]]: tensor<1x2x4x8xf32>)
// CHECK-NOT: graph.matmul
// CHECK-NOT: graph.softmax
// CHECK-NOT: graph.select
// CHECK-NOT: graph.constant
// CHECK: %[[R:.*]] = graph.reshape %[[X]] : tensor<1x4x16xf32> to tensor<1x4x2x8xf32>
// CHECK-NEXT: %[[K:.*]] = graph.transpose %[[R]] {perm = array<i64: 0, 2, 1, 3>} : tensor<1x4x2x8xf32> -> tensor<1x2x4x8xf32>
// CHECK-NEXT: %[[O:.*]], %{{.*}} = graph.attention %[[Q]], %[[K]], %[[V]] {causal, scale = 0.35355339{{[0-9]*}} : f64} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4xf32>)
// CHECK-NOT: graph.matmul
// CHECK-NOT: graph.softmax
// CHECK-NOT: perm = array<i64: 0, 2, 3, 1>
// CHECK: return %[[O]]
func.func @gpt2(%q: tensor<1x2x4x8xf32>, %x: tensor<1x4x16xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %mask = graph.constant dense<[[false, true, true, true], [false, false, true, true], [false, false, false, true], [false, false, false, false]]> : tensor<4x4xi1>
  %r = graph.reshape %x : tensor<1x4x16xf32> to tensor<1x4x2x8xf32>
  %kt = graph.transpose %r {perm = array<i64: 0, 2, 3, 1>} : tensor<1x4x2x8xf32> -> tensor<1x2x8x4xf32>
  %s = graph.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %c = graph.constant dense<2.82842708> : tensor<f32>
  %t = graph.div %s, %c : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %fill = graph.constant dense<-3.40282347E+38> : tensor<f32>
  %m = graph.select %mask, %fill, %t : (tensor<4x4xi1>, tensor<f32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = graph.softmax %m {axis = 3 : i64} : tensor<1x2x4x4xf32>
  %o = graph.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// GPT-2's whole block as exported: q, k^T and v transposed from the
// projections' [B, S, H, D], the output transposed back. The op runs
// seq_major on the projections themselves; no transpose is left.
// CHECK-LABEL: func.func @gpt2_seq_major
// CHECK-SAME: (%[[QX:.*]]: tensor<1x4x2x8xf32>, %[[KX:.*]]: tensor<1x4x2x8xf32>, %[[VX:.*]]: tensor<1x4x2x8xf32>)
// CHECK-NOT: graph.transpose
// CHECK: %[[O:.*]], %{{.*}} = graph.attention %[[QX]], %[[KX]], %[[VX]] {causal, scale = 0.35355339{{[0-9]*}} : f64, seq_major} : (tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>) -> (tensor<1x4x2x8xf32>, tensor<1x2x4xf32>)
// CHECK-NEXT: %[[Y:.*]] = graph.reshape %[[O]] : tensor<1x4x2x8xf32> to tensor<1x4x16xf32>
// CHECK-NEXT: return %[[Y]]
func.func @gpt2_seq_major(%qx: tensor<1x4x2x8xf32>, %kx: tensor<1x4x2x8xf32>, %vx: tensor<1x4x2x8xf32>) -> tensor<1x4x16xf32> {
  %mask = graph.constant dense<[[false, true, true, true], [false, false, true, true], [false, false, false, true], [false, false, false, false]]> : tensor<4x4xi1>
  %q = graph.transpose %qx {perm = array<i64: 0, 2, 1, 3>} : tensor<1x4x2x8xf32> -> tensor<1x2x4x8xf32>
  %kt = graph.transpose %kx {perm = array<i64: 0, 2, 3, 1>} : tensor<1x4x2x8xf32> -> tensor<1x2x8x4xf32>
  %v = graph.transpose %vx {perm = array<i64: 0, 2, 1, 3>} : tensor<1x4x2x8xf32> -> tensor<1x2x4x8xf32>
  %s = graph.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %c = graph.constant dense<2.82842708> : tensor<f32>
  %t = graph.div %s, %c : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %fill = graph.constant dense<-3.40282347E+38> : tensor<f32>
  %m = graph.select %mask, %fill, %t : (tensor<4x4xi1>, tensor<f32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = graph.softmax %m {axis = 3 : i64} : tensor<1x2x4x4xf32>
  %o = graph.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  %ot = graph.transpose %o {perm = array<i64: 0, 2, 1, 3>} : tensor<1x2x4x8xf32> -> tensor<1x4x2x8xf32>
  %y = graph.reshape %ot : tensor<1x4x2x8xf32> to tensor<1x4x16xf32>
  return %y : tensor<1x4x16xf32>
}

// -----

// Stays head-major: the output is read untransposed too (and q is not a
// transpose at all in @gpt2 above).
// CHECK-LABEL: func.func @out_read_head_major
// CHECK: graph.attention
// CHECK-NOT: seq_major
// CHECK: graph.transpose %{{.*}} {perm = array<i64: 0, 2, 1, 3>} : tensor<1x2x4x8xf32> -> tensor<1x4x2x8xf32>
func.func @out_read_head_major(%qx: tensor<1x4x2x8xf32>, %kx: tensor<1x4x2x8xf32>, %vx: tensor<1x4x2x8xf32>) -> (tensor<1x4x2x8xf32>, tensor<1x2x4x8xf32>) {
  %q = graph.transpose %qx {perm = array<i64: 0, 2, 1, 3>} : tensor<1x4x2x8xf32> -> tensor<1x2x4x8xf32>
  %kt = graph.transpose %kx {perm = array<i64: 0, 2, 3, 1>} : tensor<1x4x2x8xf32> -> tensor<1x2x8x4xf32>
  %v = graph.transpose %vx {perm = array<i64: 0, 2, 1, 3>} : tensor<1x4x2x8xf32> -> tensor<1x2x4x8xf32>
  %s = graph.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %p = graph.softmax %s {axis = 3 : i64} : tensor<1x2x4x4xf32>
  %o = graph.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  %ot = graph.transpose %o {perm = array<i64: 0, 2, 1, 3>} : tensor<1x2x4x8xf32> -> tensor<1x4x2x8xf32>
  return %ot, %o : tensor<1x4x2x8xf32>, tensor<1x2x4x8xf32>
}

// -----

// LLaMA with grouped-query attention: 4 query heads share 2 kv heads,
// repeated with reshape -> broadcast -> reshape (repeat_kv); k^T is a
// transpose of the last two dims; the scale is a mul; an additive [S, S]
// constant mask of 0 / -inf. The op reads the un-repeated k and v (2 heads)
// and no transpose is left.
// CHECK-LABEL: func.func @llama_gqa
// CHECK-SAME: (%[[Q:.*]]: tensor<1x4x4x4xf32>, %[[K:.*]]: tensor<1x2x4x4xf32>, %[[V:.*]]: tensor<1x2x4x4xf32>)
// CHECK-NOT: graph.transpose
// CHECK-NOT: graph.broadcast
// CHECK-NOT: graph.reshape
// CHECK-NOT: graph.constant
// CHECK: %[[O:.*]], %{{.*}} = graph.attention %[[Q]], %[[K]], %[[V]] {causal, scale = 5.000000e-01 : f64} : (tensor<1x4x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> (tensor<1x4x4x4xf32>, tensor<1x4x4xf32>)
// CHECK-NOT: graph.matmul
// CHECK-NOT: graph.softmax
// CHECK-NOT: graph.transpose
// CHECK-NOT: graph.broadcast
// CHECK-NEXT: return %[[O]]
func.func @llama_gqa(%q: tensor<1x4x4x4xf32>, %k: tensor<1x2x4x4xf32>, %v: tensor<1x2x4x4xf32>) -> tensor<1x4x4x4xf32> {
  %mask = graph.constant dense<[[0.0, 0xFF800000, 0xFF800000, 0xFF800000], [0.0, 0.0, 0xFF800000, 0xFF800000], [0.0, 0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0, 0.0]]> : tensor<4x4xf32>
  %k5 = graph.reshape %k : tensor<1x2x4x4xf32> to tensor<1x2x1x4x4xf32>
  %kb = graph.broadcast %k5 : tensor<1x2x1x4x4xf32> to tensor<1x2x2x4x4xf32>
  %kr = graph.reshape %kb : tensor<1x2x2x4x4xf32> to tensor<1x4x4x4xf32>
  %v5 = graph.reshape %v : tensor<1x2x4x4xf32> to tensor<1x2x1x4x4xf32>
  %vb = graph.broadcast %v5 : tensor<1x2x1x4x4xf32> to tensor<1x2x2x4x4xf32>
  %vr = graph.reshape %vb : tensor<1x2x2x4x4xf32> to tensor<1x4x4x4xf32>
  %kt = graph.transpose %kr {perm = array<i64: 0, 1, 3, 2>} : tensor<1x4x4x4xf32> -> tensor<1x4x4x4xf32>
  %s = graph.matmul %q, %kt : (tensor<1x4x4x4xf32>, tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  %c = graph.constant dense<5.000000e-01> : tensor<f32>
  %t = graph.mul %s, %c : (tensor<1x4x4x4xf32>, tensor<f32>) -> tensor<1x4x4x4xf32>
  %m = graph.add %t, %mask : (tensor<1x4x4x4xf32>, tensor<4x4xf32>) -> tensor<1x4x4x4xf32>
  %p = graph.softmax %m {axis = 3 : i64} : tensor<1x4x4x4xf32>
  %o = graph.matmul %p, %vr : (tensor<1x4x4x4xf32>, tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  return %o : tensor<1x4x4x4xf32>
}

// -----

// The same with the operands the other way round: the scale on the mul's
// lhs, the mask (-3.4e38, shaped [1, 1, S, S]) on the add's lhs, no GQA.
// CHECK-LABEL: func.func @additive_swapped
// CHECK-SAME: (%[[Q:.*]]: tensor<2x2x4x8xf32>, %[[K:.*]]: tensor<2x2x4x8xf32>, %[[V:.*]]: tensor<2x2x4x8xf32>)
// CHECK-NEXT: %[[O:.*]], %{{.*}} = graph.attention %[[Q]], %[[K]], %[[V]] {causal, scale = 2.500000e-01 : f64}
// CHECK-NEXT: return %[[O]]
func.func @additive_swapped(%q: tensor<2x2x4x8xf32>, %k: tensor<2x2x4x8xf32>, %v: tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32> {
  %mask = graph.constant dense<[[[[0.0, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, 0.0, -3.40282347E+38], [0.0, 0.0, 0.0, 0.0]]]]> : tensor<1x1x4x4xf32>
  %kt = graph.transpose %k {perm = array<i64: 0, 1, 3, 2>} : tensor<2x2x4x8xf32> -> tensor<2x2x8x4xf32>
  %s = graph.matmul %q, %kt : (tensor<2x2x4x8xf32>, tensor<2x2x8x4xf32>) -> tensor<2x2x4x4xf32>
  %c = graph.constant dense<2.500000e-01> : tensor<f32>
  %t = graph.mul %c, %s : (tensor<f32>, tensor<2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
  %m = graph.add %mask, %t : (tensor<1x1x4x4xf32>, tensor<2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
  %p = graph.softmax %m {axis = 3 : i64} : tensor<2x2x4x4xf32>
  %o = graph.matmul %p, %v : (tensor<2x2x4x4xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32>
  return %o : tensor<2x2x4x8xf32>
}

// -----

// Only k shares heads (v is read with all 4): both are read repeated.
// CHECK-LABEL: func.func @gqa_k_only
// CHECK-SAME: (%[[Q:.*]]: tensor<1x4x4x4xf32>, %[[K:.*]]: tensor<1x2x4x4xf32>, %[[V:.*]]: tensor<1x4x4x4xf32>)
// CHECK: %[[K5:.*]] = graph.reshape %[[K]]
// CHECK-NEXT: %[[KB:.*]] = graph.broadcast %[[K5]]
// CHECK-NEXT: %[[KR:.*]] = graph.reshape %[[KB]] : tensor<1x2x2x4x4xf32> to tensor<1x4x4x4xf32>
// CHECK-NEXT: %[[O:.*]], %{{.*}} = graph.attention %[[Q]], %[[KR]], %[[V]] {causal, scale = 5.000000e-01 : f64} : (tensor<1x4x4x4xf32>, tensor<1x4x4x4xf32>, tensor<1x4x4x4xf32>)
// CHECK-NOT: graph.transpose
// CHECK-NEXT: return %[[O]]
func.func @gqa_k_only(%q: tensor<1x4x4x4xf32>, %k: tensor<1x2x4x4xf32>, %v: tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32> {
  %mask = graph.constant dense<[[0.0, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, 0.0, -3.40282347E+38], [0.0, 0.0, 0.0, 0.0]]> : tensor<4x4xf32>
  %k5 = graph.reshape %k : tensor<1x2x4x4xf32> to tensor<1x2x1x4x4xf32>
  %kb = graph.broadcast %k5 : tensor<1x2x1x4x4xf32> to tensor<1x2x2x4x4xf32>
  %kr = graph.reshape %kb : tensor<1x2x2x4x4xf32> to tensor<1x4x4x4xf32>
  %kt = graph.transpose %kr {perm = array<i64: 0, 1, 3, 2>} : tensor<1x4x4x4xf32> -> tensor<1x4x4x4xf32>
  %s = graph.matmul %q, %kt : (tensor<1x4x4x4xf32>, tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  %c = graph.constant dense<5.000000e-01> : tensor<f32>
  %t = graph.mul %s, %c : (tensor<1x4x4x4xf32>, tensor<f32>) -> tensor<1x4x4x4xf32>
  %m = graph.add %t, %mask : (tensor<1x4x4x4xf32>, tensor<4x4xf32>) -> tensor<1x4x4x4xf32>
  %p = graph.softmax %m {axis = 3 : i64} : tensor<1x4x4x4xf32>
  %o = graph.matmul %p, %v : (tensor<1x4x4x4xf32>, tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  return %o : tensor<1x4x4x4xf32>
}

// -----

// BERT: the padding mask input, unsqueezed to [B, 1, 1, S], as
// (1 - mask) * finfo.min is an additive bias computed from an argument: the
// op's bias operand, not causal.
// CHECK-LABEL: func.func @bert
// CHECK-SAME: (%[[Q:.*]]: tensor<2x2x4x8xf32>, %[[X:.*]]: tensor<2x4x2x8xf32>, %[[V:.*]]: tensor<2x2x4x8xf32>, %[[MASK:.*]]: tensor<2x4xi64>
// CHECK: %[[B:.*]] = graph.mul %{{.*}}, %{{.*}} : (tensor<2x1x1x4xf32>, tensor<f32>) -> tensor<2x1x1x4xf32>
// CHECK-NOT: graph.matmul
// CHECK-NOT: graph.softmax
// CHECK: %[[K:.*]] = graph.transpose %[[X]] {perm = array<i64: 0, 2, 1, 3>} : tensor<2x4x2x8xf32> -> tensor<2x2x4x8xf32>
// CHECK-NEXT: %[[O:.*]], %{{.*}} = graph.attention %[[Q]], %[[K]], %[[V]], %[[B]] {scale = 0.35355339{{[0-9]*}} : f64} : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x1x1x4xf32>) -> (tensor<2x2x4x8xf32>, tensor<2x2x4xf32>)
// CHECK-NOT: graph.matmul
// CHECK-NOT: graph.softmax
// CHECK-NEXT: return %[[O]]
func.func @bert(%q: tensor<2x2x4x8xf32>, %x: tensor<2x4x2x8xf32>, %v: tensor<2x2x4x8xf32>,
                %mask: tensor<2x4xi64> {graph.kind = "input", graph.name = "attention_mask"}) -> tensor<2x2x4x8xf32> {
  %m4 = graph.reshape %mask : tensor<2x4xi64> to tensor<2x1x1x4xi64>
  %mf = graph.cast %m4 : tensor<2x1x1x4xi64> to tensor<2x1x1x4xf32>
  %one = graph.constant dense<1.000000e+00> : tensor<f32>
  %inv = graph.sub %one, %mf : (tensor<f32>, tensor<2x1x1x4xf32>) -> tensor<2x1x1x4xf32>
  %min = graph.constant dense<-3.40282347E+38> : tensor<f32>
  %bias = graph.mul %inv, %min : (tensor<2x1x1x4xf32>, tensor<f32>) -> tensor<2x1x1x4xf32>
  %kt = graph.transpose %x {perm = array<i64: 0, 2, 3, 1>} : tensor<2x4x2x8xf32> -> tensor<2x2x8x4xf32>
  %s = graph.matmul %q, %kt : (tensor<2x2x4x8xf32>, tensor<2x2x8x4xf32>) -> tensor<2x2x4x4xf32>
  %c = graph.constant dense<2.82842708> : tensor<f32>
  %t = graph.div %s, %c : (tensor<2x2x4x4xf32>, tensor<f32>) -> tensor<2x2x4x4xf32>
  %a = graph.add %t, %bias : (tensor<2x2x4x4xf32>, tensor<2x1x1x4xf32>) -> tensor<2x2x4x4xf32>
  %p = graph.softmax %a {axis = 3 : i64} : tensor<2x2x4x4xf32>
  %o = graph.matmul %p, %v : (tensor<2x2x4x4xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32>
  return %o : tensor<2x2x4x8xf32>
}

// -----

// A boolean mask of the kept keys, select(mask, s, fill), lower triangular
// including the diagonal, and no scale: causal, scale 1.
// CHECK-LABEL: func.func @select_kept
// CHECK-SAME: (%[[Q:.*]]: tensor<1x1x4x8xf32>, %[[K:.*]]: tensor<1x1x4x8xf32>, %[[V:.*]]: tensor<1x1x4x8xf32>)
// CHECK-NEXT: %[[O:.*]], %{{.*}} = graph.attention %[[Q]], %[[K]], %[[V]] {causal, scale = 1.000000e+00 : f64}
// CHECK-NEXT: return %[[O]]
func.func @select_kept(%q: tensor<1x1x4x8xf32>, %k: tensor<1x1x4x8xf32>, %v: tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32> {
  %keep = graph.constant dense<[[true, false, false, false], [true, true, false, false], [true, true, true, false], [true, true, true, true]]> : tensor<4x4xi1>
  %kt = graph.transpose %k {perm = array<i64: 0, 1, 3, 2>} : tensor<1x1x4x8xf32> -> tensor<1x1x8x4xf32>
  %s = graph.matmul %q, %kt : (tensor<1x1x4x8xf32>, tensor<1x1x8x4xf32>) -> tensor<1x1x4x4xf32>
  %fill = graph.constant dense<0xFF800000> : tensor<f32>
  %m = graph.select %keep, %s, %fill : (tensor<4x4xi1>, tensor<1x1x4x4xf32>, tensor<f32>) -> tensor<1x1x4x4xf32>
  %p = graph.softmax %m {axis = 3 : i64} : tensor<1x1x4x4xf32>
  %o = graph.matmul %p, %v : (tensor<1x1x4x4xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32>
  return %o : tensor<1x1x4x8xf32>
}

// -----

// Sq < Sk (queries are the last 2 of 4 positions): the causal mask is
// bottom-right aligned, keys j > i + Sk - Sq masked.
// CHECK-LABEL: func.func @causal_sq_lt_sk
// CHECK-SAME: (%[[Q:.*]]: tensor<1x2x2x8xf32>, %[[K:.*]]: tensor<1x2x4x8xf32>, %[[V:.*]]: tensor<1x2x4x8xf32>)
// CHECK-NEXT: %[[O:.*]], %{{.*}} = graph.attention %[[Q]], %[[K]], %[[V]] {causal, scale = 2.500000e-01 : f64} : (tensor<1x2x2x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> (tensor<1x2x2x8xf32>, tensor<1x2x2xf32>)
// CHECK-NEXT: return %[[O]]
func.func @causal_sq_lt_sk(%q: tensor<1x2x2x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x2x8xf32> {
  %mask = graph.constant dense<[[false, false, false, true], [false, false, false, false]]> : tensor<2x4xi1>
  %kt = graph.transpose %k {perm = array<i64: 0, 1, 3, 2>} : tensor<1x2x4x8xf32> -> tensor<1x2x8x4xf32>
  %s = graph.matmul %q, %kt : (tensor<1x2x2x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x2x4xf32>
  %c = graph.constant dense<4.000000e+00> : tensor<f32>
  %t = graph.div %s, %c : (tensor<1x2x2x4xf32>, tensor<f32>) -> tensor<1x2x2x4xf32>
  %fill = graph.constant dense<-3.40282347E+38> : tensor<f32>
  %m = graph.select %mask, %fill, %t : (tensor<2x4xi1>, tensor<f32>, tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32>
  %p = graph.softmax %m {axis = 3 : i64} : tensor<1x2x2x4xf32>
  %o = graph.matmul %p, %v : (tensor<1x2x2x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x2x8xf32>
  return %o : tensor<1x2x2x8xf32>
}

// -----

// A mask computed in the graph (its constant too large to fold): the upper
// triangle of a splat of ones, cast to i1 and sliced from an [8, 8] buffer
// down to [S, S], then select(mask, fill, s): causal; the mask ops are gone.
// CHECK-LABEL: func.func @computed_mask
// CHECK-SAME: (%[[Q:.*]]: tensor<1x2x4x8xf32>, %[[K:.*]]: tensor<1x2x4x8xf32>, %[[V:.*]]: tensor<1x2x4x8xf32>)
// CHECK-NEXT: %[[O:.*]], %{{.*}} = graph.attention %[[Q]], %[[K]], %[[V]] {causal, scale = 2.500000e-01 : f64}
// CHECK-NEXT: return %[[O]]
func.func @computed_mask(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %ones = graph.constant dense<1.000000e+00> : tensor<8x8xf32>
  %up = graph.trilu %ones {k = 1 : i64, upper} : tensor<8x8xf32>
  %b = graph.cast %up : tensor<8x8xf32> to tensor<8x8xi1>
  %mask = graph.slice %b {starts = array<i64: 0, 0>, sizes = array<i64: 4, 4>, steps = array<i64: 1, 1>} : tensor<8x8xi1> -> tensor<4x4xi1>
  %kt = graph.transpose %k {perm = array<i64: 0, 1, 3, 2>} : tensor<1x2x4x8xf32> -> tensor<1x2x8x4xf32>
  %s = graph.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %c = graph.constant dense<4.000000e+00> : tensor<f32>
  %t = graph.div %s, %c : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %fill = graph.constant dense<-3.40282347E+38> : tensor<f32>
  %m = graph.select %mask, %fill, %t : (tensor<4x4xi1>, tensor<f32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = graph.softmax %m {axis = 3 : i64} : tensor<1x2x4x4xf32>
  %o = graph.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// A causal boolean mask and then a padding bias from an input (GPT-2 with an
// attention mask): both, causal and the bias operand.
// CHECK-LABEL: func.func @causal_and_bias
// CHECK-SAME: (%[[Q:.*]]: tensor<2x2x4x8xf32>, %[[K:.*]]: tensor<2x2x4x8xf32>, %[[V:.*]]: tensor<2x2x4x8xf32>, %[[B:.*]]: tensor<2x1x1x4xf32>
// CHECK-NEXT: %[[O:.*]], %{{.*}} = graph.attention %[[Q]], %[[K]], %[[V]], %[[B]] {causal, scale = 2.500000e-01 : f64} : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x1x1x4xf32>) -> (tensor<2x2x4x8xf32>, tensor<2x2x4xf32>)
// CHECK-NEXT: return %[[O]]
func.func @causal_and_bias(%q: tensor<2x2x4x8xf32>, %k: tensor<2x2x4x8xf32>, %v: tensor<2x2x4x8xf32>,
                           %bias: tensor<2x1x1x4xf32> {graph.kind = "input", graph.name = "b"}) -> tensor<2x2x4x8xf32> {
  %mask = graph.constant dense<[[false, true, true, true], [false, false, true, true], [false, false, false, true], [false, false, false, false]]> : tensor<4x4xi1>
  %kt = graph.transpose %k {perm = array<i64: 0, 1, 3, 2>} : tensor<2x2x4x8xf32> -> tensor<2x2x8x4xf32>
  %s = graph.matmul %q, %kt : (tensor<2x2x4x8xf32>, tensor<2x2x8x4xf32>) -> tensor<2x2x4x4xf32>
  %c = graph.constant dense<4.000000e+00> : tensor<f32>
  %t = graph.div %s, %c : (tensor<2x2x4x4xf32>, tensor<f32>) -> tensor<2x2x4x4xf32>
  %fill = graph.constant dense<-3.40282347E+38> : tensor<f32>
  %m = graph.select %mask, %fill, %t : (tensor<4x4xi1>, tensor<f32>, tensor<2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
  %a = graph.add %m, %bias : (tensor<2x2x4x4xf32>, tensor<2x1x1x4xf32>) -> tensor<2x2x4x4xf32>
  %p = graph.softmax %a {axis = 3 : i64} : tensor<2x2x4x4xf32>
  %o = graph.matmul %p, %v : (tensor<2x2x4x4xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32>
  return %o : tensor<2x2x4x8xf32>
}

// -----

// An additive causal-looking mask with Sq > Sk leaves rows without a key:
// not `causal`, but it is still a constant additive mask, so the op's bias
// (0 / -3.4e38 keeps the unfused softmax's uniform rows).
// CHECK-LABEL: func.func @additive_sq_gt_sk
// CHECK-SAME: (%[[Q:.*]]: tensor<1x1x4x8xf32>, %[[K:.*]]: tensor<1x1x2x8xf32>, %[[V:.*]]: tensor<1x1x2x8xf32>)
// CHECK-NEXT: %[[M:.*]] = graph.constant {{.*}} : tensor<4x2xf32>
// CHECK-NEXT: %[[O:.*]], %{{.*}} = graph.attention %[[Q]], %[[K]], %[[V]], %[[M]] {scale = 1.000000e+00 : f64}
// CHECK-NEXT: return %[[O]]
func.func @additive_sq_gt_sk(%q: tensor<1x1x4x8xf32>, %k: tensor<1x1x2x8xf32>, %v: tensor<1x1x2x8xf32>) -> tensor<1x1x4x8xf32> {
  %mask = graph.constant dense<[[-3.40282347E+38, -3.40282347E+38], [-3.40282347E+38, -3.40282347E+38], [0.0, -3.40282347E+38], [0.0, 0.0]]> : tensor<4x2xf32>
  %kt = graph.transpose %k {perm = array<i64: 0, 1, 3, 2>} : tensor<1x1x2x8xf32> -> tensor<1x1x8x2xf32>
  %s = graph.matmul %q, %kt : (tensor<1x1x4x8xf32>, tensor<1x1x8x2xf32>) -> tensor<1x1x4x2xf32>
  %m = graph.add %s, %mask : (tensor<1x1x4x2xf32>, tensor<4x2xf32>) -> tensor<1x1x4x2xf32>
  %p = graph.softmax %m {axis = 3 : i64} : tensor<1x1x4x2xf32>
  %o = graph.matmul %p, %v : (tensor<1x1x4x2xf32>, tensor<1x1x2x8xf32>) -> tensor<1x1x4x8xf32>
  return %o : tensor<1x1x4x8xf32>
}

// -----

// Left unfused: the probabilities have a second use (returned).
// CHECK-LABEL: func.func @softmax_second_use
// CHECK-NOT: graph.attention
// CHECK: graph.matmul
// CHECK: graph.softmax
// CHECK: graph.matmul
func.func @softmax_second_use(%q: tensor<1x1x4x8xf32>, %k: tensor<1x1x4x8xf32>, %v: tensor<1x1x4x8xf32>) -> (tensor<1x1x4x8xf32>, tensor<1x1x4x4xf32>) {
  %kt = graph.transpose %k {perm = array<i64: 0, 1, 3, 2>} : tensor<1x1x4x8xf32> -> tensor<1x1x8x4xf32>
  %s = graph.matmul %q, %kt : (tensor<1x1x4x8xf32>, tensor<1x1x8x4xf32>) -> tensor<1x1x4x4xf32>
  %c = graph.constant dense<4.000000e+00> : tensor<f32>
  %t = graph.div %s, %c : (tensor<1x1x4x4xf32>, tensor<f32>) -> tensor<1x1x4x4xf32>
  %p = graph.softmax %t {axis = 3 : i64} : tensor<1x1x4x4xf32>
  %o = graph.matmul %p, %v : (tensor<1x1x4x4xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32>
  return %o, %p : tensor<1x1x4x8xf32>, tensor<1x1x4x4xf32>
}

// -----

// Left unfused: the raw scores have a second use.
// CHECK-LABEL: func.func @scores_second_use
// CHECK-NOT: graph.attention
// CHECK: graph.matmul
// CHECK: graph.softmax
// CHECK: graph.matmul
func.func @scores_second_use(%q: tensor<1x1x4x8xf32>, %k: tensor<1x1x4x8xf32>, %v: tensor<1x1x4x8xf32>) -> (tensor<1x1x4x8xf32>, tensor<1x1x4x4xf32>) {
  %kt = graph.transpose %k {perm = array<i64: 0, 1, 3, 2>} : tensor<1x1x4x8xf32> -> tensor<1x1x8x4xf32>
  %s = graph.matmul %q, %kt : (tensor<1x1x4x8xf32>, tensor<1x1x8x4xf32>) -> tensor<1x1x4x4xf32>
  %c = graph.constant dense<4.000000e+00> : tensor<f32>
  %t = graph.div %s, %c : (tensor<1x1x4x4xf32>, tensor<f32>) -> tensor<1x1x4x4xf32>
  %p = graph.softmax %t {axis = 3 : i64} : tensor<1x1x4x4xf32>
  %o = graph.matmul %p, %v : (tensor<1x1x4x4xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32>
  return %o, %s : tensor<1x1x4x8xf32>, tensor<1x1x4x4xf32>
}

// -----

// A constant boolean mask that is not causal (it masks the keys before the
// query, anti-causal) becomes an additive bias: select(mask, fill, 0). A
// fill <= -1e30 absorbs any score it is added to, so the probabilities are
// the select's.
// CHECK-LABEL: func.func @mask_not_causal
// CHECK-NOT: graph.softmax
// CHECK: %[[B:.*]] = graph.select %{{.*}}, %{{.*}}, %{{.*}} : (tensor<4x4xi1>, tensor<f32>, tensor<f32>) -> tensor<4x4xf32>
// CHECK: graph.attention %{{.*}}, %{{.*}}, %{{.*}}, %[[B]] {scale
// CHECK-NOT: graph.softmax
func.func @mask_not_causal(%q: tensor<1x1x4x8xf32>, %k: tensor<1x1x4x8xf32>, %v: tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32> {
  %mask = graph.constant dense<[[false, false, false, false], [true, false, false, false], [true, true, false, false], [true, true, true, false]]> : tensor<4x4xi1>
  %kt = graph.transpose %k {perm = array<i64: 0, 1, 3, 2>} : tensor<1x1x4x8xf32> -> tensor<1x1x8x4xf32>
  %s = graph.matmul %q, %kt : (tensor<1x1x4x8xf32>, tensor<1x1x8x4xf32>) -> tensor<1x1x4x4xf32>
  %fill = graph.constant dense<-3.40282347E+38> : tensor<f32>
  %m = graph.select %mask, %fill, %s : (tensor<4x4xi1>, tensor<f32>, tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
  %p = graph.softmax %m {axis = 3 : i64} : tensor<1x1x4x4xf32>
  %o = graph.matmul %p, %v : (tensor<1x1x4x4xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32>
  return %o : tensor<1x1x4x8xf32>
}

// -----

// Left unfused: a causal boolean mask whose fill (-1.0) does not mask
// (only <= -1e30 does).
// CHECK-LABEL: func.func @fill_too_large
// CHECK-NOT: graph.attention
// CHECK: graph.matmul
// CHECK: graph.select
// CHECK: graph.softmax
// CHECK: graph.matmul
func.func @fill_too_large(%q: tensor<1x1x4x8xf32>, %k: tensor<1x1x4x8xf32>, %v: tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32> {
  %mask = graph.constant dense<[[false, true, true, true], [false, false, true, true], [false, false, false, true], [false, false, false, false]]> : tensor<4x4xi1>
  %kt = graph.transpose %k {perm = array<i64: 0, 1, 3, 2>} : tensor<1x1x4x8xf32> -> tensor<1x1x8x4xf32>
  %s = graph.matmul %q, %kt : (tensor<1x1x4x8xf32>, tensor<1x1x8x4xf32>) -> tensor<1x1x4x4xf32>
  %fill = graph.constant dense<-1.000000e+00> : tensor<f32>
  %m = graph.select %mask, %fill, %s : (tensor<4x4xi1>, tensor<f32>, tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
  %p = graph.softmax %m {axis = 3 : i64} : tensor<1x1x4x4xf32>
  %o = graph.matmul %p, %v : (tensor<1x1x4x4xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32>
  return %o : tensor<1x1x4x8xf32>
}

// -----

// Sq > Sk with a causal boolean mask (keys j > i + Sk - Sq): not the
// causal flag (the first query rows keep no key, where the softmax over the
// fill is uniform and causal attention would give 0), but an additive bias,
// which keeps those rows uniform: fill + s is fill.
// CHECK-LABEL: func.func @causal_sq_gt_sk
// CHECK-NOT: graph.softmax
// CHECK: graph.attention
// CHECK-NOT: causal
// CHECK-NOT: graph.softmax
func.func @causal_sq_gt_sk(%q: tensor<1x1x4x8xf32>, %k: tensor<1x1x2x8xf32>, %v: tensor<1x1x2x8xf32>) -> tensor<1x1x4x8xf32> {
  %mask = graph.constant dense<[[true, true], [true, true], [false, true], [false, false]]> : tensor<4x2xi1>
  %kt = graph.transpose %k {perm = array<i64: 0, 1, 3, 2>} : tensor<1x1x2x8xf32> -> tensor<1x1x8x2xf32>
  %s = graph.matmul %q, %kt : (tensor<1x1x4x8xf32>, tensor<1x1x8x2xf32>) -> tensor<1x1x4x2xf32>
  %fill = graph.constant dense<-3.40282347E+38> : tensor<f32>
  %m = graph.select %mask, %fill, %s : (tensor<4x2xi1>, tensor<f32>, tensor<1x1x4x2xf32>) -> tensor<1x1x4x2xf32>
  %p = graph.softmax %m {axis = 3 : i64} : tensor<1x1x4x2xf32>
  %o = graph.matmul %p, %v : (tensor<1x1x4x2xf32>, tensor<1x1x2x8xf32>) -> tensor<1x1x4x8xf32>
  return %o : tensor<1x1x4x8xf32>
}

// -----

// Left unfused: an additive bias that depends on a trainable parameter
// (it would need a gradient, which graph.attention does not give).
// CHECK-LABEL: func.func @trainable_bias
// CHECK-NOT: graph.attention
// CHECK: graph.matmul
// CHECK: graph.add
// CHECK: graph.softmax
// CHECK: graph.matmul
func.func @trainable_bias(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>,
                          %w: tensor<2x4x4xf32> {graph.kind = "trainable", graph.name = "rel_bias"}) -> tensor<1x2x4x8xf32> {
  %bias = graph.reshape %w : tensor<2x4x4xf32> to tensor<1x2x4x4xf32>
  %kt = graph.transpose %k {perm = array<i64: 0, 1, 3, 2>} : tensor<1x2x4x8xf32> -> tensor<1x2x8x4xf32>
  %s = graph.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %a = graph.add %s, %bias : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = graph.softmax %a {axis = 3 : i64} : tensor<1x2x4x4xf32>
  %o = graph.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// Left unfused: a softmax over the queries (axis 2), not the keys.
// CHECK-LABEL: func.func @softmax_not_last_axis
// CHECK-NOT: graph.attention
// CHECK: graph.matmul
// CHECK: graph.softmax %{{.*}} {axis = 2 : i64}
// CHECK: graph.matmul
func.func @softmax_not_last_axis(%q: tensor<1x1x4x8xf32>, %k: tensor<1x1x4x8xf32>, %v: tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32> {
  %kt = graph.transpose %k {perm = array<i64: 0, 1, 3, 2>} : tensor<1x1x4x8xf32> -> tensor<1x1x8x4xf32>
  %s = graph.matmul %q, %kt : (tensor<1x1x4x8xf32>, tensor<1x1x8x4xf32>) -> tensor<1x1x4x4xf32>
  %p = graph.softmax %s {axis = 2 : i64} : tensor<1x1x4x4xf32>
  %o = graph.matmul %p, %v : (tensor<1x1x4x4xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32>
  return %o : tensor<1x1x4x8xf32>
}

// -----

// Left unfused: the matmuls broadcast k and v over the heads ([1, 1, ...]
// against 2 query heads).
// CHECK-LABEL: func.func @broadcast_batch_dims
// CHECK-NOT: graph.attention
// CHECK: graph.matmul
// CHECK: graph.softmax
// CHECK: graph.matmul
func.func @broadcast_batch_dims(%q: tensor<1x2x4x8xf32>, %k: tensor<1x1x4x8xf32>, %v: tensor<1x1x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %kt = graph.transpose %k {perm = array<i64: 0, 1, 3, 2>} : tensor<1x1x4x8xf32> -> tensor<1x1x8x4xf32>
  %s = graph.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x1x8x4xf32>) -> tensor<1x2x4x4xf32>
  %c = graph.constant dense<4.000000e+00> : tensor<f32>
  %t = graph.div %s, %c : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %p = graph.softmax %t {axis = 3 : i64} : tensor<1x2x4x4xf32>
  %o = graph.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x1x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// HF GPT-2's computed mask with Sq < Sk: the rows [Sk - Sq, Sk) of a
// lower-triangular (kept keys) [max, max] buffer, select(keep, s, fill):
// causal, bottom-right aligned.
// CHECK-LABEL: func.func @sliced_kept_sq_lt_sk
// CHECK-SAME: (%[[Q:.*]]: tensor<1x2x2x8xf32>, %[[K:.*]]: tensor<1x2x4x8xf32>, %[[V:.*]]: tensor<1x2x4x8xf32>)
// CHECK-NEXT: %[[O:.*]], %{{.*}} = graph.attention %[[Q]], %[[K]], %[[V]] {causal, scale = 1.000000e+00 : f64}
// CHECK-NEXT: return %[[O]]
func.func @sliced_kept_sq_lt_sk(%q: tensor<1x2x2x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x2x8xf32> {
  %ones = graph.constant dense<true> : tensor<1x1x8x8xi1>
  %f = graph.cast %ones : tensor<1x1x8x8xi1> to tensor<1x1x8x8xf32>
  %tri = graph.trilu %f {k = 0 : i64} : tensor<1x1x8x8xf32>
  %b = graph.cast %tri : tensor<1x1x8x8xf32> to tensor<1x1x8x8xi1>
  %keep = graph.slice %b {starts = array<i64: 0, 0, 2, 0>, sizes = array<i64: 1, 1, 2, 4>, steps = array<i64: 1, 1, 1, 1>} : tensor<1x1x8x8xi1> -> tensor<1x1x2x4xi1>
  %kt = graph.transpose %k {perm = array<i64: 0, 1, 3, 2>} : tensor<1x2x4x8xf32> -> tensor<1x2x8x4xf32>
  %s = graph.matmul %q, %kt : (tensor<1x2x2x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x2x4xf32>
  %fill = graph.constant dense<-3.40282347E+38> : tensor<f32>
  %m = graph.select %keep, %s, %fill : (tensor<1x1x2x4xi1>, tensor<1x2x2x4xf32>, tensor<f32>) -> tensor<1x2x2x4xf32>
  %p = graph.softmax %m {axis = 3 : i64} : tensor<1x2x2x4xf32>
  %o = graph.matmul %p, %v : (tensor<1x2x2x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x2x8xf32>
  return %o : tensor<1x2x2x8xf32>
}

// -----

// The same buffer sliced from row 0 keeps keys j <= i, a top-left aligned
// mask, which is not the op's causal for Sq < Sk: an additive bias.
// CHECK-LABEL: func.func @sliced_top_left
// CHECK-NOT: graph.softmax
// CHECK: graph.attention
// CHECK-NOT: causal
// CHECK-NOT: graph.softmax
func.func @sliced_top_left(%q: tensor<1x2x2x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x2x8xf32> {
  %ones = graph.constant dense<true> : tensor<1x1x8x8xi1>
  %f = graph.cast %ones : tensor<1x1x8x8xi1> to tensor<1x1x8x8xf32>
  %tri = graph.trilu %f {k = 0 : i64} : tensor<1x1x8x8xf32>
  %b = graph.cast %tri : tensor<1x1x8x8xf32> to tensor<1x1x8x8xi1>
  %keep = graph.slice %b {starts = array<i64: 0, 0, 0, 0>, sizes = array<i64: 1, 1, 2, 4>, steps = array<i64: 1, 1, 1, 1>} : tensor<1x1x8x8xi1> -> tensor<1x1x2x4xi1>
  %kt = graph.transpose %k {perm = array<i64: 0, 1, 3, 2>} : tensor<1x2x4x8xf32> -> tensor<1x2x8x4xf32>
  %s = graph.matmul %q, %kt : (tensor<1x2x2x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x2x4xf32>
  %fill = graph.constant dense<-3.40282347E+38> : tensor<f32>
  %m = graph.select %keep, %s, %fill : (tensor<1x1x2x4xi1>, tensor<1x2x2x4xf32>, tensor<f32>) -> tensor<1x2x2x4xf32>
  %p = graph.softmax %m {axis = 3 : i64} : tensor<1x2x2x4xf32>
  %o = graph.matmul %p, %v : (tensor<1x2x2x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x2x8xf32>
  return %o : tensor<1x2x2x8xf32>
}

// -----

// A matmul that widens its result (narrow operands, f32 out) is not
// attention's out, which has q's type: left alone.
// CHECK-LABEL: func.func @widened_output
// CHECK-NOT: graph.attention
// CHECK: graph.softmax
func.func @widened_output(%q: tensor<1x1x4x8xbf16>, %k: tensor<1x1x4x8xbf16>, %v: tensor<1x1x4x8xbf16>) -> tensor<1x1x4x8xf32> {
  %kt = graph.transpose %k {perm = array<i64: 0, 1, 3, 2>} : tensor<1x1x4x8xbf16> -> tensor<1x1x8x4xbf16>
  %s = graph.matmul %q, %kt : (tensor<1x1x4x8xbf16>, tensor<1x1x8x4xbf16>) -> tensor<1x1x4x4xbf16>
  %p = graph.softmax %s {axis = 3 : i64} : tensor<1x1x4x4xbf16>
  %o = graph.matmul %p, %v : (tensor<1x1x4x4xbf16>, tensor<1x1x4x8xbf16>) -> tensor<1x1x4x8xf32>
  return %o : tensor<1x1x4x8xf32>
}

// -----

// DistilBERT's form (HF, opset 11): q divided by sqrt(d) before the scores
// matmul, and masked_fill with a padding mask computed from the input and
// broadcast over the heads and queries. The scale folds into the op, the
// mask becomes a bias of its un-broadcast shape.
// CHECK-LABEL: func.func @distilbert
// CHECK-SAME: (%[[Q:.*]]: tensor<2x2x4x8xf32>, %[[K:.*]]: tensor<2x4x2x8xf32>, %[[V:.*]]: tensor<2x2x4x8xf32>, %[[M:.*]]: tensor<2x4xi64>
// CHECK-NOT: graph.div
// CHECK-DAG: %[[KT:.*]] = graph.transpose %[[K]] {perm = array<i64: 0, 2, 1, 3>}
// CHECK-DAG: %[[C:.*]] = graph.reshape %{{.*}} : tensor<2x4xi1> to tensor<2x1x1x4xi1>
// CHECK: %[[B:.*]] = graph.select %[[C]], %{{.*}}, %{{.*}} : (tensor<2x1x1x4xi1>, tensor<f32>, tensor<f32>) -> tensor<2x1x1x4xf32>
// CHECK: graph.attention %[[Q]], %[[KT]], %[[V]], %[[B]] {scale = 0.353553{{[0-9]*}} : f64}
// CHECK-NOT: graph.softmax
func.func @distilbert(%q: tensor<2x2x4x8xf32>, %k: tensor<2x4x2x8xf32>, %v: tensor<2x2x4x8xf32>, %mask: tensor<2x4xi64>) -> tensor<2x2x4x8xf32> {
  %c = graph.constant dense<2.82842708> : tensor<f32>
  %qs = graph.div %q, %c : (tensor<2x2x4x8xf32>, tensor<f32>) -> tensor<2x2x4x8xf32>
  %kt = graph.transpose %k {perm = array<i64: 0, 2, 3, 1>} : tensor<2x4x2x8xf32> -> tensor<2x2x8x4xf32>
  %s = graph.matmul %qs, %kt : (tensor<2x2x4x8xf32>, tensor<2x2x8x4xf32>) -> tensor<2x2x4x4xf32>
  %zero = graph.constant dense<0> : tensor<i64>
  %pad = graph.equal %mask, %zero : (tensor<2x4xi64>, tensor<i64>) -> tensor<2x4xi1>
  %pr = graph.reshape %pad : tensor<2x4xi1> to tensor<2x1x1x4xi1>
  %pb = graph.broadcast %pr : tensor<2x1x1x4xi1> to tensor<2x2x4x4xi1>
  %ninf = graph.constant dense<0xFF800000> : tensor<f32>
  %m = graph.select %pb, %ninf, %s : (tensor<2x2x4x4xi1>, tensor<f32>, tensor<2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
  %p = graph.softmax %m {axis = 3 : i64} : tensor<2x2x4x4xf32>
  %o = graph.matmul %p, %v : (tensor<2x2x4x4xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32>
  return %o : tensor<2x2x4x8xf32>
}

// -----

// TorchScript's folded mask: one additive causal matrix repeated per batch
// row ([B, 1, S, S], -FLT_MAX above the diagonal): causal, the constant gone.
// CHECK-LABEL: func.func @batched_causal_constant
// CHECK-NOT: graph.constant
// CHECK: graph.attention %{{.*}}, %{{.*}}, %{{.*}} {causal, scale = 2.500000e-01 : f64} :
// CHECK-NOT: graph.add
func.func @batched_causal_constant(%q: tensor<2x2x3x8xf32>, %k: tensor<2x2x3x8xf32>, %v: tensor<2x2x3x8xf32>) -> tensor<2x2x3x8xf32> {
  %mask = graph.constant dense<[[[[0.0, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, -3.40282347E+38], [0.0, 0.0, 0.0]]],
                                [[[0.0, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, -3.40282347E+38], [0.0, 0.0, 0.0]]]]> : tensor<2x1x3x3xf32>
  %kt = graph.transpose %k {perm = array<i64: 0, 1, 3, 2>} : tensor<2x2x3x8xf32> -> tensor<2x2x8x3xf32>
  %s = graph.matmul %q, %kt : (tensor<2x2x3x8xf32>, tensor<2x2x8x3xf32>) -> tensor<2x2x3x3xf32>
  %c = graph.constant dense<2.500000e-01> : tensor<f32>
  %t = graph.mul %s, %c : (tensor<2x2x3x3xf32>, tensor<f32>) -> tensor<2x2x3x3xf32>
  %a = graph.add %t, %mask : (tensor<2x2x3x3xf32>, tensor<2x1x3x3xf32>) -> tensor<2x2x3x3xf32>
  %p = graph.softmax %a {axis = 3 : i64} : tensor<2x2x3x3xf32>
  %o = graph.matmul %p, %v : (tensor<2x2x3x3xf32>, tensor<2x2x3x8xf32>) -> tensor<2x2x3x8xf32>
  return %o : tensor<2x2x3x8xf32>
}

// -----

// The same shape, but batch row 1 also masks key 0 of row 2: not the same
// matrix for every batch row, so not causal; it stays the op's bias.
// CHECK-LABEL: func.func @batched_masks_differ
// CHECK: %[[M:.*]] = graph.constant
// CHECK: graph.attention %{{.*}}, %{{.*}}, %{{.*}}, %[[M]] {scale = 2.500000e-01 : f64} :
func.func @batched_masks_differ(%q: tensor<2x2x3x8xf32>, %k: tensor<2x2x3x8xf32>, %v: tensor<2x2x3x8xf32>) -> tensor<2x2x3x8xf32> {
  %mask = graph.constant dense<[[[[0.0, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, -3.40282347E+38], [0.0, 0.0, 0.0]]],
                                [[[0.0, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, -3.40282347E+38], [-3.40282347E+38, 0.0, 0.0]]]]> : tensor<2x1x3x3xf32>
  %kt = graph.transpose %k {perm = array<i64: 0, 1, 3, 2>} : tensor<2x2x3x8xf32> -> tensor<2x2x8x3xf32>
  %s = graph.matmul %q, %kt : (tensor<2x2x3x8xf32>, tensor<2x2x8x3xf32>) -> tensor<2x2x3x3xf32>
  %c = graph.constant dense<2.500000e-01> : tensor<f32>
  %t = graph.mul %s, %c : (tensor<2x2x3x3xf32>, tensor<f32>) -> tensor<2x2x3x3xf32>
  %a = graph.add %t, %mask : (tensor<2x2x3x3xf32>, tensor<2x1x3x3xf32>) -> tensor<2x2x3x3xf32>
  %p = graph.softmax %a {axis = 3 : i64} : tensor<2x2x3x3xf32>
  %o = graph.matmul %p, %v : (tensor<2x2x3x3xf32>, tensor<2x2x3x8xf32>) -> tensor<2x2x3x8xf32>
  return %o : tensor<2x2x3x8xf32>
}

// -----

// transformers' mask as torch.export writes it at sizes too large to fold:
// kv_idx <= q_idx from two position ranges, and-ed with true and with a
// padding mask gathered from an all-true [B, S] constant, then
// select(keep, 0, -FLT_MAX) added to the scores: causal; no mask op is left.
// CHECK-LABEL: func.func @hf_computed_mask
// CHECK-NOT: graph.less_equal
// CHECK-NOT: graph.gather_nd
// CHECK: graph.attention %{{.*}}, %{{.*}}, %{{.*}} {causal, scale = 2.500000e-01 : f64} :
// CHECK-NOT: graph.select
// CHECK-NOT: graph.and
func.func @hf_computed_mask(%q: tensor<2x2x3x8xf32>, %k: tensor<2x2x3x8xf32>, %v: tensor<2x2x3x8xf32>) -> tensor<2x2x3x8xf32> {
  %kv = graph.constant dense<[[[[0, 1, 2]]]]> : tensor<1x1x1x3xi64>
  %qi = graph.constant dense<[[[[0], [1], [2]]]]> : tensor<1x1x3x1xi64>
  %le = graph.less_equal %kv, %qi : (tensor<1x1x1x3xi64>, tensor<1x1x3x1xi64>) -> tensor<1x1x3x3xi1>
  %true = graph.constant dense<true> : tensor<i1>
  %a0 = graph.and %true, %le : (tensor<i1>, tensor<1x1x3x3xi1>) -> tensor<1x1x3x3xi1>
  %ones = graph.constant dense<true> : tensor<2x3xi1>
  %idx = graph.constant dense<[[[[[0, 0], [0, 1], [0, 2]]]], [[[[1, 0], [1, 1], [1, 2]]]]]> : tensor<2x1x1x3x2xi64>
  %pad = graph.gather_nd %ones, %idx {batch_dims = 0 : i64} : (tensor<2x3xi1>, tensor<2x1x1x3x2xi64>) -> tensor<2x1x1x3xi1>
  %keep = graph.and %a0, %pad : (tensor<1x1x3x3xi1>, tensor<2x1x1x3xi1>) -> tensor<2x1x3x3xi1>
  %zero = graph.constant dense<0.000000e+00> : tensor<f32>
  %fill = graph.constant dense<-3.40282347E+38> : tensor<f32>
  %bias = graph.select %keep, %zero, %fill : (tensor<2x1x3x3xi1>, tensor<f32>, tensor<f32>) -> tensor<2x1x3x3xf32>
  %kt = graph.transpose %k {perm = array<i64: 0, 1, 3, 2>} : tensor<2x2x3x8xf32> -> tensor<2x2x8x3xf32>
  %s = graph.matmul %q, %kt : (tensor<2x2x3x8xf32>, tensor<2x2x8x3xf32>) -> tensor<2x2x3x3xf32>
  %c = graph.constant dense<2.500000e-01> : tensor<f32>
  %t = graph.mul %s, %c : (tensor<2x2x3x3xf32>, tensor<f32>) -> tensor<2x2x3x3xf32>
  %a = graph.add %t, %bias : (tensor<2x2x3x3xf32>, tensor<2x1x3x3xf32>) -> tensor<2x2x3x3xf32>
  %p = graph.softmax %a {axis = 3 : i64} : tensor<2x2x3x3xf32>
  %o = graph.matmul %p, %v : (tensor<2x2x3x3xf32>, tensor<2x2x3x8xf32>) -> tensor<2x2x3x8xf32>
  return %o : tensor<2x2x3x8xf32>
}

// -----

// The same computation with a padding mask that is an input: it depends on
// the data, so the mask is the op's bias and not causal.
// CHECK-LABEL: func.func @hf_padding_input
// CHECK: %[[B:.*]] = graph.select
// CHECK: graph.attention %{{.*}}, %{{.*}}, %{{.*}}, %[[B]] {scale = 2.500000e-01 : f64} :
func.func @hf_padding_input(%q: tensor<2x2x3x8xf32>, %k: tensor<2x2x3x8xf32>, %v: tensor<2x2x3x8xf32>,
                            %pad: tensor<2x1x1x3xi1> {graph.kind = "input", graph.name = "attention_mask"}) -> tensor<2x2x3x8xf32> {
  %kv = graph.constant dense<[[[[0, 1, 2]]]]> : tensor<1x1x1x3xi64>
  %qi = graph.constant dense<[[[[0], [1], [2]]]]> : tensor<1x1x3x1xi64>
  %le = graph.less_equal %kv, %qi : (tensor<1x1x1x3xi64>, tensor<1x1x3x1xi64>) -> tensor<1x1x3x3xi1>
  %keep = graph.and %le, %pad : (tensor<1x1x3x3xi1>, tensor<2x1x1x3xi1>) -> tensor<2x1x3x3xi1>
  %zero = graph.constant dense<0.000000e+00> : tensor<f32>
  %fill = graph.constant dense<-3.40282347E+38> : tensor<f32>
  %bias = graph.select %keep, %zero, %fill : (tensor<2x1x3x3xi1>, tensor<f32>, tensor<f32>) -> tensor<2x1x3x3xf32>
  %kt = graph.transpose %k {perm = array<i64: 0, 1, 3, 2>} : tensor<2x2x3x8xf32> -> tensor<2x2x8x3xf32>
  %s = graph.matmul %q, %kt : (tensor<2x2x3x8xf32>, tensor<2x2x8x3xf32>) -> tensor<2x2x3x3xf32>
  %c = graph.constant dense<2.500000e-01> : tensor<f32>
  %t = graph.mul %s, %c : (tensor<2x2x3x3xf32>, tensor<f32>) -> tensor<2x2x3x3xf32>
  %a = graph.add %t, %bias : (tensor<2x2x3x3xf32>, tensor<2x1x3x3xf32>) -> tensor<2x2x3x3xf32>
  %p = graph.softmax %a {axis = 3 : i64} : tensor<2x2x3x3xf32>
  %o = graph.matmul %p, %v : (tensor<2x2x3x3xf32>, tensor<2x2x3x8xf32>) -> tensor<2x2x3x8xf32>
  return %o : tensor<2x2x3x8xf32>
}
