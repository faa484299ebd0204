//===- Optimizer.h - SGD, AdamW, clipping and LR schedules ------*- C++ -*-===//
//
// The update rules a training program applies after its backward pass. They
// follow PyTorch's torch.optim.SGD / torch.optim.AdamW (single-tensor, not
// foreach) formulas and operation order, so a run can be checked against
// them step by step; docs/training.md ("Runtime") writes the formulas out.
//
// Parameters, gradients and optimizer state are f32. Mixed precision (f16 or
// bf16 parameters with f32 master weights) is out of scope: a non-f32 tensor
// is an error.
//
// The optimizer state lives in an Optimizer object as plain f32 buffers, one
// per parameter and slot, so checkpoints can save and restore it by name.
//
// No MLIR dependency; part of lamina_runtime.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_RUNTIME_OPTIMIZER_H
#define LAMINA_RUNTIME_OPTIMIZER_H

#include "lamina/Runtime/Status.h"
#include "lamina/Runtime/Tensor.h"

#include <math.h>
#include <stdint.h>
#include <string>
#include <vector>

namespace lamina::rt {

enum class OptimizerKind : uint8_t { Sgd, AdamW };

/// Hyper-parameters; the defaults are PyTorch's (AdamW: betas (0.9, 0.999),
/// eps 1e-8, weight_decay 0.01; SGD: no momentum, no weight decay). The
/// learning rate is passed to each step, so a schedule can drive it.
struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::AdamW;
  // SGD
  float momentum = 0.0f;
  float dampening = 0.0f;
  bool nesterov = false;
  // AdamW
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  /// SGD: L2 (added to the gradient); AdamW: decoupled (p *= 1 - lr * wd).
  float weightDecay = 0.01f;

  static OptimizerConfig sgd(float momentum = 0, float weightDecay = 0,
                             bool nesterov = false) {
    OptimizerConfig c;
    c.kind = OptimizerKind::Sgd;
    c.momentum = momentum;
    c.weightDecay = weightDecay;
    c.nesterov = nesterov;
    return c;
  }
  static OptimizerConfig adamw(float weightDecay = 0.01f) {
    OptimizerConfig c;
    c.weightDecay = weightDecay;
    return c;
  }
};

/// The per-step scalars of an update, computed once on the host in the
/// order PyTorch computes them, so the host loop and the CUDA kernel apply
/// the same f32 coefficients through the same per-element functions below.
struct UpdateCoefficients {
  float lr;
  // SGD
  float weightDecay, momentum, damp; ///< damp = 1 - dampening
  bool nesterov, firstStep;
  // AdamW
  float decay, w1, b2, w2, stepSize, bc2, eps;
};
/// `step` is 1-based (PyTorch's state['step'] after its increment).
UpdateCoefficients updateCoefficients(const OptimizerConfig &cfg, float lr,
                                      int64_t step);

/// torch.lerp(a, b, w) for a scalar weight: two formulas, picked by w, so
/// the result is exact at both ends.
LAMINA_HD inline float optimizerLerp(float a, float b, float w) {
  return w < 0.5f ? a + w * (b - a) : b - (b - a) * (1.0f - w);
}

/// One element of torch.optim.SGD; `buf` is the momentum buffer (nullptr
/// without momentum).
LAMINA_HD inline void sgdElement(float &p, float g, float *buf,
                                 const UpdateCoefficients &c) {
  float d = c.weightDecay != 0 ? g + c.weightDecay * p : g;
  if (buf) {
    // PyTorch: the first step copies the gradient (no dampening).
    *buf = c.firstStep ? d : c.momentum * *buf + c.damp * d;
    d = c.nesterov ? d + c.momentum * *buf : *buf;
  }
  p = p - c.lr * d;
}

/// One element of torch.optim.adamw._single_tensor_adamw.
LAMINA_HD inline void adamwElement(float &p, float &m, float &v, float g,
                                   const UpdateCoefficients &c) {
  p *= c.decay;
  m = optimizerLerp(m, g, c.w1);
  // addcmul / addcdiv evaluate (value * a) * b and (value * a) / b.
  v = v * c.b2 + c.w2 * g * g;
  float denom = sqrtf(v) / c.bc2 + c.eps;
  p = p + -c.stepSize * m / denom;
}

/// One parameter's part in an update of many (Device::optimizerUpdates,
/// cuda::optimizerSteps): its configuration, its f32 tensors, its
/// optimizerSlots(*cfg) state buffers (null when none) and the f16/bf16 copy
/// to store the updated value in (null when none).
struct ParamUpdate {
  const OptimizerConfig *cfg = nullptr;
  Tensor param, grad;
  const Tensor *state = nullptr;
  const Tensor *copy = nullptr;
};

