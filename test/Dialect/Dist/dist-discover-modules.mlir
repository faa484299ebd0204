// RUN: split-file %s %t
// RUN: lamina-opt %t/names.mlir --dist-discover-modules | FileCheck %s
// RUN: lamina-opt %t/names.mlir --dist-describe-model -o /dev/null | FileCheck %s --check-prefix=DESC
// RUN: lamina-opt %t/names.mlir --dist-discover-modules --dist-describe-model -o /dev/null | FileCheck %s --check-prefix=DESC
// RUN: lamina-opt %t/annotated.mlir --dist-describe-model -o /dev/null | FileCheck %s --check-prefix=ANNOT
// RUN: lamina-opt %t/experts.mlir --dist-discover-modules | FileCheck %s --check-prefix=MOE
// RUN: lamina-opt %t/dynamo.mlir --dist-discover-modules | FileCheck %s --check-prefix=DYNAMO
// RUN: lamina-opt %t/structure.mlir --dist-discover-modules | FileCheck %s --check-prefix=STRUCT
// RUN: lamina-opt %t/regex.mlir --dist-discover-modules | FileCheck %s --check-prefix=NONE
// RUN: lamina-opt %t/regex.mlir --dist-discover-modules="module-regex=blk_([a-z])" | FileCheck %s --check-prefix=REGEX
// RUN: not lamina-opt %t/regex.mlir --dist-discover-modules="module-regex=blk_(" 2>&1 | FileCheck %s --check-prefix=BADRE
// RUN: not lamina-opt %t/regex.mlir --dist-discover-modules="module-regex=nothing_(x)" 2>&1 | FileCheck %s --check-prefix=NOMATCH
// RUN: not lamina-opt %t/regex.mlir --dist-discover-modules="function=missing" 2>&1 | FileCheck %s --check-prefix=NOFUNC

// BADRE: error: --module-regex 'blk_(' is not a valid regex
// NOMATCH: error: --module-regex 'nothing_(x)' matches no parameter or node name
// NOFUNC: error: dist-discover-modules: no function @missing

