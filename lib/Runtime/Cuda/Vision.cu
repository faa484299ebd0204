//===- Vision.cu - convolution and pooling on the device ------------------===//
//
// Direct kernels, one thread per element written, so no atomics and no
// scratch: the forward ops per output element; the input gradients per
// input element, visiting the output positions whose windows read it; the
// weight gradient per weight element, summing over the batch and output
// positions in a fixed order. Correct for every geometry the host takes
// and deterministic, not fast: cuDNN's convolutions are the way to speed
// (docs/cuda.md, "Vision").
//
//===----------------------------------------------------------------------===//

#include "Common.h"

using namespace lamina::rt;
using namespace lamina::rt::cuda;
using namespace lamina::rt::cuda::detail;
using lamina::rt::detail::checkConv;
using lamina::rt::detail::checkPool;
using lamina::rt::detail::poolDivisor;
using lamina::rt::detail::WindowGeometry;

namespace {
constexpr float kInf = __builtin_huge_valf();

/// Input position of tap k of output position o along spatial dim d.
__device__ inline int64_t tapAt(const WindowGeometry &g, int d, int64_t o,
                                int64_t k) {
  return o * g.stride[d] - g.padBegin[d] + k * g.dilation[d];
}

/// Splits a plane offset into (d, h, w) of `size`.
__device__ inline void split3(int64_t i, const int64_t *size, int64_t *at) {
  at[2] = i % size[2];
  i /= size[2];
  at[1] = i % size[1];
  at[0] = i / size[1];
}

/// The output positions along dim d whose window tap k reads input
/// position i: o with o * stride = i + padBegin - k * dilation, in range.
__device__ inline bool outputOf(const WindowGeometry &g, int d, int64_t i,
                                int64_t k, int64_t &o) {
  int64_t t = i + g.padBegin[d] - k * g.dilation[d];
  if (t < 0 || t % g.stride[d])
    return false;
  o = t / g.stride[d];
  return o < g.out[d];
}

template <typename T>
__global__ void convKernel(WindowGeometry g, const T *x, const T *w,
                           const T *b, T *y, int64_t n) {
  int64_t cg = g.channels / g.group, mg = g.outChannels / g.group;
  int64_t p = g.outSize(), in = g.inSize(), ks = g.kernelSize();
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    int64_t pos = e % p, m = (e / p) % g.outChannels, img = e / p / g.outChannels;
    int64_t o[3];
    split3(pos, g.out, o);
    int64_t grp = m / mg;
    float acc = b ? loadValue(b[m]) : 0.0f;
    for (int64_t c = 0; c < cg; ++c) {
      const T *xc = x + (img * g.channels + grp * cg + c) * in;
      const T *wc = w + (m * cg + c) * ks;
      for (int64_t kd = 0; kd < g.kernel[0]; ++kd) {
        int64_t id = tapAt(g, 0, o[0], kd);
        if (id < 0 || id >= g.in[0])
          continue;
        for (int64_t kh = 0; kh < g.kernel[1]; ++kh) {
          int64_t ih = tapAt(g, 1, o[1], kh);
          if (ih < 0 || ih >= g.in[1])
            continue;
          for (int64_t kw = 0; kw < g.kernel[2]; ++kw) {
            int64_t iw = tapAt(g, 2, o[2], kw);
            if (iw >= 0 && iw < g.in[2])
              acc += loadValue(xc[(id * g.in[1] + ih) * g.in[2] + iw]) *
                     loadValue(wc[(kd * g.kernel[1] + kh) * g.kernel[2] + kw]);
          }
        }
      }
    }
    y[e] = storeValue<T>(acc);
  }
}

