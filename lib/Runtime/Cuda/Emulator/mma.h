//===- mma.h - nvcuda::wmma for the kernel emulator ---------------*- C++ -*-===//
//
// Shadows CUDA's <mma.h> in lamina_cuda_emulated builds (this directory is
// searched first). A fragment holds 8 of a 16x16 tile's elements per lane,
// spread as the sm_80 mma.m16n8k16 accumulator spreads them; kernels that
// read fragment elements must find the layout out (as probeLayout does),
// because the device does not document it either. The collective operations
// exchange elements through a per-warp staging tile, with warp barriers, so
// each lane computes only its own elements of the product.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_LIB_RUNTIME_CUDA_EMULATOR_MMA_H
#define LAMINA_LIB_RUNTIME_CUDA_EMULATOR_MMA_H

#include "DeviceCode.h"

namespace lamina::cuda_emulator {
/// Row and column of element e (0..7) of `lane`'s part of a 16x16 tile.
inline int fragRow(int lane, int e) { return (lane >> 2) + 8 * ((e >> 1) & 1); }
inline int fragCol(int lane, int e) {
  return 8 * (e >> 2) + 2 * (lane & 3) + (e & 1);
}
/// The warp's staging tiles: 3 x 256 floats (A, B, C) per warp.
float *warpStaging();
} // namespace lamina::cuda_emulator

namespace nvcuda::wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16,
                "the emulator has the 16x16x16 shape only");
  static constexpr int num_elements = 8;
  T x[8];
};

namespace detail {
namespace emu = ::lamina::cuda_emulator;
inline float toFloat(float v) { return v; }
inline float toFloat(__half v) { return __half2float(v); }
inline float toFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> T fromFloat(float v);
template <> inline float fromFloat<float>(float v) { return v; }

/// Element (r, c) of a matrix at p with leading dimension ldm.
template <typename P>
P &at(P *p, unsigned ldm, int r, int c, bool rowMajor) {
  return rowMajor ? p[size_t(r) * ldm + c] : p[size_t(c) * ldm + r];
}
} // namespace detail

template <typename Use, typename T, typename L>
void fill_fragment(fragment<Use, 16, 16, 16, T, L> &f, T v) {
  for (int e = 0; e < 8; ++e)
    f.x[e] = v;
}
template <typename Use, typename T, typename L, typename V>
void fill_fragment(fragment<Use, 16, 16, 16, T, L> &f, V v) {
  for (int e = 0; e < 8; ++e)
    f.x[e] = T(v);
}

/// matrix_a / matrix_b: the layout is the fragment's.
template <typename Use, typename T, typename L>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, L> &f, const T *p,
                      unsigned ldm) {
  static_assert(!std::is_same_v<Use, accumulator>);
  int lane = detail::emu::lane();
  for (int e = 0; e < 8; ++e)
    f.x[e] = detail::at(p, ldm, detail::emu::fragRow(lane, e),
                        detail::emu::fragCol(lane, e),
                        std::is_same_v<L, row_major>);
  detail::emu::syncWarp();
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f,
                             const float *p, unsigned ldm, layout_t layout) {
  int lane = detail::emu::lane();
  for (int e = 0; e < 8; ++e)
    f.x[e] = detail::at(p, ldm, detail::emu::fragRow(lane, e),
                        detail::emu::fragCol(lane, e),
                        layout == mem_row_major);
  detail::emu::syncWarp();
}
inline void store_matrix_sync(float *p,
                              const fragment<accumulator, 16, 16, 16, float> &f,
                              unsigned ldm, layout_t layout) {
  int lane = detail::emu::lane();
  for (int e = 0; e < 8; ++e)
    detail::at(p, ldm, detail::emu::fragRow(lane, e),
               detail::emu::fragCol(lane, e), layout == mem_row_major) = f.x[e];
  // No barrier: as on the device, other lanes see these stores only after
  // the kernel's own __syncwarp.
}

/// d = a b + c, f32 accumulation.
template <typename T, typename LA, typename LB>
void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
              const fragment<matrix_a, 16, 16, 16, T, LA> &a,
              const fragment<matrix_b, 16, 16, 16, T, LB> &b,
              const fragment<accumulator, 16, 16, 16, float> &c) {
  namespace emu = detail::emu;
  int lane = emu::lane();
  float *A = emu::warpStaging(), *B = A + 256, *C = B + 256;
  for (int e = 0; e < 8; ++e) {
    int r = emu::fragRow(lane, e), col = emu::fragCol(lane, e);
    A[r * 16 + col] = detail::toFloat(a.x[e]);
    B[r * 16 + col] = detail::toFloat(b.x[e]);
    C[r * 16 + col] = c.x[e];
  }
  emu::syncWarp();
  float out[8];
  for (int e = 0; e < 8; ++e) {
    int r = emu::fragRow(lane, e), col = emu::fragCol(lane, e);
    float acc = C[r * 16 + col];
    for (int k = 0; k < 16; ++k)
      acc += A[r * 16 + k] * B[k * 16 + col];
    out[e] = acc;
  }
  emu::syncWarp(); // every lane has read the staging tiles
  for (int e = 0; e < 8; ++e)
    d.x[e] = out[e];
}
} // namespace nvcuda::wmma

#endif // LAMINA_LIB_RUNTIME_CUDA_EMULATOR_MMA_H
