//===- CostModel.cpp - durations, memory and traffic of a plan ------------===//
//
// Compute: GEMM FLOPs / (t x peak x gemm efficiency) plus the other bytes at
// HBM speed; backward is twice the forward and full recompute adds one more
// forward before it. Tensor parallelism (Megatron) splits FLOPs, bytes and
// parameters by t and adds ring all-reduces of the activation inside the
// compute (they sit on the critical path). Communication: ring volumes
// (METHODS.md section 4) over NVLink when the group fits in a node, else
// over each GPU's NIC. Everything is then timed by simulateTimeline.
//
//===----------------------------------------------------------------------===//

#include "lamina/Plan/CostModel.h"
#include "lamina/Schedule/StepBuffers.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <sstream>

namespace lamina::plan {

using schedule::Action;
using schedule::ActionKind;
using schedule::Expected;
using schedule::ScheduleKind;
using schedule::Status;

namespace {
/// Bytes per value and parameter under each precision, with Adam.
/// bf16-mixed (METHODS.md section 4): bf16 weights, gradients and
/// activations, fp32 master weights and two moments (12 B); the step reads
/// and writes the fp32 state, reads the gradient, writes the bf16 weight.
/// fp32 (the host backend): 4-byte everything, moments m and v (8 B), no
/// master copy; the step reads and writes weight and moments and reads the
/// gradient. bf16-copies (`lamina compile --precision bf16
/// --param-reads=copies`): the modules read the weights' bf16 copies (which
/// ZeRO all-gathers), but the values crossing stages and the gradients
/// (and their reductions) are f32; fp32 master and moments; the step also
/// reads an f32 gradient and writes the bf16 copy.
constexpr PrecisionBytes kPrecisions[] = {
    {Precision::Bf16Mixed, "bf16-mixed", "bf16 mixed precision", 2, 2, 2, 12,
     2 * 12 + 2 + 2},
    {Precision::Fp32, "fp32", "fp32", 4, 4, 4, 8, 2 * (4 + 8) + 4},
    {Precision::Bf16Copies, "bf16-copies",
     "bf16 weight copies, fp32 values and gradients (lamina compile "
     "--precision bf16 --param-reads=copies)",
     4, 2, 4, 12, 2 * 12 + 4 + 2},
};

std::string fmtGiB(double bytes) {
  std::ostringstream os;
  os.precision(1);
  os << std::fixed << bytes / (1024.0 * 1024 * 1024) << " GiB";
  return os.str();
}

/// The layers of the description; with none marked, every module is one.
std::vector<int> layerIndices(const ModelDesc &desc) {
  std::vector<int> layers;
  for (size_t i = 0; i < desc.modules.size(); ++i)
    if (desc.modules[i].role == ModuleRole::Layer)
      layers.push_back(static_cast<int>(i));
  if (layers.empty())
    for (size_t i = 0; i < desc.modules.size(); ++i)
      layers.push_back(static_cast<int>(i));
  return layers;
}

int numStages(const PlanConfig &c, int numLayers) {
  if (c.schedule == ScheduleKind::Interleaved1F1B)
    return c.chunks > 0 ? c.pp * c.chunks : numLayers;
  return numLayers;
}
} // namespace

const PrecisionBytes &precisionBytes(Precision precision) {
  for (const PrecisionBytes &row : kPrecisions)
    if (row.precision == precision)
      return row;
  return kPrecisions[0];
}

std::optional<Precision> parsePrecision(const std::string &name) {
  for (const PrecisionBytes &row : kPrecisions)
    if (name == row.name)
      return row.precision;
  return std::nullopt;
}

std::string precisionNames() {
  std::string names;
  for (const PrecisionBytes &row : kPrecisions)
    names += (names.empty() ? "" : ", ") + std::string(row.name);
  return names;
}

double ringTime(double factor, double bytes, int steps, double bandwidth,
                double latency) {
  return factor * bytes / bandwidth + steps * latency;
}

std::string describeConfig(const PlanConfig &c) {
  std::ostringstream os;
  os << "p" << c.pp << " d" << c.dp << " t" << c.tp;
  if (c.ep > 1)
    os << " e" << c.ep;
  os << " m" << c.microBatches << " b" << c.microBatchSize << " "
     << schedule::scheduleKindName(c.schedule);
  if (c.schedule == ScheduleKind::Interleaved1F1B && c.chunks > 0)
    os << " v" << c.chunks;
  os << " zero" << c.zero << (c.recompute ? " recompute" : " no-recompute");
  if (c.precision != Precision::Bf16Mixed)
    os << " " << precisionBytes(c.precision).name;
  // What is priced: without expert parallelism the factor changes nothing.
  if (c.ep > 1 && c.moeImbalance != 1)
    os << " imbalance" << c.moeImbalance;
  return os.str();
}

int expertSplit(const ModuleDesc &m, const PlanConfig &c) {
  if (c.ep > 1)
    return c.ep;
  return c.tp > 1 && m.experts > 0 && m.experts % c.tp == 0 ? c.tp : 1;
}

double moeImbalance(const ModuleDesc &m, const PlanConfig &c) {
  if (c.ep <= 1 || m.experts <= 0 || m.expertsPerToken <= 0)
    return 1;
  const double most =
      double(c.ep) *
      double(std::min<int64_t>(m.expertsPerToken, m.experts / c.ep)) /
      double(m.expertsPerToken);
  return std::max(1.0, std::min(c.moeImbalance, most));
}

Status checkMoeImbalance(const ModelDesc &desc, double factor) {
  std::ostringstream flag;
  flag << "--moe-imbalance " << factor << ": ";
  // Written so that NaN fails too.
  if (!(factor >= 1) || !std::isfinite(factor))
    return Status::error(flag.str() +
                         "must be a finite factor >= 1 (the busiest "
                         "expert-parallel rank's rows over the mean; 1: "
                         "tokens routed evenly)");
  if (factor > 1 && desc.moeModules() == 0)
    return Status::error(flag.str() +
                         "the model has no mixture-of-experts layer");
  return Status::success();
}

Status checkConfig(const ModelDesc &desc, const PlanConfig &c) {
  auto bad = [](const std::string &flag, long long v, const std::string &why) {
    return Status::error("--" + flag + " " + std::to_string(v) + ": " + why);
  };
  if (desc.modules.empty())
    return Status::error("the model has no modules to plan");
  if (desc.microBatchSize < 1)
    return Status::error("the model description's micro-batch size must be "
                         ">= 1");
  if (c.pp < 1)
    return bad("pp", c.pp, "must be >= 1");
  if (c.dp < 1)
    return bad("dp", c.dp, "must be >= 1");
  if (c.tp < 1)
    return bad("tp", c.tp, "must be >= 1");
  if (c.ep < 1)
    return bad("ep", c.ep, "must be >= 1");
  if (c.ep > 1) {
    if (c.dp % c.ep != 0)
      return bad("ep", c.ep,
                 "the expert-parallel groups are made of data-parallel "
                 "replicas: --ep must divide --dp");
    if (desc.moeModules() == 0)
      return bad("ep", c.ep, "the model has no mixture-of-experts layer");
    for (const ModuleDesc &m : desc.modules)
      if (m.experts % c.ep != 0)
        return bad("ep", c.ep,
                   "the " + std::to_string(m.experts) + " experts of " +
                       m.name + " do not split evenly over the ranks");
  }
  if (Status s = checkMoeImbalance(desc, c.moeImbalance); !s)
    return s;
  if (c.microBatches < 1)
    return bad("micro-batches", c.microBatches, "must be >= 1");
  if (c.microBatchSize < 1)
    return bad("micro-batch-size", c.microBatchSize, "must be >= 1");
  if (c.zero < 0 || c.zero > 3)
    return bad("zero", c.zero, "must be 0, 1, 2 or 3");
  if (c.chunks < 0)
    return bad("chunks", c.chunks, "must be >= 1 (0: one layer per chunk)");
  const int layers = static_cast<int>(layerIndices(desc).size());
  if (c.pp > layers)
    return bad("pp", c.pp,
               "more pipeline ranks than the model's " +
                   std::to_string(layers) + " layers");
  if (c.schedule == ScheduleKind::Layered && c.pp != 1)
    return bad("pp", c.pp, "the layered schedule has no pipeline (use --pp 1)");
  if (c.schedule == ScheduleKind::Interleaved1F1B) {
    if (c.chunks > 0 && c.pp * c.chunks > layers)
      return bad("chunks", c.chunks,
                 "p x chunks exceeds the " + std::to_string(layers) +
                     " layers");
    if (c.chunks == 0 && layers % c.pp != 0)
      return bad("pp", c.pp,
                 "interleaved-1f1b needs the " + std::to_string(layers) +
                     " layers to divide by p (or pass --chunks)");
    if (c.microBatches % c.pp != 0)
      return bad("micro-batches", c.microBatches,
                 "interleaved-1f1b needs a multiple of --pp " +
                     std::to_string(c.pp));
  }
  if (c.schedule == ScheduleKind::BreadthFirst && c.microBatches < c.pp)
    return bad("micro-batches", c.microBatches,
               "breadth-first needs at least --pp " + std::to_string(c.pp) +
                   " micro-batches");
  return Status::success();
}

namespace {

/// Training runs in the configured precision whatever the file stores:
/// byte figures of the description are scaled from the stored value size
/// (the parameters' bytes per parameter) to the precision's.
double valueScale(const ModelDesc &desc, Precision precision) {
  double params = 0, bytes = 0;
  for (const ModuleDesc &m : desc.modules) {
    params += m.params;
    bytes += m.paramBytes;
  }
  return params > 0 && bytes > 0
             ? precisionBytes(precision).value / (bytes / params)
             : 1.0;
}

class Evaluator {
public:
  Evaluator(const ModelDesc &desc, const PlanConfig &c, const Hardware &hw)
      : desc(desc), c(c), hw(hw), prec(precisionBytes(c.precision)),
        k(double(c.microBatchSize) / double(desc.microBatchSize)),
        kb(k * valueScale(desc, c.precision)) {
    for (const ModuleDesc &m : desc.modules)
      anyLayer |= m.role == ModuleRole::Layer;
  }

