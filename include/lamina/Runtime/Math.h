//===- Math.h - per-element math for host and CUDA kernels ----*- C++ -*-===//
//
// Every scalar function a graph op applies per element, written once so the
// host runtime and generated CUDA kernels agree bit for bit where the
// platform's libm allows. Only C math functions (`::expf`, `::erff`, ...) are
// called: CUDA provides them as device functions, whereas std:: overloads and
// std::numeric_limits are host-only without --expt-relaxed-constexpr.
//
// Floats compute in their own type (f16/bf16 are widened to float by the
// caller); integers wrap on overflow (computed in the unsigned type, so there
// is no signed-overflow UB) and divide truncating toward zero.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_RUNTIME_MATH_H
#define LAMINA_RUNTIME_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>
#include <type_traits>

#ifdef __CUDACC__
#define LAMINA_HD __host__ __device__
#else
#define LAMINA_HD
#endif

namespace lamina::rt {

/// Storage of IEEE binary16 and bfloat16 values. Distinct types (rather than
/// uint16_t) so templates can tell them apart from u16 and from each other.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

namespace math {

LAMINA_HD inline uint32_t floatBits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
LAMINA_HD inline float bitsFloat(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

//===----------------------------------------------------------------------===//
// fp16 / bf16 <-> fp32, round to nearest even
//===----------------------------------------------------------------------===//

/// Exact: every half is a float.
LAMINA_HD inline float halfToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0x1f) // inf / NaN: keep the payload
    return bitsFloat(sign | 0x7f800000 | (mant << 13));
  if (exp == 0) {
    if (mant == 0)
      return bitsFloat(sign);
    // Subnormal: mant * 2^-24, exact in float.
    float v = float(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return bitsFloat(sign | ((exp + 112) << 23) | (mant << 13));
}

LAMINA_HD inline uint16_t floatToHalf(float f) {
  uint32_t x = floatBits(f);
  uint16_t sign = uint16_t((x >> 16) & 0x8000);
  x &= 0x7fffffff;
  if (x >= 0x7f800000) // inf stays inf; NaN stays a (quiet) NaN
    return sign | (x > 0x7f800000 ? 0x7e00 | ((x >> 13) & 0x3ff) : 0x7c00);
  if (x >= 0x477ff000) // >= 65520 (halfway above the largest half): inf
    return sign | 0x7c00;
  if (x < 0x38800000) { // below 2^-14: a subnormal half or zero
    if (x <= 0x33000000) // <= 2^-25 (the tie with 0 goes to even 0)
      return sign;
    uint32_t e = x >> 23, mant = (x & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - e; // value / 2^-24 = mant >> shift
    uint32_t r = mant >> shift, rem = mant & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (r & 1)))
      ++r; // may carry into the smallest normal, which encodes correctly
    return sign | uint16_t(r);
  }
  uint32_t h = (x - 0x38000000) >> 13, rem = x & 0x1fff; // rebias 127 -> 15
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
    ++h; // a carry into the exponent is the correct rounding
  return sign | uint16_t(h);
}

LAMINA_HD inline float bf16ToFloat(uint16_t b) {
  return bitsFloat(uint32_t(b) << 16);
}

LAMINA_HD inline uint16_t floatToBf16(float f) {
  uint32_t x = floatBits(f);
  if ((x & 0x7fffffff) > 0x7f800000) // NaN: truncating could make it inf
    return uint16_t((x >> 16) | 0x40);
  x += 0x7fff + ((x >> 16) & 1);
  return uint16_t(x >> 16);
}

/// double -> float rounding to odd, so that a second rounding to a narrower
/// format (half, bf16) equals rounding the double directly.
LAMINA_HD inline float doubleToFloatOdd(double d) {
  float f = float(d);
  if (double(f) == d || f != f)
    return f;
  uint32_t u = floatBits(f);
  if (fabs(double(f)) > fabs(d))
    --u; // step back toward zero (|f| > 0 here), i.e. truncate
  return bitsFloat(u | 1);
}
LAMINA_HD inline uint16_t doubleToHalf(double d) {
  return floatToHalf(doubleToFloatOdd(d));
}
LAMINA_HD inline uint16_t doubleToBf16(double d) {
  return floatToBf16(doubleToFloatOdd(d));
}

//===----------------------------------------------------------------------===//
// Unary
//===----------------------------------------------------------------------===//

template <typename T> LAMINA_HD inline T neg(T x) {
  if constexpr (std::is_integral_v<T>)
    return T(std::make_unsigned_t<T>(0) - std::make_unsigned_t<T>(x));
  else
    return -x;
}
template <typename T> LAMINA_HD inline T abs(T x) {
  if constexpr (std::is_unsigned_v<T>)
    return x;
  else if constexpr (std::is_integral_v<T>)
    return x < 0 ? neg(x) : x; // abs(MIN) wraps to MIN
  else
    return x < T(0) ? -x : (x == T(0) ? T(0) : x); // NaN stays NaN, -0 -> 0
}
/// max(x, 0); NaN propagates.
template <typename T> LAMINA_HD inline T relu(T x) {
  return x < T(0) ? T(0) : x;
}

LAMINA_HD inline float exp(float x) { return ::expf(x); }
/// exp for x <= 0 (softmax's x - max), written so loops over it vectorise:
/// Cephes' expf (exp(x) = 2^n exp(r), |r| <= ln2/2, degree-6 polynomial),
/// within 2 ulp of expf; results below FLT_MIN (x < -87.3) flush to 0 and
/// NaN propagates. libm's expf takes a slow path for every underflow, which
/// masked attention scores hit constantly.
LAMINA_HD inline float expNonPositive(float x) {
  const float lowest = -87.3365479f; // exp(lowest) = FLT_MIN
  float xc = x < lowest ? lowest : x;
  xc = xc > 0.0f ? 0.0f : xc;
  float n = ::floorf(xc * 1.44269504088896341f + 0.5f);
  float r = xc - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float y = p * r * r + r + 1.0f;
  y = y * bitsFloat(uint32_t(int32_t(n) + 127) << 23);
  y = x < lowest ? 0.0f : y;
  return x != x ? x : y;
}
LAMINA_HD inline double exp(double x) { return ::exp(x); }
LAMINA_HD inline float log(float x) { return ::logf(x); }
LAMINA_HD inline double log(double x) { return ::log(x); }
LAMINA_HD inline float sqrt(float x) { return ::sqrtf(x); }
LAMINA_HD inline double sqrt(double x) { return ::sqrt(x); }
/// A rational minimax approximation (the one Eigen and XLA use: degree 13/6
/// in x, a few ulp from tanhf over [-7.9, 7.9] and exactly +-1 beyond). It
/// vectorises and is several times faster than libm's tanhf, which
/// dominated the GELU of transformer MLPs.
LAMINA_HD inline float tanh(float x) {
  // Branch-free (selects, not jumps) so loops over it vectorise.
  const float clamp = 7.90531110763549805f;
  float tiny = x;
  x = x > clamp ? clamp : x;
  x = x < -clamp ? -clamp : x;
  float x2 = x * x;
  float p = -2.76076847742355e-16f;
  p = p * x2 + 2.00018790482477e-13f;
  p = p * x2 - 8.60467152213735e-11f;
  p = p * x2 + 5.12229709037114e-08f;
  p = p * x2 + 1.48572235717979e-05f;
  p = p * x2 + 6.37261928875436e-04f;
  p = p * x2 + 4.89352455891786e-03f;
  float q = 1.19825839466702e-06f;
  q = q * x2 + 1.18534705686654e-04f;
  q = q * x2 + 2.26843463243900e-03f;
  q = q * x2 + 4.89352518554385e-03f;
  // tanh(x) = x to float precision near 0; keeps -0 and denormals.
  return (tiny > -0.0004f && tiny < 0.0004f) ? tiny : x * p / q;
}
LAMINA_HD inline double tanh(double x) { return ::tanh(x); }
LAMINA_HD inline float erf(float x) { return ::erff(x); }
LAMINA_HD inline double erf(double x) { return ::erf(x); }
LAMINA_HD inline float erfc(float x) { return ::erfcf(x); }
LAMINA_HD inline double erfc(double x) { return ::erfc(x); }
LAMINA_HD inline float cos(float x) { return ::cosf(x); }
LAMINA_HD inline double cos(double x) { return ::cos(x); }
LAMINA_HD inline float sin(float x) { return ::sinf(x); }
LAMINA_HD inline double sin(double x) { return ::sin(x); }

template <typename T> LAMINA_HD inline T reciprocal(T x) { return T(1) / x; }

/// Never evaluates exp of a large positive number: no overflow, no inf/inf.
template <typename T> LAMINA_HD inline T sigmoid(T x) {
  if (x >= T(0))
    return T(1) / (T(1) + exp(-x));
  T e = exp(x);
  return e / (T(1) + e);
}

/// x * Phi(x) = x/2 * erfc(-x/sqrt 2); erfc keeps precision for x << 0,
/// where 1 + erf(x/sqrt 2) would cancel.
template <typename T> LAMINA_HD inline T gelu(T x) {
  return T(0.5) * x * erfc(-x * T(0.70710678118654752440));
}

/// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <typename T> LAMINA_HD inline T geluTanh(T x) {
  T inner = T(0.79788456080286535588) * (x + T(0.044715) * x * x * x);
  return T(0.5) * x * (T(1) + tanh(inner));
}

/// d gelu / dx = Phi(x) + x phi(x) (graph.gelu's gradient, one pass).
template <typename T> LAMINA_HD inline T geluDerivative(T x) {
  T cdf = T(0.5) * erfc(-x * T(0.70710678118654752440));
  T pdf = T(0.39894228040143267794) * exp(T(-0.5) * x * x);
  return cdf + x * pdf;
}

/// d geluTanh / dx = (1 + t)/2 + x/2 (1 - t^2) c (1 + 3 a x^2) with
/// t = tanh(c (x + a x^3)), c = sqrt(2/pi), a = 0.044715.
template <typename T> LAMINA_HD inline T geluTanhDerivative(T x) {
  const T c = T(0.79788456080286535588), a = T(0.044715);
  T t = tanh(c * (x + a * x * x * x));
  return T(0.5) * (T(1) + t) +
         T(0.5) * x * (T(1) - t * t) * c * (T(1) + T(3) * a * x * x);
}

//===----------------------------------------------------------------------===//
// Binary
//===----------------------------------------------------------------------===//

template <typename T> LAMINA_HD inline T add(T a, T b) {
  if constexpr (std::is_integral_v<T>)
    return T(std::make_unsigned_t<T>(a) + std::make_unsigned_t<T>(b));
  else
    return a + b;
}
template <typename T> LAMINA_HD inline T sub(T a, T b) {
  if constexpr (std::is_integral_v<T>)
    return T(std::make_unsigned_t<T>(a) - std::make_unsigned_t<T>(b));
  else
    return a - b;
}
template <typename T> LAMINA_HD inline T mul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    // Promote narrow unsigned types past int so the product cannot overflow
    // a signed int (u16 * u16 would).
    using U = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned,
                                 std::make_unsigned_t<T>>;
    return T(U(std::make_unsigned_t<T>(a)) * U(std::make_unsigned_t<T>(b)));
  } else {
    return a * b;
  }
}
/// Integer division truncates; x / 0 is 0 (as numpy gives) and MIN / -1
/// wraps to MIN, instead of the undefined behaviour (a trap on x86).
template <typename T> LAMINA_HD inline T div(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    if (b == 0)
      return T(0);
    if constexpr (std::is_signed_v<T>)
      if (b == T(-1))
        return neg(a);
    return T(a / b);
  } else {
    return a / b;
  }
}

