//===- Evaluator.cpp - run an imported graph on the host kernels ----------===//
//
// Walks @forward in order and calls one lamina_runtime kernel per graph op.
// Every value gets its own buffer; a buffer is freed after its last use.
//
//===----------------------------------------------------------------------===//

#include "lamina/Eval/Evaluator.h"

#include "ModelLoader.h" // lib/Target/ONNX: TensorReader, parseModel

#include "lamina/Dialect/Graph/IR/GraphDialect.h"
#include "lamina/Dialect/Graph/IR/GraphOps.h"
#include "lamina/Runtime/Kernels.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>

using namespace mlir;
using namespace lamina;
using namespace lamina::eval;

//===----------------------------------------------------------------------===//
// Host tensors
//===----------------------------------------------------------------------===//

HostTensor::HostTensor(rt::DType dtype, std::vector<int64_t> shape)
    : dtype(dtype), shape(std::move(shape)) {
  storage.assign((byteSize() + 7) / 8 + 1, 0);
}

int64_t HostTensor::numElements() const {
  return rt::numElements(shape.data(), int(shape.size()));
}

rt::Tensor HostTensor::view() const {
  return rt::Tensor{const_cast<uint64_t *>(storage.data()), dtype,
                    int(shape.size()), shape.data()};
}

bool lamina::eval::dtypeOf(Type t, rt::DType &out) {
  if (t.isF32()) out = rt::DType::F32;
  else if (t.isF64()) out = rt::DType::F64;
  else if (t.isF16()) out = rt::DType::F16;
  else if (t.isBF16()) out = rt::DType::BF16;
  else if (auto i = dyn_cast<IntegerType>(t)) {
    bool u = i.isUnsigned();
    switch (i.getWidth()) {
    case 1: out = rt::DType::I1; break;
    case 8: out = u ? rt::DType::U8 : rt::DType::I8; break;
    case 16: out = u ? rt::DType::U16 : rt::DType::I16; break;
    case 32: out = u ? rt::DType::U32 : rt::DType::I32; break;
    case 64: out = u ? rt::DType::U64 : rt::DType::I64; break;
    default: return false;
    }
  } else
    return false;
  return true;
}

std::string lamina::eval::describe(const HostTensor &t) {
  std::string s = "tensor<";
  for (int64_t d : t.shape)
    s += std::to_string(d) + "x";
  return s + rt::dtypeName(t.dtype) + ">";
}

std::string lamina::eval::describe(Type type) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << type;
  return s;
}

static std::string allocFor(Type type, HostTensor &out) {
  auto ranked = dyn_cast<RankedTensorType>(type);
  rt::DType dtype;
  if (!ranked || !ranked.hasStaticShape() ||
      !dtypeOf(ranked.getElementType(), dtype))
    return "unsupported type " + describe(type);
  out = HostTensor(dtype, std::vector<int64_t>(ranked.getShape().begin(),
                                               ranked.getShape().end()));
  return "";
}

static bool matches(const HostTensor &t, Type type) {
  auto ranked = dyn_cast<RankedTensorType>(type);
  rt::DType dtype;
  return ranked && dtypeOf(ranked.getElementType(), dtype) &&
         dtype == t.dtype && llvm::ArrayRef<int64_t>(t.shape) == ranked.getShape();
}

std::string lamina::eval::fromElementsAttr(ElementsAttr attr, HostTensor &out) {
  auto dense = dyn_cast<DenseElementsAttr>(attr);
  if (!dense)
    return "unsupported constant attribute (not dense elements)";
  if (std::string err = allocFor(dense.getType(), out); !err.empty())
    return err;
  auto *bytes = static_cast<char *>(out.data());
  if (out.dtype == rt::DType::I1) {
    int64_t i = 0;
    for (bool b : dense.getValues<bool>())
      bytes[i++] = b ? 1 : 0;
    return "";
  }
  ArrayRef<char> raw = dense.getRawData();
  size_t elt = rt::dtypeSize(out.dtype), total = out.byteSize();
  if (dense.isSplat()) {
    if (raw.size() < elt)
      return "malformed splat constant";
    for (size_t off = 0; off < total; off += elt)
      std::memcpy(bytes + off, raw.data(), elt);
    return "";
  }
  if (raw.size() != total)
    return "constant data has " + std::to_string(raw.size()) +
           " bytes, expected " + std::to_string(total);
  std::memcpy(bytes, raw.data(), total);
  return "";
}

