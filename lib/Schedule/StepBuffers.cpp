//===- StepBuffers.cpp - the memory plan of one rank's step ---------------===//

#include "lamina/Schedule/StepBuffers.h"

#include "lamina/Schedule/MemoryPlan.h"

namespace lamina::schedule {

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
  }
  return "?";
}
} // namespace

std::string planStepBuffers(const std::vector<StepCall> &calls, int numModules,
                            const StepBufferSizes &sizes, bool forwardOnly,
                            StepBuffers &out) {
  out = StepBuffers();
  std::vector<BufferKey> keys;
  std::vector<BufferRequest> requests;
  std::map<BufferKey, size_t> live; // value -> its request
  std::string error;
  auto describe = [](const BufferKey &key) {
    auto [kind, index, mb] = key;
    return kindName(kind) + std::to_string(index) + ", micro-batch " +
           std::to_string(mb);
  };
  auto sizeOf = [&](const BufferKey &key) -> int64_t {
    auto [kind, index, mb] = key;
    const std::vector<int64_t> &v = kind == BufferKind::Activation
                                        ? sizes.activation
                                        : kind == BufferKind::Gradient
                                              ? sizes.gradient
                                              : sizes.residual;
    return index >= 0 && size_t(index) < v.size() ? v[size_t(index)] : -1;
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
      error = describe(key) + " is written again at call " +
              std::to_string(i) + " while the step still holds it";
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
  for (size_t n = 0; n < calls.size() && error.empty(); ++n) {
    const StepCall &c = calls[n];
    int64_t i = int64_t(n);
    int k = c.module, j = c.microBatch;
    switch (c.kind) {
    case CallKind::Forward:
      if (k > 0)
        use({BufferKind::Activation, k - 1, j}, i, forwardOnly);
      if (k < lastModule)
        define({BufferKind::Activation, k, j}, i);
      if (!forwardOnly)
        define({BufferKind::Residual, k, j}, i);
      break;
    case CallKind::Backward:
      if (k > 0)
        use({BufferKind::Activation, k - 1, j}, i, true);
      use({BufferKind::Residual, k, j}, i, true);
      if (k < lastModule)
        use({BufferKind::Gradient, k, j}, i, true);
      if (k > 0)
        define({BufferKind::Gradient, k - 1, j}, i);
      break;
    case CallKind::Send:
      use(transferKey(c), i, false);
      break;
    case CallKind::WaitSend:
      use(transferKey(c), i, true);
      break;
    case CallKind::PostRecv:
      define(transferKey(c), i);
      break;
    case CallKind::Recv:
      if (!live.count(transferKey(c)))
        define(transferKey(c), i);
      break;
    default:
      break;
    }
  }
  if (error.empty() && !live.empty())
    error = "the step still holds " + describe(live.begin()->first) +
            " at its end";
  if (!error.empty())
    return error;
  MemoryPlan plan = planMemory(requests, 64);
  for (size_t r = 0; r < keys.size(); ++r)
    out.offsets[keys[r]] = plan.offsets[r];
  out.bytes = plan.peakBytes;
  return "";
}

} // namespace lamina::schedule
