// RUN: lamina-opt %s -split-input-file -convert-graph-to-rt -verify-diagnostics | FileCheck %s

// The memory plan: exp overwrites the matmul result that dies at it, the
// reshape is a view of the same bytes (no call), the add needs fresh room
// while its operand is live, and a result that is an argument is copied into
// the arena so every output has an offset.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: (%[[ARENA:.*]]: !rt.arena, %[[X:.*]]: memref<2x3xf32> {graph.kind = "input", graph.name = "x"}, %[[W:.*]]: memref<3x4xf32> {graph.kind = "trainable", graph.name = "w"})
// CHECK-SAME: -> (memref<2x4xf32>, memref<8xf32>, memref<3x4xf32>)
// CHECK-SAME: rt.arena_bytes = 192 : i64, rt.tensor_bytes = 320 : i64
func.func @forward(%x: tensor<2x3xf32> {graph.name = "x", graph.kind = "input"},
                   %w: tensor<3x4xf32> {graph.name = "w", graph.kind = "trainable"})
    -> (tensor<2x4xf32>, tensor<8xf32>, tensor<3x4xf32>)
    attributes {graph.output_names = ["y", "z", "w_out"]} {
  // CHECK: %[[MM:.*]] = rt.view %[[ARENA]][[[OFF:[0-9]+]]] : memref<2x4xf32>
  // CHECK: rt.call "lamina::rt::matmul"(%[[X]], %[[W]], %[[MM]]) {args = [0 : index, 1 : index, 2 : index, false, false]
  %0 = graph.matmul %x, %w : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  // CHECK: %[[EXP:.*]] = rt.view %[[ARENA]][[[OFF]]] : memref<2x4xf32>
  // CHECK: rt.call "lamina::rt::unary"(%[[MM]], %[[EXP]]) {args = ["lamina::rt::UnaryOp::Exp", 0 : index, 1 : index]
  %1 = graph.exp %0 : tensor<2x4xf32>
  // CHECK: %[[FLAT:.*]] = rt.view %[[ARENA]][[[OFF]]] : memref<8xf32>
  // CHECK-NOT: lamina::rt::reshape
  %2 = graph.reshape %1 : tensor<2x4xf32> to tensor<8xf32>
  // CHECK: %[[C:.*]] = rt.constant dense<{{.*}}> : tensor<8xf32> : memref<8xf32>
  %c = graph.constant dense<[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]> : tensor<8xf32>
  // CHECK: %[[SUM:.*]] = rt.view %[[ARENA]][{{[0-9]+}}] : memref<8xf32>
  // CHECK: rt.call "lamina::rt::binary"(%[[FLAT]], %[[C]], %[[SUM]])
  %3 = graph.add %2, %c : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  // CHECK: %[[COPY:.*]] = rt.view %[[ARENA]][{{[0-9]+}}] : memref<3x4xf32>
  // CHECK: rt.call "lamina::rt::reshape"(%[[W]], %[[COPY]])
  // CHECK: return %[[EXP]], %[[SUM]], %[[COPY]]
  return %1, %3, %w : tensor<2x4xf32>, tensor<8xf32>, tensor<3x4xf32>
}

// -----

// A transpose of the last two dims that only feeds matmuls is never
// computed: the matmul reads its input with BLAS's transposition flag (the
// tied embedding of a language-model head).
// CHECK-LABEL: func.func @tied_head
// CHECK-SAME: %[[H:[^:]*]]: memref<2x8xf32>{{.*}}%[[E:[^:]*]]: memref<16x8xf32>
// CHECK-NOT: lamina::rt::transpose
// CHECK: rt.call "lamina::rt::matmul"(%[[H]], %[[E]], %{{.*}}) {args = [0 : index, 1 : index, 2 : index, false, true]
func.func @tied_head(%h: tensor<2x8xf32> {graph.name = "h", graph.kind = "input"},
                     %e: tensor<16x8xf32> {graph.name = "wte", graph.kind = "trainable"})
    -> tensor<2x16xf32> {
  %t = graph.transpose %e {perm = array<i64: 1, 0>} : tensor<16x8xf32> -> tensor<8x16xf32>
  %0 = graph.matmul %h, %t : (tensor<2x8xf32>, tensor<8x16xf32>) -> tensor<2x16xf32>
  return %0 : tensor<2x16xf32>
}

