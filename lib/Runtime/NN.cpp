//===- NN.cpp - softmax, norms and their gradients, cross-entropy ---------===//
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

/// softmax / logSoftmax backward over the [outer, n, inner] view, a block
/// of `inner` columns at a time as softmaxT. Each element is read before it
/// is written at the same index, so the result may alias either input.
template <typename T, bool Log>
void softmaxBackwardT(const Tensor &result, const Tensor &grad,
                      const Tensor &out, int64_t outer, int64_t n,
                      int64_t inner) {
  using C = Compute<T>;
  const T *y = result.as<T>(), *g = grad.as<T>();
  T *dx = out.as<T>();
  int64_t width = std::min(inner, kSoftmaxBlock);
  int64_t blocks = (inner + width - 1) / width;
  parallelFor(outer * blocks, std::max<int64_t>(1, kGrain / (n * width * 4)),
              [&](int64_t b, int64_t e) {
                std::vector<double> sum(width);
                for (int64_t item = b; item < e; ++item) {
                  int64_t o = item / blocks, c0 = (item % blocks) * width;
                  int64_t w = std::min(width, inner - c0);
                  int64_t base = o * n * inner + c0;
                  std::fill(sum.begin(), sum.end(), 0.0);
                  for (int64_t i = 0; i < n; ++i)
                    for (int64_t c = 0; c < w; ++c) {
                      int64_t k = base + i * inner + c;
                      C gv = load(g[k]);
                      sum[c] += Log ? double(gv) : double(gv * C(load(y[k])));
                    }
                  for (int64_t i = 0; i < n; ++i)
                    for (int64_t c = 0; c < w; ++c) {
                      int64_t k = base + i * inner + c;
                      C yv = load(y[k]), gv = load(g[k]), s = C(sum[c]);
                      dx[k] = store<T>(Log ? gv - math::exp(yv) * s
                                           : yv * (gv - s));
                    }
                }
              });
}

Status softmaxBackwardImpl(const char *name, bool log, const Tensor &result,
                           const Tensor &grad, int64_t axis,
                           const Tensor &gradInput) {
  if (Status st = checkSoftmaxBackward(name, result, grad, axis, gradInput);
      !st.ok())
    return st;
  int64_t outer, n, inner;
  splitAround(result, int(axis), outer, n, inner);
  if (result.numElements() == 0)
    return Status::success();
  dispatch(result.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (isFloatStorage<T>) {
      if (log)
        softmaxBackwardT<T, true>(result, grad, gradInput, outer, n, inner);
      else
        softmaxBackwardT<T, false>(result, grad, gradInput, outer, n, inner);
    }
  });
  return Status::success();
}

/// R: the result's type (T, or f16/bf16 for f32 T: the f32 value rounded).
template <typename T, typename R = T>
void layerNormT(const Tensor &in, const Tensor &scale, const Tensor *bias,
                double epsilon, const Tensor &out, int64_t rows, int64_t n) {
  using C = Compute<T>;
  const T *x = in.as<T>(), *g = scale.as<T>();
  const T *bb = bias ? bias->as<T>() : nullptr;
  R *y = out.as<R>();
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
                  R *yr = y + r * n;
                  for (int64_t i = 0; i < n; ++i) {
                    C v = C((double(load(xr[i])) - mean) * rstd) * load(g[i]);
                    if (bb)
                      v += load(bb[i]);
                    yr[i] = store<R>(v);
                  }
                }
              });
}

template <typename T, typename R = T>
void rmsNormT(const Tensor &in, const Tensor &scale, double epsilon,
              const Tensor &out, int64_t rows, int64_t n) {
  using C = Compute<T>;
  const T *x = in.as<T>(), *g = scale.as<T>();
  R *y = out.as<R>();
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
          R *yr = y + r * n;
          for (int64_t i = 0; i < n; ++i)
            yr[i] = store<R>(C(double(load(xr[i])) * rrms) * load(g[i]));
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

Status lamina::rt::softmaxBackward(const Tensor &result,
                                   const Tensor &gradResult, int64_t axis,
                                   const Tensor &gradInput) {
  return softmaxBackwardImpl("softmax_grad", false, result, gradResult, axis,
                             gradInput);
}

Status lamina::rt::logSoftmaxBackward(const Tensor &result,
                                      const Tensor &gradResult, int64_t axis,
                                      const Tensor &gradInput) {
  return softmaxBackwardImpl("log_softmax_grad", true, result, gradResult,
                             axis, gradInput);
}

Status lamina::rt::detail::checkNormForward(
    const char *name, const Tensor &input, int64_t &axis,
    const Tensor *const *params, int numParams, const Tensor &result,
    int64_t &rows, int64_t &n) {
  // A narrow result of an f32 input is checked as the f32 result it rounds.
  Tensor same = result;
  if (input.dtype == DType::F32 &&
      (result.dtype == DType::F16 || result.dtype == DType::BF16))
    same.dtype = DType::F32;
  return checkNorm(name, input, axis, params, numParams, same, rows, n);
}

namespace {
/// Calls f(Tag<T>, Tag<R>) for an op's float input type T and result type
/// R (T, or f16/bf16 for f32 T).
template <typename F> void dispatchInOut(const Tensor &input,
                                         const Tensor &result, F &&f) {
  if (dispatchNarrowed(input, result, f))
    return;
  dispatch(input.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (isFloatStorage<T>)
      f(tag, tag);
  });
}
} // namespace

