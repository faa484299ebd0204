//===- Elementwise.cpp - unary, binary, compare, select, fused, cast ------===//

#include "Internal.h"

#include <cstring>
#include <limits>

using namespace lamina::rt;
using namespace lamina::rt::detail;

//===----------------------------------------------------------------------===//
// Broadcast plan
//===----------------------------------------------------------------------===//

Status lamina::rt::detail::planBroadcast(const char *op,
                                         const Tensor *const *inputs, int n,
                                         const Tensor &result,
                                         BroadcastPlan &plan, bool exact) {
  int rank = result.rank;
  std::vector<int64_t> strides[kMaxBroadcastInputs];
  for (int k = 0; k < n; ++k) {
    strides[k].resize(rank);
    if (!broadcastStrides(inputs[k]->shape, inputs[k]->rank, result.shape, rank,
                          strides[k].data()))
      return Status::error(std::string(op) + ": operand " +
                           describe(*inputs[k]) +
                           " does not broadcast to result " + describe(result));
  }
  // The result may not be larger than the operands' broadcast.
  for (int d = 0; d < rank && exact; ++d) {
    if (result.shape[d] == 1)
      continue;
    bool covered = false;
    for (int k = 0; k < n; ++k) {
      int j = d - (rank - inputs[k]->rank);
      covered |= j >= 0 && inputs[k]->shape[j] == result.shape[d];
    }
    if (!covered)
      return Status::error(std::string(op) + ": result " + describe(result) +
                           " is not the broadcast of its operands");
  }
  plan.numInputs = n;
  plan.shape.clear();
  for (int k = 0; k < kMaxBroadcastInputs; ++k)
    plan.strides[k].clear();
  if (result.numElements() == 0) {
    plan.shape = {0};
    for (int k = 0; k < n; ++k)
      plan.strides[k] = {0};
    return Status::success();
  }
  for (int d = 0; d < rank; ++d) {
    int64_t size = result.shape[d];
    if (size == 1)
      continue;
    bool merge = !plan.shape.empty();
    for (int k = 0; k < n && merge; ++k)
      merge = plan.strides[k].back() == strides[k][d] * size;
    if (merge) {
      plan.shape.back() *= size;
      for (int k = 0; k < n; ++k)
        plan.strides[k].back() = strides[k][d];
    } else {
      plan.shape.push_back(size);
      for (int k = 0; k < n; ++k)
        plan.strides[k].push_back(strides[k][d]);
    }
  }
  if (plan.shape.empty()) { // every dim is 1: a single element
    plan.shape = {1};
    for (int k = 0; k < n; ++k)
      plan.strides[k] = {0};
  }
  return Status::success();
}

//===----------------------------------------------------------------------===//
// Unary
//===----------------------------------------------------------------------===//

namespace {
template <typename T, typename F>
void mapUnary(const Tensor &in, const Tensor &out, int64_t cost, F f) {
  const T *x = in.as<T>();
  T *y = out.as<T>();
  parallelFor(in.numElements(), kGrain / cost, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      y[i] = store<T>(f(load(x[i])));
  });
}

template <typename T>
void unaryFloat(UnaryOp op, const Tensor &in, const Tensor &out) {
  using C = Compute<T>;
  switch (op) {
  case UnaryOp::Neg:
    return mapUnary<T>(in, out, 1, [](C x) { return -x; });
  case UnaryOp::Abs:
    return mapUnary<T>(in, out, 1, [](C x) { return math::abs(x); });
  case UnaryOp::Relu:
    return mapUnary<T>(in, out, 1, [](C x) { return math::relu(x); });
  case UnaryOp::Exp:
    return mapUnary<T>(in, out, 8, [](C x) { return math::exp(x); });
  case UnaryOp::Log:
    return mapUnary<T>(in, out, 8, [](C x) { return math::log(x); });
  case UnaryOp::Sqrt:
    return mapUnary<T>(in, out, 4, [](C x) { return math::sqrt(x); });
  case UnaryOp::Reciprocal:
    return mapUnary<T>(in, out, 2, [](C x) { return math::reciprocal(x); });
  case UnaryOp::Tanh:
    return mapUnary<T>(in, out, 8, [](C x) { return math::tanh(x); });
  case UnaryOp::Erf:
    return mapUnary<T>(in, out, 8, [](C x) { return math::erf(x); });
  case UnaryOp::Sigmoid:
    return mapUnary<T>(in, out, 8, [](C x) { return math::sigmoid(x); });
  case UnaryOp::Gelu:
    return mapUnary<T>(in, out, 8, [](C x) { return math::gelu(x); });
  case UnaryOp::GeluTanh:
    return mapUnary<T>(in, out, 8, [](C x) { return math::geluTanh(x); });
  case UnaryOp::GeluDerivative:
    return mapUnary<T>(in, out, 8,
                       [](C x) { return math::geluDerivative(x); });
  case UnaryOp::GeluTanhDerivative:
    return mapUnary<T>(in, out, 8,
                       [](C x) { return math::geluTanhDerivative(x); });
  case UnaryOp::Cos:
    return mapUnary<T>(in, out, 8, [](C x) { return math::cos(x); });
  case UnaryOp::Sin:
    return mapUnary<T>(in, out, 8, [](C x) { return math::sin(x); });
  case UnaryOp::Not:
    return; // rejected before dispatch
  }
}
} // namespace

