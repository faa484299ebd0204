// RUN: lamina-opt %s -split-input-file -graph-pack-attention | FileCheck %s
// RUN: lamina-opt %s -split-input-file -graph-pack-attention -convert-graph-to-rt | FileCheck %s --check-prefix=RT

// The forward and its gradient on a fused q/k/v projection: no slices,
// reshapes or concatenation are left, and the lowering calls the packed
// kernels.
// CHECK-LABEL: func.func @train
// CHECK-NOT: graph.slice
// CHECK: %[[O:.*]], %[[L:.*]] = graph.packed_attention %arg0 {causal, heads = 4 : i64, kv_heads = 4 : i64, scale = 0.35355339059327373 : f64} : (tensor<2x8x96xbf16>) -> (tensor<2x8x4x8xbf16>, tensor<2x4x8xf32>)
// CHECK-NEXT: %[[G:.*]] = graph.packed_attention_grad %arg0, %[[O]], %[[L]], %arg1 {causal, heads = 4 : i64, kv_heads = 4 : i64, scale = 0.35355339059327373 : f64}
// CHECK-NEXT: return %[[O]], %[[G]]
// RT-LABEL: func.func @train
// RT: rt.call "lamina::rt::packedAttention"
// RT: rt.call "lamina::rt::packedAttentionBackward"
func.func @train(%x: tensor<2x8x96xbf16>, %do: tensor<2x8x4x8xbf16>) -> (tensor<2x8x4x8xbf16>, tensor<2x8x96xbf16>) {
  %q0 = graph.slice %x {sizes = array<i64: 2, 8, 32>, starts = array<i64: 0, 0, 0>, steps = array<i64: 1, 1, 1>} : tensor<2x8x96xbf16> -> tensor<2x8x32xbf16>
  %k0 = graph.slice %x {sizes = array<i64: 2, 8, 32>, starts = array<i64: 0, 0, 32>, steps = array<i64: 1, 1, 1>} : tensor<2x8x96xbf16> -> tensor<2x8x32xbf16>
  %v0 = graph.slice %x {sizes = array<i64: 2, 8, 32>, starts = array<i64: 0, 0, 64>, steps = array<i64: 1, 1, 1>} : tensor<2x8x96xbf16> -> tensor<2x8x32xbf16>
  %q = graph.reshape %q0 : tensor<2x8x32xbf16> to tensor<2x8x4x8xbf16>
  %k = graph.reshape %k0 : tensor<2x8x32xbf16> to tensor<2x8x4x8xbf16>
  %v = graph.reshape %v0 : tensor<2x8x32xbf16> to tensor<2x8x4x8xbf16>
  %o, %l = graph.attention %q, %k, %v {causal, scale = 0.35355339059327373 : f64, seq_major} : (tensor<2x8x4x8xbf16>, tensor<2x8x4x8xbf16>, tensor<2x8x4x8xbf16>) -> (tensor<2x8x4x8xbf16>, tensor<2x4x8xf32>)
  %gq, %gk, %gv = graph.attention_grad %q, %k, %v, %o, %l, %do {causal, scale = 0.35355339059327373 : f64, seq_major} : (tensor<2x8x4x8xbf16>, tensor<2x8x4x8xbf16>, tensor<2x8x4x8xbf16>, tensor<2x8x4x8xbf16>, tensor<2x4x8xf32>, tensor<2x8x4x8xbf16>) -> (tensor<2x8x4x8xbf16>, tensor<2x8x4x8xbf16>, tensor<2x8x4x8xbf16>)
  %rq = graph.reshape %gq : tensor<2x8x4x8xbf16> to tensor<2x8x32xbf16>
  %rk = graph.reshape %gk : tensor<2x8x4x8xbf16> to tensor<2x8x32xbf16>
  %rv = graph.reshape %gv : tensor<2x8x4x8xbf16> to tensor<2x8x32xbf16>
  %c = graph.concat %rq, %rk, %rv {axis = 2 : i64} : (tensor<2x8x32xbf16>, tensor<2x8x32xbf16>, tensor<2x8x32xbf16>) -> tensor<2x8x96xbf16>
  return %o, %c : tensor<2x8x4x8xbf16>, tensor<2x8x96xbf16>
}

// -----

