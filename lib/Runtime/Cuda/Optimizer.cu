//===- Optimizer.cu - SGD, AdamW, gradient norm and clipping --------------===//
//
// The host Optimizer::step and clipGradNorm (lib/Runtime/Optimizer.cpp) on
// the device. Element-wise arithmetic uses the _rn intrinsics so nvcc
// cannot contract a*b+c into an FMA: each operation rounds as written in
// the host source. (The host itself is built with -march=native, where
// GCC's default -ffp-contract=fast may fuse some of them, so the two agree
// to an ulp or so per step rather than bit for bit.)
//
//===----------------------------------------------------------------------===//

#include "Common.h"
#include "lamina/Runtime/Cuda/Optimizer.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

using namespace lamina::rt;
using namespace lamina::rt::cuda;
using namespace lamina::rt::cuda::detail;

namespace {
// The host's per-element rules (Optimizer.h). This file is built with
// -fmad=false (CMakeLists.txt) so nvcc does not contract them into FMAs
// the host does not use: the device update is the host's bit for bit.
//
// C is the parameter's low-precision copy (ArgKind::ParamCopy: Half or
// BFloat16), stored from the updated value as the cast kernel rounds it, or
// NoCopy.
struct NoCopy {};
template <typename C>
__device__ inline void storeCopy(C *copy, int64_t k, float p) {
  if constexpr (!std::is_same_v<C, NoCopy>)
    copy[k] = store<C>(p);
}
/// Four copy elements as one 8-byte store (the 4-wide kernel's).
template <typename C> struct alignas(8) Copy4 { C x, y, z, w; };
template <typename C>
__device__ inline void storeCopy4(C *copy, int64_t k4, float4 p) {
  if constexpr (!std::is_same_v<C, NoCopy>)
    reinterpret_cast<Copy4<C> *>(copy)[k4] =
        Copy4<C>{store<C>(p.x), store<C>(p.y), store<C>(p.z), store<C>(p.w)};
}

template <typename C>
__global__ void sgdKernel(UpdateCoefficients c, float *p, const float *g,
                          float *buf, C *copy, int64_t n) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n;
       k += int64_t(gridDim.x) * blockDim.x) {
    sgdElement(p[k], g[k], buf ? buf + k : nullptr, c);
    storeCopy(copy, k, p[k]);
  }
}

__global__ void axpyKernel(float *dst, const float *src, float a, int64_t n) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n;
       k += int64_t(gridDim.x) * blockDim.x)
    dst[k] = __fadd_rn(dst[k], __fmul_rn(a, src[k]));
}

template <typename C>
__global__ void adamwKernel(UpdateCoefficients c, float *p, const float *g,
                            float *m, float *v, C *copy, int64_t n) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n;
       k += int64_t(gridDim.x) * blockDim.x) {
    adamwElement(p[k], m[k], v[k], g[k], c);
    storeCopy(copy, k, p[k]);
  }
}

/// adamwKernel four elements a thread with 16-byte loads and stores (the
/// update is memory-bound: 28 bytes an element, 30 with a copy); the same
/// per-element rule, so the same bits.
template <typename C>
__device__ inline void adamwVec4(const UpdateCoefficients &c, float4 *p,
                                 const float4 *g, float4 *m, float4 *v, C *copy,
                                 int64_t k) {
  float4 P = p[k], G = g[k], M = m[k], V = v[k];
  adamwElement(P.x, M.x, V.x, G.x, c);
  adamwElement(P.y, M.y, V.y, G.y, c);
  adamwElement(P.z, M.z, V.z, G.z, c);
  adamwElement(P.w, M.w, V.w, G.w, c);
  p[k] = P;
  m[k] = M;
  v[k] = V;
  storeCopy4(copy, k, P);
}

template <typename C>
__global__ void adamwVec4Kernel(UpdateCoefficients c, float4 *p,
                                const float4 *g, float4 *m, float4 *v, C *copy,
                                int64_t n4) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n4;
       k += int64_t(gridDim.x) * blockDim.x)
    adamwVec4(c, p, g, m, v, copy, k);
}

//===----------------------------------------------------------------------===//
// Multi-tensor launches: up to kChunk tensors per launch, passed by value;
// block b of a launch belongs to the tensor whose block range holds it.
//===----------------------------------------------------------------------===//