// -----

// A transpose read by a matmul and by a transpose that folds (the tied
// head's weight and the input gradient's matmul, which reads it transposed
// back) folds too: the second matmul reads the weight as it is stored.
// CHECK-LABEL: func.func @tied_head_backward
// CHECK-SAME: %[[H:[^:]*]]: memref<2x8xf32>{{.*}}%[[E:[^:]*]]: memref<16x8xf32>{{.*}}%[[D:[^:]*]]: memref<2x16xf32>
// CHECK-NOT: lamina::rt::transpose
// CHECK: rt.call "lamina::rt::matmul"(%[[H]], %[[E]], %{{.*}}) {args = [0 : index, 1 : index, 2 : index, false, true]
// CHECK: rt.call "lamina::rt::matmul"(%[[D]], %[[E]], %{{.*}}) {args = [0 : index, 1 : index, 2 : index, false, false]
func.func @tied_head_backward(%h: tensor<2x8xf32> {graph.name = "h", graph.kind = "input"},
                              %e: tensor<16x8xf32> {graph.name = "wte", graph.kind = "trainable"},
                              %d: tensor<2x16xf32> {graph.name = "d", graph.kind = "input"})
    -> (tensor<2x16xf32>, tensor<2x8xf32>) {
  %t = graph.transpose %e {perm = array<i64: 1, 0>} : tensor<16x8xf32> -> tensor<8x16xf32>
  %0 = graph.matmul %h, %t : (tensor<2x8xf32>, tensor<8x16xf32>) -> tensor<2x16xf32>
  %tt = graph.transpose %t {perm = array<i64: 1, 0>} : tensor<8x16xf32> -> tensor<16x8xf32>
  %1 = graph.matmul %d, %tt : (tensor<2x16xf32>, tensor<16x8xf32>) -> tensor<2x8xf32>
  return %0, %1 : tensor<2x16xf32>, tensor<2x8xf32>
}

// -----

// A transpose with another user is computed as usual.
// CHECK-LABEL: func.func @transpose_kept
// CHECK: rt.call "lamina::rt::transpose"
// CHECK: rt.call "lamina::rt::matmul"({{.*}}) {args = [0 : index, 1 : index, 2 : index, false, false]
func.func @transpose_kept(%h: tensor<2x8xf32> {graph.name = "h", graph.kind = "input"},
                          %e: tensor<16x8xf32> {graph.name = "wte", graph.kind = "trainable"})
    -> (tensor<2x16xf32>, tensor<8x16xf32>) {
  %t = graph.transpose %e {perm = array<i64: 1, 0>} : tensor<16x8xf32> -> tensor<8x16xf32>
  %0 = graph.matmul %h, %t : (tensor<2x8xf32>, tensor<8x16xf32>) -> tensor<2x16xf32>
  return %0, %t : tensor<2x16xf32>, tensor<8x16xf32>
}

// -----

// Values live at the same time never share bytes; dead ones are reused.
// %a and %b are both live at the add; %d reuses the room of %a or %b.
// CHECK-LABEL: func.func @reuse
// CHECK-SAME: rt.arena_bytes = 8192 : i64, rt.tensor_bytes = 12288 : i64
func.func @reuse(%x: tensor<1024xf32> {graph.name = "x", graph.kind = "input"})
    -> tensor<1024xf32> {
  %a = graph.exp %x : tensor<1024xf32>
  %b = graph.sin %x : tensor<1024xf32>
  %c = graph.add %a, %b : (tensor<1024xf32>, tensor<1024xf32>) -> tensor<1024xf32>
  return %c : tensor<1024xf32>
}

// -----

