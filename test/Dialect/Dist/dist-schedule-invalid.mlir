// Configurations the schedule generator refuses are errors naming the
// options; dist-insert-comm refuses lists that are not compute-only.
// RUN: not lamina-opt %s -dist-schedule="schedule=breadth-first pp=4 micro-batches=2 modules=8" 2>&1 | FileCheck %s --check-prefix=BFM
// RUN: not lamina-opt %s -dist-schedule="schedule=interleaved-1f1b pp=2 micro-batches=3 modules=4" 2>&1 | FileCheck %s --check-prefix=INTERM
// RUN: not lamina-opt %s -dist-schedule="schedule=interleaved-1f1b pp=2 micro-batches=2 modules=3" 2>&1 | FileCheck %s --check-prefix=INTERL
// RUN: not lamina-opt %s -dist-schedule="schedule=layered pp=2 modules=4" 2>&1 | FileCheck %s --check-prefix=LAYERED
// RUN: not lamina-opt %s -dist-schedule="schedule=gpipe pp=4 modules=2" 2>&1 | FileCheck %s --check-prefix=FEW
// RUN: not lamina-opt %s -dist-schedule="schedule=gpipe dp=2 zero=5 modules=2" 2>&1 | FileCheck %s --check-prefix=ZERO
// RUN: not lamina-opt %s -dist-schedule="schedule=gpipe micro-batches=0 modules=2" 2>&1 | FileCheck %s --check-prefix=MB
// RUN: not lamina-opt %s -dist-schedule="schedule=zigzag" 2>&1 | FileCheck %s --check-prefix=KIND
// RUN: not lamina-opt %s -dist-schedule="schedule=gpipe pp=2" 2>&1 | FileCheck %s --check-prefix=NOCHAIN
// RUN: not lamina-opt %s -dist-schedule="schedule=gpipe modules=1" -dist-schedule="schedule=gpipe modules=1" 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: not lamina-opt %s -dist-insert-comm 2>&1 | FileCheck %s --check-prefix=NONE

// BFM: error: dist-schedule: invalid options schedule=breadth-first pp=4 dp=1 micro-batches=2 zero=0 modules=8: breadth-first needs m >= p: with m = 2 micro-batches and p = 4 pipeline ranks
// INTERM: error: dist-schedule: invalid options schedule=interleaved-1f1b pp=2 dp=1 micro-batches=3 zero=0 modules=4: interleaved-1f1b needs m to be a multiple of p
// INTERL: error: dist-schedule: invalid options {{.*}} modules=3: interleaved-1f1b needs L divisible by p
// LAYERED: error: dist-schedule: invalid options schedule=layered pp=2 {{.*}}: layered is data parallel only and needs p = 1 (got p = 2)
// FEW: error: dist-schedule: invalid options {{.*}}: gpipe needs at least one module per pipeline rank: L = 2 < p = 4
// ZERO: error: dist-schedule: invalid options {{.*}} zero=5 {{.*}}: sharding level must be in [0, 3], got 5
// MB: error: dist-schedule: invalid options {{.*}} micro-batches=0 {{.*}}: micro-batches m must be in [1, 1048576], got 0
// KIND: error: dist-schedule: unknown schedule='zigzag'; expected gpipe, 1f1b, interleaved-1f1b, breadth-first or layered
// NOCHAIN: error: dist-schedule: modules=0 takes L from the dist.chain of @forward, which is missing; run dist-discover-modules or give modules=L
// TWICE: error: dist-schedule: the module already holds a dist.schedule
// NONE: error: dist-insert-comm: no dist.schedule; run dist-schedule first
module {
}