Status lamina::rt::unary(UnaryOp op, const Tensor &input,
                         const Tensor &result) {
  if (input.dtype != result.dtype || !sameShape(input, result))
    return Status::error("unary: result " + describe(result) +
                         " differs from input " + describe(input));
  if (op == UnaryOp::Not) {
    if (input.dtype != DType::I1)
      return Status::error("unary: not needs i1, got " + describe(input));
    mapUnary<Bool>(input, result, 1, [](uint8_t x) { return uint8_t(!x); });
    return Status::success();
  }
  bool floatOnly =
      op != UnaryOp::Neg && op != UnaryOp::Abs && op != UnaryOp::Relu;
  if (input.dtype == DType::I1 || (floatOnly && !isFloat(input.dtype)))
    return Status::error("unary: op " + std::to_string(int(op)) +
                         " is not defined on " + describe(input));
  dispatch(input.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (isFloatStorage<T>) {
      unaryFloat<T>(op, input, result);
    } else if constexpr (isIntStorage<T>) {
      if (op == UnaryOp::Neg)
        mapUnary<T>(input, result, 1, [](T x) { return math::neg(x); });
      else if (op == UnaryOp::Abs)
        mapUnary<T>(input, result, 1, [](T x) { return math::abs(x); });
      else
        mapUnary<T>(input, result, 1, [](T x) { return math::relu(x); });
    }
  });
  return Status::success();
}

//===----------------------------------------------------------------------===//
// Binary and compare
//===----------------------------------------------------------------------===//