// Only static shapes can be planned.
// expected-error @+1 {{argument or result type 'tensor<?xf32>' is not a static tensor}}
func.func @dynamic(%x: tensor<?xf32> {graph.name = "x", graph.kind = "input"}) -> tensor<?xf32> {
  return %x : tensor<?xf32>
}

// -----

// A fused chain is one call of the gen:: adapter: the result, the steps as
// (isBinary, op, lhs, rhs) per step, their count, then the inputs. It may
// overwrite an input of its shape whose storage dies there.
// CHECK-LABEL: func.func @fused
// CHECK: %[[E:.*]] = rt.view %{{.*}}[[[OFF:[0-9]+]]] : memref<2x4xf32>
// CHECK: %[[F:.*]] = rt.view %{{.*}}[[[OFF]]] : memref<2x4xf32>
// CHECK: rt.call "lamina::rt::gen::fusedElementwise"(%[[E]], %{{.*}}, %[[F]]) {args = [2 : index, array<i64: 1, 0, 0, 1, 0, 10, 2, 0>, 2, 0 : index, 1 : index]
func.func @fused(%x: tensor<2x4xf32> {graph.name = "x", graph.kind = "input"},
                 %b: tensor<4xf32> {graph.name = "b", graph.kind = "trainable"})
    -> tensor<2x4xf32> attributes {graph.output_names = ["y"]} {
  %0 = graph.exp %x : tensor<2x4xf32>
  %1 = graph.fused_elementwise %0, %b {ops = ["add", "gelu"], lhs = array<i64: 0, 2>, rhs = array<i64: 1, -1>} : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  return %1 : tensor<2x4xf32>
}

// -----

// A multi-result op (the norms' fused gradients) gets one arena view per
// result, passed last in result order; an absent gradient or addend is
// nullptr (a unit argument); an addend follows the incoming gradient. The
// cross-entropy ops are one call each.
// CHECK-LABEL: func.func @fused_gradients
// CHECK: %[[DX:.*]] = rt.view %{{.*}}[{{[0-9]+}}] : memref<2x3x4xf32>
// CHECK: %[[DS:.*]] = rt.view %{{.*}}[{{[0-9]+}}] : memref<4xf32>
// CHECK: %[[DB:.*]] = rt.view %{{.*}}[{{[0-9]+}}] : memref<4xf32>
// CHECK: rt.call "lamina::rt::gen::layerNormBackward"(%{{.*}}, %{{.*}}, %{{.*}}, %[[DX]], %[[DS]], %[[DB]]) {args = [0 : index, 1 : index, 2 : index, unit, 2, 1.000000e-05, 3 : index, 4 : index, 5 : index]
// CHECK: rt.call "lamina::rt::gen::rmsNormBackward"({{.*}}) {args = [0 : index, 1 : index, 2 : index, 3 : index, 2, 1.000000e-05, 4 : index, 5 : index]
// CHECK: rt.call "lamina::rt::softmaxCrossEntropy"({{.*}}) {args = [0 : index, 1 : index, -100, 2 : index]
// CHECK: rt.call "lamina::rt::softmaxCrossEntropyBackward"({{.*}}) {args = [0 : index, 1 : index, 2 : index, -100, 3 : index]
func.func @fused_gradients(%x: tensor<2x3x4xf32> {graph.name = "x", graph.kind = "input"},
                           %s: tensor<4xf32> {graph.name = "s", graph.kind = "trainable"},
                           %g: tensor<2x3x4xf32> {graph.name = "g", graph.kind = "input"},
                           %t: tensor<2x3xi64> {graph.name = "t", graph.kind = "input"})
    -> (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<2x3x4xf32>, tensor<4xf32>, tensor<2x3x4xf32>)
    attributes {graph.output_names = ["dx", "ds", "db", "dx2", "ds2", "dl"]} {
  %dx, %ds, %db = graph.layer_norm_grad %x, %s, %g {axis = 2 : i64, epsilon = 1.0e-5 : f64} : tensor<2x3x4xf32>, tensor<4xf32> -> tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>
  %dx2, %ds2 = graph.rms_norm_grad %x, %s, %g addend %x {axis = 2 : i64, epsilon = 1.0e-5 : f64} : tensor<2x3x4xf32>, tensor<4xf32>
  %l = graph.softmax_cross_entropy %x, %t {ignore_index = -100 : i64} : (tensor<2x3x4xf32>, tensor<2x3xi64>) -> tensor<2x3xf32>
  %dl = graph.softmax_cross_entropy_grad %x, %t, %l {ignore_index = -100 : i64} : (tensor<2x3x4xf32>, tensor<2x3xi64>, tensor<2x3xf32>) -> tensor<2x3x4xf32>
  return %dx, %ds, %db, %dx2, %ds2, %dl : tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<2x3x4xf32>, tensor<4xf32>, tensor<2x3x4xf32>
}