Status lamina::rt::layerNorm(const Tensor &input, const Tensor &scale,
                             const Tensor *bias, int64_t axis, double epsilon,
                             const Tensor &result) {
  const Tensor *params[] = {&scale, bias};
  int64_t rows, n;
  Status s = checkNormForward("layer_norm", input, axis, params, bias ? 2 : 1,
                              result, rows, n);
  if (!s.ok() || input.numElements() == 0)
    return s;
  dispatchInOut(input, result, [&](auto in, auto out) {
    layerNormT<typename decltype(in)::type, typename decltype(out)::type>(
        input, scale, bias, epsilon, result, rows, n);
  });
  return Status::success();
}

Status lamina::rt::rmsNorm(const Tensor &input, const Tensor &scale,
                           int64_t axis, double epsilon, const Tensor &result) {
  const Tensor *params[] = {&scale};
  int64_t rows, n;
  Status s =
      checkNormForward("rms_norm", input, axis, params, 1, result, rows, n);
  if (!s.ok() || input.numElements() == 0)
    return s;
  dispatchInOut(input, result, [&](auto in, auto out) {
    rmsNormT<typename decltype(in)::type, typename decltype(out)::type>(
        input, scale, epsilon, result, rows, n);
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

Status lamina::rt::detail::checkSoftmaxBackward(const char *name,
                                                const Tensor &result,
                                                const Tensor &gradResult,
                                                int64_t &axis,
                                                const Tensor &gradInput) {
  if (Status st = checkFloatAlongAxis(name, result, axis, gradInput); !st.ok())
    return st;
  if (gradResult.dtype != result.dtype || !sameShape(gradResult, result))
    return Status::error(std::string(name) + ": gradient " +
                         describe(gradResult) + " differs from result " +
                         describe(result));
  return Status::success();
}

Status lamina::rt::detail::checkNormBackward(
    const char *name, const Tensor &input, int64_t &axis, const Tensor &scale,
    const Tensor &gradResult, const Tensor &gradInput, const Tensor *gradScale,
    const Tensor *gradBias, int64_t &rows, int64_t &n, const Tensor *addend) {
  const Tensor *params[] = {&scale, gradScale, gradBias};
  if (Status s = checkNorm(name, input, axis, params, 3, gradInput, rows, n);
      !s.ok())
    return s;
  // The result's gradient may be f16/bf16 for an f32 input (a narrow-
  // stored product, widened on load).
  bool narrow = input.dtype == DType::F32 && isNarrowFloat(gradResult.dtype);
  for (const Tensor *t : {&gradResult, addend})
    if (t && ((t->dtype != input.dtype && !(t == &gradResult && narrow)) ||
              !sameShape(*t, input)))
      return Status::error(
          std::string(name) + ": " + (t == addend ? "addend " : "gradient ") +
          describe(*t) + " differs from input " + describe(input) +
          (t == addend ? "" : " (f16/bf16 for f32)"));
  return Status::success();
}

Status lamina::rt::detail::checkCrossEntropy(const char *name,
                                             const Tensor &logits,
                                             const Tensor &labels,
                                             const Tensor &rowValue,
                                             const Tensor *gradLogits,
                                             int64_t &rows, int64_t &v) {
  if (logits.rank < 1 || !isFloat(logits.dtype))
    return Status::error(std::string(name) + ": logits must be a float " +
                         "tensor of rank >= 1, got " + describe(logits));
  if (labels.dtype != DType::I32 && labels.dtype != DType::I64)
    return Status::error(std::string(name) + ": labels must be i32 or i64, " +
                         "got " + describe(labels));
  std::vector<int64_t> rowShape(logits.shape, logits.shape + logits.rank - 1);
  // The per-row value (loss or its gradient) in the logits' type, or f32
  // for f16/bf16 logits (read widened: a mixed-precision LM head's).
  if (!hasShape(labels, rowShape) || !hasShape(rowValue, rowShape) ||
      (rowValue.dtype != logits.dtype && !wideRowValue(logits, rowValue)))
    return Status::error(std::string(name) + ": logits " + describe(logits) +
                         " need labels and a per-row " +
                         dtypeName(logits.dtype) +
                         (isNarrowFloat(logits.dtype) ? " (or f32)" : "") +
                         " tensor shaped " +
                         shapeString(rowShape.data(), int(rowShape.size())) +
                         ", got " + describe(labels) + ", " +
                         describe(rowValue));
  // The gradient in the logits' type, or f16/bf16 for f32 logits (rounded
  // once on store, as a cast of the f32 gradient).
  bool narrowed = gradLogits && logits.dtype == DType::F32 &&
                  (gradLogits->dtype == DType::F16 ||
                   gradLogits->dtype == DType::BF16);
  if (gradLogits && ((gradLogits->dtype != logits.dtype && !narrowed) ||
                     !sameShape(*gradLogits, logits)))
    return Status::error(std::string(name) + ": gradient " +
                         describe(*gradLogits) + " differs from logits " +
                         describe(logits) + " (f16/bf16 for f32 logits)");
  rows = labels.numElements();
  v = logits.shape[logits.rank - 1];
  return Status::success();
}

namespace {
/// Per-row statistics of a norm's input, in double as the forward kernels:
/// (mean, 1/std) for layer_norm, (0, 1/rms) for rms_norm.
template <typename T>
void rowStatistics(const T *x, int64_t n, bool rms, double epsilon,
                   double &mean, double &rstd) {
  mean = 0;
  double acc = 0;
  if (!rms) {
    for (int64_t i = 0; i < n; ++i)
      mean += double(load(x[i]));
    mean /= double(n);
  }
  for (int64_t i = 0; i < n; ++i) {
    double d = double(load(x[i])) - mean;
    acc += d * d;
  }
  rstd = 1.0 / std::sqrt(acc / double(n) + epsilon);
}

/// dx per row, then the parameter gradients as column sums over the rows in
/// row order (a fixed order whatever the thread count: deterministic).
/// layer_norm: dx = rstd (dxh - mean(dxh) - xh mean(dxh xh)), xh = (x -
/// mean) rstd; rms_norm: dx = r dxh - x r^3 mean(dxh x) -- the same
/// expression with mean = 0, the first mean dropped and xh = x r. dxh = g
/// scale; dscale = sum g xh, dbias = sum g. D: g's type (T, or f16/bf16
/// for f32 T, widened on load).
template <typename T, typename D>
void normBackwardT(bool rms, const Tensor &input, const Tensor &scale,
                   const Tensor &gradResult, double epsilon,
                   const Tensor &gradInput, const Tensor *gradScale,
                   const Tensor *gradBias, const Tensor *addend, int64_t rows,
                   int64_t n) {
  using C = Compute<T>;
  const T *x = input.as<T>(), *g = scale.as<T>();
  const D *dy = gradResult.as<D>();
  const T *add = addend ? addend->as<T>() : nullptr;
  T *dx = gradInput.as<T>();
  std::vector<double> stats(size_t(2 * rows));
  parallelFor(rows, std::max<int64_t>(1, kGrain / (6 * n)),
              [&](int64_t b, int64_t e) {
                for (int64_t r = b; r < e; ++r) {
                  const T *xr = x + r * n;
                  const D *dyr = dy + r * n;
                  double mean, rstd;
                  rowStatistics(xr, n, rms, epsilon, mean, rstd);
                  stats[size_t(2 * r)] = mean;
                  stats[size_t(2 * r + 1)] = rstd;
                  double s1 = 0, s2 = 0;
                  for (int64_t i = 0; i < n; ++i) {
                    double dxh = double(C(load(dyr[i]) * load(g[i])));
                    s1 += dxh;
                    s2 += dxh * ((double(load(xr[i])) - mean) * rstd);
                  }
                  s1 = rms ? 0.0 : s1 / double(n);
                  s2 /= double(n);
                  T *dxr = dx + r * n;
                  const T *addr = add ? add + r * n : nullptr;
                  for (int64_t i = 0; i < n; ++i) {
                    double xh = (double(load(xr[i])) - mean) * rstd;
                    double dxh = double(C(load(dyr[i]) * load(g[i])));
                    C v = C(rstd * (dxh - s1 - xh * s2));
                    dxr[i] = store<T>(addr ? C(v + C(load(addr[i]))) : v);
                  }
                }
              });
  if (!gradScale && !gradBias)
    return;
  constexpr int64_t kColumns = 256;
  int64_t blocks = (n + kColumns - 1) / kColumns;
  parallelFor(blocks, std::max<int64_t>(1, kGrain / (2 * rows * kColumns)),
              [&](int64_t b, int64_t e) {
                std::vector<double> ds(kColumns), db(kColumns);
                for (int64_t blk = b; blk < e; ++blk) {
                  int64_t c0 = blk * kColumns, w = std::min(kColumns, n - c0);
                  std::fill(ds.begin(), ds.end(), 0.0);
                  std::fill(db.begin(), db.end(), 0.0);
                  for (int64_t r = 0; r < rows; ++r) {
                    const T *xr = x + r * n + c0;
                    const D *dyr = dy + r * n + c0;
                    double mean = stats[size_t(2 * r)],
                           rstd = stats[size_t(2 * r + 1)];
                    for (int64_t c = 0; c < w; ++c) {
                      double d = double(load(dyr[c]));
                      ds[size_t(c)] += d * ((double(load(xr[c])) - mean) * rstd);
                      db[size_t(c)] += d;
                    }
                  }
                  for (int64_t c = 0; c < w; ++c) {
                    if (gradScale)
                      gradScale->as<T>()[c0 + c] = store<T>(ds[size_t(c)]);
                    if (gradBias)
                      gradBias->as<T>()[c0 + c] = store<T>(db[size_t(c)]);
                  }
                }
              });
}

Status normBackward(const char *name, bool rms, const Tensor &input,
                    const Tensor &scale, const Tensor &gradResult,
                    int64_t axis, double epsilon, const Tensor &gradInput,
                    const Tensor *gradScale, const Tensor *gradBias,
                    const Tensor *addend) {
  int64_t rows, n;
  if (Status s = checkNormBackward(name, input, axis, scale, gradResult,
                                   gradInput, gradScale, gradBias, rows, n,
                                   addend);
      !s.ok())
    return s;
  if (rows == 0 || n == 0) {
    // Parameter gradients over no rows are 0.
    for (const Tensor *t : {gradScale, gradBias})
      if (t)
        std::fill_n(static_cast<char *>(t->data), t->byteSize(), 0);
    return Status::success();
  }
  dispatchInOut(input, gradResult, [&](auto in, auto grad) {
    normBackwardT<typename decltype(in)::type, typename decltype(grad)::type>(
        rms, input, scale, gradResult, epsilon, gradInput, gradScale, gradBias,
        addend, rows, n);
  });
  return Status::success();
}

int64_t labelAt(const Tensor &labels, int64_t row) {
  return labels.dtype == DType::I64 ? labels.as<int64_t>()[row]
                                    : int64_t(labels.as<int32_t>()[row]);
}

/// The first row whose label is neither ignoreIndex nor in [0, v), or -1.
int64_t badLabelRow(const Tensor &labels, int64_t rows, int64_t v,
                    int64_t ignoreIndex) {
  for (int64_t r = 0; r < rows; ++r) {
    int64_t label = labelAt(labels, r);
    if (label != ignoreIndex && (label < 0 || label >= v))
      return r;
  }
  return -1;
}

/// exp(x - max) for x <= max: the vectorisable expf for f32, as softmax's
/// f32 rows use.
template <typename C> C expShifted(C d) {
  if constexpr (std::is_same_v<C, float>)
    return math::expNonPositive(d);
  else
    return math::exp(d);
}

/// max and sum exp(x - max) of a row (the sum in double; NaN anywhere makes
/// both NaN), as logSoftmax computes them.
template <typename T>
void rowMaxSum(const T *xr, int64_t v, Compute<T> &mx, double &sum) {
  using C = Compute<T>;
  mx = -std::numeric_limits<C>::infinity();
  bool nan = false;
  for (int64_t i = 0; i < v; ++i) {
    C e = load(xr[i]);
    mx = e > mx ? e : mx;
    nan |= e != e;
  }
  if (nan)
    mx = std::numeric_limits<C>::quiet_NaN();
  sum = 0;
  for (int64_t i = 0; i < v; ++i)
    sum += expShifted(C(load(xr[i]) - mx));
}

/// Forward (gradLoss null: loss per row) or backward (gradLogits per
/// element) of softmax cross-entropy over rows of length v.
/// L: the per-row value's type (T, or f32 for f16/bf16 T).
template <typename T, typename G = T, typename L = T>
void crossEntropyT(const Tensor &logits, const Tensor &labels,
                   int64_t ignoreIndex, const Tensor *loss,
                   const Tensor *gradLoss, const Tensor *gradLogits,
                   int64_t rows, int64_t v) {
  using C = Compute<T>;
  const T *x = logits.as<T>();
  parallelFor(rows, std::max<int64_t>(1, kGrain / (4 * v)),
              [&](int64_t b, int64_t e) {
                for (int64_t r = b; r < e; ++r) {
                  const T *xr = x + r * v;
                  int64_t label = labelAt(labels, r);
                  bool ignored = label == ignoreIndex;
                  if (loss && ignored) {
                    loss->as<L>()[r] = store<L>(C(0));
                    continue;
                  }
                  if (gradLogits && ignored) {
                    std::fill_n(gradLogits->as<G>() + r * v, v, store<G>(C(0)));
                    continue;
                  }
                  C mx;
                  double sum;
                  rowMaxSum(xr, v, mx, sum);
                  if (loss) {
                    // -log_softmax(x)[label], rounded as logSoftmax rounds.
                    loss->as<L>()[r] =
                        store<L>(C(std::log(sum)) - C(load(xr[label]) - mx));
                    continue;
                  }
                  C scaleRow = C(load(gradLoss->as<L>()[r]));
                  C inv = C(1.0 / sum);
                  G *gr = gradLogits->as<G>() + r * v;
                  for (int64_t i = 0; i < v; ++i) {
                    C p = expShifted(C(load(xr[i]) - mx)) * inv;
                    gr[i] = store<G>((p - C(i == label ? 1 : 0)) * scaleRow);
                  }
                }
              });
}

Status crossEntropy(const char *name, const Tensor &logits,
                    const Tensor &labels, int64_t ignoreIndex,
                    const Tensor &rowValue, const Tensor *gradLogits) {
  int64_t rows, v;
  if (Status s = checkCrossEntropy(name, logits, labels, rowValue, gradLogits,
                                   rows, v);
      !s.ok())
    return s;
  if (int64_t r = badLabelRow(labels, rows, v, ignoreIndex); r >= 0)
    return Status::error(std::string(name) + ": label " +
                         std::to_string(labelAt(labels, r)) + " at position " +
                         std::to_string(r) + " is out of range for " +
                         std::to_string(v) + " classes");
  if (rows == 0)
    return Status::success();
  // The gradient in the logits' type, or f16/bf16 for f32 logits; the
  // per-row value in the logits' type, or f32 for f16/bf16 logits.
  bool wide = wideRowValue(logits, rowValue);
  dispatchInOut(logits, gradLogits ? *gradLogits : logits,
                [&](auto in, auto out) {
                  using T = typename decltype(in)::type;
                  using G = typename decltype(out)::type;
                  dispatchRowValue<T>(wide, [&](auto rowTag) {
                    using L = typename decltype(rowTag)::type;
                    if (gradLogits)
                      crossEntropyT<T, G, L>(logits, labels, ignoreIndex,
                                             nullptr, &rowValue, gradLogits,
                                             rows, v);
                    else
                      crossEntropyT<T, T, L>(logits, labels, ignoreIndex,
                                             &rowValue, nullptr, nullptr,
                                             rows, v);
                  });
                });
  return Status::success();
}
} // namespace

Status lamina::rt::layerNormBackward(const Tensor &input, const Tensor &scale,
                                     const Tensor &gradResult, int64_t axis,
                                     double epsilon, const Tensor &gradInput,
                                     const Tensor *gradScale,
                                     const Tensor *gradBias,
                                     const Tensor *addend) {
  return normBackward("layer_norm_grad", false, input, scale, gradResult, axis,
                      epsilon, gradInput, gradScale, gradBias, addend);
}

Status lamina::rt::rmsNormBackward(const Tensor &input, const Tensor &scale,
                                   const Tensor &gradResult, int64_t axis,
                                   double epsilon, const Tensor &gradInput,
                                   const Tensor *gradScale,
                                   const Tensor *addend) {
  return normBackward("rms_norm_grad", true, input, scale, gradResult, axis,
                      epsilon, gradInput, gradScale, nullptr, addend);
}

Status lamina::rt::softmaxCrossEntropy(const Tensor &logits,
                                       const Tensor &labels,
                                       int64_t ignoreIndex,
                                       const Tensor &loss) {
  return crossEntropy("softmax_cross_entropy", logits, labels, ignoreIndex,
                      loss, nullptr);
}

Status lamina::rt::softmaxCrossEntropyBackward(const Tensor &logits,
                                               const Tensor &labels,
                                               const Tensor &gradLoss,
                                               int64_t ignoreIndex,
                                               const Tensor &gradLogits) {
  return crossEntropy("softmax_cross_entropy_grad", logits, labels,
                      ignoreIndex, gradLoss, &gradLogits);
}
