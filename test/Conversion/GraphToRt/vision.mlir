// RUN: lamina-opt %s -convert-graph-to-rt | FileCheck %s

// The vision ops' kernel calls: the window attributes as arrays, a
// convolution's bias optional (unit when absent), the pools' flags.
// CHECK-LABEL: func.func @forward
// CHECK: rt.call "lamina::rt::gen::conv"({{.*}}) {args = [0 : index, 1 : index, 2 : index, array<i64: 2, 1>, array<i64: 1, 1>, array<i64: 1, 1, 0, 0>, 2, 3 : index]
// CHECK: rt.call "lamina::rt::gen::conv"({{.*}}) {args = [0 : index, 1 : index, unit, array<i64: 2, 1>, array<i64: 1, 1>, array<i64: 1, 1, 0, 0>, 2, 2 : index]
// CHECK: rt.call "lamina::rt::convBackwardInput"({{.*}}) {args = [0 : index, 1 : index, array<i64: 2, 1>, array<i64: 1, 1>, array<i64: 1, 1, 0, 0>, 2, 2 : index]
// CHECK: rt.call "lamina::rt::convBackwardWeight"({{.*}}) {args = [0 : index, 1 : index, array<i64: 2, 1>, array<i64: 1, 1>, array<i64: 1, 1, 0, 0>, 2, 2 : index]
// CHECK: rt.call "lamina::rt::maxPool"({{.*}}) {args = [0 : index, array<i64: 2, 2>, array<i64: 2, 2>, array<i64: 1, 1>, array<i64: 0, 0, 0, 0>, 1 : index]
// CHECK: rt.call "lamina::rt::maxPoolIndices"({{.*}}) {args = [0 : index, array<i64: 2, 2>, array<i64: 2, 2>, array<i64: 1, 1>, array<i64: 0, 0, 0, 0>, true, 1 : index]
// CHECK: rt.call "lamina::rt::maxPoolBackward"({{.*}}) {args = [0 : index, 1 : index, array<i64: 2, 2>, array<i64: 2, 2>, array<i64: 1, 1>, array<i64: 0, 0, 0, 0>, 2 : index]
// CHECK: rt.call "lamina::rt::avgPool"({{.*}}) {args = [0 : index, array<i64: 3, 3>, array<i64: 1, 1>, array<i64: 1, 1>, array<i64: 1, 1, 1, 1>, true, 1 : index]
// CHECK: rt.call "lamina::rt::avgPoolBackward"({{.*}}) {args = [0 : index, array<i64: 3, 3>, array<i64: 1, 1>, array<i64: 1, 1>, array<i64: 1, 1, 1, 1>, true, 1 : index]
func.func @forward(%x: tensor<1x4x6x6xf32> {graph.name = "x", graph.kind = "input"},
                   %w: tensor<6x2x3x3xf32> {graph.name = "w", graph.kind = "trainable"},
                   %b: tensor<6xf32> {graph.name = "b", graph.kind = "trainable"},
                   %g: tensor<1x6x3x5xf32> {graph.name = "g", graph.kind = "input"},
                   %gp: tensor<1x4x3x3xf32> {graph.name = "gp", graph.kind = "input"})
    -> (tensor<1x6x3x5xf32>, tensor<1x6x3x5xf32>, tensor<1x4x6x6xf32>, tensor<6x2x3x3xf32>,
        tensor<1x4x3x3xf32>, tensor<1x4x3x3xi64>, tensor<1x4x6x6xf32>, tensor<1x4x6x6xf32>,
        tensor<1x4x6x6xf32>)
    attributes {graph.output_names = ["y", "y2", "dx", "dw", "m", "i", "dm", "a", "da"]} {
  %y = graph.conv %x, %w, %b {dilations = array<i64: 1, 1>, group = 2 : i64, pads = array<i64: 1, 1, 0, 0>, strides = array<i64: 2, 1>} : (tensor<1x4x6x6xf32>, tensor<6x2x3x3xf32>, tensor<6xf32>) -> tensor<1x6x3x5xf32>
  %y2 = graph.conv %x, %w {dilations = array<i64: 1, 1>, group = 2 : i64, pads = array<i64: 1, 1, 0, 0>, strides = array<i64: 2, 1>} : (tensor<1x4x6x6xf32>, tensor<6x2x3x3xf32>) -> tensor<1x6x3x5xf32>
  %dx = graph.conv_grad_input %w, %g {dilations = array<i64: 1, 1>, group = 2 : i64, pads = array<i64: 1, 1, 0, 0>, strides = array<i64: 2, 1>} : (tensor<6x2x3x3xf32>, tensor<1x6x3x5xf32>) -> tensor<1x4x6x6xf32>
  %dw = graph.conv_grad_weight %x, %g {dilations = array<i64: 1, 1>, group = 2 : i64, pads = array<i64: 1, 1, 0, 0>, strides = array<i64: 2, 1>} : (tensor<1x4x6x6xf32>, tensor<1x6x3x5xf32>) -> tensor<6x2x3x3xf32>
  %m = graph.max_pool %x {dilations = array<i64: 1, 1>, kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : tensor<1x4x6x6xf32> -> tensor<1x4x3x3xf32>
  %i = graph.max_pool_indices %x {column_major, dilations = array<i64: 1, 1>, kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : tensor<1x4x6x6xf32> -> tensor<1x4x3x3xi64>
  %dm = graph.max_pool_grad %x, %gp {dilations = array<i64: 1, 1>, kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : tensor<1x4x6x6xf32>, tensor<1x4x3x3xf32>
  %a = graph.avg_pool %x {count_include_pad, dilations = array<i64: 1, 1>, kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : tensor<1x4x6x6xf32> -> tensor<1x4x6x6xf32>
  %da = graph.avg_pool_grad %a {count_include_pad, dilations = array<i64: 1, 1>, kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : tensor<1x4x6x6xf32> -> tensor<1x4x6x6xf32>
  return %y, %y2, %dx, %dw, %m, %i, %dm, %a, %da : tensor<1x6x3x5xf32>, tensor<1x6x3x5xf32>, tensor<1x4x6x6xf32>, tensor<6x2x3x3xf32>, tensor<1x4x3x3xf32>, tensor<1x4x3x3xi64>, tensor<1x4x6x6xf32>, tensor<1x4x6x6xf32>, tensor<1x4x6x6xf32>
}
