// RUN: lamina-opt %s -convert-graph-to-rt -convert-rt-to-emitc=model-path=/models/m.onnx | FileCheck %s --check-prefix=EMITC
// RUN: lamina-opt %s -convert-graph-to-rt -convert-rt-to-emitc=model-path=/models/m.onnx | lamina-translate --mlir-to-cpp | FileCheck %s --check-prefix=CPP
// RUN: not lamina-opt %s -convert-graph-to-rt '-convert-rt-to-emitc=model-path=/models/m.onnx mode=train entry=forward' 2>&1 | FileCheck %s --check-prefix=NOTRAIN
// RUN: not lamina-opt %s -convert-graph-to-rt -convert-rt-to-emitc=mode=eval 2>&1 | FileCheck %s --check-prefix=MODE

// A training program's loss comes from the module's graph.train
// (convert-rt-to-emitc-train.mlir); without it, mode=train is refused.
// NOTRAIN: mode=train needs the module's graph.train (the loss the program computes; run graph-add-loss)
// MODE: mode must be inference, train or dist, got 'eval'

// EMITC: emitc.include "lamina/Runtime/Generated.h"
// EMITC: emitc.func @lamina_forward(%{{.*}}: !emitc.ptr<!emitc.opaque<"const lamina::rt::Tensor">>, %{{.*}}: !emitc.ptr<!emitc.opaque<"void">>) attributes {specifiers = ["static"]}
// EMITC: emitc.func @main

// Shapes and integer arrays are static const globals; constants keep their
// exact bits as 64-bit words.
// CPP: #include "lamina/Runtime/Generated.h"
// CPP-DAG: static const int64_t [[S23:lamina_i64s_[0-9]+]][2] = {2, 3};
// CPP-DAG: static const int64_t [[PERM:lamina_i64s_[0-9]+]][2] = {1, 0};
// CPP-DAG: static const uint64_t lamina_const_0[1] = {0x3f8000003f800000ULL};
// CPP-DAG: static const uint64_t lamina_const_1[1] = {0x3f800000bf800000ULL};
// CPP: static const lamina::rt::ArgSpec lamina_args[2] =
// CPP-SAME: "x", lamina::rt::ArgKind::Input, lamina::rt::DType::F32, 2, [[S23]]}, {"flag\"s", lamina::rt::ArgKind::Constant, lamina::rt::DType::I1, 1, lamina_i64s_
// CPP: static const lamina::rt::OutputSpec lamina_outputs[2] =
// CPP-SAME: "y", lamina::rt::DType::F32, 2, lamina_i64s_{{[0-9]+}}, 0}, {"n", lamina::rt::DType::F32, 1, lamina_i64s_{{[0-9]+}}, 64}
// CPP: static void lamina_forward(const lamina::rt::Tensor* [[ARGS:v[0-9]+]], void* [[ARENA:v[0-9]+]]) {
// CPP: lamina::rt::Tensor [[X:v[0-9]+]] = lamina::rt::gen::arg([[ARGS]], 0, lamina::rt::DType::F32, 2, [[S23]]);
// CPP: lamina::rt::Tensor [[T:v[0-9]+]] = lamina::rt::gen::view([[ARENA]], {{[0-9]+}}, lamina::rt::DType::F32, 2,
// CPP: lamina::rt::Status [[S:v[0-9]+]] = lamina::rt::transpose([[X]], [[PERM]], [[T]]);
// CPP: lamina::rt::checkKernel([[S]], "loc({{.*}}) (graph.transpose)");
// Exact doubles: hexadecimal literals.
// CPP: lamina::rt::gen::layerNorm({{.*}}, nullptr, int64_t(1LL), 0x1.4f8b588e368f1p-17,
// CPP: lamina::rt::gen::constant(lamina_const_1, lamina::rt::DType::F32, 1,
// CPP: static const lamina::rt::ProgramSpec lamina_program = {"/models/m.onnx", lamina_args, 2, lamina_outputs, 2, {{[0-9]+}}, lamina_forward};
// CPP: main(
// CPP: lamina::rt::programMain({{.*}}, lamina_program);
func.func @forward(%x: tensor<2x3xf32> {graph.name = "x", graph.kind = "input"},
                   %f: tensor<3xi1> {graph.name = "flag\"s", graph.kind = "constant"})
    -> (tensor<3x2xf32>, tensor<2xf32>)
    attributes {graph.output_names = ["y", "n"]} {
  %t = graph.transpose %x {perm = array<i64: 1, 0>} : tensor<2x3xf32> -> tensor<3x2xf32>
  %s = graph.constant dense<[1.0, 1.0]> : tensor<2xf32>
  %n = graph.layer_norm %t, %s {axis = 1 : i64, epsilon = 1.0e-05 : f64} : tensor<3x2xf32>, tensor<2xf32>
  %c = graph.constant dense<[-1.0, 1.0]> : tensor<2xf32>
  return %n, %c : tensor<3x2xf32>, tensor<2xf32>
}
