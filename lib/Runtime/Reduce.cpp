//===- Reduce.cpp - reduce_{sum,mean,max,prod} and cumsum -----------------===//
//
// A reduction is planned on the input's dims with size-1 dims dropped and
// neighbours of the same kind (kept / reduced) merged. Two loop orders follow
// from whichever kind the contiguous innermost dim is:
//  * reduced innermost: each output accumulates contiguous runs;
//  * kept innermost: a block of outputs accumulates a contiguous input row
//    per reduced index (column sums), which vectorises and splits by blocks.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <algorithm>
#include <cmath>
#include <limits>

using namespace lamina::rt;
using namespace lamina::rt::detail;

namespace {
constexpr int64_t kColumnBlock = 1024;

/// Sizes and input strides of one kind of dim, row-major order.
struct DimList {
  std::vector<int64_t> size, stride;
  int64_t count() const { return numElements(size.data(), int(size.size())); }
  /// Input offset of the index-th element of these dims.
  int64_t offset(int64_t index) const {
    int64_t off = 0;
    for (int d = int(size.size()) - 1; d >= 0; --d) {
      off += (index % size[d]) * stride[d];
      index /= size[d];
    }
    return off;
  }
};

template <typename A> A identity(ReduceOp op) {
  switch (op) {
  case ReduceOp::Max:
    if constexpr (std::is_floating_point_v<A>)
      return -std::numeric_limits<A>::infinity();
    else
      return std::numeric_limits<A>::lowest();
  case ReduceOp::Prod:
    return A(1);
  default:
    return A(0);
  }
}

/// `combine` is a closure (not a switch on op) so inner loops inline it.
/// R is the result's type: T, or f32 for f16/bf16 T (the accumulator,
/// unrounded).
template <typename T, typename R = T, typename Combine>
void reduceT(ReduceOp op, const Tensor &in, const Tensor &out,
             const DimList &kept, const DimList &red, Combine combine) {
  using A = Compute<T>;
  const T *x = in.as<T>();
  R *y = out.as<R>();
  int64_t outCount = out.numElements(), redCount = red.count();
  auto finish = [&](A a) {
    if (op == ReduceOp::Mean) {
      if constexpr (std::is_integral_v<A>) { // the count may not fit in A
        using W = std::conditional_t<std::is_signed_v<A>, int64_t, uint64_t>;
        a = A(math::div(W(a), W(redCount)));
      } else {
        a = a / A(redCount);
      }
    }
    return store<R>(a);
  };
  if (in.numElements() == 0) { // nothing to reduce: the identity
    std::fill(y, y + outCount, finish(identity<A>(op)));
    return;
  }
  bool reducedInner = !red.size.empty() && red.stride.back() == 1;
  if (reducedInner) {
    // Reduced elements q in [0, redCount) lie in runs of `len` contiguous
    // elements, one run per index of the other reduced dims.
    int64_t len = red.size.back();
    DimList rest{{red.size.begin(), red.size.end() - 1},
                 {red.stride.begin(), red.stride.end() - 1}};
    auto accumulate = [&](int64_t base, int64_t q0, int64_t q1) {
      A a = identity<A>(op);
      while (q0 < q1) {
        int64_t i0 = q0 % len, i1 = std::min(len, i0 + (q1 - q0));
        const T *run = x + base + rest.offset(q0 / len);
        for (int64_t i = i0; i < i1; ++i)
          a = combine(a, A(load(run[i])));
        q0 += i1 - i0;
      }
      return a;
    };
    int threads = getNumThreads();
    if (outCount < threads && redCount >= 4 * kGrain) {
      // Few outputs, much work each: split each output's elements into
      // partial results, combined in a fixed order.
      for (int64_t o = 0; o < outCount; ++o) {
        std::vector<A> partial(threads, identity<A>(op));
        int64_t base = kept.offset(o);
        parallelFor(threads, 1, [&](int64_t b, int64_t e) {
          for (int64_t t = b; t < e; ++t)
            partial[t] = accumulate(base, redCount * t / threads,
                                    redCount * (t + 1) / threads);
        });
        A a = identity<A>(op);
        for (A p : partial)
          a = combine(a, p);
        y[o] = finish(a);
      }
      return;
    }
    parallelFor(outCount, std::max<int64_t>(1, kGrain / redCount),
                [&](int64_t b, int64_t e) {
                  for (int64_t o = b; o < e; ++o)
                    y[o] = finish(accumulate(kept.offset(o), 0, redCount));
                });
    return;
  }
  // Kept innermost (or nothing reduced): column blocks of one output row.
  int64_t len = kept.size.back();
  DimList outer{{kept.size.begin(), kept.size.end() - 1},
                {kept.stride.begin(), kept.stride.end() - 1}};
  int64_t outRows = outer.count();
  int64_t blocks = (len + kColumnBlock - 1) / kColumnBlock;
  int64_t work = std::min(len, kColumnBlock) * redCount;
  parallelFor(outRows * blocks, std::max<int64_t>(1, kGrain / work),
              [&](int64_t b, int64_t e) {
                std::vector<A> acc(std::min(len, kColumnBlock));
                for (int64_t item = b; item < e; ++item) {
                  int64_t row = item / blocks;
                  int64_t c0 = (item % blocks) * kColumnBlock;
                  int64_t c1 = std::min(c0 + kColumnBlock, len);
                  std::fill(acc.begin(), acc.end(), identity<A>(op));
                  int64_t base = outer.offset(row) + c0;
                  for (int64_t r = 0; r < redCount; ++r) {
                    const T *run = x + base + red.offset(r);
                    for (int64_t c = 0; c < c1 - c0; ++c)
                      acc[c] = combine(acc[c], A(load(run[c])));
                  }
                  R *dst = y + row * len + c0;
                  for (int64_t c = 0; c < c1 - c0; ++c)
                    dst[c] = finish(acc[c]);
                }
              });
}
} // namespace

