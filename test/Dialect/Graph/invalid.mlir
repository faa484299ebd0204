// RUN: lamina-opt %s -split-input-file -verify-diagnostics

// Shapes that do not broadcast.
func.func @add_shapes(%a: tensor<2x3xf32>, %b: tensor<4xf32>) {
  // expected-error @+2 {{operand shapes do not broadcast}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.add %a, %b : (tensor<2x3xf32>, tensor<4xf32>) -> tensor<2x3xf32>
  return
}

// -----
// Element types must agree.
func.func @add_types(%a: tensor<3xf32>, %b: tensor<3xf16>) {
  // expected-error @+2 {{operands have different element types}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.add %a, %b : (tensor<3xf32>, tensor<3xf16>) -> tensor<3xf32>
  return
}

// -----
// A declared result type that differs from the inferred one.
func.func @add_result(%a: tensor<2x3xf32>, %b: tensor<3xf32>) {
  // expected-error @+2 {{inferred type(s) 'tensor<2x3xf32>' are incompatible with return type(s) of operation 'tensor<3x3xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.add %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<3x3xf32>
  return
}

// -----
// Graph values have static shapes.
func.func @dynamic(%a: tensor<?x3xf32>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor}}
  %0 = graph.neg %a : tensor<?x3xf32>
  return
}

// -----
// Contraction sizes differ.
func.func @matmul_k(%a: tensor<2x3xf32>, %b: tensor<4x5xf32>) {
  // expected-error @+2 {{matmul contraction sizes differ: 3 vs 4}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.matmul %a, %b : (tensor<2x3xf32>, tensor<4x5xf32>) -> tensor<2x5xf32>
  return
}

// -----
// Matmul needs matrices.
func.func @matmul_rank(%a: tensor<3xf32>, %b: tensor<3x5xf32>) {
  // expected-error @+2 {{matmul operands need rank >= 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.matmul %a, %b : (tensor<3xf32>, tensor<3x5xf32>) -> tensor<5xf32>
  return
}

// -----
// Batch dimensions must broadcast.
func.func @matmul_batch(%a: tensor<2x2x3xf32>, %b: tensor<3x3x5xf32>) {
  // expected-error @+2 {{matmul batch dimensions do not broadcast}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.matmul %a, %b : (tensor<2x2x3xf32>, tensor<3x3x5xf32>) -> tensor<2x2x5xf32>
  return
}

// -----
// Softmax axis out of range.
func.func @softmax_axis(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{axis 2 out of range for rank 2}}
  %0 = graph.softmax %a {axis = 2 : i64} : tensor<2x3xf32>
  return
}

// -----
// Layer norm scale must cover the normalised dims.
func.func @layer_norm_scale(%a: tensor<2x3xf32>, %s: tensor<2xf32>) {
  // expected-error @+1 {{scale type 'tensor<2xf32>' does not match the normalised dims}}
  %0 = graph.layer_norm %a, %s {axis = 1 : i64, epsilon = 1.0e-5 : f64} : tensor<2x3xf32>, tensor<2xf32>
  return
}

// -----
// RMS norm axis out of range.
func.func @rms_norm_axis(%a: tensor<2x3xf32>, %s: tensor<3xf32>) {
  // expected-error @+1 {{axis -1 out of range for rank 2}}
  %0 = graph.rms_norm %a, %s {axis = -1 : i64, epsilon = 1.0e-5 : f64} : tensor<2x3xf32>, tensor<3xf32>
  return
}

// -----
// Reduction axes strictly increasing.
func.func @reduce_axes(%a: tensor<2x3xf32>) {
  // expected-error @+2 {{reduction axes must be strictly increasing}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.reduce_sum %a {axes = array<i64: 1, 0>, keepdims = false} : tensor<2x3xf32> -> tensor<f32>
  return
}

// -----
// Reduction axis out of range.
func.func @reduce_range(%a: tensor<2x3xf32>) {
  // expected-error @+2 {{reduction axis out of range}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.reduce_max %a {axes = array<i64: 2>, keepdims = false} : tensor<2x3xf32> -> tensor<2x3xf32>
  return
}

// -----
// Reshape keeps the element count.
func.func @reshape_count(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{changes the number of elements}}
  %0 = graph.reshape %a : tensor<2x3xf32> to tensor<5xf32>
  return
}

// -----
// Reshape keeps the element type.
func.func @reshape_type(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{reshape must keep the element type}}
  %0 = graph.reshape %a : tensor<2x3xf32> to tensor<6xf16>
  return
}

// -----
// Transpose needs a permutation.
func.func @transpose_perm(%a: tensor<2x3xf32>) {
  // expected-error @+2 {{perm is not a permutation}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.transpose %a {perm = array<i64: 0, 0>} : tensor<2x3xf32> -> tensor<2x2xf32>
  return
}

// -----
// Concat inputs agree outside the axis.
func.func @concat_dims(%a: tensor<2x3xf32>, %b: tensor<3x3xf32>) {
  // expected-error @+2 {{concat inputs differ outside the axis}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.concat %a, %b {axis = 1 : i64} : (tensor<2x3xf32>, tensor<3x3xf32>) -> tensor<2x6xf32>
  return
}

// -----
// Slices stay in bounds.
func.func @slice_bounds(%a: tensor<4xf32>) {
  // expected-error @+2 {{slice of dim 0 out of bounds}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.slice %a {starts = array<i64: 2>, sizes = array<i64: 3>, steps = array<i64: 1>} : tensor<4xf32> -> tensor<3xf32>
  return
}

