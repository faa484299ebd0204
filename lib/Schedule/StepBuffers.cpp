//===- StepBuffers.cpp - the memory plan of one rank's step ---------------===//

#include "lamina/Schedule/StepBuffers.h"

#include "lamina/Schedule/MemoryPlan.h"

#include <array>
#include <deque>
#include <optional>

namespace lamina::schedule {

ShardCapacity shardCapacity(int64_t total, int parts, bool padded) {
  if (parts <= 0)
    return {};
  int64_t chunk = (total + parts - 1) / parts;
  return {padded ? chunk * parts : total, chunk};
}

const std::vector<int64_t> &StepBufferSizes::of(BufferKind kind) const {
  switch (kind) {
  case BufferKind::Activation:
    return activation;
  case BufferKind::Gradient:
    return gradient;
  case BufferKind::Residual:
    return residual;
  case BufferKind::Gathered:
    return gathered;
  case BufferKind::FullGradient:
    return fullGradient;
  case BufferKind::GradientPart:
    return gradientPart;
  }
  return activation;
}

int64_t packedBytes(const std::vector<int64_t> &bytes) {
  int64_t total = 0;
  for (int64_t n : bytes)
    total += (n + 63) / 64 * 64;
  return total;
}

namespace {
const char *kindName(BufferKind kind) {
  switch (kind) {
  case BufferKind::Activation:
    return "the activations of boundary ";
  case BufferKind::Gradient:
    return "the gradient of boundary ";
  case BufferKind::Residual:
    return "the residuals of module ";
  case BufferKind::Gathered:
    return "the gathered weights of module ";
  case BufferKind::FullGradient:
    return "the full gradient of module ";
  case BufferKind::GradientPart:
    return "the reduce-scattered part of module ";
  }
  return "?";
}
} // namespace

std::string planStepBuffers(const std::vector<StepCall> &calls, int numModules,
                            const StepBufferSizes &sizes, int zeroLevel,
                            bool forwardOnly, StepBuffers &out) {
  out = StepBuffers();
  std::vector<BufferKey> keys;
  std::vector<BufferRequest> requests;
  std::map<BufferKey, size_t> live; // value -> its request
  std::string error;
  auto describe = [](const BufferKey &key) {
    auto [kind, index, n] = key;
    bool zeroKind = kind >= BufferKind::Gathered;
    return kindName(kind) + std::to_string(index) +
           (zeroKind ? ", the step's " + std::to_string(n + 1) + ". "
                     : ", micro-batch " + std::to_string(n));
  };
  auto sizeOf = [&](const BufferKey &key) -> int64_t {
    auto [kind, index, mb] = key;
    const std::vector<int64_t> &v = sizes.of(kind);
    if (index >= 0 && size_t(index) < v.size())
      return v[size_t(index)];
    // ZeRO's buffers not given: not planned here.
    return kind >= BufferKind::Gathered ? 0 : -1;
  };
  auto define = [&](BufferKey key, int64_t i) {
    int64_t bytes = sizeOf(key);
    if (bytes < 0) {
      error = "no size for " + describe(key);
      return;
    }
    if (bytes == 0)
      return;
    if (live.count(key)) {
      error = describe(key) + " is written again at call " + std::to_string(i) +
              " while the step still holds it";
      return;
    }
    live[key] = requests.size();
    keys.push_back(key);
    requests.push_back({bytes, i, i});
  };
  // Reads `key` at call i; `last`: its last read (it is freed after it).
  auto use = [&](BufferKey key, int64_t i, bool last) {
    if (sizeOf(key) == 0)
      return;
    auto it = live.find(key);
    if (it == live.end()) {
      error = "call " + std::to_string(i) + " reads " + describe(key) +
              ", which the step does not hold there";
      return;
    }
    requests[it->second].last = i;
    if (last)
      live.erase(it);
  };
  auto transferKey = [](const StepCall &c) {
    return BufferKey{c.payload == Payload::ActivationGrad
                         ? BufferKind::Gradient
                         : BufferKind::Activation,
                     c.module, c.microBatch};
  };
  const int lastModule = numModules - 1;
  // ZeRO: per module its gathers not yet used, the run whose gathered
  // weights the calls read, the full gradient a run accumulates into, the
  // reduce-scatters in flight (full gradient, part), counts per kind.
  std::map<int, std::deque<BufferKey>> gathers;
  std::optional<BufferKey> active;
  std::map<int, BufferKey> open;
  std::deque<std::pair<BufferKey, std::optional<BufferKey>>> scatters;
  std::map<std::pair<BufferKind, int>, int> counts;
  std::map<int, bool> scattered;
  // Per call the values behind its CallOffsets (in, res, cot, out, at, part).
  enum Slot { In, Res, Cot, Out, At, Part };
  std::vector<std::array<std::optional<BufferKey>, 6>> slots(calls.size());
  auto next = [&](BufferKind kind, int k) {
    return BufferKey{kind, k, counts[{kind, k}]++};
  };
  auto endRun = [&](int64_t i) {
    if (active)
      use(*active, i, true);
    active.reset();
  };
  for (size_t n = 0; n < calls.size() && error.empty(); ++n) {
    const StepCall &c = calls[n];
    int64_t i = int64_t(n);
    int k = c.module, j = c.microBatch;
    auto &slot = slots[n];
    switch (c.kind) {
    case CallKind::Forward:
      if (k > 0) {
        slot[In] = BufferKey{BufferKind::Activation, k - 1, j};
        use(*slot[In], i, forwardOnly);
      }
      if (k < lastModule) {
        slot[Out] = BufferKey{BufferKind::Activation, k, j};
        define(*slot[Out], i);
      }
      if (!forwardOnly) {
        slot[Res] = BufferKey{BufferKind::Residual, k, j};
        define(*slot[Res], i);
      }
      break;
    case CallKind::Backward:
      if (k > 0) {
        slot[In] = BufferKey{BufferKind::Activation, k - 1, j};
        use(*slot[In], i, true);
      }
      slot[Res] = BufferKey{BufferKind::Residual, k, j};
      use(*slot[Res], i, true);
      if (k < lastModule) {
        slot[Cot] = BufferKey{BufferKind::Gradient, k, j};
        use(*slot[Cot], i, true);
      }
      if (k > 0) {
        slot[Out] = BufferKey{BufferKind::Gradient, k - 1, j};
        define(*slot[Out], i);
      }
      break;
    case CallKind::Send:
      slot[At] = transferKey(c);
      use(*slot[At], i, false);
      break;
    case CallKind::WaitSend:
      slot[At] = transferKey(c);
      use(*slot[At], i, true);
      break;
    case CallKind::PostRecv:
      slot[At] = transferKey(c);
      define(*slot[At], i);
      break;
    case CallKind::Recv:
      slot[At] = transferKey(c);
      if (!live.count(*slot[At]))
        define(*slot[At], i);
      break;
    case CallKind::AllGather:
      if (zeroLevel == 3) {
        slot[At] = next(BufferKind::Gathered, k);
        define(*slot[At], i);
        gathers[k].push_back(*slot[At]);
      }
      break;
    case CallKind::UseWeights:
      if (zeroLevel == 3) {
        endRun(i);
        if (gathers[k].empty()) {
          error = "call " + std::to_string(i) + " uses module " +
                  std::to_string(k) +
                  "'s weights, which no all-gather "
                  "before it gathered";
          break;
        }
        active = gathers[k].front();
        gathers[k].pop_front();
        use(*active, i, false);
      }
      break;
    case CallKind::OptimizerStep:
      endRun(i);
      break;
    case CallKind::Accumulate:
      if (zeroLevel >= 2) {
        if (!open.count(k)) {
          open[k] = next(BufferKind::FullGradient, k);
          define(open[k], i);
        }
        use(open[k], i, false);
        slot[At] = open[k];
      }
      break;
    case CallKind::ReduceScatter:
      if (zeroLevel >= 2) {
        // A run no backward accumulated into scatters a zeroed gradient.
        if (!open.count(k)) {
          open[k] = next(BufferKind::FullGradient, k);
          define(open[k], i);
        }
        BufferKey full = open[k];
        open.erase(k);
        use(full, i, false);
        std::optional<BufferKey> part;
        if (scattered[k]) {
          part = next(BufferKind::GradientPart, k);
          define(*part, i);
        }
        scattered[k] = true;
        scatters.push_back({full, part});
        slot[At] = full;
        slot[Part] = part;
      }
      break;
    case CallKind::WaitGradients:
      if (zeroLevel >= 2) {
        if (scatters.empty() || std::get<1>(scatters.front().first) != k) {
          error = "call " + std::to_string(i) + " waits for module " +
                  std::to_string(k) +
                  "'s reduce-scatter, which is not the oldest in flight";
          break;
        }
        use(scatters.front().first, i, true);
        if (scatters.front().second)
          use(*scatters.front().second, i, true);
        scatters.pop_front();
      }
      break;
    default:
      break;
    }
  }
  // The run in progress ends with the step.
  if (error.empty())
    endRun(int64_t(calls.size()));
  if (error.empty() && !live.empty())
    error =
        "the step still holds " + describe(live.begin()->first) + " at its end";
  if (!error.empty())
    return error;
  MemoryPlan plan = planMemory(requests, 64);
  for (size_t r = 0; r < keys.size(); ++r)
    out.offsets[keys[r]] = plan.offsets[r];
  out.bytes = plan.peakBytes;
  // Values of no bytes were not placed: -1.
  auto offsetOf = [&](const std::optional<BufferKey> &key) -> int64_t {
    if (!key)
      return -1;
    auto it = out.offsets.find(*key);
    return it == out.offsets.end() ? -1 : it->second;
  };
  out.calls.resize(calls.size());
  for (size_t n = 0; n < calls.size(); ++n) {
    const auto &slot = slots[n];
    out.calls[n] = {offsetOf(slot[In]),  offsetOf(slot[Res]),
                    offsetOf(slot[Cot]), offsetOf(slot[Out]),
                    offsetOf(slot[At]),  offsetOf(slot[Part])};
  }
  return "";
}

} // namespace lamina::schedule