namespace {
/// result[i] = f(lhs[..], rhs[..]) over a broadcast plan; R is the result's
/// storage type. The inner run specialises on which operand is stretched.
template <typename T, typename R, typename F>
void mapBinary(const BroadcastPlan &p, const Tensor &lhs, const Tensor &rhs,
               const Tensor &out, int64_t cost, F f) {
  const T *a = lhs.as<T>(), *b = rhs.as<T>();
  R *c = out.as<R>();
  bool sa = p.strides[0].back() != 0, sb = p.strides[1].back() != 0;
  forEachRun(p, cost, [&](int64_t o, const int64_t *off, int64_t len) {
    const T *x = a + off[0], *y = b + off[1];
    R *z = c + o;
    if (sa && sb) {
      for (int64_t i = 0; i < len; ++i)
        z[i] = store<R>(f(load(x[i]), load(y[i])));
    } else if (sa) {
      auto v = load(y[0]);
      for (int64_t i = 0; i < len; ++i)
        z[i] = store<R>(f(load(x[i]), v));
    } else if (sb) {
      auto v = load(x[0]);
      for (int64_t i = 0; i < len; ++i)
        z[i] = store<R>(f(v, load(y[i])));
    } else {
      R v = store<R>(f(load(x[0]), load(y[0])));
      for (int64_t i = 0; i < len; ++i)
        z[i] = v;
    }
  });
}

template <typename T>
void binaryArith(BinaryOp op, const BroadcastPlan &p, const Tensor &lhs,
                 const Tensor &rhs, const Tensor &out) {
  using C = Compute<T>;
  switch (op) {
  case BinaryOp::Add:
    return mapBinary<T, T>(p, lhs, rhs, out, 1,
                           [](C x, C y) { return math::add(x, y); });
  case BinaryOp::Sub:
    return mapBinary<T, T>(p, lhs, rhs, out, 1,
                           [](C x, C y) { return math::sub(x, y); });
  case BinaryOp::Mul:
    return mapBinary<T, T>(p, lhs, rhs, out, 1,
                           [](C x, C y) { return math::mul(x, y); });
  case BinaryOp::Div:
    return mapBinary<T, T>(p, lhs, rhs, out, 2,
                           [](C x, C y) { return math::div(x, y); });
  case BinaryOp::Pow:
    // A constant square or cube (GELU's tanh form, variance): multiplies,
    // not pow. Within an ulp of pow, far faster.
    if constexpr (std::is_floating_point_v<C>) {
      if (rhs.numElements() == 1) {
        C e = load(rhs.as<T>()[0]);
        if (e == C(2))
          return mapBinary<T, T>(p, lhs, rhs, out, 1,
                                 [](C x, C) { return x * x; });
        if (e == C(3))
          return mapBinary<T, T>(p, lhs, rhs, out, 1,
                                 [](C x, C) { return x * x * x; });
      }
    }
    return mapBinary<T, T>(p, lhs, rhs, out, 8,
                           [](C x, C y) { return math::pow(x, y); });
  case BinaryOp::Min:
    return mapBinary<T, T>(p, lhs, rhs, out, 1,
                           [](C x, C y) { return math::minimum(x, y); });
  case BinaryOp::Max:
    return mapBinary<T, T>(p, lhs, rhs, out, 1,
                           [](C x, C y) { return math::maximum(x, y); });
  default:
    return; // And/Or: i1 only, handled by the caller
  }
}

Status checkOperands(const char *name, const Tensor &lhs, const Tensor &rhs) {
  if (lhs.dtype != rhs.dtype)
    return Status::error(std::string(name) + ": operand types differ: " +
                         describe(lhs) + " and " + describe(rhs));
  return Status::success();
}
} // namespace

Status lamina::rt::binary(BinaryOp op, const Tensor &lhs, const Tensor &rhs,
                          const Tensor &result) {
  Status s = checkOperands("binary", lhs, rhs);
  if (!s.ok())
    return s;
  if (result.dtype != lhs.dtype)
    return Status::error("binary: result " + describe(result) +
                         " has another element type than " + describe(lhs));
  bool logic = op == BinaryOp::And || op == BinaryOp::Or;
  if (logic != (lhs.dtype == DType::I1))
    return Status::error(std::string("binary: ") +
                         (logic ? "and/or need i1" : "arithmetic on i1") +
                         ", got " + describe(lhs));
  BroadcastPlan plan;
  const Tensor *ins[] = {&lhs, &rhs};
  s = planBroadcast("binary", ins, 2, result, plan);
  if (!s.ok())
    return s;
  if (logic) {
    if (op == BinaryOp::And)
      mapBinary<Bool, Bool>(
          plan, lhs, rhs, result, 1,
          [](uint8_t a, uint8_t b) { return uint8_t(a & b); });
    else
      mapBinary<Bool, Bool>(
          plan, lhs, rhs, result, 1,
          [](uint8_t a, uint8_t b) { return uint8_t(a | b); });
    return Status::success();
  }
  dispatch(lhs.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, Bool>)
      binaryArith<T>(op, plan, lhs, rhs, result);
  });
  return Status::success();
}

Status lamina::rt::compare(CompareOp op, const Tensor &lhs, const Tensor &rhs,
                           const Tensor &result) {
  Status s = checkOperands("compare", lhs, rhs);
  if (!s.ok())
    return s;
  if (result.dtype != DType::I1)
    return Status::error("compare: result must be i1, got " + describe(result));
  BroadcastPlan p;
  const Tensor *ins[] = {&lhs, &rhs};
  s = planBroadcast("compare", ins, 2, result, p);
  if (!s.ok())
    return s;
  dispatch(lhs.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = Compute<T>;
    switch (op) {
    case CompareOp::Equal:
      return mapBinary<T, Bool>(p, lhs, rhs, result, 1,
                                [](C a, C b) { return a == b; });
    case CompareOp::Greater:
      return mapBinary<T, Bool>(p, lhs, rhs, result, 1,
                                [](C a, C b) { return a > b; });
    case CompareOp::GreaterEqual:
      return mapBinary<T, Bool>(p, lhs, rhs, result, 1,
                                [](C a, C b) { return a >= b; });
    case CompareOp::Less:
      return mapBinary<T, Bool>(p, lhs, rhs, result, 1,
                                [](C a, C b) { return a < b; });
    case CompareOp::LessEqual:
      return mapBinary<T, Bool>(p, lhs, rhs, result, 1,
                                [](C a, C b) { return a <= b; });
    }
  });
  return Status::success();
}