// -----
// Slice steps are non-zero.
func.func @slice_step(%a: tensor<4xf32>) {
  // expected-error @+2 {{slice step must be non-zero}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.slice %a {starts = array<i64: 0>, sizes = array<i64: 1>, steps = array<i64: 0>} : tensor<4xf32> -> tensor<1xf32>
  return
}

// -----
// Broadcast only stretches unit dims.
func.func @broadcast_shape(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{'tensor<2x3xf32>' does not broadcast to 'tensor<4x3xf32>'}}
  %0 = graph.broadcast %a : tensor<2x3xf32> to tensor<4x3xf32>
  return
}

// -----
// Cast keeps the shape.
func.func @cast_shape(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{all non-scalar operands/results must have the same shape}}
  %0 = graph.cast %a : tensor<2x3xf32> to tensor<3x2xi64>
  return
}

// -----
// Gather axis in range.
func.func @gather_axis(%a: tensor<2x3xf32>, %i: tensor<4xi64>) {
  // expected-error @+2 {{gather axis out of range}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.gather %a, %i {axis = 2 : i64} : (tensor<2x3xf32>, tensor<4xi64>) -> tensor<4xf32>
  return
}

// -----
// Gather indices are integers.
func.func @gather_indices(%a: tensor<2x3xf32>, %i: tensor<4xf32>) {
  // expected-error @+1 {{operand #1 must be statically shaped tensor of 32-bit signless integer or 64-bit signless integer values}}
  %0 = graph.gather %a, %i {axis = 0 : i64} : (tensor<2x3xf32>, tensor<4xf32>) -> tensor<4x3xf32>
  return
}

// -----
// GatherND index tuples fit the data.
func.func @gather_nd(%a: tensor<2x3xf32>, %i: tensor<4x3xi64>) {
  // expected-error @+2 {{gather_nd index tuples longer than data rank}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.gather_nd %a, %i {batch_dims = 0 : i64} : (tensor<2x3xf32>, tensor<4x3xi64>) -> tensor<4xf32>
  return
}

// -----
// ScatterND reduction names.
func.func @scatter_reduction(%a: tensor<4xf32>, %i: tensor<2x1xi64>, %u: tensor<2xf32>) {
  // expected-error @+1 {{unknown reduction 'sum'}}
  %0 = graph.scatter_nd %a, %i, %u {reduction = "sum"} : (tensor<4xf32>, tensor<2x1xi64>, tensor<2xf32>) -> tensor<4xf32>
  return
}

// -----
// ScatterND updates shape.
func.func @scatter_updates(%a: tensor<4xf32>, %i: tensor<2x1xi64>, %u: tensor<3xf32>) {
  // expected-error @+1 {{updates type 'tensor<3xf32>' does not match indices and data}}
  %0 = graph.scatter_nd %a, %i, %u {reduction = "none"} : (tensor<4xf32>, tensor<2x1xi64>, tensor<3xf32>) -> tensor<4xf32>
  return
}

// -----
// ScatterND updates element type, and scalar indices (no index tuples).
func.func @scatter_updates_type(%a: tensor<4xi64>, %i: tensor<2x1xi64>, %u: tensor<2xf32>) {
  // expected-error @+1 {{updates type 'tensor<2xf32>' does not match indices and data}}
  %0 = graph.scatter_nd %a, %i, %u {reduction = "none"} : (tensor<4xi64>, tensor<2x1xi64>, tensor<2xf32>) -> tensor<4xi64>
  return
}

// -----
func.func @scatter_scalar_indices(%a: tensor<4xf32>, %i: tensor<i64>, %u: tensor<4xf32>) {
  // expected-error @+1 {{index tuples longer than the data rank}}
  %0 = graph.scatter_nd %a, %i, %u {reduction = "none"} : (tensor<4xf32>, tensor<i64>, tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----
// Trilu needs matrices.
func.func @trilu_rank(%a: tensor<4xf32>) {
  // expected-error @+1 {{trilu needs rank >= 2}}
  %0 = graph.trilu %a {k = 0 : i64} : tensor<4xf32>
  return
}

// -----
// Cumsum axis in range.
func.func @cumsum_axis(%a: tensor<4xf32>) {
  // expected-error @+1 {{axis 1 out of range for rank 1}}
  %0 = graph.cumsum %a {axis = 1 : i64} : tensor<4xf32>
  return
}

// -----
// Tile repeats per dim.
func.func @tile_repeats(%a: tensor<2x3xf32>) {
  // expected-error @+2 {{tile needs one repeat count per dim}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.tile %a {repeats = array<i64: 2>} : tensor<2x3xf32> -> tensor<4x3xf32>
  return
}

// -----
// Argument kinds are checked.
// expected-error @+1 {{'graph.kind' of argument 0 must be "input", "trainable", "constant", "boundary", "residual", "cotangent" or "param_copy"}}
func.func @bad_kind(%a: tensor<4xf32> {graph.kind = "weights"}) {
  return
}

// -----
// One output name per result.
// expected-error @+1 {{'graph.output_names' needs one string per result}}
func.func @bad_names(%a: tensor<4xf32>) -> tensor<4xf32> attributes {graph.output_names = ["a", "b"]} {
  return %a : tensor<4xf32>
}

// -----
// Logic ops take booleans.
func.func @and_types(%a: tensor<4xi64>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of 1-bit signless integer values}}
  %0 = graph.and %a, %a : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi1>
  return
}

