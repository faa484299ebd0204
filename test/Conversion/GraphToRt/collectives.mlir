// RUN: lamina-opt %s -convert-graph-to-rt | FileCheck %s

// What upstream's shard-partition leaves in a tensor-parallel module
// function lowers to calls of the runtime's tensor-parallel group
// (include/lamina/Runtime/TensorParallel.h): the collectives with their
// reduction and axis, the group rank's scalar chain as one call writing
// its tensor (the scalar ops have no buffer), and an all-reduce of a value
// that dies there in place.
// CHECK-LABEL: func.func @fwd_0
// CHECK-SAME: graph.tp_split = 0 : i64
// CHECK: rt.call "lamina::rt::tp::groupRank"(%[[RANK:.*]]) {args = [0 : index], {{.*}}} : memref<i64>
// CHECK: rt.call "lamina::rt::binary"({{.*}}%[[RANK]]
// CHECK: %[[P:[0-9]+]] = rt.view %arg0[[[AT:[0-9]+]]] : memref<2x8x32xf32>
// CHECK: rt.call "lamina::rt::matmul"({{.*}}, %[[P]])
// CHECK: %[[S:[0-9]+]] = rt.view %arg0[[[AT]]] : memref<2x8x32xf32>
// CHECK: rt.call "lamina::rt::tp::allReduce"(%[[P]], %[[S]]) {args = ["lamina::rt::GroupReduce::Sum", 0 : index, 1 : index]
// CHECK: rt.call "lamina::rt::tp::allReduce"({{.*}}) {args = ["lamina::rt::GroupReduce::Max", 0 : index, 1 : index]
// CHECK: rt.call "lamina::rt::tp::reduceScatter"({{.*}}) {args = ["lamina::rt::GroupReduce::Sum", 0 : index, 1, 1 : index]{{.*}} : memref<2x8x32xf32>, memref<2x4x32xf32>
// CHECK: rt.call "lamina::rt::tp::allGather"({{.*}}) {args = [0 : index, 1, 1 : index]{{.*}} : memref<2x4x32xf32>, memref<2x8x32xf32>
// CHECK: rt.call "lamina::rt::tp::allSlice"({{.*}}) {args = [0 : index, 2, 1 : index]{{.*}} : memref<2x8x32xf32>, memref<2x8x16xf32>
// CHECK-NOT: = shard.
// CHECK-NOT: arith.
shard.grid @tp(shape = 2)
func.func @fwd_0(%x: tensor<2x8x16xf32> {graph.kind = "boundary", graph.name = "b"},
                 %w: tensor<16x32xf32> {graph.kind = "trainable", graph.name = "w", graph.tp_split = 0 : i64},
                 %ids: tensor<2x8xi64> {graph.kind = "input", graph.name = "ids"})
    -> (tensor<2x8xi64>, tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x8x16xf32>)
    attributes {graph.output_names = ["a", "b", "c", "d"]} {
  %rank = shard.process_linear_index on @tp : index
  %r64 = arith.index_cast %rank : index to i64
  %rt = tensor.from_elements %r64 : tensor<i64>
  %local = graph.sub %ids, %rt : (tensor<2x8xi64>, tensor<i64>) -> tensor<2x8xi64>
  %p = graph.matmul %x, %w : (tensor<2x8x16xf32>, tensor<16x32xf32>) -> tensor<2x8x32xf32>
  %s = shard.all_reduce %p on @tp grid_axes = [0] : tensor<2x8x32xf32> -> tensor<2x8x32xf32>
  %m = shard.all_reduce %s on @tp grid_axes = [0] reduction = max : tensor<2x8x32xf32> -> tensor<2x8x32xf32>
  %rs = shard.reduce_scatter %m on @tp grid_axes = [0] scatter_axis = 1 : tensor<2x8x32xf32> -> tensor<2x4x32xf32>
  %g = shard.all_gather %rs on @tp grid_axes = [0] gather_axis = 1 : tensor<2x4x32xf32> -> tensor<2x8x32xf32>
  %sl = shard.all_slice %g on @tp grid_axes = [0] slice_axis = 2 : tensor<2x8x32xf32> -> tensor<2x8x16xf32>
  return %local, %s, %g, %sl : tensor<2x8xi64>, tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x8x16xf32>
}
