// dist-prefetch-gathers: at ZeRO 3, dist-insert-comm gathers each run's
// weights right before the run (a run: consecutive forwards, or backwards,
// of one module); the pass moves every gather but the first to right after
// the previous run's first compute and its send, so it overlaps the rest
// of that run. Layered gradient accumulation, 2 modules, 2 micro-batches,
// 2 replicas: runs F0 F1 B1 B0. The evaluation step keeps its gathers; a
// second run of the pass changes nothing; other levels have none to move.
// RUN: lamina-opt %s -dist-schedule="schedule=layered dp=2 zero=3 micro-batches=2 modules=2 eval=true" -dist-insert-comm -dist-verify-schedule | FileCheck %s --check-prefixes=BEFORE,EVAL
// RUN: lamina-opt %s -dist-schedule="schedule=layered dp=2 zero=3 micro-batches=2 modules=2 eval=true" -dist-insert-comm -dist-prefetch-gathers -dist-verify-schedule | FileCheck %s --check-prefixes=AFTER,EVAL
// RUN: lamina-opt %s -dist-schedule="schedule=layered dp=2 zero=3 micro-batches=2 modules=2 eval=true" -dist-insert-comm -dist-prefetch-gathers -dist-prefetch-gathers | FileCheck %s --check-prefixes=AFTER,EVAL
// Breadth-first over 2 pipeline ranks: the gather moves past the send
// that follows the run's first forward.
// RUN: lamina-opt %s -dist-schedule="schedule=breadth-first pp=2 dp=2 zero=3 micro-batches=2 modules=2" -dist-insert-comm -dist-prefetch-gathers -dist-verify-schedule | FileCheck %s --check-prefix=BF
// RUN: lamina-opt %s -dist-schedule="schedule=layered dp=2 zero=2 micro-batches=2 modules=2" -dist-insert-comm > %t.zero2.mlir
// RUN: lamina-opt %t.zero2.mlir -dist-prefetch-gathers | diff %t.zero2.mlir -

// BEFORE-LABEL: dist.schedule "layered"
// BEFORE-NEXT:   dist.rank 0 {
// BEFORE-NEXT:     dist.all_gather 0
// BEFORE-NEXT:     dist.forward 0, 0
// BEFORE-NEXT:     dist.forward 0, 1
// BEFORE-NEXT:     dist.all_gather 1
// BEFORE-NEXT:     dist.forward 1, 0
// BEFORE-NEXT:     dist.forward 1, 1
// BEFORE-NEXT:     dist.all_gather 1
// BEFORE-NEXT:     dist.backward 1, 1
// BEFORE-NEXT:     dist.backward 1, 0
// BEFORE-NEXT:     dist.reduce_scatter 1
// BEFORE-NEXT:     dist.all_gather 0
// BEFORE-NEXT:     dist.backward 0, 1
// BEFORE-NEXT:     dist.backward 0, 0
// BEFORE-NEXT:     dist.reduce_scatter 0
// BEFORE-NEXT:     dist.optimizer_step

// AFTER-LABEL: dist.schedule "layered"
// AFTER-NEXT:   dist.rank 0 {
// AFTER-NEXT:     dist.all_gather 0
// AFTER-NEXT:     dist.forward 0, 0
// AFTER-NEXT:     dist.all_gather 1
// AFTER-NEXT:     dist.forward 0, 1
// AFTER-NEXT:     dist.forward 1, 0
// AFTER-NEXT:     dist.all_gather 1
// AFTER-NEXT:     dist.forward 1, 1
// AFTER-NEXT:     dist.backward 1, 1
// AFTER-NEXT:     dist.all_gather 0
// AFTER-NEXT:     dist.backward 1, 0
// AFTER-NEXT:     dist.reduce_scatter 1
// AFTER-NEXT:     dist.backward 0, 1
// AFTER-NEXT:     dist.backward 0, 0
// AFTER-NEXT:     dist.reduce_scatter 0
// AFTER-NEXT:     dist.optimizer_step

// EVAL-LABEL: dist.schedule "layered" forward_only
// EVAL-NEXT:   dist.rank 0 {
// EVAL-NEXT:     dist.all_gather 0
// EVAL-NEXT:     dist.forward 0, 0
// EVAL-NEXT:     dist.forward 0, 1
// EVAL-NEXT:     dist.all_gather 1
// EVAL-NEXT:     dist.forward 1, 0
// EVAL-NEXT:     dist.forward 1, 1
// EVAL-NEXT:   }

// BF-LABEL: dist.schedule "breadth-first"
// BF-NEXT:   dist.rank 0 {
// BF-NEXT:     dist.all_gather 0
// BF-NEXT:     dist.forward 0, 0
// BF-NEXT:     dist.send activation 0, 0 to 1
// BF-NEXT:     dist.all_gather 0
// BF-NEXT:     dist.forward 0, 1