//--- names.mlir
// Layers from parameter names (`h.0.`, `h.1.`): the embedding before them,
// the head after; the mask every layer reads is a shared input; the two
// layers are isomorphic and share body 0.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: dist.chain = [#dist.module<"embedding", embedding>, #dist.module<"layer.0", layer, body = 0>, #dist.module<"layer.1", layer, body = 0>, #dist.module<"head", head>]
// CHECK-SAME: dist.discovery = "names"
// CHECK: graph.gather {{.*}}dist.module = 0
// CHECK: graph.matmul {{.*}}dist.module = 1
// CHECK: graph.mul {{.*}}dist.module = 1
// CHECK: graph.add {{.*}}dist.module = 1
// CHECK: graph.matmul {{.*}}dist.module = 2
// CHECK: graph.mul {{.*}}dist.module = 2
// CHECK: graph.add {{.*}}dist.module = 2
// CHECK: graph.matmul {{.*}}dist.module = 3
// DESC: 4 modules by names, micro-batch 2 x seq 3, hidden 4, 96 params
// DESC: shared inputs: mask
// DESC: embedding    embedding   -1         32
// DESC: layer.0      layer        0         16
// DESC: layer.1      layer        0         16
// DESC: head         head        -1         32
func.func @forward(%emb: tensor<8x4xf32> {graph.kind = "trainable", graph.name = "wte"},
                   %w0: tensor<4x4xf32> {graph.kind = "trainable", graph.name = "h.0.mlp.weight"},
                   %w1: tensor<4x4xf32> {graph.kind = "trainable", graph.name = "h.1.mlp.weight"},
                   %wf: tensor<4x8xf32> {graph.kind = "trainable", graph.name = "lm_head.weight"},
                   %ids: tensor<2x3xi64> {graph.kind = "input", graph.name = "input_ids"},
                   %mask: tensor<2x3x4xf32> {graph.kind = "input", graph.name = "mask"})
    -> tensor<2x3x8xf32> {
  %x = graph.gather %emb, %ids {axis = 0 : i64} : (tensor<8x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
  %a0 = graph.matmul %x, %w0 : (tensor<2x3x4xf32>, tensor<4x4xf32>) -> tensor<2x3x4xf32>
  %m0 = graph.mul %a0, %mask : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %r0 = graph.add %x, %m0 : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %a1 = graph.matmul %r0, %w1 : (tensor<2x3x4xf32>, tensor<4x4xf32>) -> tensor<2x3x4xf32>
  %m1 = graph.mul %a1, %mask : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %r1 = graph.add %r0, %m1 : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %y = graph.matmul %r1, %wf : (tensor<2x3x4xf32>, tensor<4x8xf32>) -> tensor<2x3x8xf32>
  return %y : tensor<2x3x8xf32>
}

//--- annotated.mlir
// A chain written by hand is what dist-describe-model (and lamina plan)
// describe: here the two matmuls form one module.
// ANNOT: model annotated: 2 modules by annotated
// ANNOT: front embedding -1 0 12 0 144 0 48
// ANNOT: block layer -1 32 192 192 320 48 0
func.func @forward(%w1: tensor<4x4xf32> {graph.kind = "trainable", graph.name = "b"},
                   %w2: tensor<4x4xf32> {graph.kind = "trainable", graph.name = "c"},
                   %x: tensor<3x4xf32> {graph.kind = "input", graph.name = "x"})
    -> tensor<3x4xf32> attributes {
    dist.chain = [#dist.module<"front", embedding>, #dist.module<"block", layer>]} {
  %a = graph.mul %x, %x {dist.module = 0 : i64} : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  %b = graph.matmul %a, %w1 {dist.module = 1 : i64} : (tensor<3x4xf32>, tensor<4x4xf32>) -> tensor<3x4xf32>
  %c = graph.matmul %b, %w2 {dist.module = 1 : i64} : (tensor<3x4xf32>, tensor<4x4xf32>) -> tensor<3x4xf32>
  return %c : tensor<3x4xf32>
}

//--- experts.mlir
// Nested numbered containers: three experts per layer do not make three
// layers; the outer container (`model.layers`) wins.
// MOE: dist.chain = [#dist.module<"layer.0", layer, body = 0>, #dist.module<"layer.1", layer, body = 0>]
func.func @forward(
    %w00: tensor<4x4xf32> {graph.kind = "trainable", graph.name = "model.layers.0.experts.0.weight"},
    %w01: tensor<4x4xf32> {graph.kind = "trainable", graph.name = "model.layers.0.experts.1.weight"},
    %w02: tensor<4x4xf32> {graph.kind = "trainable", graph.name = "model.layers.0.experts.2.weight"},
    %w10: tensor<4x4xf32> {graph.kind = "trainable", graph.name = "model.layers.1.experts.0.weight"},
    %w11: tensor<4x4xf32> {graph.kind = "trainable", graph.name = "model.layers.1.experts.1.weight"},
    %w12: tensor<4x4xf32> {graph.kind = "trainable", graph.name = "model.layers.1.experts.2.weight"},
    %x: tensor<3x4xf32> {graph.kind = "input", graph.name = "x"}) -> tensor<3x4xf32> {
  %m00 = graph.matmul %x, %w00 : (tensor<3x4xf32>, tensor<4x4xf32>) -> tensor<3x4xf32>
  %m01 = graph.matmul %x, %w01 : (tensor<3x4xf32>, tensor<4x4xf32>) -> tensor<3x4xf32>
  %m02 = graph.matmul %x, %w02 : (tensor<3x4xf32>, tensor<4x4xf32>) -> tensor<3x4xf32>
  %s0 = graph.add %m00, %m01 : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  %t0 = graph.add %s0, %m02 : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  %r0 = graph.add %x, %t0 : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  %m10 = graph.matmul %r0, %w10 : (tensor<3x4xf32>, tensor<4x4xf32>) -> tensor<3x4xf32>
  %m11 = graph.matmul %r0, %w11 : (tensor<3x4xf32>, tensor<4x4xf32>) -> tensor<3x4xf32>
  %m12 = graph.matmul %r0, %w12 : (tensor<3x4xf32>, tensor<4x4xf32>) -> tensor<3x4xf32>
  %s1 = graph.add %m10, %m11 : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  %t1 = graph.add %s1, %m12 : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  %r1 = graph.add %r0, %t1 : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  return %r1 : tensor<3x4xf32>
}

//--- dynamo.mlir
// Dynamo's names: anonymous weights (`val_10`), node counters, and one
// name that reads as a numbered container (`node_topk_1__1`: `node_topk`,
// index 1) with one layer where the parameters name two. The module
// scopes of the nodes' metadata (the locations' children) place the ops
// then: each residual add in its own layer.
// DYNAMO: dist.chain = [#dist.module<"layer.0", layer, body = 0>, #dist.module<"layer.1", layer, body = 0>]
// DYNAMO: graph.matmul {{.*}}dist.module = 0
// DYNAMO: graph.add {{.*}}dist.module = 0
// DYNAMO: graph.matmul {{.*}}dist.module = 1
// DYNAMO: graph.add {{.*}}dist.module = 1
func.func @forward(
    %n0: tensor<4xf32> {graph.kind = "trainable", graph.name = "model.layers.0.norm.weight"},
    %n1: tensor<4xf32> {graph.kind = "trainable", graph.name = "model.layers.1.norm.weight"},
    %w0: tensor<4x4xf32> {graph.kind = "trainable", graph.name = "val_10"},
    %w1: tensor<4x4xf32> {graph.kind = "trainable", graph.name = "val_20"},
    %x: tensor<3x4xf32> {graph.kind = "input", graph.name = "x"}) -> tensor<3x4xf32> {
  %a0 = graph.mul %x, %n0 : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32> loc("node_mul_1"("model.layers.0.norm/mul_1"))
  %m0 = graph.matmul %a0, %w0 : (tensor<3x4xf32>, tensor<4x4xf32>) -> tensor<3x4xf32> loc("node_linear"("model.layers.0.mlp/linear"))
  %r0 = graph.add %x, %m0 : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32> loc("node_add_2"("model.layers.0/add_2"))
  %a1 = graph.mul %r0, %n1 : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32> loc("node_mul_3"("model.layers.1.norm/mul_3"))
  %m1 = graph.matmul %a1, %w1 : (tensor<3x4xf32>, tensor<4x4xf32>) -> tensor<3x4xf32> loc("node_topk_1__1"("model.layers.1.mlp/linear_1"))
  %r1 = graph.add %r0, %m1 : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32> loc("node_add_4"("model.layers.1/add_4"))
  return %r1 : tensor<3x4xf32>
}

//--- structure.mlir
// Without names, the residual adds cut the stream; three repeats of the
// same segment are three layers.
// STRUCT-LABEL: func.func @forward
// STRUCT-SAME: dist.chain = [#dist.module<"embedding", embedding>, #dist.module<"layer.0", layer, body = 0>, #dist.module<"layer.1", layer, body = 0>, #dist.module<"layer.2", layer, body = 0>, #dist.module<"head", head>]
// STRUCT-SAME: dist.discovery = "structure"
func.func @forward(%emb: tensor<8x4xf32> {graph.kind = "trainable", graph.name = "p0"},
                   %w0: tensor<4x4xf32> {graph.kind = "trainable", graph.name = "p1"},
                   %w1: tensor<4x4xf32> {graph.kind = "trainable", graph.name = "p2"},
                   %w2: tensor<4x4xf32> {graph.kind = "trainable", graph.name = "p3"},
                   %wf: tensor<4x8xf32> {graph.kind = "trainable", graph.name = "p4"},
                   %ids: tensor<2x3xi64> {graph.kind = "input", graph.name = "input_ids"})
    -> tensor<2x3x8xf32> {
  %x = graph.gather %emb, %ids {axis = 0 : i64} : (tensor<8x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
  %a0 = graph.matmul %x, %w0 : (tensor<2x3x4xf32>, tensor<4x4xf32>) -> tensor<2x3x4xf32>
  %t0 = graph.tanh %a0 : tensor<2x3x4xf32>
  %r0 = graph.add %x, %t0 : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %a1 = graph.matmul %r0, %w1 : (tensor<2x3x4xf32>, tensor<4x4xf32>) -> tensor<2x3x4xf32>
  %t1 = graph.tanh %a1 : tensor<2x3x4xf32>
  %r1 = graph.add %r0, %t1 : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %a2 = graph.matmul %r1, %w2 : (tensor<2x3x4xf32>, tensor<4x4xf32>) -> tensor<2x3x4xf32>
  %t2 = graph.tanh %a2 : tensor<2x3x4xf32>
  %r2 = graph.add %r1, %t2 : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %y = graph.matmul %r2, %wf : (tensor<2x3x4xf32>, tensor<4x8xf32>) -> tensor<2x3x8xf32>
  return %y : tensor<2x3x8xf32>
}

//--- regex.mlir
// --module-regex names the layers by its capture: `a` and `b` here, which
// automatic discovery (no numbered component) would not find.
// REGEX-LABEL: func.func @forward
// REGEX-SAME: dist.chain = [#dist.module<"a", layer, body = 0>, #dist.module<"b", layer, body = 0>, #dist.module<"head", head>]
// REGEX-SAME: dist.discovery = "regex"
// Without the override: no names, no residual stream, one module.
// NONE-LABEL: func.func @forward
// NONE-SAME: dist.chain = [#dist.module<"layer.0", layer, body = 0>]
// NONE-SAME: dist.discovery = "none"
func.func @forward(%wa: tensor<4x4xf32> {graph.kind = "trainable", graph.name = "blk_a.weight"},
                   %wb: tensor<4x4xf32> {graph.kind = "trainable", graph.name = "blk_b.weight"},
                   %wf: tensor<4x8xf32> {graph.kind = "trainable", graph.name = "out.weight"},
                   %x: tensor<3x4xf32> {graph.kind = "input", graph.name = "x"})
    -> tensor<3x8xf32> {
  %a = graph.matmul %x, %wa : (tensor<3x4xf32>, tensor<4x4xf32>) -> tensor<3x4xf32>
  %b = graph.matmul %a, %wb : (tensor<3x4xf32>, tensor<4x4xf32>) -> tensor<3x4xf32>
  %y = graph.matmul %b, %wf : (tensor<3x4xf32>, tensor<4x8xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}