constexpr int kChunk = 64;
constexpr int kThreads = 256;
/// Blocks per tensor: one per 16 elements a thread, at most kMaxBlocks (a
/// function of the size only, so sums are reproducible).
constexpr int64_t kPerBlock = kThreads * 16;
constexpr int64_t kMaxBlocks = 1024;

struct Chunk {
  float *ptr[kChunk];
  int64_t count[kChunk];
  int64_t firstBlock[kChunk + 1];
  int num;
};

int64_t blocksFor(int64_t count) {
  return std::min(kMaxBlocks, (count + kPerBlock - 1) / kPerBlock);
}

/// Splits tensors into chunks; `blockBase` gets each chunk's first global
/// block (its partial sums' offset).
std::vector<Chunk> makeChunks(const Tensor *tensors, int n,
                              std::vector<int64_t> &blockBase,
                              int64_t &totalBlocks) {
  std::vector<Chunk> chunks;
  totalBlocks = 0;
  for (int i = 0; i < n; ++i) {
    int64_t count = tensors[i].numElements();
    if (count == 0)
      continue;
    if (chunks.empty() || chunks.back().num == kChunk) {
      chunks.emplace_back();
      chunks.back().num = 0;
      chunks.back().firstBlock[0] = 0;
      blockBase.push_back(totalBlocks);
    }
    Chunk &c = chunks.back();
    c.ptr[c.num] = tensors[i].as<float>();
    c.count[c.num] = count;
    c.firstBlock[c.num + 1] = c.firstBlock[c.num] + blocksFor(count);
    totalBlocks += blocksFor(count);
    ++c.num;
  }
  return chunks;
}

/// The tensor of this block (of `num`, tensor j owning blocks
/// [firstBlock[j], firstBlock[j + 1])), its block index within it and its
/// block count.
__device__ int locate(const int64_t *firstBlock, int num, int64_t block,
                      int64_t &local, int64_t &blocks) {
  int j = 0;
  while (j + 1 < num && firstBlock[j + 1] <= block)
    ++j;
  local = block - firstBlock[j];
  blocks = firstBlock[j + 1] - firstBlock[j];
  return j;
}
__device__ int locate(const Chunk &c, int64_t block, int64_t &local,
                      int64_t &blocks) {
  return locate(c.firstBlock, c.num, block, local, blocks);
}

/// Up to kChunk AdamW updates of one launch (all 4-wide, one set of
/// coefficients, one copy type): 3.6 KB of parameters, under the 4 KB that
/// every architecture and toolkit accepts.
template <typename C> struct AdamwChunk {
  float4 *p[kChunk], *m[kChunk], *v[kChunk];
  const float4 *g[kChunk];
  C *copy[kChunk];
  int64_t n4[kChunk];
  int64_t firstBlock[kChunk + 1];
  int num;
};

static_assert(sizeof(AdamwChunk<BFloat16>) + sizeof(UpdateCoefficients) <= 4096,
              "a launch's parameters must fit in 4 KB");

/// Blocks for n4 four-element groups of one tensor: about four groups a
/// thread, at most kMaxBlocks.
int64_t adamwBlocks(int64_t n4) {
  return std::max<int64_t>(
      1, std::min(kMaxBlocks, (n4 + kThreads * 4 - 1) / (kThreads * 4)));
}

/// Up to kChunk gradient sums of one launch (accumulateMany).
struct SumChunk {
  float *dst[kChunk];
  const float *src[kChunk];
  int64_t count[kChunk];
  int64_t firstBlock[kChunk + 1];
  float scale[kChunk];
  uint64_t intoZeros; ///< bit j: sum j starts from zeros
  uint64_t scaled;    ///< bit j: scale[j] != 1
  int num;
};

/// axpyKernel's dst + a * src (scaled), binaryKernel's Add (dst + src), or
/// either on a zero dst, which it then does not read.
__global__ void sumChunkKernel(SumChunk t) {
  int64_t local, blocks;
  int j = locate(t.firstBlock, t.num, blockIdx.x, local, blocks);
  bool zero = (t.intoZeros >> j) & 1, scaled = (t.scaled >> j) & 1;
  float a = t.scale[j], *dst = t.dst[j];
  const float *src = t.src[j];
  for (int64_t e = local * kThreads + threadIdx.x; e < t.count[j];
       e += blocks * kThreads)
    dst[e] =
        __fadd_rn(zero ? 0.0f : dst[e], scaled ? __fmul_rn(a, src[e]) : src[e]);
}

