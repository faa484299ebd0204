//===- GradientTest.cpp - finite-difference checks of gradient rules ------===//
//
// For every op with a gradient rule: a tiny f64 @forward computing
// loss = reduce_sum(op(params...) * r) with fixed random weights r, run
// graph-autodiff, evaluate @train_step on the reference evaluator and
// compare each gradient element with a central difference of @forward.
// Inputs are chosen away from kinks (relu and abs at 0, max ties).
//
//===----------------------------------------------------------------------===//

#include "lamina/Dialect/Graph/IR/GraphOps.h"
#include "lamina/Dialect/Graph/Transforms/Passes.h"
#include "lamina/Eval/Evaluator.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

using namespace mlir;
using lamina::eval::HostTensor;

namespace {
/// One argument of the test function.
struct Arg {
  std::string name;
  std::vector<int64_t> shape;
  /// "trainable" (random values in [lo, hi], checked) or "input".
  std::string kind = "trainable";
  double lo = -1, hi = 1;
  /// Contents when non-empty: an i64 input, or exact f64 values.
  std::vector<int64_t> ints = {};
  std::string element = "f64";
};

struct Case {
  std::string name;
  std::vector<Arg> args;
  /// Ops that define %y from the arguments (named %<name>).
  std::string body;
  std::vector<int64_t> resultShape;
  double eps = 1e-6, rtol = 1e-5, atol = 1e-8;
};

std::string typeText(const std::vector<int64_t> &shape, StringRef element) {
  std::string s = "tensor<";
  for (int64_t d : shape)
    s += std::to_string(d) + "x";
  return s + element.str() + ">";
}

/// @forward(args..., %r) -> reduce_sum(%y * %r).
std::string moduleText(const Case &c) {
  std::string rt = typeText(c.resultShape, "f64");
  std::string s = "func.func @forward(";
  for (const Arg &a : c.args)
    s += "%" + a.name + ": " + typeText(a.shape, a.element) +
         " {graph.kind = \"" + a.kind + "\", graph.name = \"" + a.name + "\"}, ";
  s += "%r: " + rt + " {graph.kind = \"input\", graph.name = \"r\"}) -> tensor<f64>"
       " attributes {graph.output_names = [\"loss\"]} {\n" + c.body + "\n";
  std::string axes;
  for (size_t i = 0; i < c.resultShape.size(); ++i)
    axes += (i ? ", " : ": ") + std::to_string(i);
  s += "  %m = graph.mul %y, %r : (" + rt + ", " + rt + ") -> " + rt + "\n";
  s += "  %l = graph.reduce_sum %m {axes = array<i64" + axes +
       ">, keepdims = false} : " + rt + " -> tensor<f64>\n";
  s += "  return %l : tensor<f64>\n}\n";
  return s;
}

HostTensor randomTensor(const std::vector<int64_t> &shape, double lo, double hi,
                        std::mt19937 &rng) {
  HostTensor t(lamina::rt::DType::F64, shape);
  std::uniform_real_distribution<double> dist(lo, hi);
  auto *p = static_cast<double *>(t.data());
  for (int64_t i = 0; i < t.numElements(); ++i)
    p[i] = dist(rng);
  return t;
}

/// @forward's output named "loss".
double loss(ModuleOp module, const std::map<std::string, HostTensor> &args) {
  std::vector<std::pair<std::string, HostTensor>> outputs;
  std::string err = lamina::eval::evaluate(module, args, outputs, "forward");
  EXPECT_EQ(err, "");
  for (const auto &[name, value] : outputs)
    if (name == "loss")
      return *static_cast<const double *>(value.data());
  ADD_FAILURE() << "@forward has no output named 'loss'";
  return NAN;
}

/// Mean cross-entropy of `logits` ([n, v] row-major) against `labels`,
/// skipping labels equal to `ignore`: the reference for graph-add-loss.
double crossEntropy(const double *logits, const std::vector<int64_t> &labels,
                    int64_t v, int64_t ignore) {
  double total = 0;
  int64_t count = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] == ignore)
      continue;
    const double *row = logits + i * v;
    double max = *std::max_element(row, row + v), sum = 0;
    for (int64_t j = 0; j < v; ++j)
      sum += std::exp(row[j] - max);
    total -= row[labels[i]] - max - std::log(sum);
    ++count;
  }
  return total / double(std::max<int64_t>(count, 1));
}

/// Central difference of @forward's loss in element `i` of argument `name`.
double numericGradient(ModuleOp module, std::map<std::string, HostTensor> &args,
                       const std::string &name, int64_t i, double eps) {
  auto *value = static_cast<double *>(args[name].data());
  double saved = value[i];
  value[i] = saved + eps;
  double up = loss(module, args);
  value[i] = saved - eps;
  double down = loss(module, args);
  value[i] = saved;
  return (up - down) / (2 * eps);
}

/// A context with the dialects the cases use.
std::unique_ptr<MLIRContext> makeContext() {
  DialectRegistry registry;
  registry.insert<func::FuncDialect, lamina::ir::graph::GraphDialect>();
  auto context = std::make_unique<MLIRContext>(registry);
  context->loadAllAvailableDialects();
  return context;
}

/// The case's @forward with @train_step built by graph-autodiff; null (a
/// test failure recorded) when it does not parse or differentiate.
OwningOpRef<ModuleOp> trainStep(MLIRContext &context, const Case &c) {
  std::string text = moduleText(c);
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &context);
  if (!module) {
    ADD_FAILURE() << text;
    return nullptr;
  }
  PassManager pm(&context);
  pm.addPass(lamina::ir::graph::createGraphAutodiff());
  if (failed(pm.run(*module))) {
    ADD_FAILURE() << text;
    return nullptr;
  }
  return module;
}