// Inference (no gradient) with shared kv heads.
// CHECK-LABEL: func.func @infer_gqa
// CHECK-NEXT: %[[O:.*]], %{{.*}} = graph.packed_attention %arg0 {causal, heads = 4 : i64, kv_heads = 2 : i64, scale = 0.35355339059327373 : f64} : (tensor<2x8x64xbf16>) -> (tensor<2x8x4x8xbf16>, tensor<2x4x8xf32>)
// CHECK-NEXT: return %[[O]]
func.func @infer_gqa(%x: tensor<2x8x64xbf16>) -> tensor<2x8x4x8xbf16> {
  %q0 = graph.slice %x {sizes = array<i64: 2, 8, 32>, starts = array<i64: 0, 0, 0>, steps = array<i64: 1, 1, 1>} : tensor<2x8x64xbf16> -> tensor<2x8x32xbf16>
  %k0 = graph.slice %x {sizes = array<i64: 2, 8, 16>, starts = array<i64: 0, 0, 32>, steps = array<i64: 1, 1, 1>} : tensor<2x8x64xbf16> -> tensor<2x8x16xbf16>
  %v0 = graph.slice %x {sizes = array<i64: 2, 8, 16>, starts = array<i64: 0, 0, 48>, steps = array<i64: 1, 1, 1>} : tensor<2x8x64xbf16> -> tensor<2x8x16xbf16>
  %q = graph.reshape %q0 : tensor<2x8x32xbf16> to tensor<2x8x4x8xbf16>
  %k = graph.reshape %k0 : tensor<2x8x16xbf16> to tensor<2x8x2x8xbf16>
  %v = graph.reshape %v0 : tensor<2x8x16xbf16> to tensor<2x8x2x8xbf16>
  %o, %l = graph.attention %q, %k, %v {causal, scale = 0.35355339059327373 : f64, seq_major} : (tensor<2x8x4x8xbf16>, tensor<2x8x2x8xbf16>, tensor<2x8x2x8xbf16>) -> (tensor<2x8x4x8xbf16>, tensor<2x4x8xf32>)
  return %o : tensor<2x8x4x8xbf16>
}

// -----

// q and k from each other's columns: not the packed layout.
// CHECK-LABEL: func.func @swapped
// CHECK-NOT: packed_attention
func.func @swapped(%x: tensor<2x8x96xbf16>) -> tensor<2x8x4x8xbf16> {
  %q0 = graph.slice %x {sizes = array<i64: 2, 8, 32>, starts = array<i64: 0, 0, 32>, steps = array<i64: 1, 1, 1>} : tensor<2x8x96xbf16> -> tensor<2x8x32xbf16>
  %k0 = graph.slice %x {sizes = array<i64: 2, 8, 32>, starts = array<i64: 0, 0, 0>, steps = array<i64: 1, 1, 1>} : tensor<2x8x96xbf16> -> tensor<2x8x32xbf16>
  %v0 = graph.slice %x {sizes = array<i64: 2, 8, 32>, starts = array<i64: 0, 0, 64>, steps = array<i64: 1, 1, 1>} : tensor<2x8x96xbf16> -> tensor<2x8x32xbf16>
  %q = graph.reshape %q0 : tensor<2x8x32xbf16> to tensor<2x8x4x8xbf16>
  %k = graph.reshape %k0 : tensor<2x8x32xbf16> to tensor<2x8x4x8xbf16>
  %v = graph.reshape %v0 : tensor<2x8x32xbf16> to tensor<2x8x4x8xbf16>
  %o, %l = graph.attention %q, %k, %v {causal, scale = 0.35355339059327373 : f64, seq_major} : (tensor<2x8x4x8xbf16>, tensor<2x8x4x8xbf16>, tensor<2x8x4x8xbf16>) -> (tensor<2x8x4x8xbf16>, tensor<2x4x8xf32>)
  return %o : tensor<2x8x4x8xbf16>
}

// -----