  Expected<Plan> run(const EvaluateOptions &opts);
  std::vector<Stage> stagesOnly() {
    buildStages();
    return std::move(plan.stages);
  }

private:
  const ModelDesc &desc;
  const PlanConfig &c;
  const Hardware &hw;
  const PrecisionBytes &prec; ///< the precision's sizes
  const double k; ///< scale from the description's micro-batch size
  const double kb; ///< k for bytes, also scaled to the precision's values
  bool anyLayer = false;
  Plan plan;
  /// Per tied parameter read by more than one stage: the stages reading it.
  std::vector<std::pair<const SharedParam *, std::vector<int>>> tied;

  /// Layers are what full recompute checkpoints and recomputes (Megatron
  /// keeps the embedding's and head's activations); a description without
  /// roles is all layers.
  bool isLayer(const ModuleDesc &m) const {
    return m.role == ModuleRole::Layer || !anyLayer;
  }

  /// Bandwidth and latency of a group of `span` consecutive GPU indices.
  std::pair<double, double> link(long long span) const {
    if (span <= hw.gpusPerNode)
      return {hw.intraNodeBandwidth * hw.intraNodeEfficiency,
              hw.intraNodeLatency};
    return {hw.interNodeBandwidth * hw.interNodeEfficiency,
            hw.interNodeLatency};
  }
  double tpAllReduce(double bytes) const {
    if (c.tp == 1)
      return 0;
    auto [bw, lat] = link(c.tp);
    return ringTime(2.0 * (c.tp - 1) / c.tp, bytes, 2 * (c.tp - 1), bw, lat);
  }
  void buildStages();
  /// Pipeline ranks holding tied parameter `i` (replica 0's placement).
  std::vector<int> tiedHolders(size_t i) const;
  /// Holders of tied parameter `i` over all replicas.
  int tiedGroup(size_t i) const { return int(tiedHolders(i).size()) * c.dp; }
  /// Bytes each holder sends to synchronise tied parameter `i`: the
  /// gradient's all-reduce (ZeRO 0), or its reduce-scatter and the updated
  /// weights' all-gather (ZeRO >= 1: each holder updates its part).
  double tiedVolume(size_t i) const;
  /// Of tied parameter `i`, the parameters (per GPU) a holder updates and
  /// keeps optimizer state for: all, or its part at ZeRO >= 1.
  double tiedUpdated(size_t i) const {
    double n = shardsTied(i) ? tiedGroup(i) : 1;
    return double(tied[i].first->params) / c.tp / n;
  }
  /// The sharding level the runtime uses: none without data parallelism.
  int zeroLevel() const { return c.dp > 1 ? c.zero : 0; }
  /// Whether tied parameter `i`'s holders each update a part (ZeRO >= 1).
  bool shardsTied(size_t i) const {
    return zeroLevel() >= 1 && tiedGroup(i) > 1;
  }
  /// Replica 0's part of `total` parameters cut in `parts` (the runtime's
  /// MPI cut: the first total % parts members one more), for member
  /// `index`; fractional with tensor parallelism.
  double partOf(double total, int parts, int index = 0) const {
    if (c.tp != 1 || parts <= 1)
      return total / std::max(parts, 1);
    double base = std::floor(total / parts + 1e-9);
    return base + (index < total - base * parts - 1e-9 ? 1 : 0);
  }
  /// Seconds of rank r's tied-parameter collectives (in the optimizer step).
  double tiedSyncTime(int r) const;
  /// The replicas holding each expert block (ep > 1): dp / ep.
  int expertHolders() const { return c.ep > 1 ? c.dp / c.ep : 1; }
  /// Whether they each update a part of it (ZeRO >= 1), as tied ones do.
  bool shardsExperts() const { return zeroLevel() >= 1 && expertHolders() > 1; }
  /// Bytes a GPU sends to synchronise stage `st`'s expert block over its
  /// holders (as tiedVolume).
  double expertVolume(const Stage &st) const {
    const double n = expertHolders();
    const double perElement =
        shardsExperts() ? prec.grad + prec.weight : 2.0 * prec.grad;
    return n > 1 ? (n - 1) / n * st.expertParams * perElement : 0.0;
  }
  struct GradientBuffers;
  /// rs's compiled step buffer (RankMemory::stepBuffers).
  void stepBuffers(RankStats &rs, const EvaluateOptions &opts) const;
  void placeStats();
  /// EvaluateOptions' compiled tensor-parallel modules (per schedule
  /// module), when they are the plan's (one of each per stage).
  std::vector<double> compiledTpForward, compiledTpBackward,
      compiledTpForwardSteps, compiledTpBackwardSteps, compiledTpParams,
      compiledTpSends;
  bool tpCompiled() const {
    size_t n = plan.stages.size();
    return c.tp > 1 && compiledTpForward.size() == n &&
           compiledTpBackward.size() == n &&
           compiledTpForwardSteps.size() == n &&
           compiledTpBackwardSteps.size() == n &&
           compiledTpParams.size() == n && compiledTpSends.size() == n;
  }
  void memory();
  void metrics();
};

// GPU order is Megatron's: tensor-parallel ranks innermost, then data
// parallel, then pipeline, so a DP group spans t*d GPUs and pipeline
// neighbours are t*d apart.
void Evaluator::buildStages() {
  const std::vector<int> layers = layerIndices(desc);
  const int nl = static_cast<int>(layers.size());
  const int ns = numStages(c, nl);
  // Owner stage of every layer: contiguous groups, the first nl % ns get
  // one more.
  std::vector<int> stageOf(desc.modules.size(), -1);
  for (int s = 0, li = 0; s < ns; ++s) {
    int count = nl / ns + (s < nl % ns ? 1 : 0);
    for (int j = 0; j < count; ++j)
      stageOf[layers[li++]] = s;
  }
  // Non-layer modules join the stage of the nearest preceding layer, or the
  // first stage when they come before every layer.
  int last = 0;
  for (size_t i = 0; i < desc.modules.size(); ++i) {
    if (stageOf[i] < 0)
      stageOf[i] = (int(i) < layers.front()) ? 0 : last;
    last = stageOf[i];
  }
  plan.stages.assign(ns, Stage());
  for (size_t i = 0; i < desc.modules.size(); ++i)
    plan.stages[stageOf[i]].modules.push_back(static_cast<int>(i));
  // Tied parameters whose readers span stages leave the owner's
  // collectives; they are synchronised by their holders' all-reduce.
  tied.clear();
  for (const SharedParam &sp : desc.sharedParams) {
    std::vector<int> stages;
    for (int m : sp.readers)
      if (m >= 0 && m < int(desc.modules.size()))
        stages.push_back(stageOf[m]);
    std::sort(stages.begin(), stages.end());
    stages.erase(std::unique(stages.begin(), stages.end()), stages.end());
    if (stages.size() < 2)
      continue;
    plan.stages[stageOf[sp.readers.front()]].sharedParams +=
        double(sp.params) / c.tp;
    tied.push_back({&sp, stages});
  }

  const double t = c.tp;
  const double gemm = hw.peakFlops * hw.gemmEfficiency;
  const double hbm = hw.hbmBandwidth * hw.hbmEfficiency;
  auto [dpBw, dpLat] = link(static_cast<long long>(c.tp) * c.dp);
  auto [ppBw, ppLat] = link(static_cast<long long>(c.gpus()));
  auto [tpBw, tpLat] = link(c.tp);
  const int d = c.dp;
  for (Stage &st : plan.stages) {
    double fwdCompute = 0, layerCompute = 0, tpF = 0, tpB = 0, tpLayer = 0,
           layerExperts = 0;
    bool firstLayer = true;
    for (size_t j = 0; j < st.modules.size(); ++j) {
      const ModuleDesc &m = desc.modules[st.modules[j]];
      const double otherBytes =
          std::max(0.0, m.forwardBytes - m.matmulBytes) * kb / t;
      // Non-GEMM FLOPs are few; charge them at tensor peak so none is free.
      double compute =
          m.matmulFlops * k / t / gemm + otherBytes / hbm +
          std::max(0.0, m.forwardFlops - m.matmulFlops) * k / t / hw.peakFlops;
      // The experts' GEMMs (part of matmulFlops, charged above split t
      // ways): split over the tensor-parallel ranks when --ep does not
      // split them (each rank E/t experts), else whole on every rank; and
      // every rank waits for the busiest, which runs f times the mean rows
      // through its experts (ep == 1: f = 1, one GPU's FLOPs).
      if (m.expertParams > 0) {
        const double f = moeImbalance(m, c);
        const double whole =
            std::min(desc.expertFlops(m), m.matmulFlops) * k / gemm;
        const double experts = c.ep > 1 ? whole : whole / expertSplit(m, c);
        compute += f * experts - whole / t; // instead of the share above
        st.expertForward += f * experts;
        if (isLayer(m))
          layerExperts += f * experts;
      }
      fwdCompute += compute;
      // Megatron: 2 all-reduces of the b*s*h activation per layer in the
      // forward and 2 in the backward; the vocabulary-parallel embedding
      // reduces its output in the forward, the head its input gradient.
      if (isLayer(m)) {
        const double ar = 2 * tpAllReduce(m.outputBytes * kb);
        tpF += ar;
        tpB += ar;
        tpLayer += ar;
        layerCompute += compute;
      } else if (m.role == ModuleRole::Embedding) {
        tpF += tpAllReduce(m.outputBytes * kb);
      } else {
        tpB += tpAllReduce(m.inputBytes * kb);
      }
      // The experts: E / t of them on each tensor-parallel rank when --ep
      // does not split them, else E / ep whole on every rank.
      st.params += (m.params - m.expertParams) / t +
                   double(m.expertParams) / expertSplit(m, c);
      // Expert parallelism: each micro-batch's rows go to the ranks holding
      // their experts and back (two all-to-alls forward, two backward, two
      // more when the backward recomputes the forward).
      if (c.ep > 1 && m.expertParams > 0) {
        const double e = c.ep;
        st.expertParams += m.expertParams / e;
        const double rows = m.routedBytes * kb * (e - 1) / e,
                     counts = double(m.experts) / e * 8 * (e - 1);
        const double one = rows + counts;
        // The busiest rank receives (dispatch) and sends back (combine) f
        // times the mean rows and every rank waits for it; the bytes stay
        // the mean, which distcheck compares with a run's.
        const double time = ringTime(1, moeImbalance(m, c) * rows + counts,
                                     c.ep - 1, dpBw, dpLat);
        const double back = isLayer(m) && c.recompute ? 4 : 2;
        st.epForward += 2 * time;
        st.epBackward += back * time;
        st.epBytes += (2 + back) * one;
      }
      st.transientBytes =
          std::max(st.transientBytes, m.peakTransientBytes * kb / t);
      // Full recompute keeps the first layer's input and what the other
      // modules need; without it, everything.
      const double act = m.activationBytes * kb / t;
      st.activationBytes += act;
      if (!isLayer(m))
        st.checkpointBytes += act;
      else if (firstLayer)
        st.checkpointBytes += m.inputBytes * kb / t;
      if (isLayer(m)) {
        st.recomputedBytes += act;
        firstLayer = false;
      }
    }
    const ModuleDesc &tail = desc.modules[st.modules.back()];
    st.tpForward = tpF;
    st.tpBackward = tpB + (c.recompute ? tpLayer : 0);
    st.forward = fwdCompute + tpF + st.epForward;
    st.backward = 2 * fwdCompute + tpB +
                  (c.recompute ? layerCompute + tpLayer : 0) + st.epBackward;
    st.expertBackward = 2 * st.expertForward + (c.recompute ? layerExperts : 0);
    // Scatter/gather: each of the t GPUs sends 1/t of the activation, the
    // receivers all-gather it over NVLink.
    st.sendBytes = tail.outputBytes * kb / t;
    st.send = ringTime(1, st.sendBytes, 1, ppBw, ppLat) +
              (c.tp > 1 ? ringTime((t - 1), st.sendBytes, c.tp - 1, tpBw,
                                   tpLat)
                        : 0);
    // As compiled: each rank holds its blocks and the weights it keeps
    // whole, and sends its boundary values as it has them (whole, or
    // sequence shards), with no gather after; its collectives are the
    // module functions' (the backward's with the recomputed forward's).
    if (tpCompiled()) {
      const size_t k = size_t(&st - plan.stages.data());
      st.params = compiledTpParams[k];
      st.sendBytes = compiledTpSends[k];
      st.send = ringTime(1, st.sendBytes, 1, ppBw, ppLat);
      const double estimatedF = st.tpForward, estimatedB = st.tpBackward;
      st.tpForward = ringTime(1, compiledTpForward[k],
                              int(compiledTpForwardSteps[k]), tpBw, tpLat);
      st.tpBackward = ringTime(1, compiledTpBackward[k],
                               int(compiledTpBackwardSteps[k]), tpBw, tpLat);
      st.forward += st.tpForward - estimatedF;
      st.backward += st.tpBackward - estimatedB;
    }
    const double synced = st.synced();
    const double gradBytes = synced * prec.grad;
    if (d > 1) {
      st.allReduce = ringTime(2.0 * (d - 1) / d, gradBytes, 2 * (d - 1),
                              dpBw, dpLat);
      st.reduceScatter =
          ringTime(double(d - 1) / d, gradBytes, d - 1, dpBw, dpLat);
      st.allGather = ringTime(double(d - 1) / d, synced * prec.weight,
                              d - 1, dpBw, dpLat);
    }
  }
}

std::vector<int> Evaluator::tiedHolders(size_t i) const {
  std::vector<int> ranks;
  for (int st : tied[i].second)
    ranks.push_back(plan.schedule.placement.rankOf[size_t(st)]);
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

double Evaluator::tiedVolume(size_t i) const {
  const double n = tiedGroup(i);
  const double perElement =
      shardsTied(i) ? prec.grad + prec.weight : 2.0 * prec.grad;
  return n > 1 ? (n - 1) / n * double(tied[i].first->params) / c.tp * perElement
               : 0.0;
}

double Evaluator::tiedSyncTime(int r) const {
  double seconds = 0;
  for (size_t i = 0; i < tied.size(); ++i) {
    std::vector<int> holders = tiedHolders(i);
    const int n = tiedGroup(i);
    if (n < 2 || !std::binary_search(holders.begin(), holders.end(), r))
      continue;
    // The group spans the job when it crosses pipeline ranks.
    auto [bw, lat] = link(holders.size() > 1
                              ? static_cast<long long>(c.gpus())
                              : static_cast<long long>(c.tp) * c.dp);
    seconds += ringTime(1, tiedVolume(i), 2 * (n - 1), bw, lat);
  }
  return seconds;
}

/// ZeRO 2-3 gradient buffers along one rank's action list, as the runtime
/// holds them: a run's first backward takes a full gradient (after
/// retiring all reduce-scatters but the newest), a reduce-scatter after the
/// stage's first of the step adds the rank's part, the optimizer step
/// retires everything.
struct Evaluator::GradientBuffers {
  std::vector<double> accumulating; ///< per stage: its full gradient, or 0
  /// Per stage: reduce-scattered this step (the first lands in the shard
  /// gradient, later ones in a part).
  std::vector<bool> scattered;
  std::deque<double> flight; ///< bytes of the scatters in flight
  double held = 0, peak = 0;
  const Evaluator &e;
  explicit GradientBuffers(const Evaluator &e)
      : accumulating(e.plan.stages.size(), 0.0),
        scattered(e.plan.stages.size(), false), e(e) {}
  double full(int stage) const {
    const Stage &st = e.plan.stages[size_t(stage)];
    return st.synced() * e.prec.grad;
  }
  /// The replica 0's part (MPI's and NCCL's cuts give it the larger one).
  double part(int stage) const {
    const Stage &st = e.plan.stages[size_t(stage)];
    return e.partOf(st.synced(), e.c.dp) * e.prec.grad;
  }
  void retire(size_t keep) {
    while (flight.size() > keep) {
      held -= flight.front();
      flight.pop_front();
    }
  }
  void step(const Action &a) {
    if (e.zeroLevel() < 2)
      return;
    switch (a.kind) {
    case ActionKind::Backward:
      if (accumulating[size_t(a.module)] == 0 && full(a.module) > 0) {
        retire(1);
        accumulating[size_t(a.module)] = full(a.module);
        held += full(a.module);
      }
      break;
    case ActionKind::ReduceScatter: {
      double bytes =
          full(a.module) + (scattered[size_t(a.module)] ? part(a.module) : 0);
      held += bytes - accumulating[size_t(a.module)];
      accumulating[size_t(a.module)] = 0;
      scattered[size_t(a.module)] = true;
      flight.push_back(bytes);
      break;
    }
    case ActionKind::OptimizerStep:
      retire(0);
      break;
    default:
      break;
    }
    peak = std::max(peak, held);
  }
};

void Evaluator::stepBuffers(RankStats &rs, const EvaluateOptions &opts) const {
  const size_t n = plan.stages.size();
  schedule::StepBufferSizes sizes;
  sizes.activation.assign(n, 0);
  sizes.gradient.assign(n, 0);
  sizes.residual.assign(n, 0);
  auto bytes = [](double v) { return int64_t(std::llround(v)); };
  for (size_t k = 0; k < n; ++k) {
    const Stage &st = plan.stages[k];
    if (k + 1 < n)
      sizes.activation[k] = sizes.gradient[k] =
          schedule::packedBytes({bytes(st.sendBytes)});
  }
  // Without recompute: the compiled forwards' residuals when their
  // boundaries are the plan's (same modules, same micro-batch), else an
  // estimate (a module's activation bytes).
  bool compiled =
      opts.residualBytes.size() == n && opts.boundaryBytes.size() == n;
  for (size_t k = 0; compiled && k + 1 < n; ++k)
    compiled = opts.boundaryBytes[k] == sizes.activation[k];
  if (!c.recompute)
    for (size_t k = 0; k < n; ++k)
      sizes.residual[k] =
          compiled
              ? opts.residualBytes[k]
              : schedule::packedBytes({bytes(plan.stages[k].activationBytes)});
  // ZeRO's buffers as the target's collectives cut them: over MPI a
  // stage's gathered weights and full gradient whole and replica 0's part
  // (the longest); over NCCL equal chunks, the last padded.
  const int zero = zeroLevel();
  if (zero >= 2) {
    sizes.fullGradient.assign(n, 0);
    sizes.gradientPart.assign(n, 0);
    sizes.gathered.assign(n, 0);
    for (size_t k = 0; k < n; ++k) {
      const Stage &st = plan.stages[k];
      const double S = st.synced();
      const double part =
          c.paddedShards ? std::ceil(S / c.dp - 1e-9) : partOf(S, c.dp);
      const double full = c.paddedShards ? part * c.dp : S;
      sizes.fullGradient[k] = bytes(full * prec.grad);
      sizes.gradientPart[k] = bytes(part * prec.grad);
      if (zero == 3)
        sizes.gathered[k] = bytes(full * prec.weight);
    }
  }
  const auto &s = plan.schedule;
  schedule::StepBuffers buffers;
  std::string err = schedule::planStepBuffers(
      schedule::lowerStep(s.ranks[size_t(s.globalRank(rs.pipelineRank, 0))],
                          zero),
      int(n), sizes, zero, /*forwardOnly=*/false, buffers);
  // The schedules are verified: their steps always plan.
  rs.memory.stepBuffers = err.empty() ? double(buffers.bytes) : 0;
  rs.memory.stepBuffersExact = err.empty() && (c.recompute || compiled);
}

// Per-rank traffic and in-flight checkpoints, walking replica 0's lists.
void Evaluator::placeStats() {
  const auto &s = plan.schedule;
  const int d = c.dp;
  plan.ranks.assign(c.pp, RankStats());
  for (int r = 0; r < c.pp; ++r) {
    RankStats &rs = plan.ranks[r];
    rs.pipelineRank = r;
    rs.stages = s.placement.modulesOn(r);
    for (int st : rs.stages) {
      rs.params += plan.stages[st].params;
      for (int m : plan.stages[st].modules)
        rs.modules.push_back(m);
    }
    std::sort(rs.modules.begin(), rs.modules.end());
    // Checkpoints (or, without recompute, full activations) are held from
    // a forward to its backward; the backward itself needs one stage's
    // full activations on top when they are recomputed.
    double held = 0, peak = 0;
    int inFlight = 0;
    GradientBuffers gradBuffers(*this);
    for (const Action &a : s.ranks[s.globalRank(r, 0)]) {
      gradBuffers.step(a);
      const Stage *st = a.module >= 0 ? &plan.stages[a.module] : nullptr;
      const double keep = st ? (c.recompute ? st->checkpointBytes
                                            : st->activationBytes)
                             : 0;
      const double regen = st && c.recompute ? st->recomputedBytes : 0;
      switch (a.kind) {
      case ActionKind::Forward:
        held += keep;
        ++inFlight;
        rs.peakInFlight = std::max(rs.peakInFlight, inFlight);
        peak = std::max(peak, held + regen);
        break;
      case ActionKind::Backward:
        peak = std::max(peak, held + regen);
        held -= keep;
        --inFlight;
        break;
      case ActionKind::Send:
        rs.traffic.p2p += st->sendBytes;
        ++rs.traffic.sends;
        break;
      case ActionKind::AllReduce:
        rs.traffic.dataParallel += 2.0 * (d - 1) / d * st->synced() * prec.grad;
        ++rs.traffic.collectives;
        break;
      case ActionKind::ReduceScatter:
        rs.traffic.dataParallel += double(d - 1) / d * st->synced() * prec.grad;
        ++rs.traffic.collectives;
        break;
      case ActionKind::AllGather:
        rs.traffic.dataParallel +=
            double(d - 1) / d * st->synced() * prec.weight;
        ++rs.traffic.collectives;
        break;
      default:
        break;
      }
    }
    rs.memory.activations = peak;
    rs.memory.gradientBuffers = gradBuffers.peak;
    // Tied parameters: whole on every holder, synchronised once a step
    // over the holders of all replicas (in the optimizer step).
    for (size_t i = 0; i < tied.size(); ++i) {
      std::vector<int> holders = tiedHolders(i);
      if (!std::binary_search(holders.begin(), holders.end(), r))
        continue;
      rs.sharedParams += double(tied[i].first->params) / c.tp;
      if (tiedVolume(i) > 0) {
        rs.traffic.dataParallel += tiedVolume(i);
        ++rs.traffic.collectives;
      }
    }
    for (int st : rs.stages) {
      rs.traffic.expertParallel += plan.stages[st].epBytes * c.microBatches;
      // The expert blocks' holders synchronise them once a step.
      if (double v = expertVolume(plan.stages[st]); v > 0) {
        rs.traffic.dataParallel += v;
        ++rs.traffic.collectives;
      }
    }
    // Tensor-parallel ring volume: the compiled modules' collectives when
    // given, else 2(t-1)/t of each all-reduced activation.
    const bool compiled = tpCompiled();
    if (c.tp > 1)
      for (int st : rs.stages) {
        if (compiled) {
          rs.traffic.tensorParallel +=
              (compiledTpForward[size_t(st)] + compiledTpBackward[size_t(st)]) *
              c.microBatches;
          continue;
        }
        for (int mi : plan.stages[st].modules) {
          const ModuleDesc &m = desc.modules[mi];
          const double per = 2.0 * (c.tp - 1) / c.tp;
          double n = isLayer(m) ? 4 + (c.recompute ? 2 : 0) : 1;
          double bytes = !isLayer(m) && m.role == ModuleRole::Head
                             ? m.inputBytes
                             : m.outputBytes;
          rs.traffic.tensorParallel += per * n * bytes * kb * c.microBatches;
        }
      }
  }
}

void Evaluator::memory() {
  const int zero = zeroLevel();
  for (RankStats &rs : plan.ranks) {
    RankMemory &mem = rs.memory;
    // Each stage's parameters less the tied ones, as the runtime holds
    // them (replica 0's shards): the weights (bf16-copies: their copies;
    // the f32 masters are optimizer state) whole, or the shard at level 3;
    // the gradient whole (level 1 reduce-scatters it in place), or the
    // shard at levels 2-3; the optimizer state whole or the shard.
    mem.weights = mem.grads = mem.optimizer = 0;
    for (int st : rs.stages) {
      const double S = plan.stages[st].synced();
      const double shard = zero >= 1 ? partOf(S, c.dp) : S;
      mem.weights += (zero >= 3 ? shard : S) * prec.weight;
      mem.grads += (zero >= 2 ? shard : S) * prec.grad;
      mem.optimizer += shard * prec.optimizer;
      // This GPU's experts: whole; at ZeRO >= 1 with several holders the
      // optimizer state of replica 0's part (as tied parameters).
      const double experts = plan.stages[st].expertParams;
      mem.weights += experts * prec.weight;
      mem.grads += experts * prec.grad;
      mem.optimizer +=
          (shardsExperts() ? partOf(experts, expertHolders()) : experts) *
          prec.optimizer;
    }
    // Tied parameters: weights and gradient whole; at ZeRO >= 1 the part
    // each holder updates (its gradient reduce-scattered in place) has
    // optimizer state (with the master weights) only.
    for (size_t i = 0; i < tied.size(); ++i) {
      std::vector<int> holders = tiedHolders(i);
      auto at =
          std::lower_bound(holders.begin(), holders.end(), rs.pipelineRank);
      if (at == holders.end() || *at != rs.pipelineRank)
        continue;
      const double whole = double(tied[i].first->params) / c.tp;
      const double part =
          shardsTied(i) ? partOf(whole, tiedGroup(i), int(at - holders.begin()))
                        : whole;
      mem.weights += whole * prec.weight;
      mem.grads += whole * prec.grad;
      mem.optimizer += part * prec.optimizer;
    }
    double transient = 0, largest = 0, second = 0;
    for (int st : rs.stages) {
      const Stage &s = plan.stages[st];
      const double params = s.synced();
      transient = std::max(transient, s.transientBytes);
      if (params > largest) {
        second = largest;
        largest = params;
      } else {
        second = std::max(second, params);
      }
    }
    // Level 3 gathers a stage's full weights before it runs (two with
    // prefetch); levels 2-3's full gradients are gradientBuffers.
    if (zero >= 3)
      transient += (largest + second) * prec.weight;
    mem.transient = transient;
    plan.peakMemory = std::max(plan.peakMemory, mem.total());
  }
}

void Evaluator::metrics() {
  const double m = c.microBatches, d = c.dp;
  // Recompute runs the layers' forward once more.
  double fwd = 0, mm = 0, refwd = 0, remm = 0;
  for (const ModuleDesc &mod : desc.modules) {
    fwd += mod.forwardFlops * k;
    mm += mod.matmulFlops * k;
    if (c.recompute && isLayer(mod)) {
      refwd += mod.forwardFlops * k;
      remm += mod.matmulFlops * k;
    }
  }
  plan.modelFlopsPerStep = 3 * fwd * m * d;
  plan.hardwareFlopsPerStep = (3 * fwd + refwd) * m * d;
  plan.matmulFlopsPerStep = (3 * mm + remm) * m * d;
  plan.samplesPerStep = double(c.microBatchSize) * m * d;
  plan.tokensPerStep = plan.samplesPerStep * double(desc.seqLen);
  const double gpus = c.gpus();
  const double step = plan.stepTime;
  if (step > 0) {
    plan.tokensPerSecond = plan.tokensPerStep / step;
    plan.modelTflopsPerGpu = plan.modelFlopsPerStep / step / gpus / 1e12;
    plan.hardwareTflopsPerGpu = plan.hardwareFlopsPerStep / step / gpus / 1e12;
    plan.megatronTflopsPerGpu = plan.matmulFlopsPerStep / step / gpus / 1e12;
    plan.mfu = plan.modelTflopsPerGpu * 1e12 / hw.peakFlops;
    plan.hfu = plan.hardwareTflopsPerGpu * 1e12 / hw.peakFlops;
  }
  double tpPerRank = 0;
  for (const RankStats &rs : plan.ranks) {
    double t = 0;
    for (int st : rs.stages)
      t += (plan.stages[st].tpForward + plan.stages[st].tpBackward) * m;
    tpPerRank = std::max(tpPerRank, t);
  }
  plan.tensorParallelTime = tpPerRank;

  auto warn = [&](std::string w) { plan.warnings.push_back(std::move(w)); };
  if (c.microBatches < c.pp)
    warn("micro-batches (" + std::to_string(c.microBatches) +
         ") < pipeline ranks (" + std::to_string(c.pp) +
         "): the pipeline never fills");
  const double usable = hw.hbmBytes - hw.reservedBytes;
  for (const RankStats &rs : plan.ranks)
    if (rs.memory.total() > usable) {
      plan.fits = false;
      warn("pipeline rank " + std::to_string(rs.pipelineRank) + " needs " +
           fmtGiB(rs.memory.total()) + " but " + hw.name + " offers " +
           fmtGiB(usable) + " (" + fmtGiB(hw.hbmBytes) + " less " +
           fmtGiB(hw.reservedBytes) + " reserved)");
    }
  if (c.tp > hw.gpusPerNode)
    warn("tensor parallelism over " + std::to_string(c.tp) +
         " GPUs crosses nodes (" + std::to_string(hw.gpusPerNode) +
         " per node): its all-reduces use the network");
  if (plan.bubbleFraction > 0.25)
    warn("pipeline bubble is " +
         std::to_string(int(std::lround(plan.bubbleFraction * 100))) +
         "% of the step; raise --micro-batches or use interleaved-1f1b / "
         "breadth-first");
  if (plan.computeOnlyStep > 0 && plan.exposedComm > 0.15 * step)
    warn("exposed communication is " +
         std::to_string(int(std::lround(plan.exposedComm / step * 100))) +
         "% of the step");
  const int layers = static_cast<int>(layerIndices(desc).size());
  if (c.schedule != ScheduleKind::Interleaved1F1B && layers % c.pp != 0)
    warn(std::to_string(layers) + " layers do not divide by --pp " +
         std::to_string(c.pp) + ": stages are uneven");
  if (c.moeImbalance > 1) {
    double most = 1;
    for (const ModuleDesc &m : desc.modules)
      if (m.expertParams > 0)
        most = std::max(most, moeImbalance(m, c));
    std::ostringstream f;
    f << "--moe-imbalance " << c.moeImbalance;
    if (c.ep == 1) {
      warn(f.str() + " has no effect at --ep 1: one GPU runs every expert, "
                     "and its FLOPs do not depend on the routing");
    } else if (most < c.moeImbalance) {
      f << " is more than a rank can receive: at --ep " << c.ep
        << " the busiest gets at most " << most
        << " times the mean rows (every rank's tokens sending it min(k, "
           "E/ep) rows each); priced at that";
      warn(f.str());
    }
  }
  if (c.zero >= 3 && (c.schedule == ScheduleKind::GPipe ||
                      c.schedule == ScheduleKind::OneFOneB ||
                      c.schedule == ScheduleKind::Interleaved1F1B) &&
      c.dp > 1 && c.microBatches > 1)
    warn("zero 3 with a depth-first schedule gathers weights per "
         "micro-batch; breadth-first/layered gather once per step");
}

Expected<Plan> Evaluator::run(const EvaluateOptions &opts) {
  if (Status s = checkConfig(desc, c); !s)
    return s;
  plan.config = c;
  plan.hardware = hw;
  plan.modelName = desc.name;
  plan.valueScale = valueScale(desc, c.precision);
  compiledTpForward = opts.tensorParallelForwardBytes;
  compiledTpBackward = opts.tensorParallelBackwardBytes;
  compiledTpForwardSteps = opts.tensorParallelForwardSteps;
  compiledTpBackwardSteps = opts.tensorParallelBackwardSteps;
  compiledTpParams = opts.tensorParallelParams;
  compiledTpSends = opts.tensorParallelSends;
  buildStages();
  schedule::ScheduleConfig sc;
  sc.kind = c.schedule;
  sc.numModules = static_cast<int>(plan.stages.size());
  sc.pipelineRanks = c.pp;
  sc.microBatches = c.microBatches;
  sc.dataParallel = std::min(c.dp, 2);
  sc.zeroLevel = c.zero;
  if (c.schedule == ScheduleKind::GPipe || c.schedule == ScheduleKind::OneFOneB)
    for (const Stage &st : plan.stages)
      sc.moduleCost.push_back(st.forward + st.backward);
  Expected<schedule::Schedule> sched = schedule::generateSchedule(sc);
  if (!sched)
    return sched.status();
  plan.schedule = std::move(*sched);

  const int p = c.pp;
  // The expert blocks' holders: replicas of one stage.
  const std::pair<double, double> dpLink =
      link(static_cast<long long>(c.tp) * c.dp);
  auto durations = [&](bool comm) {
    return [&, comm](int g, const Action &a) -> double {
      const Stage *st = a.module >= 0 ? &plan.stages[a.module] : nullptr;
      switch (a.kind) {
      case ActionKind::Forward:
        return st->forward;
      case ActionKind::Backward:
        return st->backward;
      case ActionKind::Send:
        return comm ? st->send : 0.0;
      case ActionKind::Recv:
        return 0.0;
      case ActionKind::AllGather:
        return comm ? st->allGather : 0.0;
      case ActionKind::ReduceScatter:
        return comm ? st->reduceScatter : 0.0;
      case ActionKind::AllReduce:
        return comm ? st->allReduce : 0.0;
      case ActionKind::OptimizerStep: {
        double sharded = 0, whole = 0;
        double experts = 0;
        for (int s : plan.schedule.placement.modulesOn(g % p)) {
          sharded += plan.stages[s].synced();
          whole += plan.stages[s].expertParams /
                   (shardsExperts() ? expertHolders() : 1);
          experts += comm ? expertVolume(plan.stages[s]) : 0.0;
        }
        for (size_t i = 0; i < tied.size(); ++i) {
          std::vector<int> holders = tiedHolders(i);
          if (std::binary_search(holders.begin(), holders.end(), g % p))
            whole += tiedUpdated(i);
        }
        return (sharded / (c.zero >= 1 ? c.dp : 1) + whole) *
                   prec.optimizerStep / (hw.hbmBandwidth * hw.hbmEfficiency) +
               (comm ? tiedSyncTime(g % p) : 0.0) +
               (experts > 0 ? ringTime(1, experts, 2 * (expertHolders() - 1),
                                       dpLink.first, dpLink.second)
                            : 0.0);
      }
      }
      return 0.0;
    };
  };
  Expected<schedule::Timeline> tl =
      schedule::simulateTimeline(plan.schedule, durations(true));
  if (!tl)
    return tl.status();
  plan.timeline = std::move(*tl);
  plan.stepTime = plan.timeline.stepTime;
  plan.bubbleFraction = plan.timeline.bubbleFraction;
  if (opts.exposedComm) {
    Expected<schedule::Timeline> free =
        schedule::simulateTimeline(plan.schedule, durations(false));
    if (!free)
      return free.status();
    plan.computeOnlyStep = free->stepTime;
    plan.exposedComm = std::max(0.0, plan.stepTime - free->stepTime);
  }
  placeStats();
  if (opts.stepBuffers)
    for (RankStats &rs : plan.ranks)
      stepBuffers(rs, opts);
  for (int r = 0; r < p; ++r) {
    plan.ranks[r].busy = plan.timeline.busy[r];
    plan.ranks[r].idle = plan.timeline.idle[r];
  }
  memory();
  metrics();
  if (!opts.keepTimeline) {
    plan.timeline = {};
    plan.schedule.ranks.clear();
  }
  return std::move(plan);
}

} // namespace

Expected<std::vector<Stage>> priceStages(const ModelDesc &desc,
                                         const PlanConfig &config,
                                         const Hardware &hardware) {
  if (Status s = checkConfig(desc, config); !s)
    return s;
  return Evaluator(desc, config, hardware).stagesOnly();
}

Expected<Plan> evaluatePlan(const ModelDesc &desc, const PlanConfig &config,
                            const Hardware &hardware,
                            const EvaluateOptions &options) {
  return Evaluator(desc, config, hardware).run(options);
}

} // namespace lamina::plan
