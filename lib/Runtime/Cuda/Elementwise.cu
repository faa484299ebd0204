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

/// Elements per thread of the fused kernel: four independent loads in
/// flight per input, and one 16-byte (f32) or 8-byte (f16/bf16) vector load
/// per aligned dense input.
constexpr int kFusedWidth = 4;
/// Threads per block of the fused kernel; the step results it keeps in
/// shared memory (below) take at most 32 KiB, under the default limit.
constexpr int kFusedThreads = 128;

struct FusedArgs {
  const void *in[kMaxFusedInputs];
  DType type[kMaxFusedInputs]; ///< each input's own: f32, f16 or bf16
  /// Dense: element i is at i (no index arithmetic). Vec: dense and aligned
  /// for a kFusedWidth-element vector load.
  bool dense[kMaxFusedInputs], vec[kMaxFusedInputs];
  Dims dims[kMaxFusedInputs]; ///< collapsed; used when not dense
  FusedStep steps[kMaxFusedSteps];
  int numInputs, numSteps;
  bool vecOut;   ///< the result aligned for a vector store
  uint32_t keep; ///< bit s: step s's result is read after step s + 1
};

/// Input elements i0.. i0+m-1 widened to f32 (0 past m).
template <typename S, typename I>
__device__ void fusedLoad(const void *p, bool dense, bool vec, const Dims &d,
                          I i0, int m, float (&v)[kFusedWidth]) {
  const S *x = static_cast<const S *>(p);
  if (vec && m == kFusedWidth) {
    Pack<S, kFusedWidth> pk =
        *reinterpret_cast<const Pack<S, kFusedWidth> *>(x + i0);
#pragma unroll
    for (int e = 0; e < kFusedWidth; ++e)
      v[e] = load(pk.v[e]);
    return;
  }
#pragma unroll
  for (int e = 0; e < kFusedWidth; ++e)
    v[e] =
        e < m ? load(x[dense ? i0 + e : stridedOffsetIn<I>(i0 + e, d)]) : 0.f;
}

/// Register `reg`'s element e at step s: the previous step's result, an
/// input (selected with constant indices, so v and last stay in
/// registers), or a kept step result. Force-inlined: called with the
/// unrolled e, which must stay a constant.
__device__ __forceinline__ float
fusedOperand(int reg, int e, int s, const FusedArgs &args,
             const float (&v)[kMaxFusedInputs][kFusedWidth],
             const float (&last)[kFusedWidth], const float *kept, int ld) {
  if (s > 0 && reg == args.numInputs + s - 1)
    return last[e];
  if (reg < args.numInputs) {
    float x = v[0][e];
#pragma unroll
    for (int k = 1; k < kMaxFusedInputs; ++k)
      x = reg == k ? v[k][e] : x;
    return x;
  }
  return kept[((reg - args.numInputs) * kFusedWidth + e) * ld];
}