//===----------------------------------------------------------------------===//
// Fused chains
//===----------------------------------------------------------------------===//

namespace {
/// Elements per block: every register of a block stays in L1 (20 x 1 KiB),
/// and the step's op is switched on once per block, not per element.
constexpr int64_t kFusedBlock = 256;
using FusedRegs = float[kMaxFusedInputs + kMaxFusedSteps][kFusedBlock];

/// Register `out` = the step's op over the first n elements of its operand
/// registers. powConstant 2 or 3: the exponent is that constant, computed
/// by multiplies as binary does.
void runStep(const FusedStep &st, FusedRegs &r, int out, int64_t n,
             int powConstant) {
  float *y = r[out];
  const float *a = r[st.lhs], *b = st.isBinary ? r[st.rhs] : a;
  auto each = [&](auto f) {
    for (int64_t i = 0; i < n; ++i)
      y[i] = f(a[i], b[i]);
  };
  if (st.isBinary) {
    switch (BinaryOp(st.op)) {
    case BinaryOp::Add: return each([](float x, float z) { return math::add(x, z); });
    case BinaryOp::Sub: return each([](float x, float z) { return math::sub(x, z); });
    case BinaryOp::Mul: return each([](float x, float z) { return math::mul(x, z); });
    case BinaryOp::Div: return each([](float x, float z) { return math::div(x, z); });
    case BinaryOp::Pow:
      if (powConstant == 2)
        return each([](float x, float) { return x * x; });
      if (powConstant == 3)
        return each([](float x, float) { return x * x * x; });
      return each([](float x, float z) { return math::pow(x, z); });
    case BinaryOp::Min:
      return each([](float x, float z) { return math::minimum(x, z); });
    case BinaryOp::Max:
      return each([](float x, float z) { return math::maximum(x, z); });
    default: return; // rejected by the checks
    }
  }
  auto unaryEach = [&](auto f) {
    for (int64_t i = 0; i < n; ++i)
      y[i] = f(a[i]);
  };
  switch (UnaryOp(st.op)) {
  case UnaryOp::Neg: return unaryEach([](float x) { return -x; });
  case UnaryOp::Abs: return unaryEach([](float x) { return math::abs(x); });
  case UnaryOp::Relu: return unaryEach([](float x) { return math::relu(x); });
  case UnaryOp::Exp: return unaryEach([](float x) { return math::exp(x); });
  case UnaryOp::Log: return unaryEach([](float x) { return math::log(x); });
  case UnaryOp::Sqrt: return unaryEach([](float x) { return math::sqrt(x); });
  case UnaryOp::Reciprocal:
    return unaryEach([](float x) { return math::reciprocal(x); });
  case UnaryOp::Tanh: return unaryEach([](float x) { return math::tanh(x); });
  case UnaryOp::Erf: return unaryEach([](float x) { return math::erf(x); });
  case UnaryOp::Sigmoid:
    return unaryEach([](float x) { return math::sigmoid(x); });
  case UnaryOp::Gelu: return unaryEach([](float x) { return math::gelu(x); });
  case UnaryOp::GeluTanh:
    return unaryEach([](float x) { return math::geluTanh(x); });
  case UnaryOp::GeluDerivative:
    return unaryEach([](float x) { return math::geluDerivative(x); });
  case UnaryOp::GeluTanhDerivative:
    return unaryEach([](float x) { return math::geluTanhDerivative(x); });
  case UnaryOp::Cos: return unaryEach([](float x) { return math::cos(x); });
  case UnaryOp::Sin: return unaryEach([](float x) { return math::sin(x); });
  case UnaryOp::Not: return; // rejected by the checks
  }
}

/// r[0..n) = input k at the result's elements [o, o+n) (row-major over the
/// plan's collapsed shape), widened to f32: one copy or fill per row piece,
/// so a block spans rows and short rows (a bias of 32) do not shrink the
/// blocks the steps run on. T is the input's own element type.
template <typename T>
void gatherBlock(const BroadcastPlan &p, int k, const T *x, bool dense,
                 int64_t o, int64_t n, float *r) {
  if (dense) { // the result's own layout
    for (int64_t i = 0; i < n; ++i)
      r[i] = load(x[o + i]);
    return;
  }
  const std::vector<int64_t> &stride = p.strides[k];
  int rank = int(p.shape.size());
  int64_t inner = p.shape.back();
  int64_t row = o / inner, col = o % inner;
  for (int64_t done = 0; done < n; ++row, col = 0) {
    int64_t off = 0;
    for (int64_t rem = row, d = rank - 2; d >= 0; --d) {
      off += (rem % p.shape[d]) * stride[d];
      rem /= p.shape[d];
    }
    int64_t len = std::min(inner - col, n - done);
    if (stride.back() == 0) {
      std::fill(r + done, r + done + len, load(x[off]));
    } else {
      for (int64_t i = 0; i < len; ++i)
        r[done + i] = load(x[off + col + i]);
    }
    done += len;
  }
}

/// gatherBlock on input k's element type (switched once per block).
void gatherInput(const BroadcastPlan &p, int k, const Tensor &in, bool dense,
                 int64_t o, int64_t n, float *r) {
  switch (in.dtype) {
  case DType::F16: return gatherBlock(p, k, in.as<Half>(), dense, o, n, r);
  case DType::BF16:
    return gatherBlock(p, k, in.as<BFloat16>(), dense, o, n, r);
  default: return gatherBlock(p, k, in.as<float>(), dense, o, n, r);
  }
}

/// T is the result's element type; each input has its own (checkFused).
/// With `sum` (f32, the result's trailing dims: the result viewed as rows x
/// the sum's columns), each block of columns walks the rows in order and
/// adds the f32 values as reduce's column sums do (Reduce.cpp: from row 0
/// on, one add per row), so the sum has the bits of the reduce_sum of the
/// unrounded chain.
template <typename T>
void fusedRun(const BroadcastPlan &p, const Tensor *inputs, int numInputs,
              const FusedStep *steps, int numSteps, const int *powConstant,
              const Tensor &result, const Tensor *sum) {
  T *z = result.as<T>();
  int64_t total = 1;
  for (int64_t size : p.shape)
    total *= size;
  if (total == 0) {
    if (sum)
      std::fill(sum->as<float>(), sum->as<float>() + sum->numElements(), 0.f);
    return;
  }
  bool dense[kMaxFusedInputs];
  for (int k = 0; k < numInputs; ++k) {
    int64_t expect = 1;
    dense[k] = true;
    for (int d = int(p.shape.size()) - 1; d >= 0; --d) {
      dense[k] &= p.strides[k][size_t(d)] == expect;
      expect *= p.shape[size_t(d)];
    }
  }
  // Elements o..o+n-1 computed and stored; their f32 values returned.
  auto compute = [&](FusedRegs &r, int64_t o, int64_t n) {
    for (int k = 0; k < numInputs; ++k)
      gatherInput(p, k, inputs[k], dense[k], o, n, r[k]);
    for (int s = 0; s < numSteps; ++s)
      runStep(steps[s], r, numInputs + s, n, powConstant[s]);
    const float *y = r[numInputs + numSteps - 1];
    for (int64_t i = 0; i < n; ++i)
      z[o + i] = store<T>(y[i]);
    return y;
  };
  // Rough per-element cost: transcendental steps dominate.
  int64_t perBlock =
      std::max<int64_t>(1, kGrain / (2 * std::max(numSteps, 1)) / kFusedBlock);
  if (sum) {
    int64_t cols = sum->numElements(), rows = total / cols;
    float *out = sum->as<float>();
    parallelFor((cols + kFusedBlock - 1) / kFusedBlock,
                std::max<int64_t>(1, perBlock / rows),
                [&](int64_t begin, int64_t end) {
                  FusedRegs r;
                  float acc[kFusedBlock];
                  for (int64_t b = begin; b < end; ++b) {
                    int64_t c0 = b * kFusedBlock;
                    int64_t n = std::min(kFusedBlock, cols - c0);
                    std::fill(acc, acc + n, 0.f);
                    for (int64_t row = 0; row < rows; ++row) {
                      const float *y = compute(r, row * cols + c0, n);
                      for (int64_t i = 0; i < n; ++i)
                        acc[i] = math::add(acc[i], y[i]);
                    }
                    std::copy(acc, acc + n, out + c0);
                  }
                });
    return;
  }
  parallelFor((total + kFusedBlock - 1) / kFusedBlock, perBlock,
              [&](int64_t begin, int64_t end) {
                FusedRegs r;
                for (int64_t b = begin; b < end; ++b) {
                  int64_t o = b * kFusedBlock;
                  compute(r, o, std::min(kFusedBlock, total - o));
                }
              });
}

float loadFloat(const Tensor &t, int64_t i) {
  switch (t.dtype) {
  case DType::F16: return load(t.as<Half>()[i]);
  case DType::BF16: return load(t.as<BFloat16>()[i]);
  default: return t.as<float>()[i];
  }
}
} // namespace