// A gradient concatenated in another order: forward and gradient stay.
// CHECK-LABEL: func.func @other_concat
// CHECK-NOT: packed_attention
// CHECK: graph.attention_grad
func.func @other_concat(%x: tensor<2x8x96xbf16>, %do: tensor<2x8x4x8xbf16>) -> (tensor<2x8x4x8xbf16>, tensor<2x8x96xbf16>) {
  %q0 = graph.slice %x {sizes = array<i64: 2, 8, 32>, starts = array<i64: 0, 0, 0>, steps = array<i64: 1, 1, 1>} : tensor<2x8x96xbf16> -> tensor<2x8x32xbf16>
  %k0 = graph.slice %x {sizes = array<i64: 2, 8, 32>, starts = array<i64: 0, 0, 32>, steps = array<i64: 1, 1, 1>} : tensor<2x8x96xbf16> -> tensor<2x8x32xbf16>
  %v0 = graph.slice %x {sizes = array<i64: 2, 8, 32>, starts = array<i64: 0, 0, 64>, steps = array<i64: 1, 1, 1>} : tensor<2x8x96xbf16> -> tensor<2x8x32xbf16>
  %q = graph.reshape %q0 : tensor<2x8x32xbf16> to tensor<2x8x4x8xbf16>
  %k = graph.reshape %k0 : tensor<2x8x32xbf16> to tensor<2x8x4x8xbf16>
  %v = graph.reshape %v0 : tensor<2x8x32xbf16> to tensor<2x8x4x8xbf16>
  %o, %l = graph.attention %q, %k, %v {causal, scale = 0.35355339059327373 : f64, seq_major} : (tensor<2x8x4x8xbf16>, tensor<2x8x4x8xbf16>, tensor<2x8x4x8xbf16>) -> (tensor<2x8x4x8xbf16>, tensor<2x4x8xf32>)
  %gq, %gk, %gv = graph.attention_grad %q, %k, %v, %o, %l, %do {causal, scale = 0.35355339059327373 : f64, seq_major} : (tensor<2x8x4x8xbf16>, tensor<2x8x4x8xbf16>, tensor<2x8x4x8xbf16>, tensor<2x8x4x8xbf16>, tensor<2x4x8xf32>, tensor<2x8x4x8xbf16>) -> (tensor<2x8x4x8xbf16>, tensor<2x8x4x8xbf16>, tensor<2x8x4x8xbf16>)
  %rq = graph.reshape %gq : tensor<2x8x4x8xbf16> to tensor<2x8x32xbf16>
  %rk = graph.reshape %gk : tensor<2x8x4x8xbf16> to tensor<2x8x32xbf16>
  %rv = graph.reshape %gv : tensor<2x8x4x8xbf16> to tensor<2x8x32xbf16>
  %c = graph.concat %rk, %rq, %rv {axis = 2 : i64} : (tensor<2x8x32xbf16>, tensor<2x8x32xbf16>, tensor<2x8x32xbf16>) -> tensor<2x8x96xbf16>
  return %o, %c : tensor<2x8x4x8xbf16>, tensor<2x8x96xbf16>
}

// -----

// q read by something else too.
// CHECK-LABEL: func.func @q_escapes
// CHECK-NOT: packed_attention
func.func @q_escapes(%x: tensor<2x8x96xbf16>) -> (tensor<2x8x4x8xbf16>, tensor<2x8x4x8xbf16>) {
  %q0 = graph.slice %x {sizes = array<i64: 2, 8, 32>, starts = array<i64: 0, 0, 0>, steps = array<i64: 1, 1, 1>} : tensor<2x8x96xbf16> -> tensor<2x8x32xbf16>
  %k0 = graph.slice %x {sizes = array<i64: 2, 8, 32>, starts = array<i64: 0, 0, 32>, steps = array<i64: 1, 1, 1>} : tensor<2x8x96xbf16> -> tensor<2x8x32xbf16>
  %v0 = graph.slice %x {sizes = array<i64: 2, 8, 32>, starts = array<i64: 0, 0, 64>, steps = array<i64: 1, 1, 1>} : tensor<2x8x96xbf16> -> tensor<2x8x32xbf16>
  %q = graph.reshape %q0 : tensor<2x8x32xbf16> to tensor<2x8x4x8xbf16>
  %k = graph.reshape %k0 : tensor<2x8x32xbf16> to tensor<2x8x4x8xbf16>
  %v = graph.reshape %v0 : tensor<2x8x32xbf16> to tensor<2x8x4x8xbf16>
  %o, %l = graph.attention %q, %k, %v {causal, scale = 0.35355339059327373 : f64, seq_major} : (tensor<2x8x4x8xbf16>, tensor<2x8x4x8xbf16>, tensor<2x8x4x8xbf16>) -> (tensor<2x8x4x8xbf16>, tensor<2x4x8xf32>)
  return %o, %q : tensor<2x8x4x8xbf16>, tensor<2x8x4x8xbf16>
}