// -----
// A fused step reads only registers defined before it.
func.func @fused_register(%a: tensor<4xf32>) {
  // expected-error @+1 {{step 0 reads a register not yet defined}}
  %0 = graph.fused_elementwise %a {ops = ["add"], lhs = array<i64: 0>, rhs = array<i64: 1>} : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----
// Fused steps are the kernel's ops.
func.func @fused_op(%a: tensor<4xf32>) {
  // expected-error @+1 {{step 0: unknown op 'select'}}
  %0 = graph.fused_elementwise %a {ops = ["select"], lhs = array<i64: 0>, rhs = array<i64: -1>} : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----
// A unary step has no rhs.
func.func @fused_unary_rhs(%a: tensor<4xf32>) {
  // expected-error @+1 {{step 0: unary 'exp' needs rhs -1}}
  %0 = graph.fused_elementwise %a {ops = ["exp"], lhs = array<i64: 0>, rhs = array<i64: 0>} : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----
// One lhs and one rhs per step.
func.func @fused_arity(%a: tensor<4xf32>) {
  // expected-error @+1 {{needs one lhs and one rhs register per step}}
  %0 = graph.fused_elementwise %a {ops = ["exp", "neg"], lhs = array<i64: 0>, rhs = array<i64: -1>} : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----
// At most 4 inputs.
func.func @fused_inputs(%a: tensor<4xf32>) {
  // expected-error @+1 {{needs 1 to 4 inputs, got 5}}
  %0 = graph.fused_elementwise %a, %a, %a, %a, %a {ops = ["exp"], lhs = array<i64: 0>, rhs = array<i64: -1>} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----
// At least one step.
func.func @fused_steps(%a: tensor<4xf32>) {
  // expected-error @+1 {{needs 1 to 16 steps (0 with a sum and one input), got 0}}
  %0 = graph.fused_elementwise %a {ops = [], lhs = array<i64>, rhs = array<i64>} : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----
// The kernels' float types only.
func.func @fused_f64(%a: tensor<4xf64>) {
  // expected-error @+1 {{computes f32, f16 or bf16, not 'f64'}}
  %0 = graph.fused_elementwise %a {ops = ["exp"], lhs = array<i64: 0>, rhs = array<i64: -1>} : (tensor<4xf64>) -> tensor<4xf64>
  return
}

// -----
// Inputs broadcast to the result.
func.func @fused_shape(%a: tensor<4xf32>) {
  // expected-error @+1 {{input 'tensor<4xf32>' does not broadcast to 'tensor<3xf32>'}}
  %0 = graph.fused_elementwise %a {ops = ["exp"], lhs = array<i64: 0>, rhs = array<i64: -1>} : (tensor<4xf32>) -> tensor<3xf32>
  return
}

// -----
// A sum is f32 over the result's trailing dims.
func.func @fused_sum_dims(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{sum 'tensor<4xf32>' is not f32 of the trailing dims of 'tensor<4x8xbf16>'}}
  %0, %1 = graph.fused_elementwise %a {ops = ["exp"], lhs = array<i64: 0>, rhs = array<i64: -1>} : (tensor<4x8xf32>) -> (tensor<4x8xbf16>, tensor<4xf32>)
  return
}

// -----
func.func @fused_sum_type(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{sum 'tensor<8xbf16>' is not f32 of the trailing dims}}
  %0, %1 = graph.fused_elementwise %a {ops = ["exp"], lhs = array<i64: 0>, rhs = array<i64: -1>} : (tensor<4x8xf32>) -> (tensor<4x8xbf16>, tensor<8xbf16>)
  return
}

// -----
func.func @fused_sum_all(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{sum 'tensor<4x8xf32>' is not f32 of the trailing dims}}
  %0, %1 = graph.fused_elementwise %a {ops = ["exp"], lhs = array<i64: 0>, rhs = array<i64: -1>} : (tensor<4x8xf32>) -> (tensor<4x8xbf16>, tensor<4x8xf32>)
  return
}

// -----
// A norm gradient's parameter gradient is shaped like the scale.
func.func @layer_norm_grad_scale(%a: tensor<2x3xf32>, %s: tensor<3xf32>) {
  // expected-error @+1 {{'graph.layer_norm_grad' op failed to verify that all of {scale, grad_scale} have same type}}
  %0:2 = graph.layer_norm_grad %a, %s, %a {axis = 1 : i64, epsilon = 1.0e-5 : f64} : tensor<2x3xf32>, tensor<3xf32> -> tensor<2x3xf32>, tensor<2xf32>
  return
}

// -----
// The result's gradient is the input's type, or f16/bf16 of an f32 input.
func.func @layer_norm_grad_dy_wider(%a: tensor<2x3xbf16>, %s: tensor<3xbf16>, %g: tensor<2x3xf32>) {
  // expected-error @+1 {{'graph.layer_norm_grad' op gradient 'tensor<2x3xf32>' must be 'tensor<2x3xbf16>' (or f16/bf16 for an f32 input)}}
  %0:2 = graph.layer_norm_grad %a, %s, %g {axis = 1 : i64, epsilon = 1.0e-5 : f64} : tensor<2x3xbf16>, tensor<3xbf16>, dy tensor<2x3xf32> -> tensor<2x3xbf16>, tensor<3xbf16>
  return
}

// -----
func.func @rms_norm_grad_dy_shape(%a: tensor<2x3xf32>, %s: tensor<3xf32>, %g: tensor<3x2xbf16>) {
  // expected-error @+1 {{'graph.rms_norm_grad' op gradient 'tensor<3x2xbf16>' must be 'tensor<2x3xf32>' (or f16/bf16 for an f32 input)}}
  %0:2 = graph.rms_norm_grad %a, %s, %g {axis = 1 : i64, epsilon = 1.0e-5 : f64} : tensor<2x3xf32>, tensor<3xf32>, dy tensor<3x2xbf16>
  return
}

// -----
// Cross-entropy labels drop exactly the class dim.
func.func @cross_entropy_labels(%a: tensor<2x3x5xf32>, %t: tensor<2x5xi64>) {
  // expected-error @+1 {{labels 'tensor<2x5xi64>' must be shaped like the logits 'tensor<2x3x5xf32>' without their last dim}}
  %0 = graph.softmax_cross_entropy %a, %t {ignore_index = -100 : i64} : (tensor<2x3x5xf32>, tensor<2x5xi64>) -> tensor<2x5xf32>
  return
}

// -----
// The per-row loss has the logits' element type.
func.func @cross_entropy_loss_type(%a: tensor<2x5xf32>, %t: tensor<2xi32>) {
  // expected-error @+1 {{loss 'tensor<2xf64>' must be 'tensor<2xf32>'}}
  %0 = graph.softmax_cross_entropy %a, %t {ignore_index = -100 : i64} : (tensor<2x5xf32>, tensor<2xi32>) -> tensor<2xf64>
  return
}

// -----
// The gradient's per-row input too.
func.func @cross_entropy_grad_rows(%a: tensor<2x5xf32>, %t: tensor<2xi32>, %g: tensor<5xf32>) {
  // expected-error @+1 {{grad_loss 'tensor<5xf32>' must be 'tensor<2xf32>'}}
  %0 = graph.softmax_cross_entropy_grad %a, %t, %g {ignore_index = -100 : i64} : (tensor<2x5xf32>, tensor<2xi32>, tensor<5xf32>) -> tensor<2x5xf32>
  return
}

// -----
// A matmul result may be wider (f32) only for f16/bf16 operands.
func.func @matmul_result_type(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>) {
  // expected-error @+2 {{inferred type(s) 'tensor<2x4xf32>' are incompatible with return type(s) of operation 'tensor<2x4xf64>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.matmul %a, %b : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf64>
  return
}

// -----
// q, k and v have rank 4.
func.func @attention_rank(%q: tensor<4x8x16xf32>, %k: tensor<1x4x8x16xf32>) {
  // expected-error @+1 {{q, k and v must have rank 4 ([B, H, S, D])}}
  %o, %l = graph.attention %q, %k, %k {scale = 1.0 : f64} : (tensor<4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>) -> (tensor<4x8x16xf32>, tensor<4x8xf32>)
  return
}

// -----
// q, k and v share one element type.
func.func @attention_types(%q: tensor<1x4x8x16xf32>, %k: tensor<1x4x8x16xf16>, %v: tensor<1x4x8x16xf32>) {
  // expected-error @+1 {{q, k and v must have one element type}}
  %o, %l = graph.attention %q, %k, %v {scale = 1.0 : f64} : (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf32>) -> (tensor<1x4x8x16xf32>, tensor<1x4x8xf32>)
  return
}

// -----
// v has k's kv heads and keys (Sk = 8, not 6).
func.func @attention_kv(%q: tensor<1x4x8x16xf32>, %k: tensor<1x4x8x16xf32>, %v: tensor<1x4x6x16xf32>) {
  // expected-error @+1 {{q 'tensor<1x4x8x16xf32>' needs k [B, Hk, Sk, D] and v [B, Hk, Sk, Dv], got 'tensor<1x4x8x16xf32>' and 'tensor<1x4x6x16xf32>'}}
  %o, %l = graph.attention %q, %k, %v {scale = 1.0 : f64} : (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x6x16xf32>) -> (tensor<1x4x8x16xf32>, tensor<1x4x8xf32>)
  return
}

// -----
// k has q's head dim D.
func.func @attention_d(%q: tensor<1x4x8x16xf32>, %k: tensor<1x4x8x8xf32>) {
  // expected-error @+1 {{q 'tensor<1x4x8x16xf32>' needs k [B, Hk, Sk, D] and v [B, Hk, Sk, Dv], got 'tensor<1x4x8x8xf32>' and 'tensor<1x4x8x8xf32>'}}
  %o, %l = graph.attention %q, %k, %k {scale = 1.0 : f64} : (tensor<1x4x8x16xf32>, tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>) -> (tensor<1x4x8x8xf32>, tensor<1x4x8xf32>)
  return
}

// -----
// The query heads are a multiple of the kv heads.
func.func @attention_heads(%q: tensor<1x3x8x16xf32>, %k: tensor<1x2x8x16xf32>) {
  // expected-error @+1 {{3 query heads cannot share 2 kv heads}}
  %o, %l = graph.attention %q, %k, %k {scale = 1.0 : f64} : (tensor<1x3x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>) -> (tensor<1x3x8x16xf32>, tensor<1x3x8xf32>)
  return
}

// -----
// The bias broadcasts to [B, H, Sq, Sk].
func.func @attention_bias(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x8x16xf32>, %b: tensor<2x1x1x5xf32>) {
  // expected-error @+1 {{bias 'tensor<2x1x1x5xf32>' must broadcast to 'tensor<2x4x8x8xf32>'}}
  %o, %l = graph.attention %q, %k, %k, %b {scale = 1.0 : f64} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x1x1x5xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8xf32>)
  return
}

// -----
// A bias of rank > 4 does not.
func.func @attention_bias_rank(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x8x16xf32>, %b: tensor<1x2x4x8x8xf32>) {
  // expected-error @+1 {{bias 'tensor<1x2x4x8x8xf32>' must broadcast to 'tensor<2x4x8x8xf32>'}}
  %o, %l = graph.attention %q, %k, %k, %b {scale = 1.0 : f64} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<1x2x4x8x8xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8xf32>)
  return
}

// -----
// out is [B, H, Sq, Dv] (v's Dv = 32).
func.func @attention_out(%q: tensor<1x4x8x16xf32>, %k: tensor<1x2x8x16xf32>, %v: tensor<1x2x8x32xf32>) {
  // expected-error @+1 {{out must be 'tensor<1x4x8x32xf32>', got 'tensor<1x4x8x16xf32>'}}
  %o, %l = graph.attention %q, %k, %v {scale = 1.0 : f64} : (tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x32xf32>) -> (tensor<1x4x8x16xf32>, tensor<1x4x8xf32>)
  return
}

// -----
// lse is f32 for f16 operands.
func.func @attention_lse(%q: tensor<1x4x8x16xf16>) {
  // expected-error @+1 {{lse must be 'tensor<1x4x8xf32>', got 'tensor<1x4x8xf16>'}}
  %o, %l = graph.attention %q, %q, %q {scale = 1.0 : f64} : (tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>) -> (tensor<1x4x8x16xf16>, tensor<1x4x8xf16>)
  return
}

// -----
// lse is [B, H, Sq].
func.func @attention_lse_shape(%q: tensor<1x4x8x16xf32>) {
  // expected-error @+1 {{lse must be 'tensor<1x4x8xf32>', got 'tensor<1x4x8x1xf32>'}}
  %o, %l = graph.attention %q, %q, %q {scale = 1.0 : f64} : (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>) -> (tensor<1x4x8x16xf32>, tensor<1x4x8x1xf32>)
  return
}

// -----
// The gradient checks the forward's types: lse is f64 for f64 operands.
func.func @attention_grad_lse(%q: tensor<1x4x8x16xf64>, %l: tensor<1x4x8xf32>) {
  // expected-error @+1 {{lse must be 'tensor<1x4x8xf64>', got 'tensor<1x4x8xf32>'}}
  %gq, %gk, %gv = graph.attention_grad %q, %q, %q, %q, %l, %q {scale = 1.0 : f64} : (tensor<1x4x8x16xf64>, tensor<1x4x8x16xf64>, tensor<1x4x8x16xf64>, tensor<1x4x8x16xf64>, tensor<1x4x8xf32>, tensor<1x4x8x16xf64>) -> (tensor<1x4x8x16xf64>, tensor<1x4x8x16xf64>, tensor<1x4x8x16xf64>)
  return
}

// -----
// The gradient's heads too.
func.func @attention_grad_heads(%q: tensor<1x4x8x16xf32>, %k: tensor<1x3x8x16xf32>, %l: tensor<1x4x8xf32>) {
  // expected-error @+1 {{4 query heads cannot share 3 kv heads}}
  %gq, %gk, %gv = graph.attention_grad %q, %k, %k, %q, %l, %q {causal, scale = 1.0 : f64} : (tensor<1x4x8x16xf32>, tensor<1x3x8x16xf32>, tensor<1x3x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8xf32>, tensor<1x4x8x16xf32>) -> (tensor<1x4x8x16xf32>, tensor<1x3x8x16xf32>, tensor<1x3x8x16xf32>)
  return
}

// -----
// grad_k has k's type (2 kv heads).
func.func @attention_grad_types(%q: tensor<1x4x8x16xf32>, %k: tensor<1x2x8x16xf32>, %l: tensor<1x4x8xf32>) {
  // expected-error @+1 {{failed to verify that all of {k, grad_k} have same type}}
  %gq, %gk, %gv = graph.attention_grad %q, %k, %k, %q, %l, %q {scale = 1.0 : f64} : (tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8xf32>, tensor<1x4x8x16xf32>) -> (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>)
  return
}

// -----
// Float operands only.
func.func @attention_int(%q: tensor<1x4x8x16xi32>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of floating-point values, but got 'tensor<1x4x8x16xi32>'}}
  %o, %l = graph.attention %q, %q, %q {scale = 1.0 : f64} : (tensor<1x4x8x16xi32>, tensor<1x4x8x16xi32>, tensor<1x4x8x16xi32>) -> (tensor<1x4x8x16xi32>, tensor<1x4x8xf32>)
  return
}

