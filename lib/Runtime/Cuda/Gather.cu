//===- Gather.cu - gather_nd, scatter_nd ----------------------------------===//
//
// The host checks every index before writing anything; the device cannot
// without a synchronisation, so a bad index is recorded in the error slot
// (deviceStatus reports it) and only its own slice is affected: gather_nd
// writes zeros there, scatter_nd skips that tuple.
//
// scatter_nd's host semantics are serial, in index order. The device keeps
// them where the result can be made order-independent:
// * None: the last tuple naming a target wins. A first pass picks, per
//   target slot, the highest tuple number with an atomic max; the second
//   pass lets only that tuple write, so the result is deterministic.
// * Add/Mul/Max/Min: atomic read-modify-write per element (native atomics
//   for f32/f64/32- and 64-bit integer add; compare-and-swap loops
//   otherwise, on the enclosing aligned 32-bit word for 1- and 2-byte
//   types). Integer add/mul wrap and are exact in any order; max/min agree
//   with the host except that the sign of an equal zero (and which NaN
//   payload) may come from another duplicate; float add/mul round in an
//   unspecified order.
//
//===----------------------------------------------------------------------===//

#include "Common.h"

using namespace lamina::rt;
using namespace lamina::rt::cuda;
using namespace lamina::rt::cuda::detail;

namespace {
/// The element offset of index tuple t (k indices into dims d.size[0..k),
/// strides d.stride) or false, recording the first bad index when `report`.
__device__ bool tupleOffset(const void *indices, bool wide, int64_t t, int k,
                            const Dims &d, bool report, DataError code,
                            ErrorSlot *slot, int64_t &off) {
  off = 0;
  for (int j = 0; j < k; ++j) {
    int64_t idx = readIndex(indices, wide, t * k + j);
    int64_t size = d.size[j];
    int64_t norm = idx < 0 ? idx + size : idx;
    if (norm < 0 || norm >= size) {
      if (report)
        recordError(slot, code, t * k + j, idx, size);
      return false;
    }
    off += norm * d.stride[j];
  }
  return true;
}

/// result[t, in] = data[batch(t) * batchStride + offset(t) + in].
template <typename U>
__global__ void gatherNDKernel(const U *data, const void *indices, bool wide,
                               int k, Dims d, int64_t perBatch,
                               int64_t batchStride, int64_t slice, U *y,
                               int64_t n, ErrorSlot *slot) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t t = i / slice, in = i % slice, off;
    if (!tupleOffset(indices, wide, t, k, d, in == 0, DataError::GatherNDIndex,
                     slot, off)) {
      y[i] = U(0);
      continue;
    }
    y[i] = data[(t / perBatch) * batchStride + off + in];
  }
}

/// Pass 1 of reduction None: winner[slot] = max(t + 1) over the tuples
/// naming it (0: none). Reports bad indices. W: unsigned, or unsigned long
/// long past 2^32 - 1 tuples.
template <typename W>
__global__ void scatterWinnerKernel(const void *indices, bool wide, int k,
                                    Dims d, int64_t slice, int64_t tuples,
                                    W *winner, ErrorSlot *slot) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < tuples;
       t += int64_t(gridDim.x) * blockDim.x) {
    int64_t off;
    if (tupleOffset(indices, wide, t, k, d, true, DataError::ScatterIndex,
                    slot, off))
      atomicMax(winner + off / slice, W(t + 1));
  }
}

/// Pass 2: each update element is written by the winning tuple only. The
/// winners were all written by the previous kernel on the stream.
template <typename U, typename W>
__global__ void scatterWriteKernel(const void *indices, bool wide, int k,
                                   Dims d, int64_t slice, const U *updates,
                                   U *y, const W *winner, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t t = i / slice, in = i % slice, off;
    if (tupleOffset(indices, wide, t, k, d, false, DataError::None, nullptr,
                    off) &&
        winner[off / slice] == W(t + 1))
      y[off + in] = updates[i];
  }
}

template <typename C>
__device__ C combine(ScatterReduction r, C a, C v) {
  switch (r) {
  case ScatterReduction::Add: return math::add(a, v);
  case ScatterReduction::Mul: return math::mul(a, v);
  case ScatterReduction::Max: return math::maximum(a, v);
  default: return math::minimum(a, v);
  }
}

