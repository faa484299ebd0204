//===- ExecTest.cpp - distTrainMain on hand-written module functions ------===//
//
// A distributed training program without the compiler: four modules whose
// forward and backward functions are written here (an embedding tied with
// the last module, tanh layers with and without residuals, a causal-LM-like
// loss honouring an ignore index), the schedule from LaminaSchedule as step
// functions making the calls a compiled step would (lowerStep, with the
// step buffer of planStepBuffers), and
// distTrainMain. Run with `--pp P --dp D --m M --b B --zero Z --schedule S`
// before the training flags; the same model with pp = dp = m = 1 and batch
// B*M*D is the single-process reference (test/Runtime/Dist/dist-exec.test).
//
//===----------------------------------------------------------------------===//

#include "lamina/Runtime/DistProgram.h"
#include "lamina/Schedule/Schedule.h"
#include "lamina/Schedule/StepBuffers.h"
#include "lamina/Schedule/StepCalls.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

using namespace lamina::rt;
namespace sch = lamina::schedule;

namespace {

/// Per pipeline rank, the calls its compiled step would make
/// (schedule::lowerStep, as convert-dist-to-rt lowers a verified list).
std::vector<std::vector<sch::StepCall>> stepCalls;
/// And their step buffers (planStepBuffers).
std::vector<sch::StepBuffers> stepBuffers;
constexpr int kModules = 4;

void runCalls(StepState *s, const std::vector<sch::StepCall> &calls,
              const sch::StepBuffers &buf) {
  using K = sch::CallKind;
  for (size_t n = 0; n < calls.size(); ++n) {
    const sch::StepCall &c = calls[n];
    const sch::CallOffsets &o = buf.calls[n];
    step::Payload grad = c.payload == sch::Payload::ActivationGrad
                             ? step::Payload::Gradient
                             : step::Payload::Activation;
    int k = c.module, j = c.microBatch;
    switch (c.kind) {
    case K::Forward:
      step::forward(s, k, j, o.in, o.res, o.out);
      break;
    case K::Backward:
      step::backward(s, k, j, o.in, o.res, o.cot, o.out);
      break;
    case K::Send:
      step::send(s, grad, k, j, c.peer, o.at);
      break;
    case K::WaitSend:
      step::waitSend(s, grad, k, j, c.peer);
      break;
    case K::PostRecv:
      step::postRecv(s, grad, k, j, c.peer, o.at);
      break;
    case K::Recv:
      step::recv(s, grad, k, j, c.peer, o.at);
      break;
    case K::AllGather:
      step::allGather(s, k, o.at);
      break;
    case K::ReduceScatter:
      step::reduceScatter(s, k, o.at, o.part);
      break;
    case K::AllReduce:
      step::allReduce(s, c.module);
      break;
    case K::Accumulate:
      step::accumulate(s, k, o.at);
      break;
    case K::WaitGradients:
      step::waitGradients(s, c.module);
      break;
    case K::WaitWeights:
      step::waitWeights(s, c.module);
      break;
    case K::SumShared:
      step::sumShared(s, c.name.c_str());
      break;
    case K::WaitSharedSum:
      step::waitSharedSum(s, c.name.c_str());
      break;
    case K::GatherShared:
      step::gatherShared(s, c.name.c_str());
      break;
    case K::WaitSharedGather:
      step::waitSharedGather(s, c.name.c_str());
      break;
    case K::UseWeights:
      step::useWeights(s, c.module);
      break;
    case K::OptimizerStep:
      step::optimizer(s);
      break;
    }
  }
}

/// The step function of pipeline rank P (a StepFn has no other argument).
template <int P> void stepOf(StepState *s) {
  runCalls(s, stepCalls[P], stepBuffers[P]);
}
constexpr int kMaxPp = 4;
const StepFn kSteps[kMaxPp] = {stepOf<0>, stepOf<1>, stepOf<2>, stepOf<3>};
constexpr int64_t H = 8, V = 16, S = 8, kIgnore = 3;
int64_t B = 2; // micro-batch rows
int64_t shapeTok[2], shapeH[2], shapeEmb[2] = {V, H}, shapeW[1] = {H};

const float *F(const Tensor &t) { return static_cast<const float *>(t.data); }
float *O(void *arena, size_t off) {
  return reinterpret_cast<float *>(static_cast<char *>(arena) + off);
}
const int64_t *Tok(const Tensor &t) { return static_cast<const int64_t *>(t.data); }

// Arena offsets (bytes), generous and 64-aligned.
constexpr size_t kA = 0, kB = 1 << 14, kC = 2 << 14, kArena = 3 << 14;

// Module 0: h = emb[tok[:,0]] * w0.
void fwd0(const Tensor *a, void *arena) {
  const int64_t *tok = Tok(a[0]);
  float *h = O(arena, kA);
  for (int64_t r = 0; r < B; ++r)
    for (int64_t c = 0; c < H; ++c)
      h[r * H + c] = F(a[1])[tok[r * S] * H + c] * F(a[2])[c];
}
void bwd0(const Tensor *a, void *arena) { // tok, emb, w0, gh
  const int64_t *tok = Tok(a[0]);
  float *gemb = O(arena, kA), *gw = O(arena, kB);
  std::memset(gemb, 0, V * H * 4);
  std::memset(gw, 0, H * 4);
  for (int64_t r = 0; r < B; ++r)
    for (int64_t c = 0; c < H; ++c) {
      float g = F(a[3])[r * H + c];
      gemb[tok[r * S] * H + c] += g * F(a[2])[c];
      gw[c] += g * F(a[1])[tok[r * S] * H + c];
    }
}
// Modules 1, 2: y = tanh(h * w). Module 1 keeps y as a residual.
void fwdMid(const Tensor *a, void *arena, bool residual) {
  float *y = O(arena, kA);
  for (int64_t i = 0; i < B * H; ++i)
    y[i] = std::tanh(F(a[0])[i] * F(a[1])[i % H]);
  if (residual)
    std::memcpy(O(arena, kB), y, size_t(B * H) * 4);
}
void fwd1(const Tensor *a, void *arena) { fwdMid(a, arena, true); }
void fwd2(const Tensor *a, void *arena) { fwdMid(a, arena, false); }
void bwdMid(const Tensor *a, void *arena, const float *yRes, const Tensor &gy) {
  float *gh = O(arena, kA), *gw = O(arena, kB);
  std::memset(gw, 0, H * 4);
  for (int64_t i = 0; i < B * H; ++i) {
    float w = F(a[1])[i % H], h = F(a[0])[i];
    float y = yRes ? yRes[i] : std::tanh(h * w);
    float d = F(gy)[i] * (1 - y * y);
    gh[i] = d * w;
    gw[i % H] += d * h;
  }
}
void bwd1(const Tensor *a, void *arena) { bwdMid(a, arena, F(a[2]), a[3]); }
void bwd2(const Tensor *a, void *arena) { bwdMid(a, arena, nullptr, a[2]); }
// Module 3: z = h*w3 + emb[tok[:,1]]; loss = sum_r |z_r|^2 a_r / max(count,1)
// with a_r = sum over valid positions t >= 1 of (tok+1)/16.
void lossParts(const Tensor *a, std::vector<float> &ar, float &count) {
  const int64_t *tok = Tok(a[1]);
  ar.assign(size_t(B), 0);
  count = 0;
  for (int64_t r = 0; r < B; ++r)
    for (int64_t t = 1; t < S; ++t)
      if (tok[r * S + t] != kIgnore) {
        ar[size_t(r)] += float(tok[r * S + t] + 1) / 16;
        count += 1;
      }
  count = std::max(count, 1.0f);
}
float zOf(const Tensor *a, int64_t r, int64_t c) {
  return F(a[0])[r * H + c] * F(a[3])[c] +
         F(a[2])[Tok(a[1])[r * S + 1] * H + c];
}
void fwd3(const Tensor *a, void *arena) { // h, tok, emb, w3
  std::vector<float> ar;
  float count, loss = 0;
  lossParts(a, ar, count);
  for (int64_t r = 0; r < B; ++r)
    for (int64_t c = 0; c < H; ++c)
      loss += zOf(a, r, c) * zOf(a, r, c) * ar[size_t(r)];
  *O(arena, kA) = loss / count;
}
void bwd3(const Tensor *a, void *arena) { // h, tok, emb, w3, cot
  std::vector<float> ar;
  float count;
  lossParts(a, ar, count);
  float k = *F(a[4]) / count;
  float *gh = O(arena, kA), *gemb = O(arena, kB), *gw = O(arena, kC);
  std::memset(gemb, 0, V * H * 4);
  std::memset(gw, 0, H * 4);
  const int64_t *tok = Tok(a[1]);
  for (int64_t r = 0; r < B; ++r)
    for (int64_t c = 0; c < H; ++c) {
      float dz = k * ar[size_t(r)] * 2 * zOf(a, r, c);
      gh[r * H + c] = dz * F(a[3])[c];
      gw[c] += dz * F(a[0])[r * H + c];
      gemb[tok[r * S + 1] * H + c] += dz;
    }
}

ArgSpec arg(const char *name, ArgKind kind, DType t, int rank,
            const int64_t *shape) {
  return ArgSpec{name, kind, t, rank, shape};
}
} // namespace