void checkGradients(const Case &c) {
  SCOPED_TRACE(c.name);
  std::unique_ptr<MLIRContext> context = makeContext();
  OwningOpRef<ModuleOp> module = trainStep(*context, c);
  ASSERT_TRUE(module);

  std::mt19937 rng(1234);
  std::map<std::string, HostTensor> args;
  for (const Arg &a : c.args) {
    if (a.ints.empty()) {
      args[a.name] = randomTensor(a.shape, a.lo, a.hi, rng);
      continue;
    }
    if (a.element == "f64") { // exact float values (zeros, ties)
      HostTensor t(lamina::rt::DType::F64, a.shape);
      std::copy(a.ints.begin(), a.ints.end(), static_cast<double *>(t.data()));
      args[a.name] = t;
      continue;
    }
    HostTensor t(lamina::rt::DType::I64, a.shape);
    std::copy(a.ints.begin(), a.ints.end(), static_cast<int64_t *>(t.data()));
    args[a.name] = t;
  }
  args["r"] = randomTensor(c.resultShape, -1, 1, rng);

  std::vector<std::pair<std::string, HostTensor>> outputs;
  ASSERT_EQ(lamina::eval::evaluate(*module, args, outputs, "train_step"), "");
  EXPECT_NEAR(*static_cast<const double *>(outputs[0].second.data()),
              loss(*module, args), 1e-12);
  size_t next = 1;
  for (const Arg &a : c.args) {
    if (a.kind != "trainable")
      continue;
    ASSERT_LT(next, outputs.size());
    EXPECT_EQ(outputs[next].first, "grad:" + a.name);
    const auto *grad = static_cast<const double *>(outputs[next++].second.data());
    for (int64_t i = 0; i < args[a.name].numElements(); ++i) {
      double numeric = numericGradient(*module, args, a.name, i, c.eps);
      EXPECT_NEAR(grad[i], numeric, c.atol + c.rtol * std::fabs(numeric))
          << a.name << "[" << i << "]";
    }
  }
  EXPECT_EQ(next, outputs.size());
}

/// A unary op on one [2,3] parameter with values in [lo, hi].
Case unary(const std::string &op, double lo = -1, double hi = 1,
           const std::string &attrs = "") {
  return {op + attrs,
          {{"a", {2, 3}, "trainable", lo, hi}},
          "  %y = graph." + op + " %a " + attrs + " : tensor<2x3xf64>",
          {2, 3}};
}

/// A broadcasting binary op: [2,3] with [3] (and [2,1] with [3]).
std::vector<Case> binary(const std::string &op, double lo = -1, double hi = 1) {
  return {{op,
           {{"a", {2, 3}, "trainable", lo, hi}, {"b", {3}, "trainable", lo, hi}},
           "  %y = graph." + op +
               " %a, %b : (tensor<2x3xf64>, tensor<3xf64>) -> tensor<2x3xf64>",
           {2, 3}},
          {op + "_outer",
           {{"a", {2, 1}, "trainable", lo, hi}, {"b", {3}, "trainable", lo, hi}},
           "  %y = graph." + op +
               " %a, %b : (tensor<2x1xf64>, tensor<3xf64>) -> tensor<2x3xf64>",
           {2, 3}}};
}

TEST(GradientTest, Unary) {
  for (const Case &c :
       {unary("neg"), unary("abs", 0.2, 1.0), unary("exp"),
        unary("log", 0.5, 2), unary("sqrt", 0.5, 2),
        unary("reciprocal", 0.5, 2), unary("tanh"), unary("erf"),
        unary("sigmoid"), unary("relu", 0.1, 1), unary("gelu", -2, 2),
        unary("gelu", -2, 2, "{tanh}"), unary("cos"), unary("sin")})
    checkGradients(c);
  // abs and relu on the negative side as well.
  checkGradients(unary("abs", -1, -0.2));
  checkGradients(unary("relu", -1, -0.1));
}

TEST(GradientTest, Binary) {
  for (const char *op : {"add", "sub", "mul", "min", "max"})
    for (const Case &c : binary(op))
      checkGradients(c);
  for (const Case &c : binary("div", 0.5, 2))
    checkGradients(c);
  for (const Case &c : binary("pow", 0.5, 2))
    checkGradients(c);
}

TEST(GradientTest, SelectAndCast) {
  checkGradients({"select",
                  {{"a", {2, 3}}, {"b", {3}}, {"c", {2, 3}, "input"}},
                  "  %z = graph.constant dense<0.0> : tensor<f64>\n"
                  "  %p = graph.greater %c, %z : (tensor<2x3xf64>, tensor<f64>) -> tensor<2x3xi1>\n"
                  "  %y = graph.select %p, %a, %b : (tensor<2x3xi1>, tensor<2x3xf64>, "
                  "tensor<3xf64>) -> tensor<2x3xf64>",
                  {2, 3}});
  // Through f32 and back: the difference quotient sees f32 rounding.
  checkGradients({"cast",
                  {{"a", {2, 3}}},
                  "  %f = graph.cast %a : tensor<2x3xf64> to tensor<2x3xf32>\n"
                  "  %y = graph.cast %f : tensor<2x3xf32> to tensor<2x3xf64>",
                  {2, 3},
                  1e-2, 1e-3, 1e-5});
}

