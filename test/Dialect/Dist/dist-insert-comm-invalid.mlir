// RUN: lamina-opt %s -split-input-file -dist-insert-comm -verify-diagnostics

// dist-insert-comm lowers compute-only lists; a transfer already there is
// an error on that op.
dist.schedule "gpipe" modules = 2, pp = 2, dp = 1, micro_batches = 1, zero = 0, placement = [0, 1] {
  dist.rank 0 {
    dist.forward 0, 0
    // expected-error @+1 {{dist-insert-comm: rank 0 (pp 0, dp 0) action #1 Send(activation, boundary 0, mb 0, to rank 1): a compute order holds only forwards and backwards, then one OptimizerStep}}
    dist.send activation 0, 0 to 1
    dist.backward 0, 0
    dist.optimizer_step
  }
  dist.rank 1 {
    dist.forward 1, 0
    dist.backward 1, 0
    dist.optimizer_step
  }
}

// -----
dist.schedule "layered" modules = 1, pp = 1, dp = 1, micro_batches = 1, zero = 0, placement = [0] {
  // expected-error @+1 {{dist-insert-comm: rank 0 (pp 0, dp 0): a compute order ends with one OptimizerStep}}
  dist.rank 0 {
    dist.forward 0, 0
    dist.backward 0, 0
  }
}

// -----
// The generator's refusals hold for hand-written orders too.
// expected-error @+1 {{dist-insert-comm: breadth-first needs m >= p}}
dist.schedule "breadth-first" modules = 2, pp = 2, dp = 1, micro_batches = 1, zero = 0, placement = [0, 1] {
  dist.rank 0 {
    dist.optimizer_step
  }
  dist.rank 1 {
    dist.optimizer_step
  }
}