// -----

// The softmax gradient is one call, and may overwrite either input whose
// storage dies there (here the incoming gradient %g's).
// CHECK-LABEL: func.func @softmax_grad
// CHECK: %[[G:.*]] = rt.view %{{.*}}[[[OFF:[0-9]+]]] : memref<2x4xf32>
// CHECK: rt.call "lamina::rt::unary"
// CHECK: %[[DX:.*]] = rt.view %{{.*}}[[[OFF]]] : memref<2x4xf32>
// CHECK: rt.call "lamina::rt::softmaxBackward"(%{{.*}}, %[[G]], %[[DX]]) {args = [0 : index, 1 : index, 1, 2 : index]
func.func @softmax_grad(%y: tensor<2x4xf32> {graph.name = "y", graph.kind = "input"},
                        %x: tensor<2x4xf32> {graph.name = "x", graph.kind = "input"})
    -> tensor<2x4xf32> attributes {graph.output_names = ["dx"]} {
  %g = graph.exp %x : tensor<2x4xf32>
  %dx = graph.softmax_grad %y, %g {axis = 1 : i64} : tensor<2x4xf32>
  return %dx : tensor<2x4xf32>
}

// -----

// Fused attention is one call of the gen:: adapter: q, k, v, the bias (a
// unit argument, nullptr, without one), the scale and causal literals, the
// layout, then out and lse (one arena view each). Its gradient reads q, k, v, the bias,
// the forward's out and lse and the gradient of out, and writes dq, dk and
// dv (dk and dv with the kv heads' shape).
// CHECK-LABEL: func.func @attention
// CHECK-SAME: (%{{.*}}: !rt.arena, %[[Q:.*]]: memref<1x4x8x16xf32> {{.*}}, %[[K:.*]]: memref<1x2x8x16xf32> {{.*}}, %[[V:.*]]: memref<1x2x8x16xf32> {{.*}}, %[[B:.*]]: memref<1x1x1x8xf32> {{.*}}, %[[G:.*]]: memref<1x4x8x16xf32> {graph.kind = "input", graph.name = "g"})
// CHECK: %[[O:.*]] = rt.view %{{.*}}[{{[0-9]+}}] : memref<1x4x8x16xf32>
// CHECK: %[[L:.*]] = rt.view %{{.*}}[{{[0-9]+}}] : memref<1x4x8xf32>
// CHECK: rt.call "lamina::rt::gen::attention"(%[[Q]], %[[K]], %[[V]], %[[O]], %[[L]]) {args = [0 : index, 1 : index, 2 : index, unit, 2.500000e-01, true, "lamina::rt::AttentionLayout::HeadMajor", 3 : index, 4 : index]
// CHECK: %[[OB:.*]] = rt.view %{{.*}}[{{[0-9]+}}] : memref<1x4x8x16xf32>
// CHECK: %[[LB:.*]] = rt.view %{{.*}}[{{[0-9]+}}] : memref<1x4x8xf32>
// CHECK: rt.call "lamina::rt::gen::attention"(%[[Q]], %[[K]], %[[V]], %[[B]], %[[OB]], %[[LB]]) {args = [0 : index, 1 : index, 2 : index, 3 : index, 0.35355339059327379, false, "lamina::rt::AttentionLayout::HeadMajor", 4 : index, 5 : index]
// CHECK: %[[DQ:.*]] = rt.view %{{.*}}[{{[0-9]+}}] : memref<1x4x8x16xf32>
// CHECK: %[[DK:.*]] = rt.view %{{.*}}[{{[0-9]+}}] : memref<1x2x8x16xf32>
// CHECK: %[[DV:.*]] = rt.view %{{.*}}[{{[0-9]+}}] : memref<1x2x8x16xf32>
// CHECK: rt.call "lamina::rt::gen::attentionBackward"(%[[Q]], %[[K]], %[[V]], %[[O]], %[[L]], %[[G]], %[[DQ]], %[[DK]], %[[DV]]) {args = [0 : index, 1 : index, 2 : index, unit, 3 : index, 4 : index, 5 : index, 2.500000e-01, true, "lamina::rt::AttentionLayout::HeadMajor", 6 : index, 7 : index, 8 : index]
// CHECK: rt.call "lamina::rt::gen::attentionBackward"(%[[Q]], %[[K]], %[[V]], %[[OB]], %[[LB]], %[[G]], %[[B]], %{{.*}}, %{{.*}}, %{{.*}}) {args = [0 : index, 1 : index, 2 : index, 6 : index, 3 : index, 4 : index, 5 : index, 0.35355339059327379, false, "lamina::rt::AttentionLayout::HeadMajor", 7 : index, 8 : index, 9 : index]
func.func @attention(%q: tensor<1x4x8x16xf32> {graph.name = "q", graph.kind = "input"},
                     %k: tensor<1x2x8x16xf32> {graph.name = "k", graph.kind = "input"},
                     %v: tensor<1x2x8x16xf32> {graph.name = "v", graph.kind = "input"},
                     %b: tensor<1x1x1x8xf32> {graph.name = "b", graph.kind = "input"},
                     %g: tensor<1x4x8x16xf32> {graph.name = "g", graph.kind = "input"})
    -> (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x4x8x16xf32>)
    attributes {graph.output_names = ["o", "ob", "dq", "dk", "dv", "dqb"]} {
  %o, %lse = graph.attention %q, %k, %v {causal, scale = 0.25 : f64} : (tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>) -> (tensor<1x4x8x16xf32>, tensor<1x4x8xf32>)
  %ob, %lseb = graph.attention %q, %k, %v, %b {scale = 0.35355339059327379 : f64} : (tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x1x1x8xf32>) -> (tensor<1x4x8x16xf32>, tensor<1x4x8xf32>)
  %dq, %dk, %dv = graph.attention_grad %q, %k, %v, %o, %lse, %g {causal, scale = 0.25 : f64} : (tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8xf32>, tensor<1x4x8x16xf32>) -> (tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>)
  %dqb, %dkb, %dvb = graph.attention_grad %q, %k, %v, %ob, %lseb, %g, %b {scale = 0.35355339059327379 : f64} : (tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8xf32>, tensor<1x4x8x16xf32>, tensor<1x1x1x8xf32>) -> (tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>)
  return %o, %ob, %dq, %dk, %dv, %dqb : tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x4x8x16xf32>
}