TEST(GradientTest, MixtureOfExperts) {
  checkGradients({"topk",
                  {{"a", {3, 5}, "trainable", -2, 2}},
                  "  %y, %i = graph.topk %a {k = 2 : i64} : (tensor<3x5xf64>) "
                  "-> (tensor<3x2xf64>, tensor<3x2xi64>)",
                  {3, 2}});
  // 5 tokens, hidden 3, 3 experts of width 2, top-2; expert 2 sees one
  // token, every expert's rows out of token order.
  checkGradients(
      {"moe",
       {{"x", {5, 3}, "trainable", -1, 1},
        {"e", {5, 2}, "input", 0, 0, {1, 0, 0, 1, 1, 2, 0, 1, 1, 0}, "i64"},
        {"w", {5, 2}, "trainable", 0.1, 1},
        {"gu", {3, 4, 3}, "trainable", -1, 1},
        {"d", {3, 3, 2}, "trainable", -1, 1}},
       "  %y = graph.moe %x, %e, %w, %gu, %d : (tensor<5x3xf64>, "
       "tensor<5x2xi64>, tensor<5x2xf64>, tensor<3x4x3xf64>, "
       "tensor<3x3x2xf64>) -> tensor<5x3xf64>",
       {5, 3}});
  // The router too: softmax, top-2, the picks' weights normalised.
  checkGradients(
      {"moe_routed",
       {{"x", {4, 3}, "trainable", -1, 1},
        {"wr", {3, 3}, "trainable", -2, 2},
        {"gu", {3, 4, 3}, "trainable", -1, 1},
        {"d", {3, 3, 2}, "trainable", -1, 1}},
       "  %z = graph.matmul %x, %wr : (tensor<4x3xf64>, tensor<3x3xf64>) -> "
       "tensor<4x3xf64>\n"
       "  %p = graph.softmax %z {axis = 1 : i64} : tensor<4x3xf64>\n"
       "  %v, %i = graph.topk %p {k = 2 : i64} : (tensor<4x3xf64>) -> "
       "(tensor<4x2xf64>, tensor<4x2xi64>)\n"
       "  %s = graph.reduce_sum %v {axes = array<i64: 1>, keepdims = true} : "
       "tensor<4x2xf64> -> tensor<4x1xf64>\n"
       "  %w = graph.div %v, %s : (tensor<4x2xf64>, tensor<4x1xf64>) -> "
       "tensor<4x2xf64>\n"
       "  %y = graph.moe %x, %i, %w, %gu, %d : (tensor<4x3xf64>, "
       "tensor<4x2xi64>, tensor<4x2xf64>, tensor<3x4x3xf64>, "
       "tensor<3x3x2xf64>) -> tensor<4x3xf64>",
       {4, 3}});
  // A row that goes to no expert (index -1): zero result and gradients.
  checkGradients({"moe_no_expert",
                  {{"x", {4, 3}, "trainable", -1, 1},
                   {"e", {4, 1}, "input", 0, 0, {1, -1, 0, 1}, "i64"},
                   {"w", {4, 1}, "trainable", 0.1, 1},
                   {"gu", {2, 4, 3}, "trainable", -1, 1},
                   {"d", {2, 3, 2}, "trainable", -1, 1}},
                  "  %y = graph.moe %x, %e, %w, %gu, %d : (tensor<4x3xf64>, "
                  "tensor<4x1xi64>, tensor<4x1xf64>, tensor<2x4x3xf64>, "
                  "tensor<2x3x2xf64>) -> tensor<4x3xf64>",
                  {4, 3}});
}

// Expert parallelism's row layout: 5 tokens' top-2 of 4 experts over 2
// ranks (blocks of 10 rows, some empty), a function of the rows between.
TEST(GradientTest, ExpertParallelRows) {
  checkGradients(
      {"moe_dispatch_combine",
       {{"x", {5, 3}, "trainable", -1, 1},
        {"e", {5, 2}, "input", 0, 0, {1, 0, 3, 1, 2, 0, 0, 1, 3, 2}, "i64"},
        {"w", {5, 2}, "trainable", 0.1, 1}},
       "  %rows, %cnt = graph.moe_dispatch %x, %e {experts = 4 : i64, ranks = "
       "2 : "
       "i64} : (tensor<5x3xf64>, tensor<5x2xi64>) -> (tensor<20x3xf64>, "
       "tensor<2x2xi64>)\n"
       "  %t = graph.tanh %rows : tensor<20x3xf64>\n"
       "  %y = graph.moe_combine %t, %e, %w {experts = 4 : i64, ranks = 2 : "
       "i64} : (tensor<20x3xf64>, tensor<5x2xi64>, tensor<5x2xf64>) -> "
       "tensor<5x3xf64>",
       {5, 3}});
  // One rank: dispatch, the row experts, the experts, combine (the
  // expert-parallel layer's chain without the exchanges).
  checkGradients(
      {"moe_one_rank_chain",
       {{"x", {5, 3}, "trainable", -1, 1},
        {"e", {5, 2}, "input", 0, 0, {1, 0, 0, 1, 1, 2, 0, 1, 1, 0}, "i64"},
        {"w", {5, 2}, "trainable", 0.1, 1},
        {"gu", {3, 4, 3}, "trainable", -1, 1},
        {"d", {3, 3, 2}, "trainable", -1, 1}},
       "  %rows, %cnt = graph.moe_dispatch %x, %e {experts = 3 : i64, ranks = "
       "1 : "
       "i64} : (tensor<5x3xf64>, tensor<5x2xi64>) -> (tensor<10x3xf64>, "
       "tensor<1x3xi64>)\n"
       "  %i = graph.moe_row_experts %cnt : (tensor<1x3xi64>) -> "
       "tensor<10x1xi64>\n"
       "  %one = graph.constant dense<1.0> : tensor<10x1xf64>\n"
       "  %o = graph.moe %rows, %i, %one, %gu, %d : (tensor<10x3xf64>, "
       "tensor<10x1xi64>, tensor<10x1xf64>, tensor<3x4x3xf64>, "
       "tensor<3x3x2xf64>) -> tensor<10x3xf64>\n"
       "  %y = graph.moe_combine %o, %e, %w {experts = 3 : i64, ranks = 1 : "
       "i64} : (tensor<10x3xf64>, tensor<5x2xi64>, tensor<5x2xf64>) -> "
       "tensor<5x3xf64>",
       {5, 3}});
}

