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