//===----------------------------------------------------------------------===//
// Initializers
//===----------------------------------------------------------------------===//

static func::FuncOp findFunction(ModuleOp module, StringRef name) {
  for (auto f : module.getOps<func::FuncOp>())
    if (name.empty() || f.getName() == name)
      return f;
  return {};
}

static void collectInitializers(const ::onnx::GraphProto &g,
                                llvm::StringMap<const ::onnx::TensorProto *> &m) {
  for (const auto &t : g.initializer())
    m.try_emplace(t.name(), &t);
  for (const auto &node : g.node())
    for (const auto &attr : node.attribute()) {
      if (attr.has_g())
        collectInitializers(attr.g(), m);
      for (const auto &sub : attr.graphs())
        collectInitializers(sub, m);
    }
}

std::string lamina::eval::loadInitializers(ModuleOp module, StringRef modelPath,
                                           std::map<std::string, HostTensor> &out,
                                           StringRef functionName) {
  func::FuncOp func = findFunction(module, functionName);
  if (!func)
    return "no function @" + functionName.str() + " in the module";
  auto buffer = llvm::MemoryBuffer::getFile(modelPath, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer)
    return "cannot open '" + modelPath.str() + "': " + buffer.getError().message();
  ::onnx::ModelProto model;
  if (std::string err = onnx::parseModel((*buffer)->getBuffer(), model);
      !err.empty())
    return "cannot read '" + modelPath.str() + "': " + err;
  llvm::StringMap<const ::onnx::TensorProto *> inits;
  collectInitializers(model.graph(), inits);
  StringRef dir = llvm::sys::path::parent_path(modelPath);
  onnx::TensorReader reader(dir.empty() ? "." : dir);
  MLIRContext *ctx = module.getContext();
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    auto kind = func.getArgAttrOfType<StringAttr>(i, ir::graph::kKindAttr);
    auto name = func.getArgAttrOfType<StringAttr>(i, ir::graph::kNameAttr);
    // Initializers only: not inputs, nor an outlined module's boundary
    // values, residuals and cotangents.
    if (!kind || !name ||
        (kind.getValue() != ir::graph::kKindTrainable &&
         kind.getValue() != ir::graph::kKindConstant))
      continue;
    auto it = inits.find(name.getValue());
    if (it == inits.end())
      return "no initializer named '" + name.getValue().str() + "' in '" +
             modelPath.str() + "'";
    RankedTensorType type;
    DenseElementsAttr attr;
    std::string err = reader.validate(ctx, *it->second, type);
    if (err.empty())
      err = reader.read(*it->second, type, attr);
    HostTensor t;
    if (err.empty())
      err = fromElementsAttr(attr, t);
    if (!err.empty())
      return "initializer '" + name.getValue().str() + "': " + err;
    out[name.getValue().str()] = std::move(t);
  }
  return "";
}

//===----------------------------------------------------------------------===//
// Evaluation
//===----------------------------------------------------------------------===//

/// "'node name' (graph.add)": the ONNX node behind an op.
/// The runtime layout of a graph attention op.
template <typename AttentionOpT>
static rt::AttentionLayout layoutOf(AttentionOpT op) {
  return op.getSeqMajor() ? rt::AttentionLayout::SeqMajor
                          : rt::AttentionLayout::HeadMajor;
}

static std::string where(Operation *op) {
  Location loc = op->getLoc();
  std::string s;
  llvm::raw_string_ostream os(s);
  while (auto callsite = dyn_cast<CallSiteLoc>(loc))
    loc = callsite.getCallee();
  if (auto fused = dyn_cast<FusedLoc>(loc); fused && !fused.getLocations().empty())
    loc = fused.getLocations().front();
  if (auto name = dyn_cast<NameLoc>(loc))
    os << "node '" << name.getName().getValue() << "'";
  else
    os << loc;
  os << " (" << op->getName() << ")";
  return s;
}

namespace {
using ir::graph::ConstantOp;
/// Runs one op's kernel; nullopt when the op has no kernel here.
struct Runner {
  Operation *op;
  llvm::DenseMap<Value, const HostTensor *> &env;
  /// One view per result; `out` is the first.
  std::vector<rt::Tensor> outs;
  rt::Tensor out = outs.front();