Status lamina::rt::detail::checkFused(const Tensor *inputs, int numInputs,
                                      const FusedStep *steps, int numSteps,
                                      const Tensor &result, const Tensor *sum) {
  if (sum) {
    // f32, the result's trailing dims (at least one, not all).
    bool ok = sum->dtype == DType::F32 && sum->rank >= 1 &&
              sum->rank < result.rank;
    for (int d = 0; ok && d < sum->rank; ++d)
      ok = sum->shape[d] == result.shape[result.rank - sum->rank + d];
    if (!ok)
      return Status::error("fused_elementwise: sum " + describe(*sum) +
                           " is not f32 of the trailing dims of " +
                           describe(result));
  }
  // No steps: the identity on one input, with a sum only.
  bool identity = numSteps == 0 && sum && numInputs == 1;
  if (numInputs < 1 || numInputs > kMaxFusedInputs ||
      (numSteps < 1 && !identity) || numSteps > kMaxFusedSteps)
    return Status::error("fused_elementwise: needs 1.." +
                         std::to_string(kMaxFusedInputs) + " inputs and 1.." +
                         std::to_string(kMaxFusedSteps) +
                         " steps (0 with a sum and one input)");
  auto kernelFloat = [](DType t) {
    return t == DType::F32 || t == DType::F16 || t == DType::BF16;
  };
  if (!kernelFloat(result.dtype))
    return Status::error("fused_elementwise: result " + describe(result) +
                         " is not supported (f32, f16, bf16 only)");
  // Each input its own float type, widened to f32 on load.
  for (int k = 0; k < numInputs; ++k)
    if (!kernelFloat(inputs[k].dtype))
      return Status::error("fused_elementwise: input " + describe(inputs[k]) +
                           " is not supported (f32, f16, bf16 only)");
  for (int s = 0; s < numSteps; ++s) {
    const FusedStep &st = steps[s];
    int defined = numInputs + s;
    bool bad = st.lhs >= defined || (st.isBinary && st.rhs >= defined);
    bad |= st.isBinary ? (st.op > uint8_t(BinaryOp::Max))
                       : (st.op >= uint8_t(UnaryOp::Not));
    if (bad)
      return Status::error("fused_elementwise: step " + std::to_string(s) +
                           " reads an undefined register or has an "
                           "unsupported op");
  }
  return Status::success();
}