template <typename T>
__global__ void convGradInputKernel(WindowGeometry g, const T *w, const T *dy,
                                    T *dx, int64_t n) {
  int64_t cg = g.channels / g.group, mg = g.outChannels / g.group;
  int64_t p = g.outSize(), in = g.inSize(), ks = g.kernelSize();
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    int64_t pos = e % in, c = (e / in) % g.channels, img = e / in / g.channels;
    int64_t i[3];
    split3(pos, g.in, i);
    int64_t grp = c / cg, cInGroup = c % cg;
    float acc = 0.0f;
    for (int64_t kd = 0; kd < g.kernel[0]; ++kd) {
      int64_t od;
      if (!outputOf(g, 0, i[0], kd, od))
        continue;
      for (int64_t kh = 0; kh < g.kernel[1]; ++kh) {
        int64_t oh;
        if (!outputOf(g, 1, i[1], kh, oh))
          continue;
        for (int64_t kw = 0; kw < g.kernel[2]; ++kw) {
          int64_t ow;
          if (!outputOf(g, 2, i[2], kw, ow))
            continue;
          int64_t o = (od * g.out[1] + oh) * g.out[2] + ow;
          int64_t tap = (kd * g.kernel[1] + kh) * g.kernel[2] + kw;
          for (int64_t m = grp * mg; m < (grp + 1) * mg; ++m)
            acc += loadValue(dy[(img * g.outChannels + m) * p + o]) *
                   loadValue(w[(m * cg + cInGroup) * ks + tap]);
        }
      }
    }
    dx[e] = storeValue<T>(acc);
  }
}

template <typename T>
__global__ void convGradWeightKernel(WindowGeometry g, const T *x,
                                     const T *dy, T *dw, int64_t n) {
  int64_t cg = g.channels / g.group, mg = g.outChannels / g.group;
  int64_t p = g.outSize(), in = g.inSize(), ks = g.kernelSize();
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    int64_t tap = e % ks, c = (e / ks) % cg, m = e / ks / cg;
    int64_t k[3];
    split3(tap, g.kernel, k);
    int64_t xc = (m / mg) * cg + c;
    float acc = 0.0f;
    for (int64_t img = 0; img < g.batch; ++img) {
      const T *xp = x + (img * g.channels + xc) * in;
      const T *dyp = dy + (img * g.outChannels + m) * p;
      for (int64_t o = 0; o < p; ++o) {
        int64_t at[3];
        split3(o, g.out, at);
        int64_t id = tapAt(g, 0, at[0], k[0]), ih = tapAt(g, 1, at[1], k[1]),
                iw = tapAt(g, 2, at[2], k[2]);
        if (id >= 0 && id < g.in[0] && ih >= 0 && ih < g.in[1] && iw >= 0 &&
            iw < g.in[2])
          acc += loadValue(xp[(id * g.in[1] + ih) * g.in[2] + iw]) *
                 loadValue(dyp[o]);
      }
    }
    dw[e] = storeValue<T>(acc);
  }
}

/// The plane offset of the first maximum of output position o's window
/// (NaN wins), or -1 for a window of padding only; the host's order.
template <typename T>
__device__ int64_t argmaxOf(const WindowGeometry &g, const T *xp,
                            const int64_t *o) {
  int64_t best = -1;
  float bestValue = 0.0f;
  for (int64_t kd = 0; kd < g.kernel[0]; ++kd) {
    int64_t id = tapAt(g, 0, o[0], kd);
    if (id < 0 || id >= g.in[0])
      continue;
    for (int64_t kh = 0; kh < g.kernel[1]; ++kh) {
      int64_t ih = tapAt(g, 1, o[1], kh);
      if (ih < 0 || ih >= g.in[1])
        continue;
      for (int64_t kw = 0; kw < g.kernel[2]; ++kw) {
        int64_t iw = tapAt(g, 2, o[2], kw);
        if (iw < 0 || iw >= g.in[2])
          continue;
        int64_t i = (id * g.in[1] + ih) * g.in[2] + iw;
        float v = loadValue(xp[i]);
        if (best < 0 || v > bestValue || (v != v && bestValue == bestValue)) {
          best = i;
          bestValue = v;
        }
      }
    }
  }
  return best;
}

