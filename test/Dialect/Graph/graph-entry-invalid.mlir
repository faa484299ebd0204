// RUN: lamina-opt %s -split-input-file -verify-diagnostics

// graph.entry is a unit attribute on a func.func, on one function only.
// expected-error @+1 {{'graph.entry' must be a unit attribute on a func.func}}
func.func @forward() attributes {graph.entry = 1 : i64} {
  return
}

// -----
// expected-error @+1 {{'graph.entry' must be a unit attribute on a func.func}}
module attributes {graph.entry} {
}

// -----
func.func @a() attributes {graph.entry} {
  return
}
// expected-error @+1 {{'graph.entry' on more than one function}}
func.func @b() attributes {graph.entry} {
  return
}