Status lamina::rt::detail::checkReduceTypes(const Tensor &input,
                                            const Tensor &result) {
  bool narrow = input.dtype == DType::F16 || input.dtype == DType::BF16;
  if (input.dtype != result.dtype && !(narrow && result.dtype == DType::F32))
    return Status::error("reduce: result " + describe(result) +
                         " has another element type than " + describe(input) +
                         " (or f32 for f16/bf16)");
  return Status::success();
}

Status lamina::rt::reduce(ReduceOp op, const Tensor &input, const int64_t *axes,
                          int numAxes, bool keepdims, const Tensor &result) {
  if (Status s = checkReduceTypes(input, result); !s.ok())
    return s;
  if (input.dtype == DType::I1 && op != ReduceOp::Max)
    return Status::error("reduce: only max is defined on i1");
  std::vector<bool> reduced;
  if (Status s = checkReduce(input, axes, numAxes, keepdims, result, reduced);
      !s.ok())
    return s;
  if (result.numElements() == 0)
    return Status::success();

  // Collapse: drop size-1 dims, merge neighbours of the same kind.
  std::vector<int64_t> strides(input.rank);
  rowMajorStrides(input.shape, input.rank, strides.data());
  DimList kept, red;
  int lastKind = -1;
  for (int d = 0; d < input.rank; ++d) {
    if (input.shape[d] == 1)
      continue;
    DimList &list = reduced[d] ? red : kept;
    if (lastKind == int(reduced[d])) {
      list.size.back() *= input.shape[d];
      list.stride.back() = strides[d];
    } else {
      list.size.push_back(input.shape[d]);
      list.stride.push_back(strides[d]);
    }
    lastKind = reduced[d];
  }
  if (kept.size.empty() && (red.size.empty() || red.stride.back() != 1)) {
    kept.size.push_back(1); // a single output that is not reduced innermost
    kept.stride.push_back(1);
  }
  auto run = [&](auto inTag, auto outTag) {
    using T = typename decltype(inTag)::type;
    using R = typename decltype(outTag)::type;
    using A = Compute<T>;
    if (op == ReduceOp::Max)
      reduceT<T, R>(op, input, result, kept, red,
                    [](A a, A x) { return math::maximum(a, x); });
    else if (op == ReduceOp::Prod)
      reduceT<T, R>(op, input, result, kept, red,
                    [](A a, A x) { return math::mul(a, x); });
    else
      reduceT<T, R>(op, input, result, kept, red,
                    [](A a, A x) { return math::add(a, x); });
  };
  dispatch(input.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      if (result.dtype == DType::F32)
        return run(tag, Tag<float>{});
    }
    run(tag, tag);
  });
  return Status::success();
}