/// Sum of output position o's window taps inside the input.
template <typename T>
__device__ float windowSum(const WindowGeometry &g, const T *xp,
                           const int64_t *o) {
  float sum = 0.0f;
  for (int64_t kd = 0; kd < g.kernel[0]; ++kd) {
    int64_t id = tapAt(g, 0, o[0], kd);
    if (id < 0 || id >= g.in[0])
      continue;
    for (int64_t kh = 0; kh < g.kernel[1]; ++kh) {
      int64_t ih = tapAt(g, 1, o[1], kh);
      if (ih < 0 || ih >= g.in[1])
        continue;
      for (int64_t kw = 0; kw < g.kernel[2]; ++kw) {
        int64_t iw = tapAt(g, 2, o[2], kw);
        if (iw >= 0 && iw < g.in[2])
          sum += loadValue(xp[(id * g.in[1] + ih) * g.in[2] + iw]);
      }
    }
  }
  return sum;
}

/// max (avg false) or average pool, one thread per output element.
template <typename T>
__global__ void poolKernel(WindowGeometry g, const T *x, bool avg,
                           bool includePad, T *y, int64_t n) {
  int64_t p = g.outSize(), in = g.inSize();
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    int64_t o[3];
    split3(e % p, g.out, o);
    const T *xp = x + (e / p) * in;
    if (avg) {
      int64_t div = poolDivisor(g, o[0], o[1], o[2], includePad);
      y[e] = storeValue<T>(div > 0 ? windowSum(g, xp, o) / float(div) : 0.0f);
    } else {
      int64_t i = argmaxOf(g, xp, o);
      y[e] = i < 0 ? storeValue<T>(-kInf) : xp[i];
    }
  }
}

/// graph.max_pool_indices: each window's argmax in the flattened input.
template <typename T>
__global__ void poolIndicesKernel(WindowGeometry g, const T *x,
                                  bool columnMajor, int64_t *indices,
                                  int64_t n) {
  int64_t p = g.outSize(), in = g.inSize();
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    int64_t o[3];
    split3(e % p, g.out, o);
    int64_t plane = e / p, i = argmaxOf(g, x + plane * in, o);
    i = i < 0 ? 0 : i;
    if (columnMajor) {
      int64_t at[3];
      split3(i, g.in, at);
      i = (at[2] * g.in[1] + at[1]) * g.in[0] + at[0];
    }
    indices[e] = plane * in + i;
  }
}

/// The pools' input gradient, one thread per input element: the output
/// windows that read it, in window order.
template <typename T>
__global__ void poolGradKernel(WindowGeometry g, const T *x, const T *dy,
                               bool avg, bool includePad, T *dx, int64_t n) {
  int64_t p = g.outSize(), in = g.inSize();
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    int64_t pos = e % in, plane = e / in;
    int64_t i[3], o[3];
    split3(pos, g.in, i);
    const T *dyp = dy + plane * p;
    float acc = 0.0f;
    for (int64_t kd = 0; kd < g.kernel[0]; ++kd) {
      if (!outputOf(g, 0, i[0], kd, o[0]))
        continue;
      for (int64_t kh = 0; kh < g.kernel[1]; ++kh) {
        if (!outputOf(g, 1, i[1], kh, o[1]))
          continue;
        for (int64_t kw = 0; kw < g.kernel[2]; ++kw) {
          if (!outputOf(g, 2, i[2], kw, o[2]))
            continue;
          int64_t out = (o[0] * g.out[1] + o[1]) * g.out[2] + o[2];
          if (avg) {
            int64_t div = poolDivisor(g, o[0], o[1], o[2], includePad);
            if (div > 0)
              acc += loadValue(dyp[out]) / float(div);
          } else if (argmaxOf(g, x + plane * in, o) == pos) {
            acc += loadValue(dyp[out]);
          }
        }
      }
    }
    dx[e] = storeValue<T>(acc);
  }
}

