// dist-schedule writes the compute order, dist-insert-comm the transfers
// and collectives (dist-prefetch-gathers moves ZeRO 3's gathers one run
// ahead), dist-verify-schedule proves the result; every schedule
// kind on small configurations (the examples of docs/schedules.md).
// RUN: lamina-opt %s -dist-schedule="schedule=breadth-first pp=2 micro-batches=2 modules=4" | FileCheck %s --check-prefix=COMPUTE
// RUN: lamina-opt %s -dist-schedule="schedule=breadth-first pp=2 micro-batches=2 modules=4" -dist-insert-comm -dist-verify-schedule | FileCheck %s --check-prefix=BF
// RUN: lamina-opt %s -dist-schedule="schedule=gpipe pp=2 micro-batches=2 modules=4" -dist-insert-comm -dist-verify-schedule | FileCheck %s --check-prefix=GPIPE
// RUN: lamina-opt %s -dist-schedule="schedule=1f1b pp=2 micro-batches=2 modules=4" -dist-insert-comm -dist-verify-schedule | FileCheck %s --check-prefix=ONEF
// RUN: lamina-opt %s -dist-schedule="schedule=interleaved-1f1b pp=2 micro-batches=2 modules=4" -dist-insert-comm -dist-verify-schedule | FileCheck %s --check-prefix=INTER
// RUN: lamina-opt %s -dist-schedule="schedule=layered dp=2 zero=3 micro-batches=2 modules=2" -dist-insert-comm -dist-prefetch-gathers -dist-verify-schedule | FileCheck %s --check-prefix=LAYERED
// RUN: lamina-opt %s -dist-schedule="schedule=breadth-first pp=2 dp=2 zero=1 micro-batches=2 modules=2" -dist-insert-comm -dist-verify-schedule | FileCheck %s --check-prefix=ZERO1
// RUN: lamina-opt %s -dist-schedule="schedule=gpipe pp=2 dp=2 micro-batches=3" -dist-insert-comm -dist-verify-schedule | FileCheck %s --check-prefix=CHAIN
// Verification leaves the IR as it is.
// RUN: lamina-opt %s -dist-schedule="schedule=1f1b pp=2 dp=2 zero=2 micro-batches=4 modules=6" -dist-insert-comm > %t.mlir
// RUN: lamina-opt %t.mlir -dist-verify-schedule | diff %t.mlir -

// The compute order of breadth-first, L=4 p=2 m=2: rank 0 holds modules 0
// and 2, rank 1 holds 1 and 3; forwards per module ascending, backwards
// descending with micro-batches reversed.
// COMPUTE:      dist.schedule "breadth-first" modules = 4, pp = 2, dp = 1, micro_batches = 2, zero = 0, placement = [0, 1, 0, 1] {
// COMPUTE-NEXT:   dist.rank 0 {
// COMPUTE-NEXT:     dist.forward 0, 0
// COMPUTE-NEXT:     dist.forward 0, 1
// COMPUTE-NEXT:     dist.forward 2, 0
// COMPUTE-NEXT:     dist.forward 2, 1
// COMPUTE-NEXT:     dist.backward 2, 1
// COMPUTE-NEXT:     dist.backward 2, 0
// COMPUTE-NEXT:     dist.backward 0, 1
// COMPUTE-NEXT:     dist.backward 0, 0
// COMPUTE-NEXT:     dist.optimizer_step
// COMPUTE-NEXT:   }
// COMPUTE-NEXT:   dist.rank 1 {
// COMPUTE-NEXT:     dist.forward 1, 0
// COMPUTE-NOT:    dist.send
// COMPUTE-NOT:    dist.recv