/// Elements i0..i0+m-1 of the chain into `last` (lanes past m compute on
/// zeros): every input's loaded into registers first (all loads in flight
/// at once), then the steps. Steps name registers at run time, which an
/// indexed local array would put in local memory; instead operands come
/// from registers where they can -- the inputs (selected by index), the
/// previous step's result -- and only step results read again later
/// (args.keep) go through dynamic shared memory: the thread's slot (step,
/// element) is kept[(step * kFusedWidth + element) * ld], ld the block's
/// threads.
template <typename I>
__device__ __forceinline__ void fusedCompute(const FusedArgs &args, I i0,
                                             int m, float *kept, int ld,
                                             float (&last)[kFusedWidth]) {
  float v[kMaxFusedInputs][kFusedWidth] = {}; // unused inputs: 0
#pragma unroll
  for (int k = 0; k < kMaxFusedInputs; ++k) {
    if (k >= args.numInputs)
      break;
    // The type is uniform over the grid, so the switch does not diverge.
    switch (args.type[k]) {
    case DType::F16:
      fusedLoad<Half, I>(args.in[k], args.dense[k], args.vec[k], args.dims[k],
                         i0, m, v[k]);
      break;
    case DType::BF16:
      fusedLoad<BFloat16, I>(args.in[k], args.dense[k], args.vec[k],
                             args.dims[k], i0, m, v[k]);
      break;
    default:
      fusedLoad<float, I>(args.in[k], args.dense[k], args.vec[k], args.dims[k],
                          i0, m, v[k]);
    }
  }
  // Input 0 when there are no steps (the identity with a sum); step 0
  // never reads `last` otherwise.
#pragma unroll
  for (int e = 0; e < kFusedWidth; ++e)
    last[e] = v[0][e];
  for (int s = 0; s < args.numSteps; ++s) {
    const FusedStep &st = args.steps[s];
    float out[kFusedWidth];
#pragma unroll
    for (int e = 0; e < kFusedWidth; ++e)
      out[e] = st.isBinary
                   ? applyBinary(
                         BinaryOp(st.op),
                         fusedOperand(st.lhs, e, s, args, v, last, kept, ld),
                         fusedOperand(st.rhs, e, s, args, v, last, kept, ld))
                   : applyUnary(
                         UnaryOp(st.op),
                         fusedOperand(st.lhs, e, s, args, v, last, kept, ld));
#pragma unroll
    for (int e = 0; e < kFusedWidth; ++e) {
      last[e] = out[e];
      if (args.keep >> s & 1u)
        kept[(s * kFusedWidth + e) * ld] = out[e];
    }
  }
}

/// Stores elements i0..i0+m-1 of the chain, one vector store when it can.
template <typename T, typename I>
__device__ __forceinline__ void fusedStore(const FusedArgs &args, T *y, I i0,
                                           int m,
                                           const float (&last)[kFusedWidth]) {
  if (args.vecOut && m == kFusedWidth) {
    Pack<T, kFusedWidth> pk;
#pragma unroll
    for (int e = 0; e < kFusedWidth; ++e)
      pk.v[e] = store<T>(last[e]);
    *reinterpret_cast<Pack<T, kFusedWidth> *>(y + i0) = pk;
  } else {
#pragma unroll
    for (int e = 0; e < kFusedWidth; ++e)
      if (e < m)
        y[i0 + e] = store<T>(last[e]);
  }
}

/// Each thread computes kFusedWidth consecutive elements at a time.
template <typename T, typename I>
__global__ void fusedKernel(FusedArgs args, T *y, I n) {
  LAMINA_DYNAMIC_SHARED(float, file);
  for (I i0 = (I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x)) * kFusedWidth;
       i0 < n; i0 += I(gridDim.x) * I(blockDim.x) * kFusedWidth) {
    int m = n - i0 < I(kFusedWidth) ? int(n - i0) : kFusedWidth;
    float last[kFusedWidth];
    fusedCompute<I>(args, i0, m, file + threadIdx.x, int(blockDim.x), last);
    fusedStore<T, I>(args, y, i0, m, last);
  }
}