template <typename T, typename W> __device__ T fromBits(W w) {
  T t; // little-endian: T is W's low bytes
  memcpy(&t, &w, sizeof(T));
  return t;
}
template <typename W, typename T> __device__ W toBits(T t) {
  W w = 0;
  memcpy(&w, &t, sizeof(T));
  return w;
}

/// *p = combine(*p, v), atomically.
template <typename T>
__device__ void atomicCombine(T *p, Compute<T> v, ScatterReduction r) {
  if (r == ScatterReduction::Add) {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> ||
                  std::is_same_v<T, int32_t> || std::is_same_v<T, uint32_t>) {
      atomicAdd(p, v);
      return;
    } else if constexpr (std::is_same_v<T, int64_t> ||
                         std::is_same_v<T, uint64_t>) {
      // Two's complement: the unsigned sum wraps exactly as math::add.
      atomicAdd(reinterpret_cast<unsigned long long *>(p),
                (unsigned long long)v);
      return;
    }
  }
  if constexpr (sizeof(T) == 8) {
    auto *word = reinterpret_cast<unsigned long long *>(p);
    unsigned long long old = *word, assumed;
    do {
      assumed = old;
      T next = storeValue<T>(combine(r, loadValue(fromBits<T>(assumed)), v));
      unsigned long long bits = toBits<unsigned long long>(next);
      if (bits == assumed)
        return; // unchanged (max/min that lose): nothing to write
      old = atomicCAS(word, assumed, bits);
    } while (old != assumed);
  } else {
    // 4 bytes, or 1 or 2 bytes inside their aligned 32-bit word (the
    // neighbours are rewritten with the values the CAS saw).
    auto addr = reinterpret_cast<uintptr_t>(p);
    unsigned *word = reinterpret_cast<unsigned *>(addr & ~uintptr_t(3));
    unsigned shift = unsigned(addr & 3) * 8;
    unsigned mask = 0xffffffffu;
    if constexpr (sizeof(T) < 4)
      mask = ((1u << (8 * sizeof(T))) - 1) << shift;
    unsigned old = *word, assumed;
    do {
      assumed = old;
      T cur = fromBits<T>(unsigned((assumed & mask) >> shift));
      T next = storeValue<T>(combine(r, loadValue(cur), v));
      unsigned bits = (assumed & ~mask) | (toBits<unsigned>(next) << shift);
      if (bits == assumed)
        return;
      old = atomicCAS(word, assumed, bits);
    } while (old != assumed);
  }
}

template <typename T>
__global__ void scatterReduceKernel(const void *indices, bool wide, int k,
                                    Dims d, int64_t slice, const T *updates,
                                    T *y, ScatterReduction r, int64_t n,
                                    ErrorSlot *slot) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t t = i / slice, in = i % slice, off;
    if (tupleOffset(indices, wide, t, k, d, in == 0, DataError::ScatterIndex,
                    slot, off))
      atomicCombine(y + off + in, loadValue(updates[i]), r);
  }
}

/// Dims [first, first + k) of `data` (sizes and row-major strides).
Dims indexedDims(const Tensor &data, int first, int k) {
  int64_t strides[kMaxRank];
  rowMajorStrides(data.shape, data.rank, strides);
  Dims d;
  d.rank = k;
  for (int j = 0; j < k; ++j) {
    d.size[j] = data.shape[first + j];
    d.stride[j] = strides[first + j];
  }
  return d;
}
} // namespace

