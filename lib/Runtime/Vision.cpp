//===- Vision.cpp - convolution and pooling -------------------------------===//
//
// Convolution is im2col and the runtime's GEMM (oneDNN's sgemm for f32,
// OpenBLAS for f64), per image and group: the same code for every stride,
// dilation, pad and group, and for f64 reference runs, which oneDNN's
// convolution primitives do not have (docs/dependencies.md). A 1x1 stride-1
// unpadded convolution reads its input as the column matrix directly. The
// pools are direct loops over each (image, channel) plane.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

using namespace lamina::rt;
using namespace lamina::rt::detail;

namespace {
std::string dimsString(const int64_t *v, int n) {
  std::string s = "[";
  for (int i = 0; i < n; ++i)
    s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

/// Fills the spatial part of `g` from the input's shape and the
/// attributes; `outFloor` / `outCeil` get the window counts either way.
Status readGeometry(const char *name, const Tensor &input,
                    const int64_t *kernel, const int64_t *strides,
                    const int64_t *dilations, const int64_t *pads,
                    WindowGeometry &g, int64_t *outFloor, int64_t *outCeil) {
  int s = input.rank - 2;
  if (s < 1 || s > 3)
    return Status::error(std::string(name) + ": input " + describe(input) +
                         " is not [N, C, S...] with 1 to 3 spatial dims");
  g.batch = input.shape[0];
  g.channels = input.shape[1];
  int lead = 3 - s;
  for (int i = 0; i < s; ++i) {
    int d = lead + i;
    g.in[d] = input.shape[2 + i];
    g.kernel[d] = kernel[i];
    g.stride[d] = strides[i];
    g.dilation[d] = dilations[i];
    g.padBegin[d] = pads[i];
    g.padEnd[d] = pads[s + i];
    if (g.kernel[d] < 1 || g.stride[d] < 1 || g.dilation[d] < 1 ||
        g.padBegin[d] < 0 || g.padEnd[d] < 0)
      return Status::error(std::string(name) + ": bad window kernel " +
                           dimsString(kernel, s) + " strides " +
                           dimsString(strides, s) + " dilations " +
                           dimsString(dilations, s) + " pads " +
                           dimsString(pads, 2 * s));
    int64_t room = g.in[d] + g.padBegin[d] + g.padEnd[d] -
                   (g.dilation[d] * (g.kernel[d] - 1) + 1);
    if (room < 0)
      return Status::error(std::string(name) + ": the window does not fit " +
                           describe(input));
    outFloor[i] = room / g.stride[d] + 1;
    outCeil[i] = (room + g.stride[d] - 1) / g.stride[d] + 1;
    if ((outCeil[i] - 1) * g.stride[d] >= g.in[d] + g.padBegin[d])
      --outCeil[i];
  }
  return Status::success();
}

bool hostFloat(DType t) { return t == DType::F32 || t == DType::F64; }
} // namespace

Status lamina::rt::detail::checkConv(const char *name, const Tensor &input,
                                     const Tensor &weight, const Tensor *bias,
                                     const int64_t *strides,
                                     const int64_t *dilations,
                                     const int64_t *pads, int64_t group,
                                     const Tensor &result, WindowGeometry &g) {
  if (weight.rank != input.rank || result.rank != input.rank)
    return Status::error(std::string(name) + ": input " + describe(input) +
                         ", weight " + describe(weight) + " and result " +
                         describe(result) + " must have one rank");
  int64_t outFloor[3], outCeil[3];
  if (Status st = readGeometry(name, input, weight.shape + 2, strides,
                               dilations, pads, g, outFloor, outCeil);
      !st.ok())
    return st;
  g.group = group;
  g.outChannels = weight.shape[0];
  int s = input.rank - 2;
  bool ok = isFloat(input.dtype) && weight.dtype == input.dtype &&
            result.dtype == input.dtype && group >= 1 &&
            g.channels % group == 0 && g.outChannels % group == 0 &&
            weight.shape[1] * group == g.channels &&
            result.shape[0] == g.batch && result.shape[1] == g.outChannels;
  for (int i = 0; ok && i < s; ++i)
    ok = result.shape[2 + i] == outFloor[i];
  if (bias)
    ok = ok && bias->rank == 1 && bias->shape[0] == g.outChannels &&
         bias->dtype == input.dtype;
  if (!ok)
    return Status::error(std::string(name) + ": input " + describe(input) +
                         ", weight " + describe(weight) +
                         (bias ? ", bias " + describe(*bias) : "") +
                         " in " + std::to_string(group) +
                         " groups do not give " + describe(result));
  for (int i = 0; i < s; ++i)
    g.out[3 - s + i] = outFloor[i];
  return Status::success();
}

Status lamina::rt::detail::checkPool(const char *name, const Tensor &input,
                                     const int64_t *kernel,
                                     const int64_t *strides,
                                     const int64_t *dilations,
                                     const int64_t *pads, const Tensor &result,
                                     WindowGeometry &g) {
  int64_t outFloor[3], outCeil[3];
  if (Status st = readGeometry(name, input, kernel, strides, dilations, pads,
                               g, outFloor, outCeil);
      !st.ok())
    return st;
  g.outChannels = g.channels;
  int s = input.rank - 2;
  bool floorOk = true, ceilOk = true;
  for (int i = 0; i < s && result.rank == input.rank; ++i) {
    floorOk &= result.shape[2 + i] == outFloor[i];
    ceilOk &= result.shape[2 + i] == outCeil[i];
  }
  if (input.dtype == DType::I1 || result.dtype != input.dtype ||
      result.rank != input.rank || result.shape[0] != g.batch ||
      result.shape[1] != g.channels || !(floorOk || ceilOk))
    return Status::error(std::string(name) + ": " + describe(input) +
                         " with kernel " + dimsString(kernel, s) +
                         " does not give " + describe(result));
  for (int i = 0; i < s; ++i)
    g.out[3 - s + i] = result.shape[2 + i];
  return Status::success();
}

//===----------------------------------------------------------------------===//
// Convolution
//===----------------------------------------------------------------------===//

namespace {
/// Rows of the column matrix: input channels of one group times kernel
/// taps; columns: output positions.
int64_t colRows(const WindowGeometry &g) {
  return g.channels / g.group * g.kernelSize();
}

/// Whether the input plane is its own column matrix (1x1, stride 1, no
/// pads).
bool isPointwise(const WindowGeometry &g) {
  for (int d = 0; d < 3; ++d)
    if (g.kernel[d] != 1 || g.stride[d] != 1 || g.padBegin[d] != 0 ||
        g.padEnd[d] != 0)
      return false;
  return true;
}

/// The output positions [lo, hi) along dim d whose tap k lands inside the
/// input: o * stride - padBegin + k * dilation in [0, in).
void validRange(const WindowGeometry &g, int d, int64_t k, int64_t &lo,
                int64_t &hi) {
  int64_t shift = k * g.dilation[d] - g.padBegin[d]; // input pos of o = 0
  int64_t s = g.stride[d];
  lo = shift >= 0 ? 0 : (-shift + s - 1) / s;
  hi = g.in[d] - shift <= 0 ? 0 : (g.in[d] - shift + s - 1) / s;
  lo = std::min(lo, g.out[d]);
  hi = std::max(lo, std::min(hi, g.out[d]));
}

/// Calls row(r, c, kd, kh, kw) for each column-matrix row r: input channel
/// c of one group times kernel tap (kd, kh, kw).
template <typename F> void forEachRow(const WindowGeometry &g, F &&row) {
  int64_t r = 0, cg = g.channels / g.group;
  for (int64_t c = 0; c < cg; ++c)
    for (int64_t kd = 0; kd < g.kernel[0]; ++kd)
      for (int64_t kh = 0; kh < g.kernel[1]; ++kh)
        for (int64_t kw = 0; kw < g.kernel[2]; ++kw)
          row(r++, c, kd, kh, kw);
}

/// im2col (Col2Im false: col[r, o] = x at tap r of output o, 0 in the
/// padding) or its adjoint (true: x at tap r of output o += col[r, o]).
/// Each row walks the output positions a run of `ow` at a time, the valid
/// part clipped once per run rather than tested per element.
template <bool Col2Im, typename T>
void windowColumns(const WindowGeometry &g, T *x, T *col) {
  int64_t cols = g.outSize();
  forEachRow(g, [&](int64_t r, int64_t c, int64_t kd, int64_t kh,
                    int64_t kw) {
    int64_t dLo, dHi, hLo, hHi, wLo, wHi;
    validRange(g, 0, kd, dLo, dHi);
    validRange(g, 1, kh, hLo, hHi);
    validRange(g, 2, kw, wLo, wHi);
    T *cr = col + r * cols;
    if (!Col2Im)
      std::fill(cr, cr + cols, T(0));
    int64_t sw = g.stride[2];
    for (int64_t od = dLo; od < dHi; ++od) {
      int64_t id = od * g.stride[0] - g.padBegin[0] + kd * g.dilation[0];
      for (int64_t oh = hLo; oh < hHi; ++oh) {
        int64_t ih = oh * g.stride[1] - g.padBegin[1] + kh * g.dilation[1];
        T *xrow = x + ((c * g.in[0] + id) * g.in[1] + ih) * g.in[2] +
                  (kw * g.dilation[2] - g.padBegin[2]);
        T *crow = cr + (od * g.out[1] + oh) * g.out[2];
        for (int64_t ow = wLo; ow < wHi; ++ow) {
          if (Col2Im)
            xrow[ow * sw] += crow[ow];
          else
            crow[ow] = xrow[ow * sw];
        }
      }
    }
  });
}

template <typename T>
void im2col(const WindowGeometry &g, const T *x, T *col) {
  windowColumns<false>(g, const_cast<T *>(x), col);
}

template <typename T>
void col2imAdd(const WindowGeometry &g, const T *col, T *x) {
  windowColumns<true>(g, x, const_cast<T *>(col));
}

template <typename T>
void convForward(const WindowGeometry &g, const T *x, const T *w, const T *b,
                 T *y) {
  int64_t cg = g.channels / g.group, mg = g.outChannels / g.group;
  int64_t k = colRows(g), p = g.outSize(), in = g.inSize();
  bool direct = isPointwise(g);
  parallelFor(g.batch * g.group, 1, [&](int64_t lo, int64_t hi) {
    std::vector<T> col(direct ? 0 : size_t(k * p));
    for (int64_t i = lo; i < hi; ++i) {
      int64_t n = i / g.group, grp = i % g.group;
      const T *xg = x + (n * g.channels + grp * cg) * in;
      if (!direct)
        im2col(g, xg, col.data());
      T *yg = y + (n * g.outChannels + grp * mg) * p;
      gemm(false, false, mg, p, k, T(1), w + grp * mg * k, k,
           direct ? xg : col.data(), p, T(0), yg, p);
      if (b)
        for (int64_t m = 0; m < mg; ++m)
          for (int64_t j = 0; j < p; ++j)
            yg[m * p + j] += b[grp * mg + m];
    }
  });
}

template <typename T>
void convGradInput(const WindowGeometry &g, const T *w, const T *dy, T *dx) {
  int64_t cg = g.channels / g.group, mg = g.outChannels / g.group;
  int64_t k = colRows(g), p = g.outSize(), in = g.inSize();
  bool direct = isPointwise(g);
  parallelFor(g.batch * g.group, 1, [&](int64_t lo, int64_t hi) {
    std::vector<T> col(direct ? 0 : size_t(k * p));
    for (int64_t i = lo; i < hi; ++i) {
      int64_t n = i / g.group, grp = i % g.group;
      T *dxg = dx + (n * g.channels + grp * cg) * in;
      const T *dyg = dy + (n * g.outChannels + grp * mg) * p;
      if (direct) {
        gemm(true, false, k, p, mg, T(1), w + grp * mg * k, k, dyg, p, T(0),
             dxg, p);
        continue;
      }
      gemm(true, false, k, p, mg, T(1), w + grp * mg * k, k, dyg, p, T(0),
           col.data(), p);
      std::fill(dxg, dxg + cg * in, T(0));
      col2imAdd(g, col.data(), dxg);
    }
  });
}

/// The batch is split into one chunk per thread, each summing its images
/// into its own copy of the weight gradient; the copies are added at the
/// end in chunk order, so the result does not depend on timing.
template <typename T>
void convGradWeight(const WindowGeometry &g, const T *x, const T *dy, T *dw) {
  int64_t cg = g.channels / g.group, mg = g.outChannels / g.group;
  int64_t k = colRows(g), p = g.outSize(), in = g.inSize();
  int64_t wsize = g.outChannels * k;
  bool direct = isPointwise(g);
  int64_t chunks = std::max<int64_t>(
      1, std::min<int64_t>(g.batch, getNumThreads()));
  std::vector<T> partial(size_t((chunks - 1) * wsize));
  parallelFor(chunks, 1, [&](int64_t lo, int64_t hi) {
    std::vector<T> col(direct ? 0 : size_t(k * p));
    for (int64_t c = lo; c < hi; ++c) {
      T *acc = c == 0 ? dw : partial.data() + (c - 1) * wsize;
      std::fill(acc, acc + wsize, T(0));
      for (int64_t n = g.batch * c / chunks; n < g.batch * (c + 1) / chunks;
           ++n)
        for (int64_t grp = 0; grp < g.group; ++grp) {
          const T *xg = x + (n * g.channels + grp * cg) * in;
          if (!direct)
            im2col(g, xg, col.data());
          gemm(false, true, mg, k, p, T(1),
               dy + (n * g.outChannels + grp * mg) * p, p,
               direct ? xg : col.data(), p, T(1), acc + grp * mg * k, k);
        }
    }
  });
  for (int64_t c = 1; c < chunks; ++c)
    for (int64_t i = 0; i < wsize; ++i)
      dw[i] += partial[size_t((c - 1) * wsize + i)];
}

Status hostFloatOnly(const char *name, const Tensor &t) {
  if (hostFloat(t.dtype))
    return Status::success();
  return Status::error(std::string(name) + ": " + describe(t) +
                       " is not supported on the host (f32 and f64 only)");
}
} // namespace

Status lamina::rt::conv(const Tensor &input, const Tensor &weight,
                        const Tensor *bias, const int64_t *strides,
                        const int64_t *dilations, const int64_t *pads,
                        int64_t group, const Tensor &result) {
  WindowGeometry g;
  if (Status st = checkConv("conv", input, weight, bias, strides, dilations,
                            pads, group, result, g);
      !st.ok())
    return st;
  if (Status st = hostFloatOnly("conv", input); !st.ok())
    return st;
  if (result.numElements() == 0)
    return Status::success();
  if (input.dtype == DType::F32)
    convForward(g, input.as<float>(), weight.as<float>(),
                bias ? bias->as<float>() : nullptr, result.as<float>());
  else
    convForward(g, input.as<double>(), weight.as<double>(),
                bias ? bias->as<double>() : nullptr, result.as<double>());
  return Status::success();
}

Status lamina::rt::convBackwardInput(const Tensor &weight,
                                     const Tensor &gradResult,
                                     const int64_t *strides,
                                     const int64_t *dilations,
                                     const int64_t *pads, int64_t group,
                                     const Tensor &gradInput) {
  WindowGeometry g;
  if (Status st = checkConv("conv_grad_input", gradInput, weight, nullptr,
                            strides, dilations, pads, group, gradResult, g);
      !st.ok())
    return st;
  if (Status st = hostFloatOnly("conv_grad_input", weight); !st.ok())
    return st;
  if (gradInput.numElements() == 0)
    return Status::success();
  if (weight.dtype == DType::F32)
    convGradInput(g, weight.as<float>(), gradResult.as<float>(),
                  gradInput.as<float>());
  else
    convGradInput(g, weight.as<double>(), gradResult.as<double>(),
                  gradInput.as<double>());
  return Status::success();
}

Status lamina::rt::convBackwardWeight(const Tensor &input,
                                      const Tensor &gradResult,
                                      const int64_t *strides,
                                      const int64_t *dilations,
                                      const int64_t *pads, int64_t group,
                                      const Tensor &gradWeight) {
  WindowGeometry g;
  if (Status st = checkConv("conv_grad_weight", input, gradWeight, nullptr,
                            strides, dilations, pads, group, gradResult, g);
      !st.ok())
    return st;
  if (Status st = hostFloatOnly("conv_grad_weight", input); !st.ok())
    return st;
  if (gradWeight.numElements() == 0)
    return Status::success();
  if (input.dtype == DType::F32)
    convGradWeight(g, input.as<float>(), gradResult.as<float>(),
                   gradWeight.as<float>());
  else
    convGradWeight(g, input.as<double>(), gradResult.as<double>(),
                   gradWeight.as<double>());
  return Status::success();
}

//===----------------------------------------------------------------------===//
// Pooling
//===----------------------------------------------------------------------===//

namespace {
/// Calls f(outIndex, od, oh, ow) for every output position of a plane,
/// and f's window visitor tap(inIndex) for each tap inside the input, in
/// window order.
template <typename F>
void forEachWindow(const WindowGeometry &g, F &&f) {
  int64_t o = 0;
  for (int64_t od = 0; od < g.out[0]; ++od)
    for (int64_t oh = 0; oh < g.out[1]; ++oh)
      for (int64_t ow = 0; ow < g.out[2]; ++ow, ++o)
        f(o, od, oh, ow);
}

template <typename Tap>
void forEachTapOf(const WindowGeometry &g, int64_t od, int64_t oh, int64_t ow,
                  Tap &&tap) {
  for (int64_t kd = 0; kd < g.kernel[0]; ++kd) {
    int64_t id = od * g.stride[0] - g.padBegin[0] + kd * g.dilation[0];
    if (id < 0 || id >= g.in[0])
      continue;
    for (int64_t kh = 0; kh < g.kernel[1]; ++kh) {
      int64_t ih = oh * g.stride[1] - g.padBegin[1] + kh * g.dilation[1];
      if (ih < 0 || ih >= g.in[1])
        continue;
      for (int64_t kw = 0; kw < g.kernel[2]; ++kw) {
        int64_t iw = ow * g.stride[2] - g.padBegin[2] + kw * g.dilation[2];
        if (iw >= 0 && iw < g.in[2])
          tap((id * g.in[1] + ih) * g.in[2] + iw);
      }
    }
  }
}

template <typename T> bool isNaN(T v) {
  if constexpr (std::is_floating_point_v<T>)
    return std::isnan(v);
  return false;
}

/// The first maximum of a window (NaN wins, as in PyTorch), or -1 for a
/// window of padding only.
template <typename T>
int64_t argmaxOf(const WindowGeometry &g, const T *x, int64_t od, int64_t oh,
                 int64_t ow) {
  int64_t best = -1;
  forEachTapOf(g, od, oh, ow, [&](int64_t i) {
    if (best < 0 || x[i] > x[best] || (isNaN(x[i]) && !isNaN(x[best])))
      best = i;
  });
  return best;
}

/// What a window of padding only gives: -inf, or the type's lowest.
template <typename T> T lowest() {
  if constexpr (std::is_floating_point_v<T>)
    return -std::numeric_limits<T>::infinity();
  return std::numeric_limits<T>::lowest();
}

/// Runs body(plane) over the N*C planes on the thread pool.
template <typename F> void forEachPlane(const WindowGeometry &g, F &&body) {
  int64_t work = std::max<int64_t>(1, g.outSize() * g.kernelSize());
  parallelFor(g.batch * g.channels, std::max<int64_t>(1, kGrain / work),
              [&](int64_t lo, int64_t hi) {
                for (int64_t p = lo; p < hi; ++p)
                  body(p);
              });
}

template <typename T>
void maxPoolT(const WindowGeometry &g, const T *x, T *y) {
  forEachPlane(g, [&](int64_t p) {
    const T *xp = x + p * g.inSize();
    T *yp = y + p * g.outSize();
    forEachWindow(g, [&](int64_t o, int64_t od, int64_t oh, int64_t ow) {
      int64_t i = argmaxOf(g, xp, od, oh, ow);
      yp[o] = i < 0 ? lowest<T>() : xp[i];
    });
  });
}

/// Each window's argmax in the whole flattened input; `columnMajor`
/// reverses the spatial dims within a plane (ONNX storage_order 1).
template <typename T>
void maxPoolIndicesT(const WindowGeometry &g, const T *x, bool columnMajor,
                     int64_t *indices) {
  forEachPlane(g, [&](int64_t p) {
    const T *xp = x + p * g.inSize();
    int64_t *ip = indices + p * g.outSize();
    forEachWindow(g, [&](int64_t o, int64_t od, int64_t oh, int64_t ow) {
      int64_t i = std::max<int64_t>(argmaxOf(g, xp, od, oh, ow), 0);
      if (columnMajor) {
        int64_t w = i % g.in[2], h = i / g.in[2] % g.in[1],
                d = i / g.in[2] / g.in[1];
        i = (w * g.in[1] + h) * g.in[0] + d;
      }
      ip[o] = p * g.inSize() + i;
    });
  });
}

template <typename T>
void maxPoolGradT(const WindowGeometry &g, const T *x, const T *dy, T *dx) {
  forEachPlane(g, [&](int64_t p) {
    const T *xp = x + p * g.inSize();
    const T *dyp = dy + p * g.outSize();
    T *dxp = dx + p * g.inSize();
    std::fill(dxp, dxp + g.inSize(), T(0));
    forEachWindow(g, [&](int64_t o, int64_t od, int64_t oh, int64_t ow) {
      int64_t i = argmaxOf(g, xp, od, oh, ow);
      if (i >= 0)
        dxp[i] += dyp[o];
    });
  });
}

template <typename T>
void avgPoolT(const WindowGeometry &g, const T *x, bool includePad, T *y) {
  forEachPlane(g, [&](int64_t p) {
    const T *xp = x + p * g.inSize();
    T *yp = y + p * g.outSize();
    forEachWindow(g, [&](int64_t o, int64_t od, int64_t oh, int64_t ow) {
      T sum = 0;
      forEachTapOf(g, od, oh, ow, [&](int64_t i) { sum += xp[i]; });
      int64_t div = poolDivisor(g, od, oh, ow, includePad);
      yp[o] = div > 0 ? sum / T(div) : T(0);
    });
  });
}

template <typename T>
void avgPoolGradT(const WindowGeometry &g, const T *dy, bool includePad,
                  T *dx) {
  forEachPlane(g, [&](int64_t p) {
    const T *dyp = dy + p * g.outSize();
    T *dxp = dx + p * g.inSize();
    std::fill(dxp, dxp + g.inSize(), T(0));
    forEachWindow(g, [&](int64_t o, int64_t od, int64_t oh, int64_t ow) {
      int64_t div = poolDivisor(g, od, oh, ow, includePad);
      if (div == 0)
        return;
      T share = dyp[o] / T(div);
      forEachTapOf(g, od, oh, ow, [&](int64_t i) { dxp[i] += share; });
    });
  });
}
} // namespace

Status lamina::rt::maxPool(const Tensor &input, const int64_t *kernel,
                           const int64_t *strides, const int64_t *dilations,
                           const int64_t *pads, const Tensor &result) {
  WindowGeometry g;
  if (Status st = checkPool("max_pool", input, kernel, strides, dilations,
                            pads, result, g);
      !st.ok())
    return st;
  if (isNarrowFloat(input.dtype))
    return hostFloatOnly("max_pool", input);
  dispatch(input.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_arithmetic_v<T>)
      maxPoolT(g, input.as<T>(), result.as<T>());
  });
  return Status::success();
}