// -----

// seq_major: the same call with the other layout; out [B, S, H, D], lse
// [B, H, S] as ever.
// CHECK-LABEL: func.func @attention_seq_major
// CHECK: %[[O:.*]] = rt.view %{{.*}}[{{[0-9]+}}] : memref<1x8x4x16xf32>
// CHECK: %[[L:.*]] = rt.view %{{.*}}[{{[0-9]+}}] : memref<1x4x8xf32>
// CHECK: rt.call "lamina::rt::gen::attention"(%{{.*}}, %{{.*}}, %{{.*}}, %[[O]], %[[L]]) {args = [0 : index, 1 : index, 2 : index, unit, 2.500000e-01, true, "lamina::rt::AttentionLayout::SeqMajor", 3 : index, 4 : index]
// CHECK: rt.call "lamina::rt::gen::attentionBackward"({{.*}}) {args = [0 : index, 1 : index, 2 : index, unit, 3 : index, 4 : index, 5 : index, 2.500000e-01, true, "lamina::rt::AttentionLayout::SeqMajor", 6 : index, 7 : index, 8 : index]
func.func @attention_seq_major(%q: tensor<1x8x4x16xf32> {graph.name = "q", graph.kind = "input"},
                               %k: tensor<1x8x2x16xf32> {graph.name = "k", graph.kind = "input"},
                               %g: tensor<1x8x4x16xf32> {graph.name = "g", graph.kind = "input"})
    -> (tensor<1x8x4x16xf32>, tensor<1x8x4x16xf32>) attributes {graph.output_names = ["o", "dq"]} {
  %o, %lse = graph.attention %q, %k, %k {causal, seq_major, scale = 0.25 : f64} : (tensor<1x8x4x16xf32>, tensor<1x8x2x16xf32>, tensor<1x8x2x16xf32>) -> (tensor<1x8x4x16xf32>, tensor<1x4x8xf32>)
  %dq, %dk, %dv = graph.attention_grad %q, %k, %k, %o, %lse, %g {causal, seq_major, scale = 0.25 : f64} : (tensor<1x8x4x16xf32>, tensor<1x8x2x16xf32>, tensor<1x8x2x16xf32>, tensor<1x8x4x16xf32>, tensor<1x4x8xf32>, tensor<1x8x4x16xf32>) -> (tensor<1x8x4x16xf32>, tensor<1x8x2x16xf32>, tensor<1x8x2x16xf32>)
  return %o, %dq : tensor<1x8x4x16xf32>, tensor<1x8x4x16xf32>
}

