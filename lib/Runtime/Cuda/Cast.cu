//===- Cast.cu - cast between every pair of element types -----------------===//
//
// One kernel per (source, destination) pair, each the host cast's
// convert<D>(load(x)): float to integer truncates toward zero, saturating,
// NaN -> 0; anything to i1 is `!= 0`; integers wrap into narrower ones;
// f16/bf16 round to nearest even once (from f64 and integers too, through
// Math.h's round-to-odd double -> float step).
//
//===----------------------------------------------------------------------===//

#include "Common.h"

using namespace lamina::rt;
using namespace lamina::rt::cuda;
using namespace lamina::rt::cuda::detail;

namespace {
/// std::numeric_limits is host-only without --expt-relaxed-constexpr.
template <typename I> struct IntRange;
#define LAMINA_INT_RANGE(T, LO, HI)                                            \
  template <> struct IntRange<T> {                                             \
    static constexpr T lo = LO, hi = HI;                                       \
  };
LAMINA_INT_RANGE(int8_t, INT8_MIN, INT8_MAX)
LAMINA_INT_RANGE(int16_t, INT16_MIN, INT16_MAX)
LAMINA_INT_RANGE(int32_t, INT32_MIN, INT32_MAX)
LAMINA_INT_RANGE(int64_t, INT64_MIN, INT64_MAX)
LAMINA_INT_RANGE(uint8_t, 0, UINT8_MAX)
LAMINA_INT_RANGE(uint16_t, 0, UINT16_MAX)
LAMINA_INT_RANGE(uint32_t, 0, UINT32_MAX)
LAMINA_INT_RANGE(uint64_t, 0, UINT64_MAX)
#undef LAMINA_INT_RANGE

/// The host's floatToInt (Elementwise.cpp): truncation toward zero,
/// saturating; NaN gives 0. `hi` may round up to 2^N in F, hence >=.
template <typename I, typename F> __device__ I floatToInt(F x) {
  if (x != x)
    return I(0);
  constexpr F lo = F(IntRange<I>::lo);
  constexpr F hi = F(IntRange<I>::hi);
  if (x <= lo)
    return IntRange<I>::lo;
  if (x >= hi)
    return IntRange<I>::hi;
  return I(x);
}

template <typename D, typename C> __device__ D convert(C v) {
  if constexpr (isIntStorage<D> && std::is_floating_point_v<C>)
    return floatToInt<D>(v);
  else
    return storeValue<D>(v);
}

template <typename S, typename D>
__global__ void castKernel(const S *x, D *y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = convert<D>(loadValue(x[i]));
}

/// Float pairs (the training step's f32 <-> bf16 casts): W elements per
/// thread through one vector load and store of up to 16 bytes each; the
/// n % W tail elementwise. Same per-element conversion as castKernel.
template <typename S, typename D, int W>
__global__ void castPackKernel(const S *x, D *y, int64_t n) {
  int64_t groups = n / W,
          first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x,
          stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t g = first; g < groups; g += stride) {
    Pack<S, W> a = reinterpret_cast<const Pack<S, W> *>(x)[g];
    Pack<D, W> b;
#pragma unroll
    for (int e = 0; e < W; ++e)
      b.v[e] = convert<D>(loadValue(a.v[e]));
    reinterpret_cast<Pack<D, W> *>(y)[g] = b;
  }
  for (int64_t i = groups * W + first; i < n; i += stride)
    y[i] = convert<D>(loadValue(x[i]));
}
} // namespace

Status lamina::rt::cuda::cast(const Tensor &input, const Tensor &result,
                              cudaStream_t stream) {
  if (!sameShape(input, result))
    return Status::error("cast: result " + describe(result) +
                         " has another shape than " + describe(input));
  int64_t n = input.numElements();
  if (n == 0)
    return Status::success();
  if (input.dtype == result.dtype) {
    if (input.data == result.data)
      return Status::success();
    return cudaCheck("cast", cudaMemcpyAsync(result.data, input.data,
                                             input.byteSize(),
                                             cudaMemcpyDeviceToDevice, stream));
  }
  dispatch(input.dtype, [&](auto from) {
    using S = typename decltype(from)::type;
    dispatch(result.dtype, [&](auto to) {
      using D = typename decltype(to)::type;
      constexpr size_t wide = sizeof(S) > sizeof(D) ? sizeof(S) : sizeof(D);
      constexpr int W = int(16 / wide);
      if constexpr (isFloatStorage<S> && isFloatStorage<D>) {
        if (alignedTo(input.data, W * sizeof(S)) &&
            alignedTo(result.data, W * sizeof(D))) {
          launchKernel(castPackKernel<S, D, W>, gridFor(n / W + 1), 256, 0,
                       stream, input.as<S>(), result.as<D>(), n);
          return;
        }
      }
      launchKernel(castKernel<S, D>, gridFor(n), 256, 0, stream, input.as<S>(),
                   result.as<D>(), n);
    });
  });
  return launched("cast");
}