/// The chain over the result viewed as [rows, cols] (cols: the sum's
/// elements), each column also summed over the rows in reduce's order
/// (Reduce.cu, reduceOuterVecKernel): a block is kOuterCols groups of W
/// columns x kOuterLanes row lanes over one chunk of the rows (Common.h's
/// columnSumChunks), lane y taking rows y, y + kOuterLanes, ...; the lanes
/// are added in order, then (sumChunks) the chunks. So the sum has the bits
/// of reduce(Sum) of the f32 chain. W is kFusedWidth when cols is a
/// multiple of it (whole vectors in one row), else 1.
template <typename T, typename I, int W>
__global__ void fusedSumKernel(FusedArgs args, T *y, I cols, I rows,
                               I chunkRows, float *partial, float *sum) {
  LAMINA_DYNAMIC_SHARED(float, file);
  __shared__ float part[kOuterLanes][kOuterCols * W + 1];
  const int ld = int(blockDim.x * blockDim.y);
  float *kept = file + threadIdx.y * blockDim.x + threadIdx.x;
  I c0 = (I(blockIdx.x) * I(kOuterCols) + I(threadIdx.x)) * W;
  I begin = I(blockIdx.y) * chunkRows;
  I end = begin + chunkRows < rows ? begin + chunkRows : rows;
  float acc[W];
#pragma unroll
  for (int v = 0; v < W; ++v)
    acc[v] = 0.f;
  if (c0 < cols) { // cols % W == 0: the whole group is in range
    for (I r = begin + I(threadIdx.y); r < end; r += kOuterLanes) {
      float last[kFusedWidth];
      fusedCompute<I>(args, r * cols + c0, W, kept, ld, last);
      fusedStore<T, I>(args, y, r * cols + c0, W, last);
#pragma unroll
      for (int v = 0; v < W; ++v)
        acc[v] = acc[v] + last[v];
    }
  }
  combineLanes<W>(acc, part, [](float a, float b) { return a + b; });
  if (threadIdx.y == 0 && c0 < cols)
#pragma unroll
    for (int v = 0; v < W; ++v)
      (partial ? partial + I(blockIdx.y) * cols : sum)[c0 + v] = acc[v];
}

