//===- CudnnAttention.cpp - fused attention through cuDNN -----------------===//
//
// Host code only: cuDNN's C++ frontend (header-only, cudnn_frontend.h)
// builds an SDPA graph per distinct call, cuDNN's heuristics pick an engine
// (on Hopper, flash attention on wgmma/TMA), and the graph is executed on
// the caller's stream. Semantics match Attention.cu's kernels:
//
// * scores = scale * q k^T, the causal rule j <= i (Sq == Sk only: that is
//   where cuDNN's top-left diagonal is the graph's j <= i + Sk - Sq), the
//   softmax in f32, P rounded to the storage type before P V (as the WMMA
//   kernels and flash attention do); lse is cuDNN's "Stats", the natural
//   log-sum-exp of the scaled scores per row: the same [B, H, Sq] f32.
// * The backward reads q, k, v, out, dO and lse and writes dq, dk, dv
//   (summed over each kv head's query group); cuDNN forms Delta itself.
//   It is asked for its deterministic algorithm, so a run repeats bit for
//   bit as with the kernels.
// * Layouts are strides: head-major [B, heads, S, D] or seq-major [B, S,
//   heads, D] (the projections' own layout) without a copy, and q, k, v
//   (and their gradients) may be packed in one fused projection's token
//   rows (Call::qkvStride: graph.packed_attention).
//
// cuDNN is loaded at run time (the frontend's dynamic loading: dlopen of
// libcudnn.so.9 on first use), so programs link no cuDNN and run where it
// is missing, on the kernels. Plans are cached per call description (Key)
// and device. A description cuDNN cannot plan (an old cuDNN, an
// unsupported GPU) is remembered as such and the caller falls back to the
// kernels; LAMINA_CUDA_ATTENTION=tensor-core or generic skips cuDNN
// altogether, LAMINA_CUDNN_VERBOSE=1 says why cuDNN was not used. The
// workspace comes from the stream's pool per call (cudaMallocAsync), as the
// kernels' scratch.
//
//===----------------------------------------------------------------------===//

#include "CudnnAttention.h"

#include "Common.h"

#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#include <cudnn_frontend.h>

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

namespace fe = cudnn_frontend;

// The frontend's calls go through this handle of libcudnn (dlopen'd below).
void *cudnn_frontend::cudnn_dlhandle = nullptr;
using namespace lamina::rt;
using namespace lamina::rt::cuda::detail;
using namespace lamina::rt::cuda::detail::cudnn_attention;

namespace {
// Tensor uids of the variant pack.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

/// Everything a plan depends on.
using Key = std::tuple<int /*device*/, bool /*backward*/, DType, int64_t,
                       int64_t, int64_t, int64_t, int64_t, int64_t,
                       uint32_t /*scale bits*/, bool /*causal*/,
                       bool /*seqMajor*/, int64_t /*qkvStride*/>;

struct Plan {
  std::shared_ptr<fe::graph::Graph> graph; // null: cuDNN has none
  int64_t workspace = 0;
  std::string why; // without a graph
};

std::mutex cacheMutex;
std::map<Key, Plan> cache;
std::map<int, cudnnHandle_t> handles;

bool verbose() {
  static const bool on = std::getenv("LAMINA_CUDNN_VERBOSE") != nullptr;
  return on;
}

/// libcudnn, once per process: false when this machine has none.
bool loadCudnn() {
  static const bool loaded = [] {
    for (const char *name : {"libcudnn.so.9", "libcudnn.so"})
      if ((cudnn_frontend::cudnn_dlhandle = dlopen(name, RTLD_NOW)))
        return true;
    if (verbose())
      std::fprintf(stderr, "lamina: no libcudnn (%s); using the attention "
                   "kernels\n", dlerror());
    return false;
  }();
  return loaded;
}

/// Strides of a [B, heads, S, D] view of a head- or seq-major tensor.
std::vector<int64_t> strides(const Call &c, int64_t heads, int64_t s) {
  if (c.seqMajor)
    return {s * heads * c.D, c.D, heads * c.D, 1};
  return {heads * s * c.D, s * c.D, c.D, 1};
}

std::shared_ptr<fe::graph::Tensor_attributes>
tensor(fe::graph::Graph &g, const char *name, Uid uid,
       std::vector<int64_t> dims, std::vector<int64_t> stride) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim(std::move(dims))
                      .set_stride(std::move(stride)));
}