template <typename C>
__global__ void adamwChunkKernel(UpdateCoefficients c, AdamwChunk<C> t) {
  int64_t local, blocks;
  int j = locate(t.firstBlock, t.num, blockIdx.x, local, blocks);
  for (int64_t k = local * kThreads + threadIdx.x; k < t.n4[j];
       k += blocks * kThreads)
    adamwVec4(c, t.p[j], t.g[j], t.m[j], t.v[j], t.copy[j], k);
}

/// Sum over the block in a fixed tree; thread 0 gets the result.
__device__ double blockSum(double v) {
  __shared__ double scratch[32];
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0)
    scratch[warp] = v;
  __syncthreads();
  v = lane < int(blockDim.x >> 5) ? scratch[lane] : 0.0;
  if (warp == 0)
    for (int o = 16; o > 0; o >>= 1)
      v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__global__ void sumSquaresKernel(Chunk c, double *partials) {
  int64_t local, blocks;
  int j = locate(c, blockIdx.x, local, blocks);
  const float *x = c.ptr[j];
  double acc = 0;
  for (int64_t e = local * kThreads + threadIdx.x; e < c.count[j];
       e += blocks * kThreads) {
    double d = x[e];
    acc += d * d;
  }
  acc = blockSum(acc);
  if (threadIdx.x == 0)
    partials[blockIdx.x] = acc;
}

/// One block adds the partial sums in a fixed order.
__global__ void finalSumKernel(const double *partials, int64_t count,
                               double *result) {
  double acc = 0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x)
    acc += partials[i];
  acc = blockSum(acc);
  if (threadIdx.x == 0)
    *result = acc;
}

__global__ void sqrtKernel(double *p) { *p = sqrt(*p); }

__global__ void scaleKernel(Chunk c, const double *normPtr, float maxNorm) {
  double norm = *normPtr;
  double coef = double(maxNorm) / (norm + 1e-6);
  if (!(norm - norm == 0.0) || coef >= 1.0) // non-finite, or no clipping
    return;
  float scale = float(coef);
  int64_t local, blocks;
  int j = locate(c, blockIdx.x, local, blocks);
  float *x = c.ptr[j];
  for (int64_t e = local * kThreads + threadIdx.x; e < c.count[j];
       e += blocks * kThreads)
    x[e] = __fmul_rn(x[e], scale);
}

Status checkF32(const char *op, const Tensor *tensors, int n) {
  if (n < 0)
    return Status::error(std::string(op) + ": negative tensor count");
  for (int i = 0; i < n; ++i)
    if (tensors[i].dtype != DType::F32)
      return Status::error(std::string(op) + ": tensor " + std::to_string(i) +
                           " is " + describe(tensors[i]) + ", expected f32");
  return Status::success();
}
} // namespace

Status lamina::rt::cuda::accumulateScaled(float *dst, const float *src,
                                          int64_t n, float scale,
                                          cudaStream_t stream) {
  if (n <= 0)
    return Status::success();
  launchKernel(axpyKernel, gridFor(n), 256, 0, stream, dst, src, scale, n);
  return launched("accumulate");
}

Status lamina::rt::cuda::accumulateMany(const GradientSum *sums, int count,
                                        cudaStream_t stream) {
  if (count < 0)
    return Status::error("accumulate: negative sum count");
  SumChunk t{};
  auto flush = [&]() -> Status {
    if (t.num == 0)
      return Status::success();
    launchKernel(sumChunkKernel, unsigned(t.firstBlock[t.num]), kThreads, 0,
                 stream, t);
    t = SumChunk{};
    return launched("accumulate");
  };
  for (int i = 0; i < count; ++i) {
    const GradientSum &s = sums[i];
    if (s.n < 0 || (s.n > 0 && (!s.dst || !s.src)))
      return Status::error("accumulate: sum " + std::to_string(i) +
                           " has no buffers or a negative size");
    if (s.n == 0)
      continue;
    int j = t.num++;
    t.dst[j] = s.dst;
    t.src[j] = s.src;
    t.count[j] = s.n;
    t.scale[j] = s.scale;
    t.intoZeros |= uint64_t(s.intoZeros) << j;
    t.scaled |= uint64_t(s.scale != 1.0f) << j;
    t.firstBlock[j + 1] = t.firstBlock[j] + blocksFor(s.n);
    if (t.num == kChunk)
      if (Status st = flush(); !st.ok())
        return st;
  }
  return flush();
}