/// Drops dims of 1 and merges neighbours whose strides chain (a bias over
/// [N, C] becomes rank 2, a same-shape input rank 1 with stride 1), so the
/// per-element index arithmetic is as short as it can be.
void collapseDims(Dims &d) {
  Dims c;
  for (int i = 0; i < d.rank; ++i) {
    if (d.size[i] == 1)
      continue;
    if (c.rank > 0 && c.stride[c.rank - 1] == d.stride[i] * d.size[i]) {
      c.size[c.rank - 1] *= d.size[i];
      c.stride[c.rank - 1] = d.stride[i];
      continue;
    }
    c.size[c.rank] = d.size[i];
    c.stride[c.rank] = d.stride[i];
    ++c.rank;
  }
  d = c;
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

namespace {
/// fusedElementwise with a sum (fusedSumKernel, then sumChunks when the
/// rows are split). Chains that keep many step results in shared memory
/// (kMaxSumKept: 512 threads a block) run unfused instead -- the chain into
/// f32 scratch, reduce, cast -- which gives the same bits.
constexpr int kMaxSumKept = 4;

Status fusedSum(const FusedArgs &args, int kept, const Tensor *inputs,
                int numInputs, const FusedStep *steps, int numSteps,
                const Tensor &result, const Tensor &sum, cudaStream_t stream) {
  int64_t n = result.numElements(), cols = sum.numElements(), rows = n / cols;
  if (kept > kMaxSumKept) {
    Scratch wide(stream);
    if (Status s = cudaCheck("fused_elementwise",
                             cudaMallocAsync(&wide.ptr, size_t(n) * 4, stream));
        !s.ok())
      return s;
    Tensor f32{wide.ptr, DType::F32, result.rank, result.shape};
    int64_t axes[kMaxRank];
    int leading = result.rank - sum.rank;
    for (int d = 0; d < leading; ++d)
      axes[d] = d;
    if (Status s = cuda::fusedElementwise(inputs, numInputs, steps, numSteps,
                                          f32, nullptr, stream);
        !s.ok())
      return s;
    if (Status s = cuda::reduce(ReduceOp::Sum, f32, axes, leading, false, sum,
                                stream);
        !s.ok())
      return s;
    return cuda::cast(f32, result, stream);
  }
  int64_t chunks = columnSumChunks(cols, rows);
  int64_t chunkRows = (rows + chunks - 1) / chunks;
  Scratch partial(stream);
  if (chunks > 1)
    if (Status s = cudaCheck("fused_elementwise",
                             cudaMallocAsync(&partial.ptr,
                                             size_t(chunks * cols) * 4,
                                             stream));
        !s.ok())
      return s;
  bool whole = cols % kFusedWidth == 0;
  int64_t groups = whole ? cols / kFusedWidth : cols;
  dim3 grid(unsigned((groups + kOuterCols - 1) / kOuterCols), unsigned(chunks));
  dim3 block(kOuterCols, kOuterLanes);
  size_t shared = size_t(kept) * kFusedWidth * kOuterCols * kOuterLanes * 4;
  auto *part = static_cast<float *>(partial.ptr);
  dispatchFloat(result.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto go = [&](auto index) {
      using I = decltype(index);
      if (whole)
        launchKernel(fusedSumKernel<T, I, kFusedWidth>, grid, block, shared,
                     stream, args, result.as<T>(), I(cols), I(rows),
                     I(chunkRows), part, sum.as<float>());
      else
        launchKernel(fusedSumKernel<T, I, 1>, grid, block, shared, stream,
                     args, result.as<T>(), I(cols), I(rows), I(chunkRows),
                     part, sum.as<float>());
    };
    if (fitsInt32(n, n))
      go(int32_t(0));
    else
      go(int64_t(0));
  });
  if (Status s = launched("fused_elementwise"); !s.ok() || chunks == 1)
    return s;
  return sumChunks(part, chunks, cols, sum.as<float>(), stream);
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
                                          const Tensor *sum,
                                          cudaStream_t stream) {
  // The host's checks and messages.
  if (Status s = checkFused(inputs, numInputs, steps, numSteps, result, sum);
      !s.ok())
    return s;
  int64_t n = result.numElements();
  FusedArgs args{};
  args.numInputs = numInputs;
  args.numSteps = numSteps;
  for (int k = 0; k < numInputs; ++k) {
    if (!broadcastDims(inputs[k], result, args.dims[k]))
      return Status::error("fused_elementwise: input " + describe(inputs[k]) +
                           " does not broadcast to " + describe(result));
    collapseDims(args.dims[k]);
    const Dims &d = args.dims[k];
    args.in[k] = inputs[k].data;
    args.type[k] = inputs[k].dtype;
    args.dense[k] = d.rank == 1 && d.stride[0] == 1;
    args.vec[k] = args.dense[k] &&
                  alignedTo(inputs[k].data,
                            kFusedWidth * size_t(inputs[k].elementSize()));
  }
  int kept = 0;
  for (int s = 0; s < numSteps; ++s) {
    args.steps[s] = steps[s];
    // A step reading register r = numInputs + t with t < s - 1 needs t's
    // result kept (t = s - 1 is the previous result, in registers).
    int regs[] = {steps[s].lhs, steps[s].isBinary ? steps[s].rhs : -1};
    for (int r : regs)
      if (r - numInputs >= 0 && r - numInputs < s - 1)
        args.keep |= 1u << (r - numInputs);
  }
  for (int s = 0; s < numSteps; ++s)
    kept = args.keep >> s & 1u ? s + 1 : kept;
  if (sum && n == 0)
    return cudaCheck("fused_elementwise",
                     cudaMemsetAsync(sum->data, 0, sum->byteSize(), stream));
  if (n == 0)
    return Status::success();
  args.vecOut =
      alignedTo(result.data, kFusedWidth * size_t(result.elementSize()));
  if (sum)
    return fusedSum(args, kept, inputs, numInputs, steps, numSteps, result,
                    *sum, stream);
  // 32-bit index arithmetic when i0 plus a grid stride cannot overflow
  // (broadcast offsets are below n).
  bool narrow = fitsInt32(n, n);
  unsigned grid = gridFor((n + kFusedWidth - 1) / kFusedWidth, kFusedThreads);
  // Slots up to the last kept step.
  size_t shared = size_t(kept) * kFusedWidth * kFusedThreads * sizeof(float);
  dispatchFloat(result.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (narrow)
      launchKernel(fusedKernel<T, int32_t>, grid, kFusedThreads, shared, stream,
                   args, result.as<T>(), int32_t(n));
    else
      launchKernel(fusedKernel<T, int64_t>, grid, kFusedThreads, shared, stream,
                   args, result.as<T>(), n);
  });
  return launched("fused_elementwise");
}