//===----------------------------------------------------------------------===//
// Cumsum
//===----------------------------------------------------------------------===//

Status lamina::rt::cumsum(const Tensor &input, int64_t axis, bool exclusive,
                          bool reverse, const Tensor &result) {
  if (input.dtype != result.dtype || !sameShape(input, result))
    return Status::error("cumsum: result " + describe(result) +
                         " differs from input " + describe(input));
  if (input.dtype == DType::I1)
    return Status::error("cumsum: not defined on i1");
  if (!normaliseAxis(axis, input.rank))
    return Status::error("cumsum: axis out of range for " + describe(input));
  int64_t outer, n, inner;
  splitAround(input, int(axis), outer, n, inner);
  if (input.numElements() == 0)
    return Status::success();
  dispatch(input.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = Compute<T>;
    const T *x = input.as<T>();
    T *y = result.as<T>();
    int64_t blocks = (inner + kColumnBlock - 1) / kColumnBlock;
    int64_t work = n * std::min(inner, kColumnBlock);
    parallelFor(outer * blocks, std::max<int64_t>(1, kGrain / work),
                [&](int64_t b, int64_t e) {
                  std::vector<A> acc(std::min(inner, kColumnBlock));
                  for (int64_t item = b; item < e; ++item) {
                    int64_t o = item / blocks,
                            c0 = (item % blocks) * kColumnBlock;
                    int64_t c1 = std::min(c0 + kColumnBlock, inner);
                    std::fill(acc.begin(), acc.end(), A(0));
                    for (int64_t s = 0; s < n; ++s) {
                      int64_t i = reverse ? n - 1 - s : s;
                      int64_t base = (o * n + i) * inner;
                      for (int64_t c = c0; c < c1; ++c) {
                        A v = load(x[base + c]); // read before an aliased write
                        A &a = acc[c - c0];
                        if (exclusive) {
                          y[base + c] = store<T>(a);
                          a = math::add(a, v);
                        } else {
                          a = math::add(a, v);
                          y[base + c] = store<T>(a);
                        }
                      }
                    }
                  }
                });
  });
  return Status::success();
}

Status lamina::rt::detail::checkReduce(const Tensor &input,
                                       const int64_t *axes, int numAxes,
                                       bool keepdims, const Tensor &result,
                                       std::vector<bool> &reduced) {
  reduced.assign(input.rank, false);
  for (int i = 0; i < numAxes; ++i) {
    int64_t axis = axes[i];
    if (!normaliseAxis(axis, input.rank) || reduced[axis])
      return Status::error("reduce: axis " + std::to_string(axes[i]) +
                           " out of range or repeated for " + describe(input));
    reduced[axis] = true;
  }
  std::vector<int64_t> expected;
  for (int d = 0; d < input.rank; ++d)
    if (!reduced[d] || keepdims)
      expected.push_back(reduced[d] ? 1 : input.shape[d]);
  if (!hasShape(result, expected))
    return Status::error("reduce: result " + describe(result) +
                         " should have shape " +
                         shapeString(expected.data(), int(expected.size())));
  return Status::success();
}