// -----
// fused_matmul: the product's type (or f32 for f16/bf16 operands).
func.func @fused_matmul_result(%x: tensor<4x8xf32>, %w: tensor<8x3xf32>) {
  // expected-error @+1 {{result 'tensor<4x3xbf16>' is not the product type 'tensor<4x3xf32>' (or f32 for f16/bf16)}}
  %0 = graph.fused_matmul %x, %w : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xbf16>
  return
}

// -----
// The contraction sizes must agree.
func.func @fused_matmul_k(%x: tensor<4x8xf32>, %w: tensor<7x3xf32>) {
  // expected-error @+1 {{matmul contraction sizes differ: 8 vs 7}}
  %0 = graph.fused_matmul %x, %w : (tensor<4x8xf32>, tensor<7x3xf32>) -> tensor<4x3xf32>
  return
}

// -----
// The bias is a row of the result's columns...
func.func @fused_matmul_bias_shape(%x: tensor<4x8xf32>, %w: tensor<8x3xf32>, %b: tensor<4x1xf32>) {
  // expected-error @+1 {{bias 'tensor<4x1xf32>' is not a [1, ..., 1, 3] row of 'f32'}}
  %0 = graph.fused_matmul %x, %w bias %b : (tensor<4x8xf32>, tensor<8x3xf32>, tensor<4x1xf32>) -> tensor<4x3xf32>
  return
}