/// The forward or backward graph of `c`, built for `handle`; null (and why)
/// when cuDNN has no plan for it.
std::shared_ptr<fe::graph::Graph> build(const Call &c, bool backward,
                                        cudnnHandle_t handle,
                                        std::string &why) try {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(c.dtype == DType::BF16 ? fe::DataType_t::BFLOAT16
                                             : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  std::vector<int64_t> qDims{c.B, c.H, c.Sq, c.D}, kDims{c.B, c.Hk, c.Sk, c.D};
  // out and dO in their own layout; q, k, v and their gradients packed in
  // one tensor's token rows when qkvStride is set.
  auto oStr = strides(c, c.H, c.Sq);
  auto qStr = c.qkvStride ? std::vector<int64_t>{c.Sq * c.qkvStride, c.D,
                                                 c.qkvStride, 1}
                          : oStr;
  auto kStr = c.qkvStride ? std::vector<int64_t>{c.Sk * c.qkvStride, c.D,
                                                 c.qkvStride, 1}
                          : strides(c, c.Hk, c.Sk);
  auto q = tensor(*g, "Q", kQ, qDims, qStr);
  auto k = tensor(*g, "K", kK, kDims, kStr);
  auto v = tensor(*g, "V", kV, kDims, kStr);
  std::vector<int64_t> statDims{c.B, c.H, c.Sq, 1},
      statStr{c.H * c.Sq, c.Sq, 1, 1};
  if (!backward) {
    auto opts = fe::graph::SDPA_attributes()
                    .set_name("attention")
                    .set_generate_stats(true)
                    .set_attn_scale(c.scale);
    if (c.causal)
      opts.set_causal_mask(true);
    auto [o, stats] = g->sdpa(q, k, v, opts);
    o->set_output(true).set_uid(kO).set_dim(qDims).set_stride(oStr);
    stats->set_output(true)
        .set_uid(kStats)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim(statDims)
        .set_stride(statStr);
  } else {
    auto o = tensor(*g, "O", kO, qDims, oStr);
    auto dO = tensor(*g, "dO", kDO, qDims, oStr);
    auto stats = g->tensor(fe::graph::Tensor_attributes()
                               .set_name("Stats")
                               .set_uid(kStats)
                               .set_dim(statDims)
                               .set_stride(statStr)
                               .set_data_type(fe::DataType_t::FLOAT));
    auto opts = fe::graph::SDPA_backward_attributes()
                    .set_name("attention_grad")
                    .set_attn_scale(c.scale)
                    .set_deterministic_algorithm(true);
    if (c.causal)
      opts.set_causal_mask(true);
    auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, dO, stats, opts);
    dq->set_output(true).set_uid(kDQ).set_dim(qDims).set_stride(qStr);
    dk->set_output(true).set_uid(kDK).set_dim(kDims).set_stride(kStr);
    dv->set_output(true).set_uid(kDV).set_dim(kDims).set_stride(kStr);
  }
  fe::error_t st = g->build(handle, {fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK});
  if (st.is_bad()) {
    why = st.get_message();
    return nullptr;
  }
  return g;
} catch (const std::exception &e) { // the frontend's loader throws
  why = e.what();
  return nullptr;
}

