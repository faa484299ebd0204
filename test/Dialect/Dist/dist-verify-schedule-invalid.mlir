// RUN: lamina-opt %s -split-input-file -dist-verify-schedule -verify-diagnostics
// RUN: not lamina-opt %s -split-input-file -dist-verify-schedule 2>&1 | FileCheck %s

// The simulator's whole report is kept, on the first blocked rank's action:
// CHECK:      error: deadlock: no rank can progress; 2 of 2 ranks blocked:
// CHECK-NEXT:   rank 0 (pp 0, dp 0) action #0 Recv(gradient, boundary 0, mb 0, from rank 1) waits for rank 1's action #3; that rank is at action #0 Recv(activation, boundary 0, mb 0, from rank 0)
// CHECK-NEXT:   rank 1 (pp 1, dp 0) action #0 Recv(activation, boundary 0, mb 0, from rank 0) waits for rank 0's action #2; that rank is at action #0 Recv(gradient, boundary 0, mb 0, from rank 1)
// CHECK-NEXT:   wait cycle: rank 0 -> rank 1 -> rank 0

// A missing receive: rank 1 computes module 1 without receiving its input,
// so rank 0's send has no partner.
dist.schedule "gpipe" modules = 2, pp = 2, dp = 1, micro_batches = 1, zero = 0, placement = [0, 1] {
  dist.rank 0 {
    dist.forward 0, 0
    // expected-error @+1 {{unmatched send: rank 0 (pp 0, dp 0) action #1 Send(activation, boundary 0, mb 0, to rank 1) has no matching Recv on rank 1}}
    dist.send activation 0, 0 to 1
    dist.recv gradient 0, 0 from 1
    dist.backward 0, 0
    dist.optimizer_step
  }
  dist.rank 1 {
    dist.forward 1, 0
    dist.backward 1, 0
    dist.send gradient 0, 0 to 0
    dist.optimizer_step
  }
}

// -----
// Both ranks receive first: each waits for a send the other has not reached.
dist.schedule "gpipe" modules = 2, pp = 2, dp = 1, micro_batches = 1, zero = 0, placement = [0, 1] {
  dist.rank 0 {
    // expected-error @+1 {{deadlock: no rank can progress; 2 of 2 ranks blocked:}}
    dist.recv gradient 0, 0 from 1
    dist.forward 0, 0
    dist.send activation 0, 0 to 1
    dist.backward 0, 0
    dist.optimizer_step
  }
  dist.rank 1 {
    dist.recv activation 0, 0 from 0
    dist.forward 1, 0
    dist.backward 1, 0
    dist.send gradient 0, 0 to 0
    dist.optimizer_step
  }
}

// -----
// The two replicas issue their all-reduces in different orders: NCCL would
// pair module 1's with module 0's.
dist.schedule "layered" modules = 2, pp = 1, dp = 2, micro_batches = 1, zero = 0, placement = [0, 0] {
  dist.rank 0 {
    dist.forward 0, 0
    dist.forward 1, 0
    dist.backward 1, 0
    dist.all_reduce 1
    dist.backward 0, 0
    dist.all_reduce 0
    dist.optimizer_step
  }
  dist.rank 1 {
    dist.forward 0, 0
    dist.forward 1, 0
    dist.backward 1, 0
    dist.backward 0, 0
    // expected-error @+1 {{collective mismatch in the data-parallel group of pipeline rank 0: rank 1 (pp 0, dp 1) action #4 AllReduce(weight gradients, module 0) meets rank 0 (pp 0, dp 0) action #3 AllReduce(weight gradients, module 1)}}
    dist.all_reduce 0
    dist.all_reduce 1
    dist.optimizer_step
  }
}

// -----
// One replica skips a collective: the group's counts differ (the error goes
// on the rank the verifier names first).
dist.schedule "layered" modules = 1, pp = 1, dp = 2, micro_batches = 1, zero = 0, placement = [0] {
  // expected-error @+1 {{data-parallel group of pipeline rank 0: rank 0 (pp 0, dp 0) issues 1 collectives but rank 1 (pp 0, dp 1) issues 0}}
  dist.rank 0 {
    dist.forward 0, 0
    dist.backward 0, 0
    dist.all_reduce 0
    dist.optimizer_step
  }
  dist.rank 1 {
    dist.forward 0, 0
    dist.backward 0, 0
    dist.optimizer_step
  }
}

// -----
// A backward before its forward.
dist.schedule "layered" modules = 1, pp = 1, dp = 1, micro_batches = 1, zero = 0, placement = [0] {
  dist.rank 0 {
    // expected-error @+1 {{rank 0 (pp 0, dp 0) action #0 Backward(module 0, mb 0)}}
    dist.backward 0, 0
    dist.forward 0, 0
    dist.optimizer_step
  }
}

// -----
// Compute on a rank that does not hold the module.
dist.schedule "gpipe" modules = 2, pp = 2, dp = 1, micro_batches = 1, zero = 0, placement = [0, 1] {
  dist.rank 0 {
    dist.forward 0, 0
    // expected-error @+1 {{rank 0 (pp 0, dp 0) action #1 Forward(module 1, mb 0)}}
    dist.forward 1, 0
  }
  dist.rank 1 {}
}

// -----
// An incomplete list: the error goes on the rank.
dist.schedule "layered" modules = 1, pp = 1, dp = 1, micro_batches = 2, zero = 0, placement = [0] {
  // expected-error @+1 {{rank 0 (pp 0, dp 0) never runs Forward(module 0, mb 1)}}
  dist.rank 0 {
    dist.forward 0, 0
    dist.backward 0, 0
    dist.optimizer_step
  }
}