TEST(GradientTest, MatMul) {
  checkGradients({"matmul",
                  {{"a", {2, 3, 4}}, {"b", {4, 5}}},
                  "  %y = graph.matmul %a, %b : (tensor<2x3x4xf64>, tensor<4x5xf64>) "
                  "-> tensor<2x3x5xf64>",
                  {2, 3, 5}});
  checkGradients({"matmul_batch_broadcast",
                  {{"a", {2, 1, 3, 4}}, {"b", {3, 4, 2}}},
                  "  %y = graph.matmul %a, %b : (tensor<2x1x3x4xf64>, "
                  "tensor<3x4x2xf64>) -> tensor<2x3x3x2xf64>",
                  {2, 3, 3, 2}});
}

TEST(GradientTest, Normalisation) {
  checkGradients({"softmax",
                  {{"a", {2, 4}, "trainable", -2, 2}},
                  "  %y = graph.softmax %a {axis = 1 : i64} : tensor<2x4xf64>",
                  {2, 4}});
  checkGradients({"log_softmax",
                  {{"a", {2, 4}, "trainable", -2, 2}},
                  "  %y = graph.log_softmax %a {axis = 0 : i64} : tensor<2x4xf64>",
                  {2, 4}});
  checkGradients({"layer_norm",
                  {{"a", {2, 3, 4}, "trainable", -2, 2}, {"s", {4}}, {"b", {4}}},
                  "  %y = graph.layer_norm %a, %s, %b {axis = 2 : i64, epsilon = "
                  "1.0e-5 : f64} : tensor<2x3x4xf64>, tensor<4xf64>, tensor<4xf64>",
                  {2, 3, 4}});
  checkGradients({"layer_norm_2d_no_bias",
                  {{"a", {2, 3, 4}, "trainable", -2, 2}, {"s", {3, 4}}},
                  "  %y = graph.layer_norm %a, %s {axis = 1 : i64, epsilon = "
                  "1.0e-5 : f64} : tensor<2x3x4xf64>, tensor<3x4xf64>",
                  {2, 3, 4}});
  checkGradients({"rms_norm",
                  {{"a", {2, 3, 4}, "trainable", -2, 2}, {"s", {4}}},
                  "  %y = graph.rms_norm %a, %s {axis = 2 : i64, epsilon = "
                  "1.0e-5 : f64} : tensor<2x3x4xf64>, tensor<4xf64>",
                  {2, 3, 4}});
  // Per-row weights r reach the fused gradient as grad_loss; label -1 is
  // ignored (loss and gradient 0), labels repeat across rows.
  checkGradients({"softmax_cross_entropy",
                  {{"a", {2, 3, 5}, "trainable", -3, 3},
                   {"t", {2, 3}, "input", 0, 0, {4, 0, -1, 2, 4, 1}, "i64"}},
                  "  %y = graph.softmax_cross_entropy %a, %t {ignore_index = -1 "
                  ": i64} : (tensor<2x3x5xf64>, tensor<2x3xi64>) -> "
                  "tensor<2x3xf64>",
                  {2, 3}});
}

// Fused attention: scores, softmax and the value product in one op, its
// gradient one graph.attention_grad recomputing the probabilities. Shared
// kv heads (GQA), bottom-right causal masks with Sq < Sk, and additive
// biases (inputs: no gradient) broadcast from several shapes.
TEST(GradientTest, Attention) {
  checkGradients({"attention_causal_gqa",
                  {{"q", {1, 2, 3, 4}, "trainable", -2, 2},
                   {"k", {1, 1, 5, 4}, "trainable", -2, 2},
                   {"v", {1, 1, 5, 3}}},
                  "  %y, %lse = graph.attention %q, %k, %v {causal, scale = "
                  "0.5 : f64} : (tensor<1x2x3x4xf64>, tensor<1x1x5x4xf64>, "
                  "tensor<1x1x5x3xf64>) -> (tensor<1x2x3x3xf64>, "
                  "tensor<1x2x3xf64>)",
                  {1, 2, 3, 3}});
  checkGradients({"attention_bias",
                  {{"q", {2, 2, 3, 4}, "trainable", -2, 2},
                   {"k", {2, 2, 5, 4}, "trainable", -2, 2},
                   {"v", {2, 2, 5, 2}},
                   {"bias", {3, 5}, "input", -3, 3}},
                  "  %y, %lse = graph.attention %q, %k, %v, %bias {scale = "
                  "0.7 : f64} : (tensor<2x2x3x4xf64>, tensor<2x2x5x4xf64>, "
                  "tensor<2x2x5x2xf64>, tensor<3x5xf64>) -> "
                  "(tensor<2x2x3x2xf64>, tensor<2x2x3xf64>)",
                  {2, 2, 3, 2}});
  checkGradients({"attention_causal_bias",
                  {{"q", {2, 4, 4, 3}, "trainable", -2, 2},
                   {"k", {2, 2, 4, 3}, "trainable", -2, 2},
                   {"v", {2, 2, 4, 2}},
                   {"bias", {2, 1, 1, 4}, "input", -2, 0}},
                  "  %y, %lse = graph.attention %q, %k, %v, %bias {causal, scale "
                  "= 1.0 : f64} : (tensor<2x4x4x3xf64>, tensor<2x2x4x3xf64>, "
                  "tensor<2x2x4x2xf64>, tensor<2x1x1x4xf64>) -> "
                  "(tensor<2x4x4x2xf64>, tensor<2x4x4xf64>)",
                  {2, 4, 4, 2}});
}