  rt::Tensor in(unsigned i) const { return env.lookup(op->getOperand(i))->view(); }
  rt::Status un(rt::UnaryOp k) const { return rt::unary(k, in(0), out); }
  rt::Status bin(rt::BinaryOp k) const { return rt::binary(k, in(0), in(1), out); }
  rt::Status cmp(rt::CompareOp k) const { return rt::compare(k, in(0), in(1), out); }
  template <typename Op> rt::Status red(rt::ReduceOp k, Op o) const {
    ArrayRef<int64_t> axes = o.getAxes();
    return rt::reduce(k, in(0), axes.data(), int(axes.size()), o.getKeepdims(), out);
  }

  std::optional<rt::Status> run() {
    using namespace ir::graph;
    using U = rt::UnaryOp;
    using B = rt::BinaryOp;
    using C = rt::CompareOp;
    using R = rt::ReduceOp;
    using Result = std::optional<rt::Status>;
    return llvm::TypeSwitch<Operation *, Result>(op)
        // Unary.
        .Case([&](NegOp) { return un(U::Neg); })
        .Case([&](AbsOp) { return un(U::Abs); })
        .Case([&](ReluOp) { return un(U::Relu); })
        .Case([&](ExpOp) { return un(U::Exp); })
        .Case([&](LogOp) { return un(U::Log); })
        .Case([&](SqrtOp) { return un(U::Sqrt); })
        .Case([&](ReciprocalOp) { return un(U::Reciprocal); })
        .Case([&](TanhOp) { return un(U::Tanh); })
        .Case([&](ErfOp) { return un(U::Erf); })
        .Case([&](SigmoidOp) { return un(U::Sigmoid); })
        .Case([&](CosOp) { return un(U::Cos); })
        .Case([&](SinOp) { return un(U::Sin); })
        .Case([&](NotOp) { return un(U::Not); })
        .Case([&](GeluOp o) { return un(o.getTanh() ? U::GeluTanh : U::Gelu); })
        .Case([&](GeluDerivativeOp o) {
          return un(o.getTanh() ? U::GeluTanhDerivative : U::GeluDerivative);
        })
        // Binary, compare, select, cast.
        .Case([&](AddOp) { return bin(B::Add); })
        .Case([&](SubOp) { return bin(B::Sub); })
        .Case([&](MulOp) { return bin(B::Mul); })
        .Case([&](DivOp) { return bin(B::Div); })
        .Case([&](PowOp) { return bin(B::Pow); })
        .Case([&](MinOp) { return bin(B::Min); })
        .Case([&](MaxOp) { return bin(B::Max); })
        .Case([&](AndOp) { return bin(B::And); })
        .Case([&](OrOp) { return bin(B::Or); })
        .Case([&](EqualOp) { return cmp(C::Equal); })
        .Case([&](GreaterOp) { return cmp(C::Greater); })
        .Case([&](GreaterEqualOp) { return cmp(C::GreaterEqual); })
        .Case([&](LessOp) { return cmp(C::Less); })
        .Case([&](LessEqualOp) { return cmp(C::LessEqual); })
        .Case([&](SelectOp) { return rt::select(in(0), in(1), in(2), out); })
        .Case([&](CastOp) { return rt::cast(in(0), out); })
        // Contraction, normalisation.
        .Case([&](MatMulOp) { return rt::matmul(in(0), in(1), out); })
        .Case([&](FusedMatMulOp o) {
          rt::Tensor bias, addend;
          if (o.getBias())
            bias = env.lookup(o.getBias())->view();
          if (o.getAddend())
            addend = env.lookup(o.getAddend())->view();
          return rt::matmulEpilogue(in(0), in(1),
                                    o.getBias() ? &bias : nullptr,
                                    o.getAddend() ? &addend : nullptr, out);
        })
        .Case([&](SoftmaxOp o) {
          return rt::softmax(in(0), int64_t(o.getAxis()), out);
        })
        .Case([&](LogSoftmaxOp o) {
          return rt::logSoftmax(in(0), int64_t(o.getAxis()), out);
        })
        .Case([&](SoftmaxGradOp o) {
          return rt::softmaxBackward(in(0), in(1), int64_t(o.getAxis()), out);
        })
        .Case([&](LogSoftmaxGradOp o) {
          return rt::logSoftmaxBackward(in(0), in(1), int64_t(o.getAxis()),
                                        out);
        })
        .Case([&](LayerNormOp o) {
          rt::Tensor bias;
          if (o.getBias())
            bias = env.lookup(o.getBias())->view();
          return rt::layerNorm(in(0), in(1), o.getBias() ? &bias : nullptr,
                               int64_t(o.getAxis()),
                               o.getEpsilonAttr().getValueAsDouble(), out);
        })
        .Case([&](RMSNormOp o) {
          return rt::rmsNorm(in(0), in(1), int64_t(o.getAxis()),
                             o.getEpsilonAttr().getValueAsDouble(), out);
        })
        .Case([&](LayerNormGradOp o) {
          rt::Tensor addend;
          if (o.getAddend())
            addend = in(3);
          return rt::layerNormBackward(
              in(0), in(1), in(2), int64_t(o.getAxis()),
              o.getEpsilonAttr().getValueAsDouble(), outs[0], &outs[1],
              outs.size() > 2 ? &outs[2] : nullptr,
              o.getAddend() ? &addend : nullptr);
        })
        .Case([&](RMSNormGradOp o) {
          rt::Tensor addend;
          if (o.getAddend())
            addend = in(3);
          return rt::rmsNormBackward(in(0), in(1), in(2), int64_t(o.getAxis()),
                                     o.getEpsilonAttr().getValueAsDouble(),
                                     outs[0], &outs[1],
                                     o.getAddend() ? &addend : nullptr);
        })
        // Vision.
        .Case([&](ConvOp o) {
          rt::Tensor bias;
          if (o.getBias())
            bias = env.lookup(o.getBias())->view();
          return rt::conv(in(0), in(1), o.getBias() ? &bias : nullptr,
                          o.getStrides().data(), o.getDilations().data(),
                          o.getPads().data(), o.getGroup(), out);
        })
        .Case([&](ConvGradInputOp o) {
          return rt::convBackwardInput(in(0), in(1), o.getStrides().data(),
                                       o.getDilations().data(),
                                       o.getPads().data(), o.getGroup(), out);
        })
        .Case([&](ConvGradWeightOp o) {
          return rt::convBackwardWeight(in(0), in(1), o.getStrides().data(),
                                        o.getDilations().data(),
                                        o.getPads().data(), o.getGroup(), out);
        })
        .Case([&](MaxPoolOp o) {
          return rt::maxPool(in(0), o.getKernelShape().data(),
                             o.getStrides().data(), o.getDilations().data(),
                             o.getPads().data(), out);
        })
        .Case([&](MaxPoolIndicesOp o) {
          return rt::maxPoolIndices(in(0), o.getKernelShape().data(),
                                    o.getStrides().data(),
                                    o.getDilations().data(),
                                    o.getPads().data(), o.getColumnMajor(),
                                    out);
        })
        .Case([&](MaxPoolGradOp o) {
          return rt::maxPoolBackward(in(0), in(1), o.getKernelShape().data(),
                                     o.getStrides().data(),
                                     o.getDilations().data(),
                                     o.getPads().data(), out);
        })
        .Case([&](AvgPoolOp o) {
          return rt::avgPool(in(0), o.getKernelShape().data(),
                             o.getStrides().data(), o.getDilations().data(),
                             o.getPads().data(), o.getCountIncludePad(), out);
        })
        .Case([&](AvgPoolGradOp o) {
          return rt::avgPoolBackward(in(0), o.getKernelShape().data(),
                                     o.getStrides().data(),
                                     o.getDilations().data(),
                                     o.getPads().data(),
                                     o.getCountIncludePad(), out);
        })
        .Case([&](AttentionOp o) {
          rt::Tensor bias;
          if (o.getBias())
            bias = env.lookup(o.getBias())->view();
          return rt::attention(in(0), in(1), in(2),
                               o.getBias() ? &bias : nullptr,
                               o.getScaleAttr().getValueAsDouble(), o.getCausal(),
                               outs[0], outs[1], layoutOf(o));
        })
        .Case([&](AttentionGradOp o) {
          rt::Tensor bias;
          if (o.getBias())
            bias = env.lookup(o.getBias())->view();
          return rt::attentionBackward(
              in(0), in(1), in(2), o.getBias() ? &bias : nullptr, in(3), in(4),
              in(5), o.getScaleAttr().getValueAsDouble(), o.getCausal(), outs[0],
              outs[1], outs[2], layoutOf(o));
        })
        .Case([&](SoftmaxCrossEntropyOp o) {
          return rt::softmaxCrossEntropy(in(0), in(1), o.getIgnoreIndex(), out);
        })
        .Case([&](SoftmaxCrossEntropyGradOp o) {
          return rt::softmaxCrossEntropyBackward(in(0), in(1), in(2),
                                                 o.getIgnoreIndex(), out);
        })
        // Reductions.
        .Case([&](ReduceSumOp o) { return red(R::Sum, o); })
        .Case([&](ReduceMeanOp o) { return red(R::Mean, o); })
        .Case([&](ReduceMaxOp o) { return red(R::Max, o); })
        .Case([&](ReduceProdOp o) { return red(R::Prod, o); })
        .Case([&](CumSumOp o) {
          return rt::cumsum(in(0), int64_t(o.getAxis()), o.getExclusive(),
                            o.getReverse(), out);
        })
        // Data movement.
        .Case([&](ReshapeOp) { return rt::reshape(in(0), out); })
        .Case([&](BroadcastOp) { return rt::broadcast(in(0), out); })
        .Case([&](TransposeOp o) {
          return rt::transpose(in(0), o.getPerm().data(), out);
        })
        .Case([&](ConcatOp o) {
          std::vector<rt::Tensor> ins;
          for (unsigned i = 0; i < op->getNumOperands(); ++i)
            ins.push_back(in(i));
          return rt::concat(ins.data(), int(ins.size()), int64_t(o.getAxis()), out);
        })
        .Case([&](SliceOp o) {
          return rt::slice(in(0), o.getStarts().data(), o.getSizes().data(),
                           o.getSteps().data(), out);
        })
        .Case([&](TileOp o) {
          return rt::tile(in(0), o.getRepeats().data(), out);
        })
        .Case([&](TriluOp o) {
          return rt::trilu(in(0), int64_t(o.getK()), o.getUpper(), out);
        })
        // Mixture of experts.
        .Case([&](TopKOp o) {
          return rt::topk(in(0), int64_t(o.getK()), outs[0], outs[1]);
        })
        .Case([&](MoEOp) {
          return rt::moe(in(0), in(1), in(2), in(3), in(4), out);
        })
        .Case([&](MoEGradOp) {
          return rt::moeBackward(in(0), in(1), in(2), in(3), in(4), in(5),
                                 outs[0], outs[1], outs[2], outs[3]);
        })
        .Case([&](MoEDispatchOp o) {
          return rt::moeDispatch(in(0), in(1), int64_t(o.getExperts()),
                                 int64_t(o.getRanks()), outs[0], outs[1]);
        })
        .Case([&](MoECombineOp o) {
          return rt::moeCombine(in(0), in(1), in(2), int64_t(o.getExperts()),
                                int64_t(o.getRanks()), out);
        })
        .Case([&](MoECombineGradOp o) {
          return rt::moeCombineBackward(
              in(0), in(1), in(2), in(3), int64_t(o.getExperts()),
              int64_t(o.getRanks()), outs[0], outs[1]);
        })
        .Case([&](MoERowExpertsOp) { return rt::moeRowExperts(in(0), out); })
        // Gather / scatter.
        .Case([&](GatherOp o) {
          return rt::gather(in(0), in(1), int64_t(o.getAxis()), out);
        })
        .Case([&](GatherNDOp o) {
          return rt::gatherND(in(0), in(1), int64_t(o.getBatchDims()), out);
        })
        .Case([&](ScatterNDOp o) -> Result {
          rt::ScatterReduction r;
          std::string name = o.getReduction().str();
          if (!rt::parseScatterReduction(name.c_str(), r))
            return rt::Status::error("unknown reduction '" + name + "'");
          return rt::scatterND(in(0), in(1), in(2), r, out);
        })
        .Default([](Operation *) { return Result(); });
  }
};
} // namespace