namespace {
/// Optimizer::init's and step's checks of one update.
Status checkStep(const OptimizerConfig &cfg, float lr, int64_t step,
                 const Tensor &param, const Tensor &grad, const Tensor *state,
                 const Tensor *copy) {
  auto bad = [](const char *what, double v) {
    return Status::error(std::string("optimizer: invalid ") + what + " " +
                         std::to_string(v));
  };
  if (!(cfg.weightDecay >= 0))
    return bad("weight decay", cfg.weightDecay);
  if (cfg.kind == OptimizerKind::Sgd) {
    if (!(cfg.momentum >= 0))
      return bad("momentum", cfg.momentum);
    if (cfg.nesterov && (cfg.momentum <= 0 || cfg.dampening != 0))
      return Status::error("optimizer: Nesterov momentum needs momentum > 0 "
                           "and dampening 0");
  } else {
    if (!(cfg.beta1 >= 0 && cfg.beta1 < 1))
      return bad("beta1 (must be in [0, 1))", cfg.beta1);
    if (!(cfg.beta2 >= 0 && cfg.beta2 < 1))
      return bad("beta2 (must be in [0, 1))", cfg.beta2);
    if (!(cfg.eps >= 0))
      return bad("eps", cfg.eps);
  }
  if (!(lr >= 0))
    return Status::error("optimizer: invalid learning rate " +
                         std::to_string(lr));
  if (step < 1)
    return Status::error("optimizer: step " + std::to_string(step) +
                         " (the count after its increment) must be >= 1");
  const int slots = optimizerSlots(cfg);
  if (slots && !state)
    return Status::error("optimizer: " + std::to_string(slots) +
                         " state buffers expected, got none");
  auto check = [&](const Tensor &t, const std::string &what) {
    if (t.dtype != DType::F32 || !sameShape(t, param))
      return Status::error("optimizer: " + what + " " + describe(t) +
                           " must be f32 of the parameter's shape " +
                           describe(param));
    return Status::success();
  };
  if (param.dtype != DType::F32)
    return Status::error("optimizer: parameter " + describe(param) +
                         " must be f32; f16/bf16 parameters are not "
                         "supported");
  if (Status s = check(grad, "gradient"); !s.ok())
    return s;
  if (copy && (!(copy->dtype == DType::BF16 || copy->dtype == DType::F16) ||
               !sameShape(*copy, param)))
    return Status::error("optimizer: the parameter's copy " + describe(*copy) +
                         " must be f16 or bf16 of the parameter's shape " +
                         describe(param));
  for (int i = 0; i < slots; ++i)
    if (Status s = check(state[i], "state " + std::to_string(i)); !s.ok())
      return s;
  return Status::success();
}

/// One checked update's own launch.
Status launchStep(const OptimizerConfig &cfg, float lr, int64_t step,
                  const Tensor &param, const Tensor &grad, const Tensor *state,
                  cudaStream_t stream, const Tensor *copy) {
  int64_t n = param.numElements();
  if (n == 0)
    return Status::success();
  const int slots = optimizerSlots(cfg);
  const UpdateCoefficients c = updateCoefficients(cfg, lr, step);
  auto launch = [&](auto tag) {
    using C = typename decltype(tag)::type;
    C *cp = copy ? static_cast<C *>(copy->data) : nullptr;
    if (cfg.kind == OptimizerKind::Sgd) {
      launchKernel(sgdKernel<C>, gridFor(n), 256, 0, stream, c,
                   param.as<float>(), grad.as<float>(),
                   slots ? state[0].as<float>() : nullptr, cp, n);
      return;
    }
    bool vec = n % 4 == 0 && (!cp || alignedTo(cp, 8));
    for (const void *q : {param.data, grad.data, state[0].data, state[1].data})
      vec = vec && alignedTo(q, 16);
    if (vec)
      launchKernel(adamwVec4Kernel<C>, gridFor(n / 4), 256, 0, stream, c,
                   static_cast<float4 *>(param.data),
                   static_cast<const float4 *>(grad.data),
                   static_cast<float4 *>(state[0].data),
                   static_cast<float4 *>(state[1].data), cp, n / 4);
    else
      launchKernel(adamwKernel<C>, gridFor(n), 256, 0, stream, c,
                   param.as<float>(), grad.as<float>(), state[0].as<float>(),
                   state[1].as<float>(), cp, n);
  };
  if (!copy)
    launch(Tag<NoCopy>{});
  else if (copy->dtype == DType::BF16)
    launch(Tag<BFloat16>{});
  else
    launch(Tag<Half>{});
  return launched("optimizer");
}

/// AdamW over 16-byte groups: what adamwVec4Kernel takes.
bool fourWide(const ParamUpdate &u) {
  if (u.cfg->kind != OptimizerKind::AdamW || u.param.numElements() % 4 != 0 ||
      (u.copy && !alignedTo(u.copy->data, 8)))
    return false;
  for (const void *q :
       {u.param.data, u.grad.data, u.state[0].data, u.state[1].data})
    if (!alignedTo(q, 16))
      return false;
  return true;
}

/// The fields adamwElement reads.
bool sameAdamw(const UpdateCoefficients &a, const UpdateCoefficients &b) {
  return a.decay == b.decay && a.w1 == b.w1 && a.b2 == b.b2 && a.w2 == b.w2 &&
         a.stepSize == b.stepSize && a.bc2 == b.bc2 && a.eps == b.eps;
}

/// One launch per kChunk of `group` (indices into updates, all 4-wide with
/// coefficients c and copies of type C).
template <typename C>
Status launchAdamwChunks(const UpdateCoefficients &c,
                         const ParamUpdate *updates,
                         const std::vector<int> &group, cudaStream_t stream) {
  for (size_t first = 0; first < group.size(); first += kChunk) {
    AdamwChunk<C> t{};
    t.firstBlock[0] = 0;
    for (size_t i = first; i < group.size() && t.num < kChunk; ++i) {
      const ParamUpdate &u = updates[group[i]];
      int j = t.num++;
      t.p[j] = static_cast<float4 *>(u.param.data);
      t.g[j] = static_cast<const float4 *>(u.grad.data);
      t.m[j] = static_cast<float4 *>(u.state[0].data);
      t.v[j] = static_cast<float4 *>(u.state[1].data);
      t.copy[j] = u.copy ? static_cast<C *>(u.copy->data) : nullptr;
      t.n4[j] = u.param.numElements() / 4;
      t.firstBlock[j + 1] = t.firstBlock[j] + adamwBlocks(t.n4[j]);
    }
    launchKernel(adamwChunkKernel<C>, unsigned(t.firstBlock[t.num]), kThreads,
                 0, stream, c, t);
    if (Status s = launched("optimizer"); !s.ok())
      return s;
  }
  return Status::success();
}
} // namespace