TEST(GradientTest, Reductions) {
  for (const char *op : {"reduce_sum", "reduce_mean", "reduce_max"}) {
    checkGradients({std::string(op),
                    {{"a", {2, 3, 4}}},
                    std::string("  %y = graph.") + op +
                        " %a {axes = array<i64: 0, 2>, keepdims = false} : "
                        "tensor<2x3x4xf64> -> tensor<3xf64>",
                    {3}});
    checkGradients({std::string(op) + "_keepdims",
                    {{"a", {2, 3, 4}}},
                    std::string("  %y = graph.") + op +
                        " %a {axes = array<i64: 1>, keepdims = true} : "
                        "tensor<2x3x4xf64> -> tensor<2x1x4xf64>",
                    {2, 1, 4}});
  }
  // reduce_prod away from zero, then with one zero and two zeros in a row.
  checkGradients({"reduce_prod",
                  {{"a", {2, 3, 4}, "trainable", 0.5, 1.5}},
                  "  %y = graph.reduce_prod %a {axes = array<i64: 0, 2>, "
                  "keepdims = false} : tensor<2x3x4xf64> -> tensor<3xf64>",
                  {3}});
  checkGradients({"reduce_prod_zeros",
                  {{"a", {3, 3}, "trainable", 0, 0, {2, 0, 3, 0, 0, 5, 1, -2, 3}}},
                  "  %y = graph.reduce_prod %a {axes = array<i64: 1>, "
                  "keepdims = true} : tensor<3x3xf64> -> tensor<3x1xf64>",
                  {3, 1}});
  for (const char *attrs : {"", ", exclusive", ", reverse", ", exclusive, reverse"})
    checkGradients({std::string("cumsum") + attrs,
                    {{"a", {2, 4}}},
                    std::string("  %y = graph.cumsum %a {axis = 1 : i64") + attrs +
                        "} : tensor<2x4xf64>",
                    {2, 4}});
}

TEST(GradientTest, DataMovement) {
  checkGradients({"reshape",
                  {{"a", {2, 3, 2}}},
                  "  %y = graph.reshape %a : tensor<2x3x2xf64> to tensor<3x4xf64>",
                  {3, 4}});
  checkGradients({"transpose",
                  {{"a", {2, 3, 4}}},
                  "  %y = graph.transpose %a {perm = array<i64: 2, 0, 1>} : "
                  "tensor<2x3x4xf64> -> tensor<4x2x3xf64>",
                  {4, 2, 3}});
  checkGradients({"concat",
                  {{"a", {2, 3}}, {"b", {2, 2}}},
                  "  %y = graph.concat %a, %b, %a {axis = 1 : i64} : "
                  "(tensor<2x3xf64>, tensor<2x2xf64>, tensor<2x3xf64>) -> tensor<2x8xf64>",
                  {2, 8}});
  checkGradients({"slice",
                  {{"a", {4, 7}}},
                  "  %y = graph.slice %a {starts = array<i64: 1, 1>, sizes = "
                  "array<i64: 2, 3>, steps = array<i64: 1, 2>} : tensor<4x7xf64> -> "
                  "tensor<2x3xf64>",
                  {2, 3}});
  checkGradients({"slice_negative_steps",
                  {{"a", {4, 7}}},
                  "  %y = graph.slice %a {starts = array<i64: 3, 6>, sizes = "
                  "array<i64: 4, 2>, steps = array<i64: -1, -3>} : tensor<4x7xf64> -> "
                  "tensor<4x2xf64>",
                  {4, 2}});
  checkGradients({"broadcast",
                  {{"a", {3, 1}}},
                  "  %y = graph.broadcast %a : tensor<3x1xf64> to tensor<2x3x4xf64>",
                  {2, 3, 4}});
  checkGradients({"tile",
                  {{"a", {2, 3}}},
                  "  %y = graph.tile %a {repeats = array<i64: 2, 1>} : "
                  "tensor<2x3xf64> -> tensor<4x3xf64>",
                  {4, 3}});
  checkGradients({"tile_both",
                  {{"a", {2, 3}}},
                  "  %y = graph.tile %a {repeats = array<i64: 3, 2>} : "
                  "tensor<2x3xf64> -> tensor<6x6xf64>",
                  {6, 6}});
  checkGradients({"trilu",
                  {{"a", {2, 3, 3}}},
                  "  %y = graph.trilu %a {k = 0 : i64} : tensor<2x3x3xf64>",
                  {2, 3, 3}});
  checkGradients({"trilu_upper",
                  {{"a", {3, 4}}},
                  "  %y = graph.trilu %a {k = 1 : i64, upper} : tensor<3x4xf64>",
                  {3, 4}});
}

// PyTorch's embedding padding_idx: the rule's gradient is the numeric one
// of the same gather, except that the padding row gets nothing from the
// lookups of it (a stop-gradient, so no numeric check can see it).
TEST(GradientTest, GatherPaddingIdx) {
  std::unique_ptr<MLIRContext> context = makeContext();
  Case c{
      "gather_padding_idx",
      {{"e", {4, 3}}, {"i", {2, 3}, "input", 0, 0, {1, 2, 1, 0, 3, 1}, "i64"}},
      "  %y = graph.gather %e, %i {axis = 0 : i64, padding_idx = 1 : i64} : "
      "(tensor<4x3xf64>, tensor<2x3xi64>) -> tensor<2x3x3xf64>",
      {2, 3, 3}};
  OwningOpRef<ModuleOp> module = trainStep(*context, c);
  ASSERT_TRUE(module);
  std::mt19937 rng(7);
  std::map<std::string, HostTensor> args;
  args["e"] = randomTensor({4, 3}, -1, 1, rng);
  args["i"] = HostTensor(lamina::rt::DType::I64, {2, 3});
  std::copy(c.args[1].ints.begin(), c.args[1].ints.end(),
            static_cast<int64_t *>(args["i"].data()));
  args["r"] = randomTensor({2, 3, 3}, -1, 1, rng);
  std::vector<std::pair<std::string, HostTensor>> outputs;
  ASSERT_EQ(lamina::eval::evaluate(*module, args, outputs, "train_step"), "");
  ASSERT_EQ(outputs.size(), 2u);
  const auto *grad = static_cast<const double *>(outputs[1].second.data());
  for (int64_t k = 0; k < 12; ++k) {
    double want =
        k / 3 == 1 ? 0.0 : numericGradient(*module, args, "e", k, 1e-6);
    EXPECT_NEAR(grad[k], want, 1e-8) << "e[" << k << "]";
  }
  // The padding row does change the output: its lookups are not skipped.
  EXPECT_NE(numericGradient(*module, args, "e", 3, 1e-6), 0.0);
}