/// Runs `op` (not a return) on the values in `env`, whose results it adds
/// (owned by `owned`); "" or what failed.
static std::string
runOp(Operation &op, llvm::DenseMap<Value, const HostTensor *> &env,
      llvm::DenseMap<Value, std::unique_ptr<HostTensor>> &owned) {
  if (op.getNumResults() == 0)
    return "cannot evaluate " + where(&op) + ": an op without results";
  std::vector<std::unique_ptr<HostTensor>> results;
  if (auto c = dyn_cast<ir::graph::ConstantOp>(op)) {
    results.push_back(std::make_unique<HostTensor>());
    if (std::string err = fromElementsAttr(c.getValue(), *results.back());
        !err.empty())
      return "at " + where(&op) + ": " + err;
  } else {
    std::vector<rt::Tensor> views;
    for (Value r : op.getResults()) {
      results.push_back(std::make_unique<HostTensor>());
      if (std::string err = allocFor(r.getType(), *results.back());
          !err.empty())
        return "at " + where(&op) + ": " + err;
      views.push_back(results.back()->view());
    }
    for (Value v : op.getOperands())
      if (!env.count(v))
        return "at " + where(&op) + ": operand has no value";
    Runner runner{&op, env, std::move(views)};
    std::optional<rt::Status> status = runner.run();
    if (!status)
      return "no kernel for " + where(&op);
    if (!status->ok())
      return "at " + where(&op) + ": " + status->message();
  }
  for (auto [r, result] : llvm::zip_equal(op.getResults(), results)) {
    env[r] = result.get();
    owned[r] = std::move(result);
  }
  return "";
}