// -----

// Low precision: bf16 q, k, v and out, the lse f32; an unused lse still
// gets its view (the kernel writes it).
// CHECK-LABEL: func.func @attention_bf16
// CHECK: %[[O:.*]] = rt.view %{{.*}}[{{[0-9]+}}] : memref<1x2x4x8xbf16>
// CHECK: %[[L:.*]] = rt.view %{{.*}}[{{[0-9]+}}] : memref<1x2x4xf32>
// CHECK: rt.call "lamina::rt::gen::attention"(%{{.*}}, %{{.*}}, %{{.*}}, %[[O]], %[[L]]) {args = [0 : index, 1 : index, 2 : index, unit, 5.000000e-01, true, "lamina::rt::AttentionLayout::HeadMajor", 3 : index, 4 : index]
// CHECK-SAME: : memref<1x2x4x8xbf16>, memref<1x2x4x8xbf16>, memref<1x2x4x8xbf16>, memref<1x2x4x8xbf16>, memref<1x2x4xf32>
func.func @attention_bf16(%q: tensor<1x2x4x8xbf16> {graph.name = "q", graph.kind = "input"})
    -> tensor<1x2x4x8xbf16> attributes {graph.output_names = ["o"]} {
  %o, %lse = graph.attention %q, %q, %q {causal, scale = 0.5 : f64} : (tensor<1x2x4x8xbf16>, tensor<1x2x4x8xbf16>, tensor<1x2x4x8xbf16>) -> (tensor<1x2x4x8xbf16>, tensor<1x2x4xf32>)
  return %o : tensor<1x2x4x8xbf16>
}

// -----

// Every op without a host kernel is an error before anything is rewritten
// (the runtime's group reduces only sum and max).
shard.grid @tp(shape = 2)
func.func @no_kernel(%x: tensor<4xf32> {graph.name = "x", graph.kind = "input"}) -> tensor<4xf32> {
  %0 = graph.exp %x : tensor<4xf32>
  // expected-error @+1 {{no host kernel for}}
  %1 = shard.all_reduce %0 on @tp grid_axes = [0] reduction = min : tensor<4xf32> -> tensor<4xf32>
  // expected-error @+1 {{no host kernel for}}
  %2 = shard.all_reduce %1 on @tp grid_axes = [0] reduction = min : tensor<4xf32> -> tensor<4xf32>
  return %2 : tensor<4xf32>
}
