// RUN: lamina-opt %s | FileCheck %s
// RUN: lamina-opt %s | lamina-opt | FileCheck %s
// RUN: lamina-opt %s --mlir-print-op-generic | lamina-opt | FileCheck %s

// Every action op in its compact form, two data-parallel replicas of two
// pipeline ranks (ranks listed out of order), ZeRO-3.
// CHECK-LABEL: dist.schedule "gpipe" modules = 2, pp = 2, dp = 2, micro_batches = 1, zero = 3, placement = [0, 1] {
// CHECK-NEXT:    dist.rank 0 {
// CHECK-NEXT:      dist.all_gather 0
// CHECK-NEXT:      dist.forward 0, 0
// CHECK-NEXT:      dist.send activation 0, 0 to 1
// CHECK-NEXT:      dist.recv gradient 0, 0 from 1
// CHECK-NEXT:      dist.all_gather 0
// CHECK-NEXT:      dist.backward 0, 0
// CHECK-NEXT:      dist.reduce_scatter 0
// CHECK-NEXT:      dist.optimizer_step
// CHECK-NEXT:    }
// CHECK-NEXT:    dist.rank 3 {
// CHECK-NEXT:      dist.recv activation 0, 0 from 2
// CHECK:         dist.rank 2 {
// CHECK:         dist.rank 1 {
dist.schedule "gpipe" modules = 2, pp = 2, dp = 2, micro_batches = 1, zero = 3,
    placement = [0, 1] {
  dist.rank 0 {
    dist.all_gather 0
    dist.forward 0, 0
    dist.send activation 0, 0 to 1
    dist.recv gradient 0, 0 from 1
    dist.all_gather 0
    dist.backward 0, 0
    dist.reduce_scatter 0
    dist.optimizer_step
  }
  dist.rank 3 {
    dist.recv activation 0, 0 from 2
    dist.all_gather 1
    dist.forward 1, 0
    dist.all_gather 1
    dist.backward 1, 0
    dist.send gradient 0, 0 to 2
    dist.reduce_scatter 1
    dist.optimizer_step
  }
  dist.rank 2 {
    dist.all_gather 0
    dist.forward 0, 0
    dist.send activation 0, 0 to 3
    dist.recv gradient 0, 0 from 3
    dist.all_gather 0
    dist.backward 0, 0
    dist.reduce_scatter 0
    dist.optimizer_step
  }
  dist.rank 1 {
    dist.recv activation 0, 0 from 0
    dist.all_gather 1
    dist.forward 1, 0
    dist.all_gather 1
    dist.backward 1, 0
    dist.send gradient 0, 0 to 0
    dist.reduce_scatter 1
    dist.optimizer_step
  }
}

// An all-reduce (level 0) and an empty rank list parse and print too.
// CHECK-LABEL: dist.schedule "layered" modules = 1, pp = 1, dp = 2, micro_batches = 1, zero = 0, placement = [0] {
// CHECK-NEXT:    dist.rank 0 {
// CHECK-NEXT:      dist.all_reduce 0
// CHECK-NEXT:    }
// CHECK-NEXT:    dist.rank 1 {
// CHECK-NEXT:    }
dist.schedule "layered" modules = 1, pp = 1, dp = 2, micro_batches = 1, zero = 0,
    placement = [0] {
  dist.rank 0 {
    dist.all_reduce 0
  }
  dist.rank 1 {}
}