/// Binds `func`'s arguments by their graph.name to `args` in `env`.
static std::string bindArgs(func::FuncOp func,
                            const std::map<std::string, HostTensor> &args,
                            llvm::DenseMap<Value, const HostTensor *> &env) {
  for (BlockArgument arg : func.getBody().front().getArguments()) {
    auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                  ir::graph::kNameAttr);
    if (!name)
      return "argument #" + std::to_string(arg.getArgNumber()) +
             " has no graph.name";
    auto it = args.find(name.getValue().str());
    if (it == args.end())
      return "no value for argument '" + name.getValue().str() + "'";
    if (!matches(it->second, arg.getType()))
      return "argument '" + name.getValue().str() + "': expected " +
             describe(arg.getType()) + ", got " + describe(it->second);
    env[arg] = &it->second;
  }
  return "";
}

/// The return's values, named by graph.output_names (else output_<i>).
static void
collectOutputs(func::FuncOp func, func::ReturnOp ret,
               const llvm::DenseMap<Value, const HostTensor *> &env,
               std::vector<std::pair<std::string, HostTensor>> &outputs) {
  auto names = func->getAttrOfType<ArrayAttr>(ir::graph::kOutputNamesAttr);
  for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
    std::string name = "output_" + std::to_string(i);
    if (names && i < names.size())
      if (auto s = dyn_cast<StringAttr>(names[i]))
        name = s.getValue().str();
    outputs.emplace_back(name, *env.lookup(v));
  }
}