Status lamina::rt::cuda::optimizerStep(const OptimizerConfig &cfg, float lr,
                                       int64_t step, const Tensor &param,
                                       const Tensor &grad, const Tensor *state,
                                       cudaStream_t stream,
                                       const Tensor *copy) {
  if (Status s = checkStep(cfg, lr, step, param, grad, state, copy); !s.ok())
    return s;
  return launchStep(cfg, lr, step, param, grad, state, stream, copy);
}

Status lamina::rt::cuda::optimizerSteps(float lr, int64_t step,
                                        const ParamUpdate *updates, int n,
                                        cudaStream_t stream) {
  if (n < 0)
    return Status::error("optimizer: negative update count");
  for (int i = 0; i < n; ++i) {
    const ParamUpdate &u = updates[i];
    if (!u.cfg)
      return Status::error("optimizer: update " + std::to_string(i) +
                           " has no configuration");
    if (Status s =
            checkStep(*u.cfg, lr, step, u.param, u.grad, u.state, u.copy);
        !s.ok())
      return s;
  }
  // Groups of 4-wide AdamW updates that share coefficients and copy type,
  // in order of first appearance; every other update launches alone.
  struct Group {
    UpdateCoefficients c;
    int copyType; // 0 none, 1 bf16, 2 f16
    std::vector<int> members;
  };
  std::vector<Group> groups;
  for (int i = 0; i < n; ++i) {
    const ParamUpdate &u = updates[i];
    if (u.param.numElements() == 0)
      continue;
    if (!fourWide(u)) {
      if (Status s = launchStep(*u.cfg, lr, step, u.param, u.grad, u.state,
                                stream, u.copy);
          !s.ok())
        return s;
      continue;
    }
    UpdateCoefficients c = updateCoefficients(*u.cfg, lr, step);
    int copyType = !u.copy ? 0 : u.copy->dtype == DType::BF16 ? 1 : 2;
    auto it = std::find_if(groups.begin(), groups.end(), [&](const Group &g) {
      return g.copyType == copyType && sameAdamw(g.c, c);
    });
    if (it == groups.end())
      it = groups.insert(groups.end(), Group{c, copyType, {}});
    it->members.push_back(i);
  }
  for (const Group &g : groups) {
    Status s =
        g.copyType == 0
            ? launchAdamwChunks<NoCopy>(g.c, updates, g.members, stream)
        : g.copyType == 1
            ? launchAdamwChunks<BFloat16>(g.c, updates, g.members, stream)
            : launchAdamwChunks<Half>(g.c, updates, g.members, stream);
    if (!s.ok())
      return s;
  }
  return Status::success();
}

