//===- Optimizer.cpp - SGD, AdamW, clipping and LR schedules --------------===//
//
// Element-wise arithmetic is f32 in PyTorch's order (so results match
// torch.optim bit for bit or within an ulp); scalars PyTorch computes in
// Python (bias corrections, the step size) are computed in double and
// rounded to f32 where PyTorch passes them to a tensor op.
//
//===----------------------------------------------------------------------===//

#include "lamina/Runtime/Optimizer.h"

#include <cmath>

using namespace lamina::rt;

static std::string shapeString(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "x" : "") + std::to_string(shape[i]);
  return s + "]";
}

static bool sameShape(const Tensor &t, const std::vector<int64_t> &shape) {
  if (t.rank != int(shape.size()))
    return false;
  for (int i = 0; i < t.rank; ++i)
    if (t.shape[i] != shape[size_t(i)])
      return false;
  return true;
}

Status Optimizer::init(const OptimizerConfig &config,
                       std::vector<std::string> paramNames,
                       std::vector<std::vector<int64_t>> paramShapes) {
  auto bad = [](const char *what, double v) {
    return Status::error(std::string("optimizer: invalid ") + what + " " +
                         std::to_string(v));
  };
  if (!(config.weightDecay >= 0))
    return bad("weight decay", config.weightDecay);
  if (config.kind == OptimizerKind::Sgd) {
    if (!(config.momentum >= 0))
      return bad("momentum", config.momentum);
    if (config.nesterov && (config.momentum <= 0 || config.dampening != 0))
      return Status::error("optimizer: Nesterov momentum needs momentum > 0 "
                           "and dampening 0");
  } else {
    if (!(config.beta1 >= 0 && config.beta1 < 1))
      return bad("beta1 (must be in [0, 1))", config.beta1);
    if (!(config.beta2 >= 0 && config.beta2 < 1))
      return bad("beta2 (must be in [0, 1))", config.beta2);
    if (!(config.eps >= 0))
      return bad("eps", config.eps);
  }
  if (paramNames.size() != paramShapes.size())
    return Status::error("optimizer: " + std::to_string(paramNames.size()) +
                         " names for " + std::to_string(paramShapes.size()) +
                         " parameters");
  cfg = config;
  names = std::move(paramNames);
  shapes = std::move(paramShapes);
  steps = 0;
  buffers.clear();
  for (const auto &shape : shapes) {
    for (int64_t d : shape)
      if (d < 0)
        return Status::error("optimizer: negative dimension in " +
                             shapeString(shape));
    int64_t n = numElements(shape.data(), int(shape.size()));
    for (int s = 0; s < numSlots(); ++s)
      buffers.emplace_back(size_t(n), 0.0f);
  }
  return Status::success();
}

int Optimizer::numSlots() const { return optimizerSlots(cfg); }

const char *Optimizer::slotName(int slot) const {
  if (cfg.kind == OptimizerKind::Sgd)
    return "momentum_buffer";
  return slot == 0 ? "exp_avg" : "exp_avg_sq";
}

Tensor Optimizer::state(int param, int slot) {
  const auto &shape = shapes[size_t(param)];
  return Tensor{buffers[size_t(param * numSlots() + slot)].data(), DType::F32,
                int(shape.size()), shape.data()};
}

Status Optimizer::step(float lr, const Tensor *params, const Tensor *grads,
                       int n) {
  if (n != numParams())
    return Status::error("optimizer: step with " + std::to_string(n) +
                         " parameters, initialised with " +
                         std::to_string(numParams()));
  if (!(lr >= 0))
    return Status::error("optimizer: invalid learning rate " +
                         std::to_string(lr));
  for (int i = 0; i < n; ++i) {
    const auto &shape = shapes[size_t(i)];
    for (const Tensor *t : {&params[i], &grads[i]})
      if (t->dtype != DType::F32 || !sameShape(*t, shape))
        return Status::error(
            "optimizer: " + std::string(t == &params[i] ? "parameter" : "gradient") +
            " '" + names[size_t(i)] + "' must be f32 " + shapeString(shape) +
            " (got " + dtypeName(t->dtype) + " of rank " +
            std::to_string(t->rank) + "); f16/bf16 parameters are not "
            "supported");
  }
  ++steps;
  const int slots = numSlots();
  Tensor state[2];
  for (int i = 0; i < n; ++i) {
    for (int k = 0; k < slots; ++k)
      state[k] = this->state(i, k);
    if (Status s = optimizerUpdate(cfg, lr, steps, params[i], grads[i], state);
        !s.ok())
      return s;
  }
  return Status::success();
}

int lamina::rt::optimizerSlots(const OptimizerConfig &cfg) {
  if (cfg.kind == OptimizerKind::AdamW)
    return 2;
  return cfg.momentum != 0 ? 1 : 0;
}