static std::string checkedFunction(ModuleOp module, StringRef functionName,
                                   func::FuncOp &func) {
  func = findFunction(module, functionName);
  if (!func)
    return "no function @" + functionName.str() + " in the module";
  if (!func.getBody().hasOneBlock())
    return "@" + func.getName().str() + " must have one block";
  return "";
}

std::string
lamina::eval::evaluate(ModuleOp module,
                       const std::map<std::string, HostTensor> &args,
                       std::vector<std::pair<std::string, HostTensor>> &outputs,
                       StringRef functionName) {
  func::FuncOp func;
  if (std::string err = checkedFunction(module, functionName, func);
      !err.empty())
    return err;
  Block &body = func.getBody().front();
  llvm::DenseMap<Value, const HostTensor *> env;
  if (std::string err = bindArgs(func, args, env); !err.empty())
    return err;

  // The last op using each value, so its buffer can go after that op.
  llvm::DenseMap<Operation *, llvm::SmallVector<Value, 2>> dies;
  {
    llvm::DenseMap<Value, Operation *> last;
    for (Operation &op : body)
      for (Value v : op.getOperands())
        last[v] = &op;
    for (auto &[v, op] : last)
      if (!isa<BlockArgument>(v))
        dies[op].push_back(v);
  }
  llvm::DenseMap<Value, std::unique_ptr<HostTensor>> owned;

  for (Operation &op : body) {
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      collectOutputs(func, ret, env, outputs);
      return "";
    }
    if (std::string err = runOp(op, env, owned); !err.empty())
      return err;
    auto it = dies.find(&op);
    if (it != dies.end())
      for (Value v : it->second)
        if (!llvm::any_of(body.getTerminator()->getOperands(),
                          [&](Value r) { return r == v; })) {
          env.erase(v);
          owned.erase(v);
        }
  }
  return "@" + func.getName().str() + " has no return";
}