Status lamina::rt::fusedElementwise(const Tensor *inputs, int numInputs,
                                    const FusedStep *steps, int numSteps,
                                    const Tensor &result, const Tensor *sum) {
  if (Status s = checkFused(inputs, numInputs, steps, numSteps, result, sum);
      !s.ok())
    return s;
  const Tensor *ins[kMaxFusedInputs];
  for (int k = 0; k < numInputs; ++k)
    ins[k] = &inputs[k];
  int powConstant[kMaxFusedSteps] = {};
  for (int s = 0; s < numSteps; ++s) {
    const FusedStep &st = steps[s];
    // binary's shortcut for a constant square or cube, so that a fused
    // chain computes what the same ops run one by one compute.
    if (st.isBinary && BinaryOp(st.op) == BinaryOp::Pow &&
        st.rhs < numInputs && inputs[st.rhs].numElements() == 1) {
      float e = loadFloat(inputs[st.rhs], 0);
      powConstant[s] = e == 2.0f ? 2 : e == 3.0f ? 3 : 0;
    }
  }
  BroadcastPlan plan;
  if (Status s = planBroadcast("fused_elementwise", ins, numInputs, result,
                               plan, /*exact=*/false);
      !s.ok())
    return s;
  switch (result.dtype) {
  case DType::F16:
    fusedRun<Half>(plan, inputs, numInputs, steps, numSteps, powConstant,
                   result, sum);
    break;
  case DType::BF16:
    fusedRun<BFloat16>(plan, inputs, numInputs, steps, numSteps, powConstant,
                       result, sum);
    break;
  default:
    fusedRun<float>(plan, inputs, numInputs, steps, numSteps, powConstant,
                    result, sum);
  }
  return Status::success();
}

