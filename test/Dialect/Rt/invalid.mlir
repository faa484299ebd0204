// RUN: lamina-opt %s -split-input-file -verify-diagnostics

// An arena offset must keep the 64-byte alignment.
func.func @misaligned(%arena: !rt.arena) {
  // expected-error @+1 {{offset 8 is not a non-negative multiple of 64}}
  %0 = rt.view %arena[8] : memref<4xf32>
  return
}

// -----

// Buffers are dense: no strided layouts.
func.func @strided(%arena: !rt.arena) {
  // expected-error @+1 {{needs the identity layout}}
  %0 = rt.view %arena[0] : memref<4xf32, strided<[2]>>
  return
}

// -----

// A constant's value has the buffer's shape and element type.
func.func @constant_type() {
  // expected-error @+1 {{does not match 'memref<4xi32>'}}
  %c = rt.constant dense<[1, 2, 3]> : tensor<3xi32> : memref<4xi32>
  return
}

// -----

// Every buffer is passed to the callee.
func.func @unused_buffer(%a: memref<4xf32>, %b: memref<4xf32>) {
  // expected-error @+1 {{buffer #1 is not passed to the callee}}
  rt.call "lamina::rt::reshape"(%a, %b) {args = [0 : index], where = ""} : memref<4xf32>, memref<4xf32>
  return
}

// -----

// Operand references stay in range.
func.func @out_of_range(%a: memref<4xf32>) {
  // expected-error @+1 {{argument refers to buffer #3 of 1}}
  rt.call "lamina::rt::reshape"(%a) {args = [0 : index, 3 : index], where = ""} : memref<4xf32>
  return
}

// -----

// Strings are C++ enumerators, nothing else.
func.func @not_an_enumerator(%a: memref<4xf32>) {
  // expected-error @+1 {{string argument 'x; system("")' is not a C++ enumerator}}
  rt.call "lamina::rt::reshape"(%a) {args = [0 : index, "x; system(\"\")"], where = ""} : memref<4xf32>
  return
}

// -----

// The callee is a C++ name.
func.func @bad_callee(%a: memref<4xf32>) {
  // expected-error @+1 {{callee 'a b' is not a C++ name}}
  rt.call "a b"(%a) {args = [0 : index], where = ""} : memref<4xf32>
  return
}

// -----

// A step calls outlined module functions only.
func.func @not_outlined(%a: !rt.arena) {
  return
}
func.func @step_calls_other(%s: !rt.step) {
  // expected-error @+1 {{calls @not_outlined, which is no outlined module function}}
  rt.step_call %s @not_outlined[0]
  return
}

// -----

func.func @step_calls_nothing(%s: !rt.step) {
  // expected-error @+1 {{calls 'missing', which is no function}}
  rt.step_call %s @missing[0]
  return
}

// -----

func.func @negative_peer(%s: !rt.step) {
  // expected-error @+1 {{peer must be non-negative, got -1}}
  rt.step_send %s gradient 0, 1 to -1 at 0
  return
}

// -----

func.func @negative_offset(%s: !rt.step) {
  // expected-error @+1 {{offset must be non-negative, got -64}}
  rt.step_post_recv %s 0, 1 from 1 at -64
  return
}

// -----

// Buffers the callee has no use for.
func.func @fwd_0(%a: !rt.arena) attributes {dist.outlined = #dist.outlined<module = 0, name = "m", num_in = 0, num_out = 1, num_residuals = 0>} {
  return
}
func.func @residuals_of_recompute(%s: !rt.step) {
  // expected-error @+1 {{has residuals at 64 but @fwd_0 keeps none (its backward recomputes)}}
  rt.step_call %s @fwd_0[0] res 64 out 0
  return
}

// -----

func.func @fwd_0(%a: !rt.arena) attributes {dist.outlined = #dist.outlined<module = 0, name = "m", num_in = 0, num_out = 1, num_residuals = 0>} {
  return
}
func.func @cotangent_of_forward(%s: !rt.step) {
  // expected-error @+1 {{has a cotangent at 0 but @fwd_0 is no backward (no cotangent argument)}}
  rt.step_call %s @fwd_0[0] cot 0
  return
}

// -----

func.func @negative_input(%s: !rt.step) {
  // expected-error @+1 {{in must be non-negative, got -1}}
  rt.step_call %s @fwd_0[0] in -1
  return
}

// -----

func.func @negative_part(%s: !rt.step) {
  // expected-error @+1 {{part must be non-negative, got -4}}
  rt.step_reduce_scatter %s 0 from 0 part -4
  return
}

// -----

func.func @negative_module(%s: !rt.step) {
  // expected-error @+1 {{module must be non-negative, got -2}}
  rt.step_use_weights %s -2
  return
}

// -----

func.func @unnamed_shared(%s: !rt.step) {
  // expected-error @+1 {{needs a parameter name}}
  rt.step_sum_shared %s ""
  return
}