Status lamina::rt::maxPoolIndices(const Tensor &input, const int64_t *kernel,
                                  const int64_t *strides,
                                  const int64_t *dilations,
                                  const int64_t *pads, bool columnMajor,
                                  const Tensor &indices) {
  // The pooled result's shape, in the input's type for checkPool.
  Tensor pooled = indices;
  pooled.dtype = input.dtype;
  WindowGeometry g;
  if (Status st = checkPool("max_pool_indices", input, kernel, strides,
                            dilations, pads, pooled, g);
      !st.ok())
    return st;
  if (indices.dtype != DType::I64)
    return Status::error("max_pool_indices: indices " + describe(indices) +
                         " must be i64");
  if (isNarrowFloat(input.dtype))
    return hostFloatOnly("max_pool_indices", input);
  dispatch(input.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_arithmetic_v<T>)
      maxPoolIndicesT(g, input.as<T>(), columnMajor, indices.as<int64_t>());
  });
  return Status::success();
}

Status lamina::rt::maxPoolBackward(const Tensor &input,
                                   const Tensor &gradResult,
                                   const int64_t *kernel,
                                   const int64_t *strides,
                                   const int64_t *dilations,
                                   const int64_t *pads,
                                   const Tensor &gradInput) {
  WindowGeometry g;
  if (Status st = checkPool("max_pool_grad", input, kernel, strides,
                            dilations, pads, gradResult, g);
      !st.ok())
    return st;
  if (!sameShape(input, gradInput) || gradInput.dtype != input.dtype)
    return Status::error("max_pool_grad: gradInput " + describe(gradInput) +
                         " is not shaped as the input " + describe(input));
  if (Status st = hostFloatOnly("max_pool_grad", input); !st.ok())
    return st;
  if (input.dtype == DType::F32)
    maxPoolGradT(g, input.as<float>(), gradResult.as<float>(),
                 gradInput.as<float>());
  else
    maxPoolGradT(g, input.as<double>(), gradResult.as<double>(),
                 gradInput.as<double>());
  return Status::success();
}