/// The device's handle (created on first use) and the plan of `c`.
bool planFor(const Call &c, bool backward, cudnnHandle_t &handle, Plan &plan,
             Status &result) {
  const char *name = backward ? "attention_grad" : "attention";
  int dev = 0;
  if (Status s = cudaCheck(name, cudaGetDevice(&dev)); !s.ok()) {
    result = s;
    return true;
  }
  uint32_t scaleBits;
  std::memcpy(&scaleBits, &c.scale, 4);
  Key key{dev, backward, c.dtype, c.B, c.H, c.Hk, c.Sq, c.Sk, c.D,
          scaleBits, c.causal, c.seqMajor, c.qkvStride};
  std::lock_guard<std::mutex> lock(cacheMutex);
  auto h = handles.find(dev);
  if (h == handles.end()) {
    cudnnHandle_t made = nullptr;
    if (!loadCudnn() ||
        fe::detail::create_handle(&made) != CUDNN_STATUS_SUCCESS) {
      if (verbose() && cudnn_frontend::cudnn_dlhandle)
        std::fprintf(stderr, "lamina: cudnnCreate failed; using the "
                     "attention kernels\n");
      made = nullptr; // no cuDNN here: the kernels, for good
    }
    h = handles.emplace(dev, made).first;
  }
  handle = h->second;
  if (!handle) {
    plan.why = "no usable libcudnn";
    return false;
  }
  auto it = cache.find(key);
  if (it == cache.end()) {
    Plan p;
    p.graph = build(c, backward, handle, p.why);
    if (p.graph && p.graph->get_workspace_size(p.workspace).is_bad()) {
      p.graph = nullptr;
      p.why = "no workspace size";
    }
    if (!p.graph && verbose())
      std::fprintf(stderr, "lamina: cuDNN has no %s plan (%s); using the "
                   "attention kernels\n", name, p.why.c_str());
    it = cache.emplace(key, std::move(p)).first;
  }
  plan = it->second;
  return plan.graph != nullptr;
}

bool run(const Call &c, bool backward, cudaStream_t stream, Status &result) {
  const char *name = backward ? "attention_grad" : "attention";
  cudnnHandle_t handle = nullptr;
  Plan plan;
  result = Status::success();
  if (!planFor(c, backward, handle, plan, result)) {
    if (result.ok() && attentionPath() == AttentionPath::Cudnn)
      result = Status::error(std::string(name) +
                             ": LAMINA_CUDA_ATTENTION=cudnn, but cuDNN "
                             "cannot take this call: " + plan.why);
    return !result.ok(); // an error getting the device is still an error
  }
  Scratch workspace(stream);
  if (plan.workspace > 0)
    if (Status s = cudaCheck(name, cudaMallocAsync(&workspace.ptr,
                                                   size_t(plan.workspace),
                                                   stream));
        !s.ok()) {
      result = s;
      return true;
    }
  std::unordered_map<int64_t, void *> pack{
      {kQ, const_cast<void *>(c.q)},
      {kK, const_cast<void *>(c.k)},
      {kV, const_cast<void *>(c.v)},
      {kO, c.out},
      {kStats, c.lse}};
  if (backward) {
    pack[kDO] = const_cast<void *>(c.dO);
    pack[kDQ] = c.dq;
    pack[kDK] = c.dk;
    pack[kDV] = c.dv;
  }
  // One handle per device, used by every stream of the process: the
  // stream is set under the lock, with the launch.
  std::lock_guard<std::mutex> lock(cacheMutex);
  if (fe::detail::set_stream(handle, stream) != CUDNN_STATUS_SUCCESS) {
    result = Status::error(std::string(name) + ": cudnnSetStream failed");
    return true;
  }
  fe::error_t st = plan.graph->execute(handle, pack, workspace.ptr);
  if (st.is_bad())
    result = Status::error(std::string(name) + ": cuDNN: " +
                           st.get_message());
  return true;
}
} // namespace

bool cudnn_attention::eligible(const Call &c, bool hasBias, int64_t dv) {
  AttentionPath path = attentionPath();
  if (path == AttentionPath::TensorCore || path == AttentionPath::Generic ||
      hasBias || dv != c.D || c.D % 8 != 0 || c.D > 128)
    return false;
  if (c.dtype != DType::F16 && c.dtype != DType::BF16)
    return false;
  if (c.causal && c.Sq != c.Sk)
    return false;
  // cuDNN 9's backward refuses one query and one key ("s_q = s_kv = 1 is
  // not supported", seen on an H200): both directions stay on the kernels.
  if (c.Sq == 1 && c.Sk == 1)
    return false;
  for (const void *p : {c.q, c.k, c.v, static_cast<const void *>(c.out),
                        static_cast<const void *>(c.lse), c.dO,
                        static_cast<const void *>(c.dq),
                        static_cast<const void *>(c.dk),
                        static_cast<const void *>(c.dv)})
    if (!alignedTo(p, 16))
      return false;
  return true;
}

bool cudnn_attention::forward(const Call &c, cudaStream_t stream,
                              Status &result) {
  return run(c, false, stream, result);
}

bool cudnn_attention::backward(const Call &c, cudaStream_t stream,
                               Status &result) {
  return run(c, true, stream, result);
}