TEST(GradientTest, Gather) {
  // Repeated and negative indices accumulate into the same rows.
  checkGradients({"gather_embedding",
                  {{"e", {5, 3}}, {"i", {2, 3}, "input", 0, 0, {1, 4, 1, 0, -1, 2}, "i64"}},
                  "  %y = graph.gather %e, %i {axis = 0 : i64} : (tensor<5x3xf64>, "
                  "tensor<2x3xi64>) -> tensor<2x3x3xf64>",
                  {2, 3, 3}});
  checkGradients({"gather_axis1",
                  {{"e", {2, 4, 3}}, {"i", {3}, "input", 0, 0, {3, 0, 3}, "i64"}},
                  "  %y = graph.gather %e, %i {axis = 1 : i64} : (tensor<2x4x3xf64>, "
                  "tensor<3xi64>) -> tensor<2x3x3xf64>",
                  {2, 3, 3}});
  checkGradients({"gather_nd",
                  {{"e", {3, 4, 2}}, {"i", {3, 2}, "input", 0, 0, {0, 1, 2, 3, 0, 1}, "i64"}},
                  "  %y = graph.gather_nd %e, %i {batch_dims = 0 : i64} : "
                  "(tensor<3x4x2xf64>, tensor<3x2xi64>) -> tensor<3x2xf64>",
                  {3, 2}});
  checkGradients({"gather_nd_batch",
                  {{"e", {2, 4, 3}}, {"i", {2, 3, 1}, "input", 0, 0, {1, 3, 1, 0, 2, 2}, "i64"}},
                  "  %y = graph.gather_nd %e, %i {batch_dims = 1 : i64} : "
                  "(tensor<2x4x3xf64>, tensor<2x3x1xi64>) -> tensor<2x3x3xf64>",
                  {2, 3, 3}});
}

TEST(GradientTest, ScatterND) {
  for (const char *reduction : {"add", "none"})
    checkGradients({std::string("scatter_nd_") + reduction,
                    {{"d", {4, 3}},
                     {"i", {2, 1}, "input", 0, 0, {3, 1}, "i64"},
                     {"u", {2, 3}}},
                    std::string("  %y = graph.scatter_nd %d, %i, %u {reduction = \"") +
                        reduction +
                        "\"} : (tensor<4x3xf64>, tensor<2x1xi64>, "
                        "tensor<2x3xf64>) -> tensor<4x3xf64>",
                    {4, 3}});
}

/// mul/max/min with a repeated tuple (row 3 gets two updates), both data and
/// updates trainable; mul also with exact zeros among the updates: one zero
/// at a position, two at one position, and none.
TEST(GradientTest, ScatterNDReductions) {
  auto scatterCase = [](const std::string &reduction, const std::string &name,
                        Arg updates) {
    return Case{name,
                {{"d", {4, 3}},
                 {"i", {3, 1}, "input", 0, 0, {3, 1, 3}, "i64"},
                 std::move(updates)},
                "  %y = graph.scatter_nd %d, %i, %u {reduction = \"" +
                    reduction +
                    "\"} : (tensor<4x3xf64>, tensor<3x1xi64>, "
                    "tensor<3x3xf64>) -> tensor<4x3xf64>",
                {4, 3}};
  };
  for (const char *reduction : {"mul", "max", "min"})
    checkGradients(scatterCase(reduction, std::string("scatter_nd_") + reduction,
                               {"u", {3, 3}}));
  // Rows 0 and 2 land on data row 3: column 0 has one zero (row 0), column 1
  // two (rows 0 and 2), column 2 none; row 1 (data row 1) has one zero.
  checkGradients(scatterCase("mul", "scatter_nd_mul_zeros",
                             {"u", {3, 3}, "trainable", 0, 0,
                              {0, 0, 2, -3, 2, 0, 3, 0, -2}}));
}

/// scatter_nd max/min ties: the gradient is split evenly among the
/// candidates equal to the result (data and updates), as in PyTorch's
/// scatter_reduce amax/amin.
TEST(GradientTest, ScatterNDTies) {
  for (const char *reduction : {"max", "min"}) {
    SCOPED_TRACE(reduction);
    DialectRegistry registry;
    registry.insert<func::FuncDialect, lamina::ir::graph::GraphDialect>();
    MLIRContext context(registry);
    Case c{"ties",
           {{"d", {3}}, {"i", {3, 1}, "input", 0, 0, {0, 0, 1}, "i64"}, {"u", {3}}},
           std::string("  %y = graph.scatter_nd %d, %i, %u {reduction = \"") +
               reduction +
               "\"} : (tensor<3xf64>, tensor<3x1xi64>, tensor<3xf64>) -> "
               "tensor<3xf64>",
           {3}};
    OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(moduleText(c), &context);
    ASSERT_TRUE(module);
    PassManager pm(&context);
    pm.addPass(lamina::ir::graph::createGraphAutodiff());
    ASSERT_TRUE(succeeded(pm.run(*module)));
    auto tensor = [](std::vector<double> v) {
      HostTensor t(lamina::rt::DType::F64, {int64_t(v.size())});
      std::copy(v.begin(), v.end(), static_cast<double *>(t.data()));
      return t;
    };
    double s = std::string(reduction) == "max" ? 1 : -1;
    std::map<std::string, HostTensor> args;
    // Position 0: data and both updates tie (3 ways); position 1: data and
    // one update tie; position 2: untouched.
    args["d"] = tensor({2 * s, 1 * s, 5});
    args["u"] = tensor({2 * s, 2 * s, 1 * s});
    args["r"] = tensor({3, 5, 7});
    args["i"] = HostTensor(lamina::rt::DType::I64, {3, 1});
    std::vector<int64_t> idx{0, 0, 1};
    std::copy(idx.begin(), idx.end(), static_cast<int64_t *>(args["i"].data()));
    std::vector<std::pair<std::string, HostTensor>> outputs;
    ASSERT_EQ(lamina::eval::evaluate(*module, args, outputs, "train_step"), "");
    ASSERT_EQ(outputs.size(), 3u);
    const auto *dd = static_cast<const double *>(outputs[1].second.data());
    const auto *du = static_cast<const double *>(outputs[2].second.data());
    EXPECT_DOUBLE_EQ(dd[0], 1.0);
    EXPECT_DOUBLE_EQ(dd[1], 2.5);
    EXPECT_DOUBLE_EQ(dd[2], 7.0);
    EXPECT_DOUBLE_EQ(du[0], 1.0);
    EXPECT_DOUBLE_EQ(du[1], 1.0);
    EXPECT_DOUBLE_EQ(du[2], 2.5);
  }
}