// -----
// ... of the result's element type (what cuBLASLt's epilogue reads).
func.func @fused_matmul_bias_type(%x: tensor<4x8xbf16>, %w: tensor<8x3xbf16>, %b: tensor<3xf32>) {
  // expected-error @+1 {{bias 'tensor<3xf32>' is not a [1, ..., 1, 3] row of 'bf16'}}
  %0 = graph.fused_matmul %x, %w bias %b : (tensor<4x8xbf16>, tensor<8x3xbf16>, tensor<3xf32>) -> tensor<4x3xbf16>
  return
}

// -----
// The addend has the result's type exactly (no broadcast).
func.func @fused_matmul_addend(%x: tensor<4x8xf32>, %w: tensor<8x3xf32>, %a: tensor<3xf32>) {
  // expected-error @+1 {{addend 'tensor<3xf32>' is not of the result type 'tensor<4x3xf32>'}}
  %0 = graph.fused_matmul %x, %w addend %a : (tensor<4x8xf32>, tensor<8x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>
  return
}

// -----
// seq_major reads q, k, v and out as [B, S, heads, D].
func.func @attention_seq_major_k(%q: tensor<1x8x4x16xf32>, %k: tensor<1x8x2x16xf32>, %v: tensor<1x2x8x16xf32>) {
  // expected-error @+1 {{needs k [B, Sk, Hk, D] and v [B, Sk, Hk, Dv]}}
  %o, %l = graph.attention %q, %k, %v {scale = 1.0 : f64, seq_major} : (tensor<1x8x4x16xf32>, tensor<1x8x2x16xf32>, tensor<1x2x8x16xf32>) -> (tensor<1x8x4x16xf32>, tensor<1x4x8xf32>)
  return
}

// -----
// Its out is seq-major too; lse stays [B, H, Sq].
func.func @attention_seq_major_out(%q: tensor<1x8x4x16xf32>, %k: tensor<1x8x2x16xf32>) {
  // expected-error @+1 {{out must be 'tensor<1x8x4x16xf32>', got 'tensor<1x4x8x16xf32>'}}
  %o, %l = graph.attention %q, %k, %k {scale = 1.0 : f64, seq_major} : (tensor<1x8x4x16xf32>, tensor<1x8x2x16xf32>, tensor<1x8x2x16xf32>) -> (tensor<1x4x8x16xf32>, tensor<1x4x8xf32>)
  return
}

// -----
// A reduction keeps its element type, or widens f16/bf16 to f32 only.
func.func @reduce_result_type(%x: tensor<4x6xbf16>) {
  // expected-error @+2 {{inferred type(s) 'tensor<6xbf16>' are incompatible with return type(s) of operation 'tensor<6xf16>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.reduce_sum %x {axes = array<i64: 0>, keepdims = false} : tensor<4x6xbf16> -> tensor<6xf16>
  return
}

// -----
// A norm's result narrows only an f32 input.
func.func @norm_result_type(%x: tensor<4x8xbf16>, %s: tensor<8xbf16>) {
  // expected-error @+1 {{result 'tensor<4x8xf16>' is not the input's 'tensor<4x8xbf16>' (or f16/bf16 of an f32 input)}}
  %0 = graph.layer_norm %x, %s {axis = 1 : i64, epsilon = 1.0e-5 : f64} : tensor<4x8xbf16>, tensor<8xbf16> -> tensor<4x8xf16>
  return
}

// -----
// A cross-entropy gradient narrows only from f32.
func.func @cross_entropy_grad_narrow(%a: tensor<2x5xbf16>, %t: tensor<2xi32>, %g: tensor<2xbf16>) {
  // expected-error @+1 {{grad_logits 'tensor<2x5xf16>' must have the logits' shape and type 'tensor<2x5xbf16>' (or f16/bf16 for f32 logits)}}
  %0 = graph.softmax_cross_entropy_grad %a, %t, %g {ignore_index = -100 : i64} : (tensor<2x5xbf16>, tensor<2xi32>, tensor<2xbf16>) -> tensor<2x5xf16>
  return
}

// -----
// No steps only with a sum, on one input.
func.func @fused_identity_two_inputs(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{needs 1 to 16 steps (0 with a sum and one input), got 0}}
  %0, %1 = graph.fused_elementwise %a, %a {ops = [], lhs = array<i64>, rhs = array<i64>} : (tensor<4x8xf32>, tensor<4x8xf32>) -> (tensor<4x8xbf16>, tensor<8xf32>)
  return
}