// The lists of docs/schedules.md:
//   rank 0: F0.0 Sa0.0>1 F0.1 Sa0.1>1 Ra1.0<1 F2.0 Sa2.0>1 Ra1.1<1 F2.1 Sa2.1>1 Rg2.1<1
//           B2.1 Sg1.1>1 Rg2.0<1 B2.0 Sg1.0>1 Rg0.1<1 B0.1 Rg0.0<1 B0.0 OPT
//   rank 1: Ra0.0<0 F1.0 Sa1.0>0 Ra0.1<0 F1.1 Sa1.1>0 Ra2.0<0 F3.0 Ra2.1<0 F3.1 B3.1
//           Sg2.1>0 B3.0 Sg2.0>0 Rg1.1<0 B1.1 Sg0.1>0 Rg1.0<0 B1.0 Sg0.0>0 OPT
// BF:      dist.rank 0 {
// BF-NEXT:   dist.forward 0, 0
// BF-NEXT:   dist.send activation 0, 0 to 1
// BF-NEXT:   dist.forward 0, 1
// BF-NEXT:   dist.send activation 0, 1 to 1
// BF-NEXT:   dist.recv activation 1, 0 from 1
// BF-NEXT:   dist.forward 2, 0
// BF-NEXT:   dist.send activation 2, 0 to 1
// BF-NEXT:   dist.recv activation 1, 1 from 1
// BF-NEXT:   dist.forward 2, 1
// BF-NEXT:   dist.send activation 2, 1 to 1
// BF-NEXT:   dist.recv gradient 2, 1 from 1
// BF-NEXT:   dist.backward 2, 1
// BF-NEXT:   dist.send gradient 1, 1 to 1
// BF-NEXT:   dist.recv gradient 2, 0 from 1
// BF-NEXT:   dist.backward 2, 0
// BF-NEXT:   dist.send gradient 1, 0 to 1
// BF-NEXT:   dist.recv gradient 0, 1 from 1
// BF-NEXT:   dist.backward 0, 1
// BF-NEXT:   dist.recv gradient 0, 0 from 1
// BF-NEXT:   dist.backward 0, 0
// BF-NEXT:   dist.optimizer_step
// BF-NEXT: }
// BF-NEXT: dist.rank 1 {
// BF-NEXT:   dist.recv activation 0, 0 from 0
// BF-NEXT:   dist.forward 1, 0
// BF-NEXT:   dist.send activation 1, 0 to 0
// BF-NEXT:   dist.recv activation 0, 1 from 0
// BF-NEXT:   dist.forward 1, 1
// BF-NEXT:   dist.send activation 1, 1 to 0
// BF-NEXT:   dist.recv activation 2, 0 from 0
// BF-NEXT:   dist.forward 3, 0
// BF-NEXT:   dist.recv activation 2, 1 from 0
// BF-NEXT:   dist.forward 3, 1
// BF-NEXT:   dist.backward 3, 1
// BF-NEXT:   dist.send gradient 2, 1 to 0
// BF-NEXT:   dist.backward 3, 0
// BF-NEXT:   dist.send gradient 2, 0 to 0
// BF-NEXT:   dist.recv gradient 1, 1 from 0
// BF-NEXT:   dist.backward 1, 1
// BF-NEXT:   dist.send gradient 0, 1 to 0
// BF-NEXT:   dist.recv gradient 1, 0 from 0
// BF-NEXT:   dist.backward 1, 0
// BF-NEXT:   dist.send gradient 0, 0 to 0
// BF-NEXT:   dist.optimizer_step
// BF-NEXT: }

// GPipe, contiguous: only boundary 1 crosses; every forward, then every
// backward, micro-batches in order.
// GPIPE:      placement = [0, 0, 1, 1]
// GPIPE:      dist.rank 1 {
// GPIPE-NEXT:   dist.recv activation 1, 0 from 0
// GPIPE-NEXT:   dist.forward 2, 0
// GPIPE-NEXT:   dist.forward 3, 0
// GPIPE-NEXT:   dist.recv activation 1, 1 from 0
// GPIPE-NEXT:   dist.forward 2, 1
// GPIPE-NEXT:   dist.forward 3, 1
// GPIPE-NEXT:   dist.backward 3, 0
// GPIPE-NEXT:   dist.backward 2, 0
// GPIPE-NEXT:   dist.send gradient 1, 0 to 0

// 1f1b: the last rank has no warm-up; it alternates forward and backward.
// ONEF:      placement = [0, 0, 1, 1]
// ONEF:      dist.rank 1 {
// ONEF-NEXT:   dist.recv activation 1, 0 from 0
// ONEF-NEXT:   dist.forward 2, 0
// ONEF-NEXT:   dist.forward 3, 0
// ONEF-NEXT:   dist.backward 3, 0
// ONEF-NEXT:   dist.backward 2, 0
// ONEF-NEXT:   dist.send gradient 1, 0 to 0
// ONEF-NEXT:   dist.recv activation 1, 1 from 0