/// One gradient added into its buffer (Device::accumulateMany,
/// cuda::accumulateMany): dst = (intoZeros ? 0 : dst) + scale * src, n f32
/// values (scale 1: no product). intoZeros: the buffer is neither filled
/// nor read, and holds what a zero fill and the addition would leave.
struct GradientSum {
  float *dst = nullptr;
  const float *src = nullptr;
  int64_t n = 0;
  bool intoZeros = false;
  float scale = 1.0f;
};

/// State buffers per parameter: 0 (plain SGD), 1 (SGD momentum_buffer) or
/// 2 (AdamW exp_avg, exp_avg_sq).
int optimizerSlots(const OptimizerConfig &cfg);

/// One update of one f32 parameter in host memory with its optimizer state
/// (optimizerSlots(cfg) f32 buffers of the parameter's shape); `step` is
/// 1-based. Optimizer::step calls it per parameter; drivers on other
/// devices call their device's twin.
Status optimizerUpdate(const OptimizerConfig &cfg, float lr, int64_t step,
                       const Tensor &param, const Tensor &grad,
                       const Tensor *state);

class Optimizer {
public:
  /// Checks the configuration (PyTorch's rules: nesterov needs momentum > 0
  /// and dampening 0; betas in [0, 1); eps, lr, weight decay >= 0) and
  /// allocates zeroed state for parameters of these shapes. `names` (the
  /// parameters' names) are used in messages and state names.
  Status init(const OptimizerConfig &config, std::vector<std::string> names,
              std::vector<std::vector<int64_t>> shapes);

  /// One update of every parameter: params[i] -= f(grads[i], state).
  /// params and grads are f32 with the shapes given to init, `n` of each.
  Status step(float lr, const Tensor *params, const Tensor *grads, int n);

  /// Steps taken so far (PyTorch's `state['step']`; AdamW's bias
  /// correction uses it, SGD uses it to seed the momentum buffer).
  int64_t stepCount() const { return steps; }
  void setStepCount(int64_t s) { steps = s; }
  /// The step count as an i64 scalar view, so checkpoints save and restore
  /// it like any state tensor.
  Tensor stepCountView() { return Tensor{&steps, DType::I64, 0, nullptr}; }

  /// State buffers per parameter: 0 (plain SGD), 1 (SGD momentum_buffer) or
  /// 2 (AdamW exp_avg, exp_avg_sq).
  int numSlots() const;
  /// "exp_avg", "exp_avg_sq" or "momentum_buffer".
  const char *slotName(int slot) const;
  /// A view of parameter `param`'s state buffer `slot` (f32, the
  /// parameter's shape), for checkpoints to read and write.
  Tensor state(int param, int slot);
  int numParams() const { return int(shapes.size()); }
  const std::string &paramName(int i) const { return names[size_t(i)]; }
  const OptimizerConfig &config() const { return cfg; }

private:
  OptimizerConfig cfg;
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::vector<float>> buffers; // [param * numSlots + slot]
  int64_t steps = 0;
};

/// torch.nn.utils.clip_grad_norm_: the global L2 norm of all `n` gradients
/// (accumulated in double) goes to `totalNorm`; when it exceeds `maxNorm`
/// every gradient is scaled by maxNorm / (norm + 1e-6). A non-finite norm
/// leaves the gradients untouched (the caller should skip the step).
Status clipGradNorm(const Tensor *grads, int n, float maxNorm,
                    double &totalNorm);

/// Learning rate for 0-based step `step`. Every kind warms up first
/// (nanoGPT's get_lr):
///   step <  warmup:      lr * (step + 1) / (warmup + 1)
/// then
///   Constant:            lr
///   WarmupCosine:        r = (step - warmup) / (decaySteps - warmup),
///                        minLr + 0.5 * (1 + cos(pi * r)) * (lr - minLr)
///   Linear:              minLr + (1 - r) * (lr - minLr), r as above
///   Wsd (warm-up, stable, decay): lr until the cooldown's first step
///                        c = decaySteps - cooldown, then
///                        minLr + (1 - (step - c) / cooldown) * (lr - minLr)
/// and minLr after decaySteps (all but Constant).
enum class LrScheduleKind : uint8_t { Constant, WarmupCosine, Linear, Wsd };
struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::Constant;
  double lr = 1e-3;
  int64_t warmupSteps = 0;
  int64_t decaySteps = 0; ///< the step the decay reaches minLr
  double minLr = 0.0;
  int64_t cooldownSteps = 0; ///< Wsd: the decay's length

  /// Checks lr >= minLr >= 0, warmup >= 0, decaySteps > warmup (the
  /// decaying kinds), 1 <= cooldown <= decaySteps - warmup (Wsd).
  Status validate() const;
  double at(int64_t step) const;
};

} // namespace lamina::rt

#endif // LAMINA_RUNTIME_OPTIMIZER_H
