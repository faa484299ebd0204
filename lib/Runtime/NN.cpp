//===- NN.cpp - softmax, log_softmax, layer_norm, rms_norm ----------------===//
//
// Sums (softmax denominators, normalisation statistics) accumulate in double:
// rows are long (a vocabulary, a hidden size) and the cost is negligible next
// to exp and memory traffic. Per-element results are computed in the
// tensor's compute type.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <algorithm>
#include <cmath>
#include <limits>

using namespace lamina::rt;
using namespace lamina::rt::detail;

namespace {
/// Columns of the [outer, n, inner] view processed together when the axis
/// is not innermost, so reads along `inner` stay contiguous.
constexpr int64_t kSoftmaxBlock = 64;

/// The last-axis case (attention scores, logits) over f32: one row at a
/// time, in loops the compiler vectorises.
template <bool Log>
void softmaxRowsF32(const float *x, float *y, int64_t rows, int64_t n) {
  parallelFor(rows, std::max<int64_t>(1, kGrain / (8 * n)),
              [&](int64_t b, int64_t e) {
                for (int64_t row = b; row < e; ++row) {
                  const float *xr = x + row * n;
                  float *yr = y + row * n;
                  float mx = -std::numeric_limits<float>::infinity();
                  bool nan = false;
                  for (int64_t i = 0; i < n; ++i) {
                    mx = xr[i] > mx ? xr[i] : mx;
                    nan |= xr[i] != xr[i];
                  }
                  if (nan) // NaN anywhere in the row: NaN everywhere
                    mx = std::numeric_limits<float>::quiet_NaN();
                  double sum = 0;
                  for (int64_t i = 0; i < n; ++i) {
                    float ev = math::expNonPositive(xr[i] - mx);
                    sum += ev;
                    if (!Log)
                      yr[i] = ev;
                  }
                  if (Log) {
                    float s = float(std::log(sum));
                    for (int64_t i = 0; i < n; ++i)
                      yr[i] = (xr[i] - mx) - s;
                  } else {
                    float s = float(1.0 / sum);
                    for (int64_t i = 0; i < n; ++i)
                      yr[i] *= s;
                  }
                }
              });
}

template <typename T, bool Log>
void softmaxT(const Tensor &in, const Tensor &out, int64_t outer, int64_t n,
              int64_t inner) {
  using C = Compute<T>;
  if constexpr (std::is_same_v<T, float>) {
    // In place (out aliases in) is fine: every element is read before it
    // is written, at the same index.
    if (inner == 1)
      return softmaxRowsF32<Log>(in.as<float>(), out.as<float>(), outer, n);
  }
  const T *x = in.as<T>();
  T *y = out.as<T>();
  int64_t width = std::min(inner, kSoftmaxBlock);
  int64_t blocks = (inner + width - 1) / width;
  int64_t work = n * width * 8;
  parallelFor(outer * blocks, std::max<int64_t>(1, kGrain / work),
              [&](int64_t b, int64_t e) {
                // buf holds x - max, then (softmax) exp(x - max), for one
                // block.
                std::vector<C> buf(n * width), mx(width);
                std::vector<double> sum(width);
                for (int64_t item = b; item < e; ++item) {
                  int64_t o = item / blocks, c0 = (item % blocks) * width;
                  int64_t w = std::min(width, inner - c0);
                  const T *xs = x + o * n * inner + c0;
                  T *ys = y + o * n * inner + c0;
                  std::fill(mx.begin(), mx.end(),
                            -std::numeric_limits<C>::infinity());
                  for (int64_t i = 0; i < n; ++i)
                    for (int64_t c = 0; c < w; ++c) {
                      C v = load(xs[i * inner + c]);
                      buf[i * width + c] = v;
                      mx[c] = math::maximum(mx[c], v);
                    }
                  std::fill(sum.begin(), sum.end(), 0.0);
                  for (int64_t i = 0; i < n; ++i)
                    for (int64_t c = 0; c < w; ++c) {
                      C &v = buf[i * width + c];
                      v -= mx[c];
                      C ev = math::exp(v);
                      sum[c] += ev;
                      if (!Log)
                        v = ev;
                    }
                  for (int64_t c = 0; c < w; ++c) {
                    C s = C(Log ? std::log(sum[c]) : 1.0 / sum[c]);
                    for (int64_t i = 0; i < n; ++i) {
                      C v = buf[i * width + c];
                      ys[i * inner + c] = store<T>(Log ? v - s : v * s);
                    }
                  }
                }
              });
}

Status softmaxImpl(const char *name, bool log, const Tensor &input,
                   int64_t axis, const Tensor &result) {
  if (Status st = checkFloatAlongAxis(name, input, axis, result); !st.ok())
    return st;
  int64_t outer, n, inner;
  splitAround(input, int(axis), outer, n, inner);
  if (input.numElements() == 0)
    return Status::success();
  dispatch(input.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (isFloatStorage<T>) {
      if (log)
        softmaxT<T, true>(input, result, outer, n, inner);
      else
        softmaxT<T, false>(input, result, outer, n, inner);
    }
  });
  return Status::success();
}