Status deviceFloatOnly(const char *name, const Tensor &t) {
  return isDeviceFloat(t.dtype) ? Status::success() : unsupported(name, t);
}
} // namespace

Status lamina::rt::cuda::conv(const Tensor &input, const Tensor &weight,
                              const Tensor *bias, const int64_t *strides,
                              const int64_t *dilations, const int64_t *pads,
                              int64_t group, const Tensor &result,
                              cudaStream_t stream) {
  WindowGeometry g;
  if (Status s = checkConv("conv", input, weight, bias, strides, dilations,
                           pads, group, result, g);
      !s.ok())
    return s;
  if (Status s = deviceFloatOnly("conv", input); !s.ok())
    return s;
  int64_t n = result.numElements();
  if (n == 0)
    return Status::success();
  dispatchFloat(input.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launchKernel(convKernel<T>, gridFor(n), 256, 0, stream, g,
                 input.as<T>(), weight.as<T>(),
                 bias ? bias->as<T>() : static_cast<const T *>(nullptr),
                 result.as<T>(), n);
  });
  return launched("conv");
}

Status lamina::rt::cuda::convBackwardInput(
    const Tensor &weight, const Tensor &gradResult, const int64_t *strides,
    const int64_t *dilations, const int64_t *pads, int64_t group,
    const Tensor &gradInput, cudaStream_t stream) {
  WindowGeometry g;
  if (Status s = checkConv("conv_grad_input", gradInput, weight, nullptr,
                           strides, dilations, pads, group, gradResult, g);
      !s.ok())
    return s;
  if (Status s = deviceFloatOnly("conv_grad_input", weight); !s.ok())
    return s;
  int64_t n = gradInput.numElements();
  if (n == 0)
    return Status::success();
  dispatchFloat(weight.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launchKernel(convGradInputKernel<T>, gridFor(n), 256, 0, stream, g,
                 weight.as<T>(), gradResult.as<T>(), gradInput.as<T>(), n);
  });
  return launched("conv_grad_input");
}

Status lamina::rt::cuda::convBackwardWeight(
    const Tensor &input, const Tensor &gradResult, const int64_t *strides,
    const int64_t *dilations, const int64_t *pads, int64_t group,
    const Tensor &gradWeight, cudaStream_t stream) {
  WindowGeometry g;
  if (Status s = checkConv("conv_grad_weight", input, gradWeight, nullptr,
                           strides, dilations, pads, group, gradResult, g);
      !s.ok())
    return s;
  if (Status s = deviceFloatOnly("conv_grad_weight", input); !s.ok())
    return s;
  int64_t n = gradWeight.numElements();
  if (n == 0)
    return Status::success();
  dispatchFloat(input.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launchKernel(convGradWeightKernel<T>, gridFor(n, 128), 128, 0, stream, g,
                 input.as<T>(), gradResult.as<T>(), gradWeight.as<T>(), n);
  });
  return launched("conv_grad_weight");
}

namespace {
Status poolForward(const char *name, bool avg, const Tensor &input,
                   const int64_t *kernel, const int64_t *strides,
                   const int64_t *dilations, const int64_t *pads,
                   bool includePad, const Tensor &result, cudaStream_t stream) {
  WindowGeometry g;
  if (Status s = checkPool(name, input, kernel, strides, dilations, pads,
                           result, g);
      !s.ok())
    return s;
  if (Status s = deviceFloatOnly(name, input); !s.ok())
    return s;
  int64_t n = result.numElements();
  if (n == 0)
    return Status::success();
  dispatchFloat(input.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launchKernel(poolKernel<T>, gridFor(n), 256, 0, stream, g, input.as<T>(),
                 avg, includePad, result.as<T>(), n);
  });
  return launched(name);
}