//===----------------------------------------------------------------------===//
// Select
//===----------------------------------------------------------------------===//

Status lamina::rt::select(const Tensor &condition, const Tensor &lhs,
                          const Tensor &rhs, const Tensor &result) {
  if (condition.dtype != DType::I1)
    return Status::error("select: condition must be i1, got " +
                         describe(condition));
  Status s = checkOperands("select", lhs, rhs);
  if (!s.ok())
    return s;
  if (result.dtype != lhs.dtype)
    return Status::error("select: result " + describe(result) +
                         " has another element type than " + describe(lhs));
  BroadcastPlan p;
  const Tensor *ins[] = {&condition, &lhs, &rhs};
  s = planBroadcast("select", ins, 3, result, p);
  if (!s.ok())
    return s;
  // Values are copied as bytes, so one instantiation per element size.
  dispatchSize(result.elementSize(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    const uint8_t *c = condition.as<uint8_t>();
    const U *a = lhs.as<U>(), *b = rhs.as<U>();
    U *z = result.as<U>();
    int64_t sc = p.strides[0].back(), sa = p.strides[1].back(),
            sb = p.strides[2].back();
    forEachRun(p, 1, [&](int64_t o, const int64_t *off, int64_t len) {
      for (int64_t i = 0; i < len; ++i)
        z[o + i] = c[off[0] + i * sc] ? a[off[1] + i * sa] : b[off[2] + i * sb];
    });
  });
  return Status::success();
}

//===----------------------------------------------------------------------===//
// Cast
//===----------------------------------------------------------------------===//

namespace {
/// Truncation toward zero, saturating (a plain conversion of an out-of-range
/// float is undefined behaviour); NaN gives 0.
template <typename I, typename F> I floatToInt(F x) {
  if (x != x)
    return I(0);
  constexpr F lo = F(std::numeric_limits<I>::min());
  constexpr F hi = F(std::numeric_limits<I>::max()); // may round up to 2^N
  if (x <= lo)
    return std::numeric_limits<I>::min();
  if (x >= hi)
    return std::numeric_limits<I>::max();
  return I(x);
}

template <typename D, typename C> D convert(C v) {
  if constexpr (isIntStorage<D> && std::is_floating_point_v<C>)
    return floatToInt<D>(v);
  else
    return store<D>(v);
}
} // namespace

Status lamina::rt::cast(const Tensor &input, const Tensor &result) {
  if (!sameShape(input, result))
    return Status::error("cast: result " + describe(result) +
                         " has another shape than " + describe(input));
  if (input.dtype == result.dtype) {
    if (input.data != result.data)
      std::memcpy(result.data, input.data, input.byteSize());
    return Status::success();
  }
  int64_t n = input.numElements();
  dispatch(input.dtype, [&](auto srcTag) {
    using S = typename decltype(srcTag)::type;
    dispatch(result.dtype, [&](auto dstTag) {
      using D = typename decltype(dstTag)::type;
      const S *x = input.as<S>();
      D *y = result.as<D>();
      parallelFor(n, kGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i)
          y[i] = convert<D>(load(x[i]));
      });
    });
  });
  return Status::success();
}