// Interleaved 1F1B, v = 2 chunks: rank 0's warm-up is (p-1)*2 + (v-1)*p = 4
// forwards, then one forward and one backward alternately.
// INTER:      placement = [0, 1, 0, 1]
// INTER:      dist.rank 0 {
// INTER-NEXT:   dist.forward 0, 0
// INTER-NEXT:   dist.send activation 0, 0 to 1
// INTER-NEXT:   dist.forward 0, 1
// INTER-NEXT:   dist.send activation 0, 1 to 1
// INTER-NEXT:   dist.recv activation 1, 0 from 1
// INTER-NEXT:   dist.forward 2, 0
// INTER-NEXT:   dist.send activation 2, 0 to 1
// INTER-NEXT:   dist.recv activation 1, 1 from 1
// INTER-NEXT:   dist.forward 2, 1
// INTER-NEXT:   dist.send activation 2, 1 to 1
// INTER-NEXT:   dist.recv gradient 2, 0 from 1
// INTER-NEXT:   dist.backward 2, 0

// Layered, p = 1 with two replicas at ZeRO-3: one gather per run, the next
// run's gather issued after the first compute of this one, a reduce-scatter
// after each backward run; 2 all-gathers + 1 reduce-scatter per module.
// LAYERED:      dist.schedule "layered" modules = 2, pp = 1, dp = 2, micro_batches = 2, zero = 3, placement = [0, 0] {
// LAYERED-NEXT:   dist.rank 0 {
// LAYERED-NEXT:     dist.all_gather 0
// LAYERED-NEXT:     dist.forward 0, 0
// LAYERED-NEXT:     dist.all_gather 1
// LAYERED-NEXT:     dist.forward 0, 1
// LAYERED-NEXT:     dist.forward 1, 0
// LAYERED-NEXT:     dist.all_gather 1
// LAYERED-NEXT:     dist.forward 1, 1
// LAYERED-NEXT:     dist.backward 1, 1
// LAYERED-NEXT:     dist.all_gather 0
// LAYERED-NEXT:     dist.backward 1, 0
// LAYERED-NEXT:     dist.reduce_scatter 1
// LAYERED-NEXT:     dist.backward 0, 1
// LAYERED-NEXT:     dist.backward 0, 0
// LAYERED-NEXT:     dist.reduce_scatter 0
// LAYERED-NEXT:     dist.optimizer_step
// LAYERED-NEXT:   }
// LAYERED-NEXT:   dist.rank 1 {
// LAYERED-NEXT:     dist.all_gather 0

// ZeRO-1 on two replicas: the second replica's peers are shifted by p, the
// gradients reduce-scattered after the last backward of each module and
// the updated parameters all-gathered after the optimizer step.
// ZERO1:      dist.rank 2 {
// ZERO1-NEXT:   dist.forward 0, 0
// ZERO1-NEXT:   dist.send activation 0, 0 to 3
// ZERO1:        dist.recv gradient 0, 0 from 3
// ZERO1-NEXT:   dist.backward 0, 0
// ZERO1-NEXT:   dist.reduce_scatter 0
// ZERO1-NEXT:   dist.optimizer_step
// ZERO1-NEXT:   dist.all_gather 0
// ZERO1-NEXT: }

// modules=0: L is the number of layers of @forward's chain (2 here; the
// embedding and head ride with the first and last layer).
// CHAIN:      dist.schedule "gpipe" modules = 2, pp = 2, dp = 2, micro_batches = 3, zero = 0, placement = [0, 1] {
// CHAIN:      dist.rank 3 {
// CHAIN:        dist.backward 1, 2
// CHAIN-NEXT:   dist.send gradient 0, 2 to 2
// CHAIN-NEXT:   dist.all_reduce 1
// CHAIN-NEXT:   dist.optimizer_step
// CHAIN-NEXT: }
func.func @forward(%x: tensor<4xf32>, %w: tensor<4xf32>) -> tensor<4xf32> attributes {
    dist.chain = [#dist.module<"embedding", embedding>,
                  #dist.module<"layer.0", layer, body = 0>,
                  #dist.module<"layer.1", layer, body = 0>,
                  #dist.module<"head", head>]} {
  %0 = graph.neg %x {dist.module = 0 : i64} : tensor<4xf32>
  %1 = graph.mul %0, %w {dist.module = 1 : i64} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %2 = graph.mul %1, %w {dist.module = 2 : i64} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %3 = graph.neg %2 {dist.module = 3 : i64} : tensor<4xf32>
  return %3 : tensor<4xf32>
}