// -----
// A packed q/k/v is [B, S, (H + 2 Hk) D].
func.func @packed_attention_width(%x: tensor<2x5x60xbf16>) {
  // expected-error @+1 {{qkv 'tensor<2x5x60xbf16>' is not [B, S, (4 + 2 x 2) D] (heads a multiple of kv_heads)}}
  %o, %l = graph.packed_attention %x {heads = 4 : i64, kv_heads = 2 : i64, scale = 0.25 : f64} : (tensor<2x5x60xbf16>) -> (tensor<2x5x4x8xbf16>, tensor<2x4x5xf32>)
  return
}

// -----
func.func @packed_attention_out(%x: tensor<2x5x64xbf16>) {
  // expected-error @+1 {{out and lse must be 'tensor<2x5x4x8xbf16>' and 'tensor<2x4x5xf32>'}}
  %o, %l = graph.packed_attention %x {heads = 4 : i64, kv_heads = 2 : i64, scale = 0.25 : f64} : (tensor<2x5x64xbf16>) -> (tensor<2x4x5x8xbf16>, tensor<2x4x5xf32>)
  return
}

// -----
// A convolution's weight has C / group input channels.
func.func @conv_groups(%x: tensor<1x4x5x5xf32>, %w: tensor<6x4x3x3xf32>) {
  // expected-error @+2 {{conv of 4 input channels in 2 groups needs a weight of [M, 2, ...] with M a multiple of the groups}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.conv %x, %w {dilations = array<i64: 1, 1>, group = 2 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x4x5x5xf32>, tensor<6x4x3x3xf32>) -> tensor<1x6x3x3xf32>
  return
}