/// A rank's block along `axis` of a whole row-major tensor: `outer` runs
/// (the dims before the axis) of `ranks` blocks of `block` bytes each.
struct Blocks {
  int64_t outer = 1, block = 0;
  Blocks(const std::vector<int64_t> &partShape, int64_t axis, rt::DType dtype) {
    block = int64_t(rt::dtypeSize(dtype));
    for (size_t d = 0; d < partShape.size(); ++d) {
      if (int64_t(d) < axis)
        outer *= partShape[d];
      else
        block *= partShape[d];
    }
  }
};

/// Rank `r`'s block of `whole` along `axis`, split evenly over `ranks`.
static HostTensor sliceAxis(const HostTensor &whole, int64_t axis,
                            int64_t ranks, int64_t r) {
  std::vector<int64_t> shape = whole.shape;
  shape[size_t(axis)] /= ranks;
  HostTensor part(whole.dtype, shape);
  Blocks b(shape, axis, whole.dtype);
  auto *src = static_cast<const char *>(whole.data());
  auto *dst = static_cast<char *>(part.data());
  for (int64_t o = 0; o < b.outer; ++o)
    std::memcpy(dst + o * b.block, src + (o * ranks + r) * b.block,
                size_t(b.block));
  return part;
}

/// The parts of every rank joined along `axis`.
static HostTensor joinAxis(const std::vector<const HostTensor *> &parts,
                           int64_t axis) {
  int64_t ranks = int64_t(parts.size());
  std::vector<int64_t> shape = parts[0]->shape;
  Blocks b(shape, axis, parts[0]->dtype);
  shape[size_t(axis)] *= ranks;
  HostTensor whole(parts[0]->dtype, shape);
  auto *dst = static_cast<char *>(whole.data());
  for (int64_t o = 0; o < b.outer; ++o)
    for (int64_t r = 0; r < ranks; ++r)
      std::memcpy(dst + (o * ranks + r) * b.block,
                  static_cast<const char *>(parts[size_t(r)]->data()) +
                      o * b.block,
                  size_t(b.block));
  return whole;
}

HostTensor lamina::eval::shardOf(const HostTensor &whole,
                                 ArrayRef<int64_t> splitDims, int64_t ranks,
                                 int64_t rank) {
  HostTensor t = whole;
  for (int64_t dim : splitDims)
    t = sliceAxis(t, dim, ranks, rank);
  return t;
}

