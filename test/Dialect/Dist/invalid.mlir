// RUN: lamina-opt %s -split-input-file -verify-diagnostics

// An op reads a value of a later module (a backward edge in the chain).
func.func @backward(%x: tensor<4xf32>) -> tensor<4xf32> attributes {
    dist.chain = [#dist.module<"layer.0", layer>, #dist.module<"layer.1", layer>]} {
  %0 = graph.neg %x {dist.module = 1 : i64} : tensor<4xf32>
  // expected-error @+1 {{op in module 0 reads a value of module 1, which comes later in the chain}}
  %1 = graph.neg %0 {dist.module = 0 : i64} : tensor<4xf32>
  return %1 : tensor<4xf32>
}

// -----
// Every op of a chained function belongs to a module.
func.func @unassigned(%x: tensor<4xf32>) -> tensor<4xf32> attributes {
    dist.chain = [#dist.module<"layer.0", layer>]} {
  // expected-error @+1 {{op without 'dist.module' in a function with a 'dist.chain'}}
  %0 = graph.neg %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----
// A module index past the end of the chain.
func.func @out_of_range(%x: tensor<4xf32>) -> tensor<4xf32> attributes {
    dist.chain = [#dist.module<"layer.0", layer>]} {
  // expected-error @+1 {{'dist.module' 1 is out of range for a chain of 1 modules}}
  %0 = graph.neg %x {dist.module = 1 : i64} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----
// A module index without a chain to index.
func.func @no_chain(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'dist.module' outside a function with a 'dist.chain'}}
  %0 = graph.neg %x {dist.module = 0 : i64} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----
// The head ends the chain.
// expected-error @+1 {{head module 'head' must come last in the chain}}
func.func @head_first() attributes {
    dist.chain = [#dist.module<"head", head>, #dist.module<"layer.0", layer>]} {
  return
}

// -----
// The embedding starts the chain.
// expected-error @+1 {{embedding module 'embedding' must come first in the chain}}
func.func @embedding_late() attributes {
    dist.chain = [#dist.module<"layer.0", layer>, #dist.module<"embedding", embedding>]} {
  return
}

// -----
// Module names are unique.
// expected-error @+1 {{module name 'layer.0' appears twice in the chain}}
func.func @twice() attributes {
    dist.chain = [#dist.module<"layer.0", layer>, #dist.module<"layer.0", layer>]} {
  return
}

// -----
// A placement covers every module exactly once.
// expected-error @+1 {{'dist.placement' places 1 modules; the chain has 2}}
func.func @short_placement() attributes {
    dist.chain = [#dist.module<"layer.0", layer>, #dist.module<"layer.1", layer>],
    dist.placement = #dist.placement<pp = 2, contiguous, ranks = [0]>} {
  return
}

// -----
// Ranks lie in [0, pp).
func.func @bad_rank() attributes {
    dist.chain = [#dist.module<"layer.0", layer>],
    // expected-error @+1 {{module 0 placed on rank 2, outside [0, 2)}}
    dist.placement = #dist.placement<pp = 2, contiguous, ranks = [2]>} {
  return
}

// -----
// A contiguous placement never returns to an earlier rank.
// expected-error @+1 {{placement 'contiguous' must be contiguous, but module 2 is on rank 0 after rank 1}}
func.func @not_contiguous() attributes {
    dist.chain = [#dist.module<"layer.0", layer>, #dist.module<"layer.1", layer>,
                  #dist.module<"layer.2", layer>],
    dist.placement = #dist.placement<pp = 2, contiguous, ranks = [0, 1, 0]>} {
  return
}

// -----
// A modular placement puts layer l on rank l mod pp.
// expected-error @+1 {{modular placement puts layer 1 ('layer.1') on rank 0; expected 1}}
func.func @not_modular() attributes {
    dist.chain = [#dist.module<"layer.0", layer>, #dist.module<"layer.1", layer>],
    dist.placement = #dist.placement<pp = 2, modular, ranks = [0, 0]>} {
  return
}

// -----
// At least one pipeline rank.
func.func @no_ranks() attributes {
    dist.chain = [#dist.module<"layer.0", layer>],
    // expected-error @+1 {{placement over pp = 0 ranks; expected at least 1}}
    dist.placement = #dist.placement<pp = 0, contiguous, ranks = [0]>} {
  return
}

// -----
// The discovery method is one of four.
// expected-error @+1 {{'dist.discovery' must be "names", "metadata", "structure", "regex" or "none"}}
func.func @bad_discovery() attributes {
    dist.chain = [#dist.module<"layer.0", layer>], dist.discovery = "guess"} {
  return
}

// -----
// A body index is -1 or a body.
func.func @bad_body() attributes {
    // expected-error @+1 {{module 'layer.0' has body -2; expected -1 (its own) or a body index}}
    dist.chain = [#dist.module<"layer.0", layer, body = -2>]} {
  return
}

// -----
// Unknown dist attributes are rejected.
// expected-error @+1 {{unknown dist attribute 'dist.stage'}}
func.func @unknown() attributes {dist.stage = 1} {
  return
}

// -----
// An outlined module function's counts are non-negative.
// expected-error @+1 {{dist.outlined: module, num_in, num_out and num_residuals must be non-negative}}
func.func private @fwd_0() attributes {dist.outlined = #dist.outlined<module = 0, name = "m", num_in = -1, num_out = 1, num_residuals = 0>}

// -----
// An outlined module has a name.
// expected-error @+1 {{dist.outlined: module 0 needs a name}}
func.func private @fwd_0() attributes {dist.outlined = #dist.outlined<module = 0, name = "", num_in = 0, num_out = 1, num_residuals = 0>}

// -----
// The contract is a #dist.outlined (no longer a dictionary).
// expected-error @+1 {{'dist.outlined' must be a #dist.outlined on a func.func}}
func.func private @fwd_0() attributes {dist.outlined = {module = 0 : i64, name = "m", num_in = 0 : i64, num_out = 1 : i64, num_residuals = 0 : i64}}

// -----
// Every count is given.
// expected-error @+1 {{struct is missing required parameter: num_residuals}}
func.func private @fwd_0() attributes {dist.outlined = #dist.outlined<module = 0, name = "m", num_in = 0, num_out = 1>}