TEST(GradientTest, FanOutAndUnused) {
  // %a feeds three ops; %u is never used: its gradient is zero.
  checkGradients({"fan_out",
                  {{"a", {2, 3}}, {"u", {2}}},
                  "  %t = graph.tanh %a : tensor<2x3xf64>\n"
                  "  %p = graph.mul %t, %a : (tensor<2x3xf64>, tensor<2x3xf64>) -> "
                  "tensor<2x3xf64>\n"
                  "  %y = graph.add %p, %a : (tensor<2x3xf64>, tensor<2x3xf64>) -> "
                  "tensor<2x3xf64>",
                  {2, 3}});
}

/// A tiny GPT-2 as the importer writes it (Inputs/tiny-gpt2.mlir), made f64
/// so central differences are accurate, with loss = sum(logits * r): every
/// parameter's gradient is checked at a few elements. With `fuseGelu` the
/// MLP's GELU chain becomes one graph.gelu {tanh} first, as for codegen.
/// With `causalLm`, the loss is graph-add-loss's next-token cross-entropy
/// instead, and its value is checked against crossEntropy(). With
/// `fuseAttention` the attention is one graph.attention (and its gradient
/// one graph.attention_grad), as `lamina compile` builds it.
void checkTinyGpt2(bool fuseGelu, bool causalLm = false,
                   bool fuseAttention = false) {
  SmallString<256> path(llvm::sys::path::parent_path(__FILE__));
  llvm::sys::path::append(path, "Inputs", "tiny-gpt2.mlir");
  auto file = llvm::MemoryBuffer::getFile(path);
  ASSERT_TRUE(bool(file)) << path.str().str();
  std::string text = (*file)->getBuffer().str();
  for (size_t at = text.find("f32"); at != std::string::npos;
       at = text.find("f32", at))
    text.replace(at, 3, "f64");

  DialectRegistry registry;
  registry.insert<func::FuncDialect, lamina::ir::graph::GraphDialect>();
  MLIRContext context(registry);
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &context);
  ASSERT_TRUE(module);
  auto forward = module->lookupSymbol<func::FuncOp>("forward");
  ASSERT_TRUE(forward && forward.getNumResults() == 1);

  Builder attrs(&context);
  PassManager pm(&context);
  if (fuseGelu)
    pm.addNestedPass<func::FuncOp>(lamina::ir::graph::createGraphFuseGelu());
  if (fuseAttention)
    pm.addNestedPass<func::FuncOp>(
        lamina::ir::graph::createGraphFuseAttention());
  if (causalLm)
    pm.addPass(lamina::ir::graph::createGraphAddLoss());
  pm.addPass(lamina::ir::graph::createGraphAutodiff());
  if (!causalLm) {
    // Append the weights argument %r and the scalar loss.
    Type logitsType = forward.getResultTypes()[0];
    unsigned rIndex = forward.getNumArguments();
    ASSERT_TRUE(succeeded(forward.insertArgument(
        rIndex, logitsType,
        attrs.getDictionaryAttr(
            {attrs.getNamedAttr(lamina::ir::graph::kKindAttr,
                                attrs.getStringAttr("input")),
             attrs.getNamedAttr(lamina::ir::graph::kNameAttr,
                                attrs.getStringAttr("r"))}),
        forward.getLoc())));
    auto ret = cast<func::ReturnOp>(forward.getBody().front().getTerminator());
    OpBuilder b(ret);
    Value weighted = lamina::ir::graph::MulOp::create(
        b, ret.getLoc(), ret.getOperand(0), forward.getArgument(rIndex));
    int64_t rank = cast<RankedTensorType>(logitsType).getRank();
    SmallVector<int64_t> all(rank);
    std::iota(all.begin(), all.end(), 0);
    Value sum = lamina::ir::graph::ReduceSumOp::create(
        b, ret.getLoc(), weighted, b.getDenseI64ArrayAttr(all),
        b.getBoolAttr(false));
    ret->setOperands(sum);
    forward.setFunctionType(FunctionType::get(
        &context, forward.getArgumentTypes(), {sum.getType()}));
    forward->setAttr(lamina::ir::graph::kOutputNamesAttr,
                     attrs.getStrArrayAttr({"loss"}));
  }
  ASSERT_TRUE(succeeded(pm.run(*module)));
  auto gelus = forward.getBody().getOps<lamina::ir::graph::GeluOp>();
  EXPECT_EQ(std::distance(gelus.begin(), gelus.end()), fuseGelu ? 1 : 0);
  auto attentions = forward.getBody().getOps<lamina::ir::graph::AttentionOp>();
  EXPECT_EQ(std::distance(attentions.begin(), attentions.end()),
            fuseAttention ? 1 : 0);

  std::mt19937 rng(7);
  std::map<std::string, HostTensor> args;
  std::vector<std::string> params;
  for (unsigned i = 0; i < forward.getNumArguments(); ++i) {
    auto type = cast<RankedTensorType>(forward.getArgument(i).getType());
    std::string name =
        forward.getArgAttrOfType<StringAttr>(i, lamina::ir::graph::kNameAttr)
            .str();
    std::vector<int64_t> shape(type.getShape().begin(), type.getShape().end());
    if (isa<IntegerType>(type.getElementType())) {
      HostTensor ids(lamina::rt::DType::I64, shape);
      std::uniform_int_distribution<int64_t> token(0, 31);
      for (int64_t j = 0; j < ids.numElements(); ++j)
        static_cast<int64_t *>(ids.data())[j] = token(rng);
      args[name] = ids;
      continue;
    }
    args[name] = randomTensor(shape, -0.5, 0.5, rng);
    auto kind =
        forward.getArgAttrOfType<StringAttr>(i, lamina::ir::graph::kKindAttr);
    if (kind && kind.getValue() == lamina::ir::graph::kKindTrainable)
      params.push_back(name);
  }
  ASSERT_EQ(params.size(), 16u);

  if (causalLm) {
    // Position t of the logits predicts token t + 1.
    std::vector<std::pair<std::string, HostTensor>> fwd;
    ASSERT_EQ(lamina::eval::evaluate(*module, args, fwd, "forward"), "");
    ASSERT_EQ(fwd.size(), 2u);
    const auto *logits = static_cast<const double *>(fwd[0].second.data());
    const auto *ids = static_cast<const int64_t *>(args["input_ids"].data());
    double expected = 0;
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t t = 0; t < 3; ++t)
        expected += crossEntropy(logits + (b * 4 + t) * 32, {ids[b * 4 + t + 1]},
                                 32, -100);
    EXPECT_NEAR(loss(*module, args), expected / 6, 1e-12);
  }

  std::vector<std::pair<std::string, HostTensor>> outputs;
  ASSERT_EQ(lamina::eval::evaluate(*module, args, outputs, "train_step"), "");
  ASSERT_EQ(outputs.size(), params.size() + 1);
  for (auto [i, name] : llvm::enumerate(params)) {
    SCOPED_TRACE(name);
    EXPECT_EQ(outputs[i + 1].first, "grad:" + name);
    const auto *grad = static_cast<const double *>(outputs[i + 1].second.data());
    int64_t n = args[name].numElements();
    // The first, the last and a few elements in between.
    for (int64_t j : {int64_t(0), n / 3, n / 2, (2 * n) / 3, n - 1}) {
      double numeric = numericGradient(*module, args, name, j, 1e-6);
      EXPECT_NEAR(grad[j], numeric, 1e-7 + 1e-5 * std::fabs(numeric))
          << name << "[" << j << "]";
    }
  }
}

