// RUN: lamina-opt %s -split-input-file -verify-diagnostics

// expected-error @+1 {{unknown schedule kind 'zigzag'}}
dist.schedule "zigzag" modules = 1, pp = 1, dp = 1, micro_batches = 1, zero = 0, placement = [0] {
  dist.rank 0 {}
}

// -----
// expected-error @+1 {{zero 4 is outside [0, 4)}}
dist.schedule "layered" modules = 1, pp = 1, dp = 1, micro_batches = 1, zero = 4, placement = [0] {
  dist.rank 0 {}
}

// -----
// expected-error @+1 {{placement has 1 entries for 2 modules}}
dist.schedule "gpipe" modules = 2, pp = 2, dp = 1, micro_batches = 1, zero = 0, placement = [0] {
  dist.rank 0 {}
  dist.rank 1 {}
}

// -----
// expected-error @+1 {{placement puts module 1 on rank 2, outside [0, 2)}}
dist.schedule "gpipe" modules = 2, pp = 2, dp = 1, micro_batches = 1, zero = 0, placement = [0, 2] {
  dist.rank 0 {}
  dist.rank 1 {}
}

// -----
// expected-error @+1 {{has no dist.rank 1 (pp = 2 x dp = 1 = 2 ranks)}}
dist.schedule "gpipe" modules = 2, pp = 2, dp = 1, micro_batches = 1, zero = 0, placement = [0, 1] {
  dist.rank 0 {}
}

// -----
dist.schedule "gpipe" modules = 2, pp = 2, dp = 1, micro_batches = 1, zero = 0, placement = [0, 1] {
  // expected-note @+1 {{first here}}
  dist.rank 0 {}
  // expected-error @+1 {{rank 0 appears twice}}
  dist.rank 0 {}
}

// -----
dist.schedule "gpipe" modules = 2, pp = 2, dp = 1, micro_batches = 1, zero = 0, placement = [0, 1] {
  dist.rank 0 {}
  // expected-error @+1 {{rank 2 is outside [0, 2)}}
  dist.rank 2 {}
}

// -----
dist.schedule "gpipe" modules = 2, pp = 2, dp = 1, micro_batches = 1, zero = 0, placement = [0, 1] {
  dist.rank 0 {
    // expected-error @+1 {{module 2 is outside [0, 2)}}
    dist.forward 2, 0
  }
  dist.rank 1 {}
}

// -----
dist.schedule "gpipe" modules = 2, pp = 2, dp = 1, micro_batches = 1, zero = 0, placement = [0, 1] {
  dist.rank 0 {
    // expected-error @+1 {{module -1 is outside [0, 2)}}
    dist.forward -1, 0
  }
  dist.rank 1 {}
}

// -----
dist.schedule "gpipe" modules = 2, pp = 2, dp = 1, micro_batches = 2, zero = 0, placement = [0, 1] {
  dist.rank 0 {
    // expected-error @+1 {{micro-batch 2 is outside [0, 2)}}
    dist.backward 0, 2
  }
  dist.rank 1 {}
}

// -----
dist.schedule "gpipe" modules = 2, pp = 2, dp = 1, micro_batches = 1, zero = 0, placement = [0, 1] {
  dist.rank 0 {
    // A boundary is the output of a module that has a successor.
    // expected-error @+1 {{boundary 1 is outside [0, 1)}}
    dist.send activation 1, 0 to 1
  }
  dist.rank 1 {}
}

// -----
dist.schedule "gpipe" modules = 2, pp = 2, dp = 1, micro_batches = 1, zero = 0, placement = [0, 1] {
  dist.rank 0 {
    // expected-error @+1 {{peer 5 is outside [0, 2)}}
    dist.recv gradient 0, 0 from 5
  }
  dist.rank 1 {}
}

// -----
dist.schedule "gpipe" modules = 2, pp = 2, dp = 1, micro_batches = 1, zero = 0, placement = [0, 1] {
  dist.rank 0 {
    // expected-error @+1 {{peer 0 is the rank itself}}
    dist.send activation 0, 0 to 0
  }
  dist.rank 1 {}
}

// -----
dist.schedule "layered" modules = 1, pp = 1, dp = 2, micro_batches = 1, zero = 0, placement = [0] {
  dist.rank 0 {
    // expected-error @+1 {{module 3 is outside [0, 1)}}
    dist.all_reduce 3
  }
  dist.rank 1 {}
}

// -----
dist.schedule "layered" modules = 1, pp = 1, dp = 1, micro_batches = 1, zero = 0, placement = [0] {
  dist.rank 0 {
    // expected-error @+1 {{only action ops}}
    dist.rank 0 {}
  }
}

// -----
dist.schedule "layered" modules = 1, pp = 1, dp = 1, micro_batches = 1, zero = 0, placement = [0] {
  // expected-error @+1 {{'dist.forward' op expects parent op 'dist.rank'}}
  dist.forward 0, 0
}

// -----
// expected-error @+1 {{'dist.rank' op expects parent op 'dist.schedule'}}
dist.rank 0 {}