Status lamina::rt::cuda::gatherND(const Tensor &data, const Tensor &indices,
                                  int64_t batchDims, const Tensor &result,
                                  cudaStream_t stream) {
  int64_t k;
  if (Status s = checkGatherND(data, indices, batchDims, result, k); !s.ok())
    return s;
  int r = data.rank, q = indices.rank;
  int64_t b = batchDims;
  if (r > kMaxRank)
    return Status::error("gather_nd: rank above " + std::to_string(kMaxRank) +
                         ": " + describe(data));
  int64_t n = result.numElements();
  if (n == 0)
    return Status::success();
  ErrorSlot *slot = errorSlot();
  if (!slot)
    return Status::error("gather_nd: no device error slot");
  int64_t perBatch = numElements(indices.shape + b, q - 1 - int(b));
  int64_t batchStride = numElements(data.shape + b, r - int(b));
  int64_t slice = numElements(data.shape + b + k, r - int(b + k));
  Dims d = indexedDims(data, int(b), int(k));
  dispatchSize(data.elementSize(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    launchKernel(gatherNDKernel<U>, gridFor(n), 256, 0, stream, data.as<U>(),
                 indices.data, indices.dtype == DType::I64, int(k), d,
                 std::max<int64_t>(perBatch, 1), batchStride, slice,
                 result.as<U>(), n, slot);
  });
  return launched("gather_nd");
}

Status lamina::rt::cuda::scatterND(const Tensor &data, const Tensor &indices,
                                   const Tensor &updates,
                                   ScatterReduction reduction,
                                   const Tensor &result, cudaStream_t stream) {
  int64_t k;
  if (Status s = checkScatterND(data, indices, updates, reduction, result, k);
      !s.ok())
    return s;
  int q = indices.rank;
  if (data.rank > kMaxRank)
    return Status::error("scatter_nd: rank above " + std::to_string(kMaxRank) +
                         ": " + describe(data));
  if (result.data != data.data && data.byteSize())
    if (Status s = cudaCheck("scatter_nd",
                             cudaMemcpyAsync(result.data, data.data,
                                             data.byteSize(),
                                             cudaMemcpyDeviceToDevice, stream));
        !s.ok())
      return s;
  int64_t n = updates.numElements();
  if (n == 0)
    return Status::success();
  ErrorSlot *slot = errorSlot();
  if (!slot)
    return Status::error("scatter_nd: no device error slot");
  int64_t tuples = numElements(indices.shape, q - 1);
  int64_t slice = numElements(data.shape + k, data.rank - int(k));
  Dims d = indexedDims(data, 0, int(k));
  bool wide = indices.dtype == DType::I64;
  if (reduction != ScatterReduction::None) {
    dispatch(data.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      launchKernel(scatterReduceKernel<T>, gridFor(n), 256, 0, stream,
                   indices.data, wide, int(k), d, slice, updates.as<T>(),
                   result.as<T>(), reduction, n, slot);
    });
    return launched("scatter_nd");
  }
  // None: choose the last tuple per target slot, then write. The winners
  // take 4 bytes per slot of data's first k dims (8 past 2^32 - 1 tuples).
  bool narrow = tuples < int64_t(UINT32_MAX);
  int64_t slots = numElements(data.shape, int(k));
  size_t bytes = size_t(slots) * (narrow ? 4 : 8);
  void *winner = nullptr;
  if (Status s = cudaCheck("scatter_nd",
                           cudaMallocAsync(&winner, bytes, stream));
      !s.ok())
    return s;
  auto launch = [&](auto *w) -> Status {
    using W = std::remove_pointer_t<decltype(w)>;
    if (Status s = cudaCheck("scatter_nd",
                             cudaMemsetAsync(w, 0, bytes, stream));
        !s.ok())
      return s;
    launchKernel(scatterWinnerKernel<W>, gridFor(tuples), 256, 0, stream,
                 indices.data, wide, int(k), d, slice, tuples, w, slot);
    if (Status s = launched("scatter_nd"); !s.ok())
      return s;
    dispatchSize(data.elementSize(), [&](auto tag) {
      using U = typename decltype(tag)::type;
      launchKernel(scatterWriteKernel<U, W>, gridFor(n), 256, 0, stream,
                   indices.data, wide, int(k), d, slice, updates.as<U>(),
                   result.as<U>(), w, n);
    });
    return launched("scatter_nd");
  };
  Status s = narrow ? launch(static_cast<unsigned *>(winner))
                    : launch(static_cast<unsigned long long *>(winner));
  // Stream-ordered: freed after the kernels that use it.
  Status freed = cudaCheck("scatter_nd", cudaFreeAsync(winner, stream));
  return s.ok() ? freed : s;
}