LAMINA_HD inline float pow(float a, float b) { return ::powf(a, b); }
LAMINA_HD inline double pow(double a, double b) { return ::pow(a, b); }
/// Integer power, wrapping. A negative exponent gives the truncated real
/// result: 1 and -1 keep their magnitude, every other base gives 0.
template <typename T, typename = std::enable_if_t<std::is_integral_v<T>>>
LAMINA_HD inline T pow(T a, T b) {
  if constexpr (std::is_signed_v<T>) {
    if (b < 0) {
      if (a == 1)
        return T(1);
      if (a == T(-1))
        return (b & 1) ? T(-1) : T(1);
      return T(0);
    }
  }
  T result = T(1);
  while (b) {
    if (b & 1)
      result = mul(result, a);
    a = mul(a, a);
    b = T(std::make_unsigned_t<T>(b) >> 1);
  }
  return result;
}

/// numpy's minimum/maximum (and ONNX Min/Max): a NaN operand gives NaN.
template <typename T> LAMINA_HD inline T minimum(T a, T b) {
  return (a != a || a < b) ? a : b;
}
template <typename T> LAMINA_HD inline T maximum(T a, T b) {
  return (a != a || a > b) ? a : b;
}

} // namespace math
} // namespace lamina::rt

#endif // LAMINA_RUNTIME_MATH_H