Status lamina::rt::cuda::sumOfSquares(const Tensor *tensors, int n,
                                      double *deviceResult,
                                      cudaStream_t stream) {
  if (Status s = checkF32("sum_of_squares", tensors, n); !s.ok())
    return s;
  if (!deviceResult)
    return Status::error("sum_of_squares: no result pointer");
  std::vector<int64_t> base;
  int64_t total = 0;
  std::vector<Chunk> chunks = makeChunks(tensors, n, base, total);
  void *mem = nullptr;
  size_t bytes = size_t(std::max<int64_t>(total, 1)) * sizeof(double);
  if (Status s = cudaCheck("sum_of_squares",
                           cudaMallocAsync(&mem, bytes, stream));
      !s.ok())
    return s;
  auto *partials = static_cast<double *>(mem);
  auto run = [&]() -> Status {
    for (size_t i = 0; i < chunks.size(); ++i) {
      int64_t blocks = chunks[i].firstBlock[chunks[i].num];
      launchKernel(sumSquaresKernel, unsigned(blocks), kThreads, 0, stream,
                   chunks[i], partials + base[i]);
      if (Status s = launched("sum_of_squares"); !s.ok())
        return s;
    }
    launchKernel(finalSumKernel, 1, 1024, 0, stream, partials, total,
                 deviceResult);
    return launched("sum_of_squares");
  };
  Status s = run();
  Status freed = cudaCheck("sum_of_squares", cudaFreeAsync(mem, stream));
  return s.ok() ? freed : s;
}

Status lamina::rt::cuda::sqrtInPlace(double *deviceValue,
                                     cudaStream_t stream) {
  if (!deviceValue)
    return Status::error("sqrt_in_place: no value pointer");
  launchKernel(sqrtKernel, 1, 1, 0, stream, deviceValue);
  return launched("sqrt_in_place");
}

Status lamina::rt::cuda::scaleInPlace(const Tensor *tensors, int n,
                                      const double *deviceNorm, float maxNorm,
                                      cudaStream_t stream) {
  if (!(maxNorm > 0))
    return Status::error("clip_grad_norm: max norm must be positive, got " +
                         std::to_string(maxNorm));
  if (Status s = checkF32("scale_in_place", tensors, n); !s.ok())
    return s;
  if (!deviceNorm)
    return Status::error("scale_in_place: no norm pointer");
  std::vector<int64_t> base;
  int64_t total = 0;
  for (const Chunk &c : makeChunks(tensors, n, base, total)) {
    launchKernel(scaleKernel, unsigned(c.firstBlock[c.num]), kThreads, 0,
                 stream, c, deviceNorm, maxNorm);
    if (Status s = launched("scale_in_place"); !s.ok())
      return s;
  }
  return Status::success();
}

Status lamina::rt::cuda::clipGradNorm(const Tensor *grads, int n,
                                      float maxNorm, double *deviceNorm,
                                      cudaStream_t stream) {
  if (!(maxNorm > 0))
    return Status::error("clip_grad_norm: max norm must be positive, got " +
                         std::to_string(maxNorm));
  if (Status s = sumOfSquares(grads, n, deviceNorm, stream); !s.ok())
    return s;
  if (Status s = sqrtInPlace(deviceNorm, stream); !s.ok())
    return s;
  return scaleInPlace(grads, n, deviceNorm, maxNorm, stream);
}