int main(int argc, char **argv) {
  int pp = 1, dp = 1, m = 1, zero = 0;
  std::string schedule = "gpipe";
  int i = 1;
  for (; i + 1 < argc; i += 2) {
    std::string f = argv[i];
    if (f == "--pp") pp = std::atoi(argv[i + 1]);
    else if (f == "--dp") dp = std::atoi(argv[i + 1]);
    else if (f == "--m") m = std::atoi(argv[i + 1]);
    else if (f == "--b") B = std::atoi(argv[i + 1]);
    else if (f == "--zero") zero = std::atoi(argv[i + 1]);
    else if (f == "--schedule") schedule = argv[i + 1];
    else break;
  }
  shapeTok[0] = B, shapeTok[1] = S, shapeH[0] = B, shapeH[1] = H;
  const DType I = DType::I64, Fl = DType::F32;
  using K = ArgKind;
  static std::vector<ArgSpec> a0f = {arg("tokens", K::Input, I, 2, shapeTok),
                                     arg("emb", K::Trainable, Fl, 2, shapeEmb),
                                     arg("w0", K::Trainable, Fl, 1, shapeW)};
  static std::vector<ArgSpec> a0b = a0f;
  a0b.push_back(arg("g", K::Cotangent, Fl, 2, shapeH));
  static std::vector<ArgSpec> a1f = {arg("h", K::Boundary, Fl, 2, shapeH),
                                     arg("w1", K::Trainable, Fl, 1, shapeW)};
  static std::vector<ArgSpec> a1b = {a1f[0], a1f[1],
                                     arg("y", K::Residual, Fl, 2, shapeH),
                                     arg("g", K::Cotangent, Fl, 2, shapeH)};
  static std::vector<ArgSpec> a2f = {arg("h", K::Boundary, Fl, 2, shapeH),
                                     arg("w2", K::Trainable, Fl, 1, shapeW)};
  static std::vector<ArgSpec> a2b = {a2f[0], a2f[1],
                                     arg("g", K::Cotangent, Fl, 2, shapeH)};
  static std::vector<ArgSpec> a3f = {arg("h", K::Boundary, Fl, 2, shapeH),
                                     arg("tokens", K::Input, I, 2, shapeTok),
                                     arg("emb", K::Trainable, Fl, 2, shapeEmb),
                                     arg("w3", K::Trainable, Fl, 1, shapeW)};
  static std::vector<ArgSpec> a3b = a3f;
  a3b.push_back(arg("loss", K::Cotangent, Fl, 0, nullptr));
  static OutputSpec h0{"h", Fl, 2, shapeH, kA}, y1res{"y", Fl, 2, shapeH, kB},
      loss{"loss", Fl, 0, nullptr, kA};
  static OutputSpec o0f[] = {h0}, o1f[] = {h0, y1res}, o3f[] = {loss};
  static OutputSpec o0b[] = {{"grad:emb", Fl, 2, shapeEmb, kA},
                             {"grad:w0", Fl, 1, shapeW, kB}};
  static OutputSpec oMidB[] = {{"gh", Fl, 2, shapeH, kA},
                               {"grad:w", Fl, 1, shapeW, kB}};
  static OutputSpec o3b[] = {{"gh", Fl, 2, shapeH, kA},
                             {"grad:emb", Fl, 2, shapeEmb, kB},
                             {"grad:w3", Fl, 1, shapeW, kC}};
  auto fs = [](const char *n, std::vector<ArgSpec> &args, OutputSpec *outs,
               int no, EntryFn e) {
    return FunctionSpec{n, args.data(), int(args.size()), outs, no, kArena, e};
  };
  static ModuleSpec mods[4] = {
      {"embedding", fs("fwd_0", a0f, o0f, 1, fwd0), fs("bwd_0", a0b, o0b, 2, bwd0), 0, 1, 0},
      {"layer.1", fs("fwd_1", a1f, o1f, 2, fwd1), fs("bwd_1", a1b, oMidB, 2, bwd1), 1, 1, 1},
      {"layer.2", fs("fwd_2", a2f, o0f, 1, fwd2), fs("bwd_2", a2b, oMidB, 2, bwd2), 1, 1, 0},
      {"head", fs("fwd_3", a3f, o3f, 1, fwd3), fs("bwd_3", a3b, o3b, 3, bwd3), 1, 1, 0},
  };

  sch::ScheduleConfig cfg;
  auto kind = sch::parseScheduleKind(schedule);
  if (!kind) {
    std::fprintf(stderr, "unknown schedule %s\n", schedule.c_str());
    return 2;
  }
  cfg.kind = *kind;
  cfg.numModules = 4;
  cfg.pipelineRanks = pp;
  cfg.microBatches = m;
  cfg.dataParallel = dp;
  cfg.zeroLevel = zero;
  auto sched = sch::generateSchedule(cfg);
  if (!sched) {
    std::fprintf(stderr, "schedule: %s\n", sched.error().c_str());
    return 2;
  }
  if (pp > kMaxPp) {
    std::fprintf(stderr, "at most %d pipeline ranks\n", kMaxPp);
    return 2;
  }
  // Replica 0's lists: their peers are pipeline ranks. The pairs of
  // pipeline ranks the steps send over.
  static std::vector<int> edges;
  // The trainables' readers, for the shared parameters' sums.
  std::map<std::string, std::vector<int>> readerMap;
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < mods[k].forward.numArgs; ++i)
      if (mods[k].forward.args[i].kind == ArgKind::Trainable)
        readerMap[mods[k].forward.args[i].name].push_back(k);
  std::vector<std::pair<std::string, std::vector<int>>> readers(
      readerMap.begin(), readerMap.end());
  // One replica runs every level as level 0 (as the compiler lowers it).
  int level = dp > 1 ? zero : 0;
  // What the steps hold: h (B x H f32) at every boundary and its gradient,
  // module 1's residual y; at ZeRO >= 2 each module's gathered weights and
  // full gradient (its own parameters, the tied embedding apart: H
  // elements each) cut over dp as MPI cuts them.
  const int64_t hBytes = sch::packedBytes({B * H * 4});
  sch::StepBufferSizes sizes{{hBytes, hBytes, hBytes, 0},
                             {hBytes, hBytes, hBytes, 0},
                             {0, hBytes, 0, 0}};
  if (level >= 2) {
    sch::ShardCapacity cap = sch::shardCapacity(H, dp, /*padded=*/false);
    sizes.fullGradient.assign(kModules, cap.full * 4);
    sizes.gradientPart.assign(kModules, cap.shard * 4);
    if (level == 3)
      sizes.gathered.assign(kModules, cap.full * 4);
  }
  static std::vector<int64_t> bufferBytes;
  for (int p = 0; p < pp; ++p) {
    stepCalls.push_back(sch::lowerStep(
        sched->ranks[size_t(p)], level,
        sch::sharedParamsOf(p, dp, level, readers, sched->placement.rankOf)));
    stepBuffers.emplace_back();
    if (std::string err =
            sch::planStepBuffers(stepCalls.back(), kModules, sizes, level,
                                 false, stepBuffers.back());
        !err.empty()) {
      std::fprintf(stderr, "step buffer: %s\n", err.c_str());
      return 2;
    }
    bufferBytes.push_back(stepBuffers.back().bytes);
    for (const sch::Action &x : sched->ranks[size_t(p)])
      if (x.kind == sch::ActionKind::Send) {
        bool known = false;
        for (size_t e = 0; e < edges.size(); e += 2)
          known |= edges[e] == p && edges[e + 1] == x.peer;
        if (!known)
          edges.insert(edges.end(), {p, x.peer});
      }
  }
  static std::vector<int> moduleRank = sched->placement.rankOf;
  static std::string modelPath = std::getenv("LAMINA_EXEC_TEST_MODEL")
                                     ? std::getenv("LAMINA_EXEC_TEST_MODEL")
                                     : "model.onnx";
  static std::string schedName = schedule;
  DistSpec spec{};
  spec.modelPath = modelPath.c_str();
  spec.modules = mods;
  spec.numModules = kModules;
  spec.pp = pp, spec.dp = dp, spec.microBatches = m, spec.zero = zero;
  spec.schedule = schedName.c_str();
  spec.recompute = false;
  spec.steps = kSteps;
  spec.evalSteps = nullptr;
  spec.stepBufferBytes = bufferBytes.data();
  spec.evalStepBufferBytes = nullptr;
  spec.edges = edges.data();
  spec.numEdges = int(edges.size() / 2);
  spec.numRanks = pp * dp;
  spec.moduleRank = moduleRank.data();
  static const int64_t flatParams[kModules] = {H, H, H, H};
  spec.flatParams = flatParams;
  spec.loss = LossKind::CausalLM;
  spec.labelsInput = nullptr;
  spec.vocab = V;
  spec.ignoreIndex = kIgnore;
  // argv[0] then the training flags.
  std::vector<char *> rest = {argv[0]};
  for (; i < argc; ++i)
    rest.push_back(argv[i]);
  return distTrainMain(int(rest.size()), rest.data(), spec);
}
