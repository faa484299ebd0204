//===- Elementwise.cu - unary, binary, fused chains -----------------------===//
//
// Grid-stride loops; the op is a kernel argument switched on per element (a
// uniform branch), so each element type is one kernel, not one per op:
// this keeps nvcc's time and the binary small. Per-element math is Math.h's,
// on the host's compute types (f16/bf16 in f32, f64 in f64, integers in
// their own type with Math.h's wrapping and division rules, i1 as 0/1).
//
//===----------------------------------------------------------------------===//

#include "Common.h"

using namespace lamina::rt;
using namespace lamina::rt::cuda;
using namespace lamina::rt::cuda::detail;

namespace {
/// The host's unary ops on compute type C; the host checks leave only Neg,
/// Abs and Relu for integers and Not for i1 (C = uint8_t).
template <typename C> __device__ C applyUnary(UnaryOp op, C x) {
  if constexpr (std::is_floating_point_v<C>) {
    switch (op) {
    case UnaryOp::Neg: return -x;
    case UnaryOp::Abs: return math::abs(x);
    case UnaryOp::Relu: return math::relu(x);
    case UnaryOp::Exp: return math::exp(x);
    case UnaryOp::Log: return math::log(x);
    case UnaryOp::Sqrt: return math::sqrt(x);
    case UnaryOp::Reciprocal: return math::reciprocal(x);
    case UnaryOp::Tanh: return math::tanh(x);
    case UnaryOp::Erf: return math::erf(x);
    case UnaryOp::Sigmoid: return math::sigmoid(x);
    case UnaryOp::Gelu: return math::gelu(x);
    case UnaryOp::GeluTanh: return math::geluTanh(x);
    case UnaryOp::GeluDerivative: return math::geluDerivative(x);
    case UnaryOp::GeluTanhDerivative: return math::geluTanhDerivative(x);
    case UnaryOp::Cos: return math::cos(x);
    case UnaryOp::Sin: return math::sin(x);
    default: return x; // Not: rejected on the host
    }
  } else {
    switch (op) {
    case UnaryOp::Neg: return math::neg(x);
    case UnaryOp::Abs: return math::abs(x);
    case UnaryOp::Relu:
      if constexpr (std::is_unsigned_v<C>)
        return x; // math::relu's x < 0 never holds (and nvcc warns)
      else
        return math::relu(x);
    case UnaryOp::Not: return C(!x);
    default: return x; // float-only ops: rejected on the host
    }
  }
}

/// The host's binary ops on compute type C (And/Or only reach i1's uint8_t).
template <typename C> __device__ C applyBinary(BinaryOp op, C a, C b) {
  switch (op) {
  case BinaryOp::Add: return math::add(a, b);
  case BinaryOp::Sub: return math::sub(a, b);
  case BinaryOp::Mul: return math::mul(a, b);
  case BinaryOp::Div: return math::div(a, b);
  case BinaryOp::Pow: return math::pow(a, b);
  case BinaryOp::Min: return math::minimum(a, b);
  case BinaryOp::Max: return math::maximum(a, b);
  default:
    if constexpr (std::is_integral_v<C>)
      return op == BinaryOp::And ? C(a & b) : C(a | b);
    else
      return a; // unreachable: and/or need i1
  }
}

template <typename T>
__global__ void unaryKernel(UnaryOp op, const T *x, T *y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = storeValue<T>(applyUnary(op, loadValue(x[i])));
}

/// Both operands dense with the result's shape.
template <typename T>
__global__ void binaryDenseKernel(BinaryOp op, const T *a, const T *b, T *y,
                                  int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = storeValue<T>(applyBinary(op, loadValue(a[i]), loadValue(b[i])));
}

/// da/db: the collapsed broadcast plan with each operand's strides.
template <typename T>
__global__ void binaryBroadcastKernel(BinaryOp op, const T *a, Dims da,
                                      const T *b, Dims db, T *y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = storeValue<T>(applyBinary(op, loadValue(a[stridedOffset(i, da)]),
                                     loadValue(b[stridedOffset(i, db)])));
}

struct FusedArgs {
  const void *in[kMaxFusedInputs];
  DType type[kMaxFusedInputs]; ///< each input's own: f32, f16 or bf16
  Dims dims[kMaxFusedInputs];
  FusedStep steps[kMaxFusedSteps];
  int numInputs, numSteps;
};

template <typename T>
__global__ void fusedKernel(FusedArgs args, T *y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float r[kMaxFusedInputs + kMaxFusedSteps];
    for (int k = 0; k < args.numInputs; ++k) {
      // Widened to f32 on load; the type is uniform over the grid, so the
      // switch does not diverge.
      int64_t j = stridedOffset(i, args.dims[k]);
      switch (args.type[k]) {
      case DType::F16:
        r[k] = load(static_cast<const Half *>(args.in[k])[j]);
        break;
      case DType::BF16:
        r[k] = load(static_cast<const BFloat16 *>(args.in[k])[j]);
        break;
      default: r[k] = static_cast<const float *>(args.in[k])[j];
      }
    }
    for (int s = 0; s < args.numSteps; ++s) {
      const FusedStep &st = args.steps[s];
      r[args.numInputs + s] =
          st.isBinary ? applyBinary(BinaryOp(st.op), r[st.lhs], r[st.rhs])
                      : applyUnary(UnaryOp(st.op), r[st.lhs]);
    }
    y[i] = store<T>(r[args.numInputs + args.numSteps - 1]);
  }
}