std::string lamina::eval::evaluateSpmd(
    ModuleOp module, const std::vector<std::map<std::string, HostTensor>> &args,
    std::vector<std::vector<std::pair<std::string, HostTensor>>> &outputs,
    StringRef functionName) {
  func::FuncOp func;
  if (std::string err = checkedFunction(module, functionName, func);
      !err.empty())
    return err;
  size_t ranks = args.size();
  std::vector<llvm::DenseMap<Value, const HostTensor *>> env(ranks);
  std::vector<llvm::DenseMap<Value, std::unique_ptr<HostTensor>>> owned(ranks);
  for (size_t r = 0; r < ranks; ++r)
    if (std::string err = bindArgs(func, args[r], env[r]); !err.empty())
      return "rank " + std::to_string(r) + ": " + err;
  outputs.assign(ranks, {});
  // One grid axis, every rank of it: what shard-partition writes for a
  // one-dimensional grid of `ranks`.
  auto collective = [&](Operation &op) -> std::string {
    Value in = op.getOperand(0), out = op.getResult(0);
    std::vector<const HostTensor *> parts;
    for (size_t r = 0; r < ranks; ++r)
      parts.push_back(env[r].lookup(in));
    // What every rank receives, computed once: a reduction's element-wise
    // sum (or max) of the ranks' parts, or a gather's parts joined.
    HostTensor reduced;
    auto reduce = [&](shard::ReductionKind kind) -> std::string {
      if ((kind != shard::ReductionKind::Sum &&
           kind != shard::ReductionKind::Max) ||
          parts[0]->dtype != rt::DType::F32)
        return "at " + where(&op) + ": only f32 sums and maxima are evaluated";
      reduced = *parts[0];
      auto *acc = static_cast<float *>(reduced.data());
      for (size_t q = 1; q < ranks; ++q)
        for (int64_t i = 0; i < reduced.numElements(); ++i) {
          float x = static_cast<const float *>(parts[q]->data())[i];
          acc[i] = kind == shard::ReductionKind::Sum ? acc[i] + x
                                                     : std::max(acc[i], x);
        }
      return "";
    };
    std::string err;
    if (auto sum = dyn_cast<shard::AllReduceOp>(op))
      err = reduce(sum.getReduction());
    else if (auto scatter = dyn_cast<shard::ReduceScatterOp>(op))
      err = reduce(scatter.getReduction());
    else if (auto gather = dyn_cast<shard::AllGatherOp>(op))
      reduced = joinAxis(parts, int64_t(gather.getGatherAxis().getZExtValue()));
    if (!err.empty())
      return err;
    for (size_t r = 0; r < ranks; ++r) {
      auto result = std::make_unique<HostTensor>();
      if (isa<shard::AllReduceOp, shard::AllGatherOp>(op)) {
        *result = reduced;
      } else if (auto scatter = dyn_cast<shard::ReduceScatterOp>(op)) {
        *result =
            sliceAxis(reduced, int64_t(scatter.getScatterAxis().getZExtValue()),
                      int64_t(ranks), int64_t(r));
      } else if (auto a2a = dyn_cast<shard::AllToAllOp>(op)) {
        // Rank r gets every rank's r-th block along the split axis, joined
        // along the concat axis.
        int64_t split = int64_t(a2a.getSplitAxis().getZExtValue());
        int64_t concat = int64_t(a2a.getConcatAxis().getZExtValue());
        std::vector<HostTensor> blocks;
        for (size_t q = 0; q < ranks; ++q)
          blocks.push_back(
              sliceAxis(*parts[q], split, int64_t(ranks), int64_t(r)));
        std::vector<const HostTensor *> views;
        for (const HostTensor &block : blocks)
          views.push_back(&block);
        *result = joinAxis(views, concat);
      } else if (auto slice = dyn_cast<shard::AllSliceOp>(op)) {
        *result =
            sliceAxis(*parts[r], int64_t(slice.getSliceAxis().getZExtValue()),
                      int64_t(ranks), int64_t(r));
      } else {
        *result = *parts[r]; // tensor.cast
      }
      env[r][out] = result.get();
      owned[r][out] = std::move(result);
    }
    return "";
  };
  for (Operation &op : func.getBody().front()) {
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      for (size_t r = 0; r < ranks; ++r)
        collectOutputs(func, ret, env[r], outputs[r]);
      return "";
    }
    // The rank's index, as a 0-d i64 through its casts.
    if (isa<shard::ProcessLinearIndexOp, arith::IndexCastOp,
            tensor::FromElementsOp>(op)) {
      for (size_t r = 0; r < ranks; ++r) {
        auto index = std::make_unique<HostTensor>(rt::DType::I64,
                                                  std::vector<int64_t>{});
        *static_cast<int64_t *>(index->data()) =
            isa<shard::ProcessLinearIndexOp>(op)
                ? int64_t(r)
                : *static_cast<const int64_t *>(
                      env[r].lookup(op.getOperand(0))->data());
        env[r][op.getResult(0)] = index.get();
        owned[r][op.getResult(0)] = std::move(index);
      }
      continue;
    }
    if (isa<shard::AllReduceOp, shard::AllGatherOp, shard::AllSliceOp,
            shard::AllToAllOp, shard::ReduceScatterOp, tensor::CastOp>(op)) {
      if (std::string err = collective(op); !err.empty())
        return err;
      continue;
    }
    for (size_t r = 0; r < ranks; ++r)
      if (std::string err = runOp(op, env[r], owned[r]); !err.empty())
        return "rank " + std::to_string(r) + ": " + err;
  }
  return "@" + func.getName().str() + " has no return";
}