Status lamina::rt::avgPool(const Tensor &input, const int64_t *kernel,
                           const int64_t *strides, const int64_t *dilations,
                           const int64_t *pads, bool countIncludePad,
                           const Tensor &result) {
  WindowGeometry g;
  if (Status st = checkPool("avg_pool", input, kernel, strides, dilations,
                            pads, result, g);
      !st.ok())
    return st;
  if (Status st = hostFloatOnly("avg_pool", input); !st.ok())
    return st;
  if (input.dtype == DType::F32)
    avgPoolT(g, input.as<float>(), countIncludePad, result.as<float>());
  else
    avgPoolT(g, input.as<double>(), countIncludePad, result.as<double>());
  return Status::success();
}

Status lamina::rt::avgPoolBackward(const Tensor &gradResult,
                                   const int64_t *kernel,
                                   const int64_t *strides,
                                   const int64_t *dilations,
                                   const int64_t *pads, bool countIncludePad,
                                   const Tensor &gradInput) {
  WindowGeometry g;
  if (Status st = checkPool("avg_pool_grad", gradInput, kernel, strides,
                            dilations, pads, gradResult, g);
      !st.ok())
    return st;
  if (Status st = hostFloatOnly("avg_pool_grad", gradInput); !st.ok())
    return st;
  if (gradInput.dtype == DType::F32)
    avgPoolGradT(g, gradResult.as<float>(), countIncludePad,
                 gradInput.as<float>());
  else
    avgPoolGradT(g, gradResult.as<double>(), countIncludePad,
                 gradInput.as<double>());
  return Status::success();
}