/// The result's shape with `in`'s broadcast strides; false if it does not
/// broadcast or the rank is too large.
bool broadcastDims(const Tensor &in, const Tensor &result, Dims &d) {
  if (result.rank > kMaxRank)
    return false;
  d.rank = result.rank;
  for (int i = 0; i < result.rank; ++i)
    d.size[i] = result.shape[i];
  return broadcastStrides(in.shape, in.rank, result.shape, result.rank,
                          d.stride);
}

bool isDense(const Tensor &in, const Tensor &result) {
  return in.rank == result.rank && sameShape(in, result);
}
} // namespace

Status lamina::rt::cuda::unary(UnaryOp op, const Tensor &input,
                               const Tensor &result, cudaStream_t stream) {
  // The host's checks and messages.
  if (input.dtype != result.dtype || !sameShape(input, result))
    return Status::error("unary: result " + describe(result) +
                         " differs from input " + describe(input));
  if (op == UnaryOp::Not) {
    if (input.dtype != DType::I1)
      return Status::error("unary: not needs i1, got " + describe(input));
  } else {
    bool floatOnly =
        op != UnaryOp::Neg && op != UnaryOp::Abs && op != UnaryOp::Relu;
    if (input.dtype == DType::I1 || (floatOnly && !isFloat(input.dtype)))
      return Status::error("unary: op " + std::to_string(int(op)) +
                           " is not defined on " + describe(input));
  }
  int64_t n = input.numElements();
  if (n == 0)
    return Status::success();
  dispatch(input.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launchKernel(unaryKernel<T>, gridFor(n), 256, 0, stream, op, input.as<T>(),
                 result.as<T>(), n);
  });
  return launched("unary");
}

Status lamina::rt::cuda::binary(BinaryOp op, const Tensor &lhs,
                                const Tensor &rhs, const Tensor &result,
                                cudaStream_t stream) {
  // The host's checks and messages.
  if (lhs.dtype != rhs.dtype)
    return Status::error("binary: operand types differ: " + describe(lhs) +
                         " and " + describe(rhs));
  if (result.dtype != lhs.dtype)
    return Status::error("binary: result " + describe(result) +
                         " has another element type than " + describe(lhs));
  bool logic = op == BinaryOp::And || op == BinaryOp::Or;
  if (logic != (lhs.dtype == DType::I1))
    return Status::error(std::string("binary: ") +
                         (logic ? "and/or need i1" : "arithmetic on i1") +
                         ", got " + describe(lhs));
  const Tensor *inputs[] = {&lhs, &rhs};
  BroadcastPlan plan;
  if (Status s = planBroadcast("binary", inputs, 2, result, plan); !s.ok())
    return s;
  int64_t n = result.numElements();
  if (n == 0)
    return Status::success();
  Dims da, db;
  if (!planDims(plan, 0, da) || !planDims(plan, 1, db))
    return Status::error("binary: rank above " + std::to_string(kMaxRank) +
                         ": " + describe(result));
  bool dense = isDense(lhs, result) && isDense(rhs, result);
  dispatch(result.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (dense)
      launchKernel(binaryDenseKernel<T>, gridFor(n), 256, 0, stream, op,
                   lhs.as<T>(), rhs.as<T>(), result.as<T>(), n);
    else
      launchKernel(binaryBroadcastKernel<T>, gridFor(n), 256, 0, stream, op,
                   lhs.as<T>(), da, rhs.as<T>(), db, result.as<T>(), n);
  });
  return launched("binary");
}

Status lamina::rt::cuda::fusedElementwise(const Tensor *inputs, int numInputs,
                                          const FusedStep *steps, int numSteps,
                                          const Tensor &result,
                                          cudaStream_t stream) {
  // The host's checks and messages.
  if (Status s = checkFused(inputs, numInputs, steps, numSteps, result);
      !s.ok())
    return s;
  FusedArgs args{};
  args.numInputs = numInputs;
  args.numSteps = numSteps;
  for (int k = 0; k < numInputs; ++k) {
    if (!broadcastDims(inputs[k], result, args.dims[k]))
      return Status::error("fused_elementwise: input " + describe(inputs[k]) +
                           " does not broadcast to " + describe(result));
    args.in[k] = inputs[k].data;
    args.type[k] = inputs[k].dtype;
  }
  for (int s = 0; s < numSteps; ++s)
    args.steps[s] = steps[s];
  int64_t n = result.numElements();
  if (n == 0)
    return Status::success();
  dispatchFloat(result.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launchKernel(fusedKernel<T>, gridFor(n), 256, 0, stream, args,
                 result.as<T>(), n);
  });
  return launched("fused_elementwise");
}