Status poolBackward(const char *name, bool avg, const Tensor *input,
                    const Tensor &gradResult, const int64_t *kernel,
                    const int64_t *strides, const int64_t *dilations,
                    const int64_t *pads, bool includePad,
                    const Tensor &gradInput, cudaStream_t stream) {
  WindowGeometry g;
  if (Status s = checkPool(name, gradInput, kernel, strides, dilations, pads,
                           gradResult, g);
      !s.ok())
    return s;
  if (input && (!sameShape(*input, gradInput) ||
                input->dtype != gradInput.dtype))
    return Status::error(std::string(name) + ": gradInput " +
                         describe(gradInput) + " is not shaped as the input " +
                         describe(*input));
  if (Status s = deviceFloatOnly(name, gradInput); !s.ok())
    return s;
  int64_t n = gradInput.numElements();
  if (n == 0)
    return Status::success();
  dispatchFloat(gradInput.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launchKernel(poolGradKernel<T>, gridFor(n), 256, 0, stream, g,
                 input ? input->as<T>() : static_cast<const T *>(nullptr),
                 gradResult.as<T>(), avg, includePad, gradInput.as<T>(), n);
  });
  return launched(name);
}
} // namespace

Status lamina::rt::cuda::maxPool(const Tensor &input, const int64_t *kernel,
                                 const int64_t *strides,
                                 const int64_t *dilations, const int64_t *pads,
                                 const Tensor &result, cudaStream_t stream) {
  return poolForward("max_pool", false, input, kernel, strides, dilations,
                     pads, false, result, stream);
}

Status lamina::rt::cuda::maxPoolIndices(const Tensor &input,
                                        const int64_t *kernel,
                                        const int64_t *strides,
                                        const int64_t *dilations,
                                        const int64_t *pads, bool columnMajor,
                                        const Tensor &indices,
                                        cudaStream_t stream) {
  Tensor pooled = indices;
  pooled.dtype = input.dtype;
  WindowGeometry g;
  if (Status s = checkPool("max_pool_indices", input, kernel, strides,
                           dilations, pads, pooled, g);
      !s.ok())
    return s;
  if (indices.dtype != DType::I64)
    return Status::error("max_pool_indices: indices " + describe(indices) +
                         " must be i64");
  if (Status s = deviceFloatOnly("max_pool_indices", input); !s.ok())
    return s;
  int64_t n = indices.numElements();
  if (n == 0)
    return Status::success();
  dispatchFloat(input.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launchKernel(poolIndicesKernel<T>, gridFor(n), 256, 0, stream, g,
                 input.as<T>(), columnMajor, indices.as<int64_t>(), n);
  });
  return launched("max_pool_indices");
}

Status lamina::rt::cuda::maxPoolBackward(
    const Tensor &input, const Tensor &gradResult, const int64_t *kernel,
    const int64_t *strides, const int64_t *dilations, const int64_t *pads,
    const Tensor &gradInput, cudaStream_t stream) {
  return poolBackward("max_pool_grad", false, &input, gradResult, kernel,
                      strides, dilations, pads, false, gradInput, stream);
}

Status lamina::rt::cuda::avgPool(const Tensor &input, const int64_t *kernel,
                                 const int64_t *strides,
                                 const int64_t *dilations, const int64_t *pads,
                                 bool countIncludePad, const Tensor &result,
                                 cudaStream_t stream) {
  return poolForward("avg_pool", true, input, kernel, strides, dilations,
                     pads, countIncludePad, result, stream);
}

Status lamina::rt::cuda::avgPoolBackward(
    const Tensor &gradResult, const int64_t *kernel, const int64_t *strides,
    const int64_t *dilations, const int64_t *pads, bool countIncludePad,
    const Tensor &gradInput, cudaStream_t stream) {
  return poolBackward("avg_pool_grad", true, nullptr, gradResult, kernel,
                      strides, dilations, pads, countIncludePad, gradInput,
                      stream);
}