// -----
// The bias has one value per output channel.
func.func @conv_bias(%x: tensor<1x4x5x5xf32>, %w: tensor<6x4x3x3xf32>, %b: tensor<4xf32>) {
  // expected-error @+2 {{conv bias must be [M] of the weight's type}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.conv %x, %w, %b {dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x4x5x5xf32>, tensor<6x4x3x3xf32>, tensor<4xf32>) -> tensor<1x6x3x3xf32>
  return
}

// -----
// Window attributes: one per spatial dim, pads twice that.
func.func @conv_pads(%x: tensor<1x4x5x5xf32>, %w: tensor<6x4x3x3xf32>) {
  // expected-error @+2 {{window attributes need one kernel size, stride and dilation per spatial dim and two pads}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.conv %x, %w {dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x4x5x5xf32>, tensor<6x4x3x3xf32>) -> tensor<1x6x3x3xf32>
  return
}

// -----
// Four spatial dims are more than the window ops take.
func.func @pool_rank(%x: tensor<1x1x2x2x2x2xf32>) {
  // expected-error @+2 {{window ops take [N, C, S...] with 1 to 3 spatial dims, got rank 6}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.max_pool %x {dilations = array<i64: 1, 1, 1, 1>, kernel_shape = array<i64: 1, 1, 1, 1>, pads = array<i64: 0, 0, 0, 0, 0, 0, 0, 0>, strides = array<i64: 1, 1, 1, 1>} : tensor<1x1x2x2x2x2xf32> -> tensor<1x1x2x2x2x2xf32>
  return
}

// -----
// A window larger than the padded input.
func.func @pool_fit(%x: tensor<1x1x4x4xf32>) {
  // expected-error @+2 {{window of 5 does not fit spatial dim 0 of 4 with its pads}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.avg_pool %x {dilations = array<i64: 1, 1>, kernel_shape = array<i64: 5, 1>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : tensor<1x1x4x4xf32> -> tensor<1x1x1x4xf32>
  return
}

// -----
// Strides, dilations and kernels are positive, pads not negative.
func.func @pool_stride(%x: tensor<1x1x4x4xf32>) {
  // expected-error @+2 {{window kernel, strides and dilations must be >= 1 and pads >= 0}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.max_pool %x {dilations = array<i64: 1, 1>, kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 0, 1>} : tensor<1x1x4x4xf32> -> tensor<1x1x3x3xf32>
  return
}

// -----
// A gradient op's grad_result is the forward op's result.
func.func @conv_grad_input_shape(%w: tensor<6x4x3x3xf32>, %g: tensor<1x6x4x4xf32>) {
  // expected-error @+1 {{grad_result 'tensor<1x6x4x4xf32>' is not the forward result 'tensor<1x6x3x3xf32>'}}
  %0 = graph.conv_grad_input %w, %g {dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<6x4x3x3xf32>, tensor<1x6x4x4xf32>) -> tensor<1x4x5x5xf32>
  return
}

// -----
func.func @conv_grad_weight_shape(%x: tensor<1x4x5x5xf32>, %g: tensor<1x6x3x3xf32>) {
  // expected-error @+1 {{grad_result 'tensor<1x6x3x3xf32>' is not the forward result 'tensor<1x6x4x4xf32>'}}
  %0 = graph.conv_grad_weight %x, %g {dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x4x5x5xf32>, tensor<1x6x3x3xf32>) -> tensor<6x4x2x2xf32>
  return
}