template <typename T>
void layerNormT(const Tensor &in, const Tensor &scale, const Tensor *bias,
                double epsilon, const Tensor &out, int64_t rows, int64_t n) {
  using C = Compute<T>;
  const T *x = in.as<T>(), *g = scale.as<T>();
  const T *bb = bias ? bias->as<T>() : nullptr;
  T *y = out.as<T>();
  parallelFor(rows, std::max<int64_t>(1, kGrain / (4 * n)),
              [&](int64_t b, int64_t e) {
                for (int64_t r = b; r < e; ++r) {
                  const T *xr = x + r * n;
                  double mean = 0, var = 0;
                  for (int64_t i = 0; i < n; ++i)
                    mean += double(load(xr[i]));
                  mean /= double(n);
                  for (int64_t i = 0; i < n; ++i) {
                    double d = double(load(xr[i])) - mean;
                    var += d * d;
                  }
                  double rstd = 1.0 / std::sqrt(var / double(n) + epsilon);
                  T *yr = y + r * n;
                  for (int64_t i = 0; i < n; ++i) {
                    C v = C((double(load(xr[i])) - mean) * rstd) * load(g[i]);
                    if (bb)
                      v += load(bb[i]);
                    yr[i] = store<T>(v);
                  }
                }
              });
}

template <typename T>
void rmsNormT(const Tensor &in, const Tensor &scale, double epsilon,
              const Tensor &out, int64_t rows, int64_t n) {
  using C = Compute<T>;
  const T *x = in.as<T>(), *g = scale.as<T>();
  T *y = out.as<T>();
  parallelFor(
      rows, std::max<int64_t>(1, kGrain / (3 * n)), [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          const T *xr = x + r * n;
          double ms = 0;
          for (int64_t i = 0; i < n; ++i) {
            double v = double(load(xr[i]));
            ms += v * v;
          }
          double rrms = 1.0 / std::sqrt(ms / double(n) + epsilon);
          T *yr = y + r * n;
          for (int64_t i = 0; i < n; ++i)
            yr[i] = store<T>(C(double(load(xr[i])) * rrms) * load(g[i]));
        }
      });
}
} // namespace

Status lamina::rt::softmax(const Tensor &input, int64_t axis,
                           const Tensor &result) {
  return softmaxImpl("softmax", false, input, axis, result);
}

Status lamina::rt::logSoftmax(const Tensor &input, int64_t axis,
                              const Tensor &result) {
  return softmaxImpl("log_softmax", true, input, axis, result);
}

Status lamina::rt::layerNorm(const Tensor &input, const Tensor &scale,
                             const Tensor *bias, int64_t axis, double epsilon,
                             const Tensor &result) {
  const Tensor *params[] = {&scale, bias};
  int64_t rows, n;
  Status s = checkNorm("layer_norm", input, axis, params, bias ? 2 : 1, result,
                       rows, n);
  if (!s.ok() || input.numElements() == 0)
    return s;
  dispatch(input.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (isFloatStorage<T>)
      layerNormT<T>(input, scale, bias, epsilon, result, rows, n);
  });
  return Status::success();
}

Status lamina::rt::rmsNorm(const Tensor &input, const Tensor &scale,
                           int64_t axis, double epsilon, const Tensor &result) {
  const Tensor *params[] = {&scale};
  int64_t rows, n;
  Status s = checkNorm("rms_norm", input, axis, params, 1, result, rows, n);
  if (!s.ok() || input.numElements() == 0)
    return s;
  dispatch(input.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (isFloatStorage<T>)
      rmsNormT<T>(input, scale, epsilon, result, rows, n);
  });
  return Status::success();
}

Status lamina::rt::detail::checkFloatAlongAxis(const char *name,
                                               const Tensor &input,
                                               int64_t &axis,
                                               const Tensor &result) {
  if (input.dtype != result.dtype || !sameShape(input, result) ||
      !isFloat(input.dtype))
    return Status::error(std::string(name) + ": needs equal float types, got " +
                         describe(input) + " -> " + describe(result));
  if (!normaliseAxis(axis, input.rank))
    return Status::error(std::string(name) + ": axis out of range for " +
                         describe(input));
  return Status::success();
}

Status lamina::rt::detail::checkNorm(const char *name, const Tensor &input,
                                     int64_t &axis,
                                     const Tensor *const *params,
                                     int numParams, const Tensor &result,
                                     int64_t &rows, int64_t &n) {
  if (Status st = checkFloatAlongAxis(name, input, axis, result); !st.ok())
    return st;
  std::vector<int64_t> normShape(input.shape + axis, input.shape + input.rank);
  for (int k = 0; k < numParams; ++k)
    if (params[k] &&
        (params[k]->dtype != input.dtype || !hasShape(*params[k], normShape)))
      return Status::error(
          std::string(name) + ": parameter " + describe(*params[k]) +
          " should be " + shapeString(normShape.data(), int(normShape.size())) +
          "x" + dtypeName(input.dtype));
  rows = numElements(input.shape, int(axis));
  n = numElements(normShape.data(), int(normShape.size()));
  return Status::success();
}