UpdateCoefficients lamina::rt::updateCoefficients(const OptimizerConfig &cfg,
                                                  float lr, int64_t step) {
  UpdateCoefficients c{};
  c.lr = lr;
  c.weightDecay = cfg.weightDecay;
  c.momentum = cfg.momentum;
  c.damp = 1.0f - cfg.dampening;
  c.nesterov = cfg.nesterov;
  c.firstStep = step == 1;
  const double t = double(step);
  const double bc1 = 1.0 - std::pow(double(cfg.beta1), t);
  c.bc2 = float(std::sqrt(1.0 - std::pow(double(cfg.beta2), t)));
  c.decay = float(1.0 - double(lr) * double(cfg.weightDecay));
  c.w1 = float(1.0 - double(cfg.beta1));
  c.b2 = cfg.beta2;
  c.w2 = float(1.0 - double(cfg.beta2));
  c.stepSize = float(double(lr) / bc1);
  c.eps = cfg.eps;
  return c;
}

Status lamina::rt::optimizerUpdate(const OptimizerConfig &cfg, float lr,
                                   int64_t step, const Tensor &param,
                                   const Tensor &grad, const Tensor *state) {
  const int slots = optimizerSlots(cfg);
  int64_t count = param.numElements();
  if (param.dtype != DType::F32 || grad.dtype != DType::F32 ||
      grad.numElements() != count)
    return Status::error("optimizer: parameter and gradient must be f32 of "
                         "the same size");
  for (int k = 0; k < slots; ++k)
    if (state[k].dtype != DType::F32 || state[k].numElements() != count)
      return Status::error("optimizer: state buffer " + std::to_string(k) +
                           " must be f32 of the parameter's size");
  const UpdateCoefficients c = updateCoefficients(cfg, lr, step);
  float *p = param.as<float>();
  const float *g = grad.as<float>();
  if (cfg.kind == OptimizerKind::Sgd) {
    float *buf = slots ? state[0].as<float>() : nullptr;
    for (int64_t k = 0; k < count; ++k)
      sgdElement(p[k], g[k], buf ? buf + k : nullptr, c);
    return Status::success();
  }
  float *m = state[0].as<float>(), *v = state[1].as<float>();
  for (int64_t k = 0; k < count; ++k)
    adamwElement(p[k], m[k], v[k], g[k], c);
  return Status::success();
}

Status lamina::rt::clipGradNorm(const Tensor *grads, int n, float maxNorm,
                                double &totalNorm) {
  if (!(maxNorm > 0))
    return Status::error("clip_grad_norm: max norm must be positive, got " +
                         std::to_string(maxNorm));
  double sumSq = 0;
  for (int i = 0; i < n; ++i) {
    if (grads[i].dtype != DType::F32)
      return Status::error("clip_grad_norm: gradient " + std::to_string(i) +
                           " is " + dtypeName(grads[i].dtype) +
                           ", expected f32");
    const float *g = grads[i].as<float>();
    for (int64_t k = 0, e = grads[i].numElements(); k < e; ++k)
      sumSq += double(g[k]) * double(g[k]);
  }
  totalNorm = std::sqrt(sumSq);
  if (!std::isfinite(totalNorm))
    return Status::success();
  double coef = double(maxNorm) / (totalNorm + 1e-6);
  if (coef >= 1.0)
    return Status::success();
  const float c = float(coef);
  for (int i = 0; i < n; ++i) {
    float *g = grads[i].as<float>();
    for (int64_t k = 0, e = grads[i].numElements(); k < e; ++k)
      g[k] *= c;
  }
  return Status::success();
}

Status LrSchedule::validate() const {
  if (!(lr >= 0) || !std::isfinite(lr))
    return Status::error("learning rate must be a finite number >= 0, got " +
                         std::to_string(lr));
  if (warmupSteps < 0)
    return Status::error("warm-up steps must be >= 0, got " +
                         std::to_string(warmupSteps));
  if (kind == LrScheduleKind::Constant)
    return Status::success();
  if (!(minLr >= 0) || minLr > lr)
    return Status::error("minimum learning rate " + std::to_string(minLr) +
                         " must be in [0, lr = " + std::to_string(lr) + "]");
  if (decaySteps <= warmupSteps)
    return Status::error("decay steps (" + std::to_string(decaySteps) +
                         ") must exceed the warm-up steps (" +
                         std::to_string(warmupSteps) + ")");
  if (kind == LrScheduleKind::Wsd &&
      (cooldownSteps < 1 || cooldownSteps > decaySteps - warmupSteps))
    return Status::error("cooldown steps (" + std::to_string(cooldownSteps) +
                         ") must be in [1, " +
                         std::to_string(decaySteps - warmupSteps) +
                         "] (the steps after the warm-up)");
  return Status::success();
}

double LrSchedule::at(int64_t step) const {
  if (step < warmupSteps)
    return lr * double(step + 1) / double(warmupSteps + 1);
  if (kind == LrScheduleKind::Constant)
    return lr;
  if (step > decaySteps)
    return minLr;
  double ratio =
      double(step - warmupSteps) / double(decaySteps - warmupSteps);
  switch (kind) {
  case LrScheduleKind::WarmupCosine:
    return minLr + 0.5 * (1.0 + std::cos(M_PI * ratio)) * (lr - minLr);
  case LrScheduleKind::Linear:
    return minLr + (1.0 - ratio) * (lr - minLr);
  case LrScheduleKind::Wsd: {
    int64_t start = decaySteps - cooldownSteps;
    if (step < start)
      return lr;
    return minLr +
           (1.0 - double(step - start) / double(cooldownSteps)) * (lr - minLr);
  }
  case LrScheduleKind::Constant:
    break;
  }
  return lr;
}