// -----
func.func @max_pool_grad_shape(%x: tensor<1x1x4x4xf32>, %g: tensor<1x1x3x3xf32>) {
  // expected-error @+1 {{grad_result 'tensor<1x1x3x3xf32>' is not the forward result 'tensor<1x1x2x2xf32>'}}
  %0 = graph.max_pool_grad %x, %g {dilations = array<i64: 1, 1>, kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : tensor<1x1x4x4xf32>, tensor<1x1x3x3xf32>
  return
}

// -----
func.func @avg_pool_grad_shape(%g: tensor<1x1x3x3xf32>) {
  // expected-error @+1 {{grad_result 'tensor<1x1x3x3xf32>' is not the forward result 'tensor<1x1x2x2xf32>'}}
  %0 = graph.avg_pool_grad %g {dilations = array<i64: 1, 1>, kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : tensor<1x1x3x3xf32> -> tensor<1x1x4x4xf32>
  return
}

// -----
// A fused projection's layout names its dim and at least two parts.
// expected-error @+1 {{'graph.tp_parts' of argument 0 must be [dim, parts] with parts >= 2}}
func.func @tp_parts(%w: tensor<4x6xf32> {graph.tp_parts = array<i64: 1, 1>}) {
  return
}

// -----
// expected-error @+1 {{'graph.tp_split' of argument 0 must be a non-negative integer}}
func.func @tp_split(%w: tensor<4x6xf32> {graph.tp_split = -1 : i64}) {
  return
}

// -----
func.func @topk_k(%a: tensor<3x4xf32>) {
  // expected-error @+1 {{k = 5 must be in [1, 4]}}
  %v, %i = graph.topk %a {k = 5 : i64} : (tensor<3x4xf32>) -> (tensor<3x5xf32>, tensor<3x5xi64>)
  return
}

// -----
// The experts' weights: gate_up [E, 2I, H] and down [E, H, I].
func.func @moe_weights(%x: tensor<5x3xf32>, %e: tensor<5x2xi64>, %w: tensor<5x2xf32>, %gu: tensor<3x4x3xf32>, %d: tensor<3x3x4xf32>) {
  // expected-error @+1 {{gate_up 'tensor<3x4x3xf32>' and down 'tensor<3x3x4xf32>' must be [E, 2I, 3] and [E, 3, I]}}
  %y = graph.moe %x, %e, %w, %gu, %d : (tensor<5x3xf32>, tensor<5x2xi64>, tensor<5x2xf32>, tensor<3x4x3xf32>, tensor<3x3x4xf32>) -> tensor<5x3xf32>
  return
}

// -----
func.func @moe_picks(%x: tensor<5x3xf32>, %e: tensor<5x4xi64>, %w: tensor<5x4xf32>, %gu: tensor<3x4x3xf32>, %d: tensor<3x3x2xf32>) {
  // expected-error @+1 {{each token's 4 experts must be between 1 and the 3 experts}}
  %y = graph.moe %x, %e, %w, %gu, %d : (tensor<5x3xf32>, tensor<5x4xi64>, tensor<5x4xf32>, tensor<3x4x3xf32>, tensor<3x3x2xf32>) -> tensor<5x3xf32>
  return
}

// -----
// Expert parallelism: the experts split evenly over the ranks.
func.func @moe_dispatch_ranks(%x: tensor<5x3xf32>, %e: tensor<5x2xi64>) {
  // expected-error @+1 {{the 4 experts must split evenly over 3 ranks}}
  %r, %n = graph.moe_dispatch %x, %e {experts = 4 : i64, ranks = 3 : i64} : (tensor<5x3xf32>, tensor<5x2xi64>) -> (tensor<30x3xf32>, tensor<3x1xi64>)
  return
}

// -----
// Each rank's block holds the most rows 5 tokens can send it: 5 min(2, 2).
func.func @moe_dispatch_blocks(%x: tensor<5x3xf32>, %e: tensor<5x2xi64>) {
  // expected-error @+1 {{rows 'tensor<16x3xf32>' must be 2 blocks of at least 10 rows (T min(k, E/R))}}
  %r, %n = graph.moe_dispatch %x, %e {experts = 4 : i64, ranks = 2 : i64} : (tensor<5x3xf32>, tensor<5x2xi64>) -> (tensor<16x3xf32>, tensor<2x2xi64>)
  return
}

// -----
func.func @moe_dispatch_counts(%x: tensor<5x3xf32>, %e: tensor<5x2xi64>) {
  // expected-error @+1 {{counts must be [2, 2]}}
  %r, %n = graph.moe_dispatch %x, %e {experts = 4 : i64, ranks = 2 : i64} : (tensor<5x3xf32>, tensor<5x2xi64>) -> (tensor<20x3xf32>, tensor<2x4xi64>)
  return
}

// -----
func.func @moe_exchange_blocks(%r: tensor<21x3xf32>, %n: tensor<2x2xi64>) {
  // expected-error @+1 {{rows 'tensor<21x3xf32>' must be 2 blocks}}
  %a, %b = graph.moe_exchange %r, %n : (tensor<21x3xf32>, tensor<2x2xi64>) -> (tensor<21x3xf32>, tensor<2x2xi64>)
  return
}

// -----
func.func @moe_row_experts_shape(%n: tensor<2x2xi64>) {
  // expected-error @+1 {{the result must be i64 [R C, 1]}}
  %e = graph.moe_row_experts %n : (tensor<2x2xi64>) -> tensor<20x2xi64>
  return
}

// -----
func.func @moe_combine_result(%r: tensor<20x3xf32>, %e: tensor<5x2xi64>, %w: tensor<5x2xf32>) {
  // expected-error @+1 {{the result must be [T, H] of the rows' type}}
  %y = graph.moe_combine %r, %e, %w {experts = 4 : i64, ranks = 2 : i64} : (tensor<20x3xf32>, tensor<5x2xi64>, tensor<5x2xf32>) -> tensor<4x3xf32>
  return
}

// -----
// The experts' split on an argument.
// expected-error @+1 {{'graph.ep_split' of argument 0 must be an integer >= 2}}
func.func @ep_split_attr(%gu: tensor<2x4x3xf32> {graph.ep_split = 1 : i64}) {
  return
}