TEST(GradientTest, TinyGpt2) { checkTinyGpt2(/*fuseGelu=*/false); }
TEST(GradientTest, TinyGpt2FusedGelu) { checkTinyGpt2(/*fuseGelu=*/true); }
TEST(GradientTest, TinyGpt2CausalLm) {
  checkTinyGpt2(/*fuseGelu=*/true, /*causalLm=*/true);
}
TEST(GradientTest, TinyGpt2FusedAttention) {
  checkTinyGpt2(/*fuseGelu=*/true, /*causalLm=*/true, /*fuseAttention=*/true);
}

/// graph-add-loss kind=cross-entropy with an ignored label: the loss matches
/// crossEntropy() and its gradient the central differences.
TEST(GradientTest, CrossEntropyIgnoreIndex) {
  DialectRegistry registry;
  registry.insert<func::FuncDialect, lamina::ir::graph::GraphDialect>();
  MLIRContext context(registry);
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(R"mlir(
    func.func @forward(%w: tensor<4x5xf64> {graph.kind = "trainable", graph.name = "w"},
                       %x: tensor<3x4xf64> {graph.kind = "input", graph.name = "x"},
                       %y: tensor<3xi64> {graph.kind = "input", graph.name = "y"})
        -> tensor<3x5xf64> attributes {graph.output_names = ["logits"]} {
      %0 = graph.matmul %x, %w : (tensor<3x4xf64>, tensor<4x5xf64>) -> tensor<3x5xf64>
      return %0 : tensor<3x5xf64>
    })mlir", &context);
  ASSERT_TRUE(module);
  PassManager pm(&context);
  lamina::ir::graph::GraphAddLossOptions options;
  options.kind = "cross-entropy";
  options.labels = "y";
  options.ignoreIndex = -1;
  pm.addPass(lamina::ir::graph::createGraphAddLoss(options));
  pm.addPass(lamina::ir::graph::createGraphAutodiff());
  ASSERT_TRUE(succeeded(pm.run(*module)));

  std::mt19937 rng(3);
  std::map<std::string, HostTensor> args;
  args["w"] = randomTensor({4, 5}, -1, 1, rng);
  args["x"] = randomTensor({3, 4}, -1, 1, rng);
  std::vector<int64_t> labels{4, -1, 1};
  args["y"] = HostTensor(lamina::rt::DType::I64, {3});
  std::copy(labels.begin(), labels.end(), static_cast<int64_t *>(args["y"].data()));

  std::vector<std::pair<std::string, HostTensor>> fwd;
  ASSERT_EQ(lamina::eval::evaluate(*module, args, fwd, "forward"), "");
  EXPECT_NEAR(loss(*module, args),
              crossEntropy(static_cast<const double *>(fwd[0].second.data()),
                           labels, 5, -1),
              1e-12);
  std::vector<std::pair<std::string, HostTensor>> outputs;
  ASSERT_EQ(lamina::eval::evaluate(*module, args, outputs, "train_step"), "");
  ASSERT_EQ(outputs.size(), 2u);
  const auto *grad = static_cast<const double *>(outputs[1].second.data());
  for (int64_t i = 0; i < 20; ++i) {
    double numeric = numericGradient(*module, args, "w", i, 1e-6);
    EXPECT_NEAR(grad[i], numeric, 1e-8 + 1e-5 * std::fabs(numeric)) << i;
  }
}
} // namespace
