//===- RtToEmitCPass.cpp - rt functions -> an EmitC program ---------------===//
//
// The entry function becomes `static void lamina_forward(const Tensor *args,
// void *arena)`; static globals hold shapes, integer arrays and constants;
// the ProgramSpec tables and `main` are EmitC globals and a function, so
// `translateToCpp` of the module is the whole program. See the pass
// description in include/lamina/Conversion/Passes.td.
//
//===----------------------------------------------------------------------===//

#include "StepFunctions.h"

#include "lamina/Conversion/Passes.h"
#include "lamina/Dialect/Dist/IR/DistDialect.h"
#include "lamina/Dialect/Graph/IR/GraphDialect.h"
#include "lamina/Dialect/Rt/IR/RtOps.h"

#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

namespace lamina {
#define GEN_PASS_DEF_CONVERTRTTOEMITC
#include "lamina/Conversion/Passes.h.inc"
} // namespace lamina

using namespace mlir;
using namespace lamina;

/// The runtime's DType enumerator for an element type; "" if it has none.
static std::string dtypeEnumerator(Type t) {
  StringRef name;
  if (t.isF32()) name = "F32";
  else if (t.isF64()) name = "F64";
  else if (t.isF16()) name = "F16";
  else if (t.isBF16()) name = "BF16";
  else if (auto i = dyn_cast<IntegerType>(t)) {
    static const std::map<unsigned, std::pair<StringRef, StringRef>> kInts = {
        {1, {"I1", "I1"}},   {8, {"I8", "U8"}},   {16, {"I16", "U16"}},
        {32, {"I32", "U32"}}, {64, {"I64", "U64"}}};
    auto it = kInts.find(i.getWidth());
    if (it == kInts.end())
      return "";
    name = i.isUnsigned() ? it->second.second : it->second.first;
  } else
    return "";
  return ("lamina::rt::DType::" + name).str();
}

std::string lamina::cString(StringRef s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\')
      out += '\\', out += char(c);
    else if (c >= 0x20 && c < 0x7f && c != '?') // '?' avoids trigraphs
      out += char(c);
    else
    {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\%03o", unsigned(c));
      out += buf;
    }
  }
  return out + "\"";
}

/// An exact C++ double: a hexadecimal floating literal.
static std::string doubleLiteral(double v) {
  if (std::isnan(v))
    return "__builtin_nan(\"\")";
  if (std::isinf(v))
    return v > 0 ? "__builtin_inf()" : "(-__builtin_inf())";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%a", v);
  return buf;
}

namespace {
class ProgramEmitter {
public:
  ProgramEmitter(ModuleOp module, func::FuncOp entry, StringRef modelPath,
                 bool train = false, StringRef labelsInput = "",
                 int64_t vocab = 0, bool cuda = false)
      : module(module), entry(entry), modelPath(modelPath), train(train),
        labelsInput(labelsInput), vocab(vocab), cuda(cuda),
        b(module.getContext()) {}

  /// mode=train: the TrainSpec's LossKind enumerator and ignored label.
  std::string lossKind = "CausalLM";
  int64_t ignoreIndex = -100;

  /// Most kernel calls per emitted C++ function (calls-per-function).
  int64_t callsPerFunction = 128;

  /// `evalEntry` (mode=train, may be null): the loss-only function with
  /// the entry's arguments, emitted as the TrainSpec's `eval` program.
  LogicalResult run(func::FuncOp evalEntry = {});
  /// mode=dist: every outlined module function, the DistSpec and a `main`
  /// calling lamina::rt::distTrainMain (cuda: lamina::rt::cuda::'s).
  struct DistOptions {
    /// The training program's settings (convert-dist-to-rt's `rt.dist`).
    std::string kind;
    int64_t numModules = 0, pp = 1, dp = 1, tp = 1, microBatches = 1, zero = 0;
    std::vector<int64_t> placement, flatParams;
    bool recompute = true;
    std::string lossKind = "CausalLM", labelsInput;
    int64_t vocab = 0, ignoreIndex = -100;
  };
  LogicalResult runDist(ArrayRef<func::FuncOp> funcs, const DistOptions &opts);

private:
  Type tensorType() { return emitc::OpaqueType::get(ctx(), "lamina::rt::Tensor"); }
  MLIRContext *ctx() { return module.getContext(); }
  emitc::OpaqueAttr opaque(StringRef s) { return emitc::OpaqueAttr::get(ctx(), s); }

  /// A static const int64_t array global with `values`; "" when empty (the
  /// callee gets nullptr).
  std::string i64Global(ArrayRef<int64_t> values);
  /// Reads a global array inside the function being built.
  Value getGlobal(StringRef name, int64_t size);
  /// A constant's static word array: all its bytes, or a large splat's one
  /// element (filled at run time by gen::splat).
  struct ConstantGlobal {
    std::string name;
    int64_t numWords = 0;
    bool splat = false;
  };
  ConstantGlobal constantGlobal(ir::rt::ConstantOp op);

  LogicalResult emitBody(emitc::FuncOp func);
  /// Emits `calls` as the body of `func`, each buffer's Tensor made where
  /// the part first uses it.
  void emitPart(emitc::FuncOp func, ArrayRef<ir::rt::CallOp> calls);
  /// The Tensor of rt buffer `v` (an entry argument, arena view or
  /// constant) in the part being emitted.
  Value tensorFor(Value v);
  Value makeTensor(Location loc, StringRef callee, Value base,
                   Attribute first, MemRefType type);
  LogicalResult checkEntry();
  /// `entry` as `static void lamina_<name>(const Tensor *, void *)`.
  FailureOr<emitc::FuncOp> emitFunction();
  void emitCall(ir::rt::CallOp call);
  void emitSpecAndMain(emitc::FuncOp func, StringRef evalSpec);
  /// The ProgramSpec (or FunctionSpec) initialiser of `entry`, emitted as
  /// `func`, whose tables are named prefix_args and prefix_outputs.
  std::string specInitializer(emitc::FuncOp func, StringRef first,
                              StringRef prefix);
  /// Static ArgSpec / OutputSpec arrays of `entry`; their names, or
  /// "nullptr" when empty.
  std::string argsTable(StringRef name);
  std::string outputsTable(StringRef name);
  std::string specArray(StringRef name, StringRef type, int64_t n,
                        const std::string &init);

  ModuleOp module;
  func::FuncOp entry;
  std::string modelPath;
  bool train;
  std::string labelsInput;
  int64_t vocab;
  /// target=cuda: kernels' lamina::rt::cuda:: twins on `stream`.
  bool cuda;
  Value stream;
  OpBuilder b;
  OpBuilder globals{static_cast<MLIRContext *>(nullptr)};
  std::map<std::vector<int64_t>, std::string> arrays;
  unsigned numConstants = 0;
  llvm::DenseMap<Operation *, ConstantGlobal> constants;
  llvm::DenseMap<Value, Value> tensors; // rt buffer -> Tensor, this part
  Value argsPtr, arena;                 // this part's parameters
};
} // namespace

std::string ProgramEmitter::i64Global(ArrayRef<int64_t> values) {
  if (values.empty())
    return "";
  std::vector<int64_t> key(values.begin(), values.end());
  auto it = arrays.find(key);
  if (it != arrays.end())
    return it->second;
  std::string name = "lamina_i64s_" + std::to_string(arrays.size());
  auto type = emitc::ArrayType::get({int64_t(values.size())},
                                    b.getIntegerType(64));
  auto init = DenseIntElementsAttr::get(
      RankedTensorType::get({int64_t(values.size())}, b.getIntegerType(64)),
      values);
  emitc::GlobalOp::create(globals, entry.getLoc(), name, type, init,
                          /*extern=*/false, /*static=*/true, /*const=*/true);
  arrays.emplace(std::move(key), name);
  return name;
}

Value ProgramEmitter::getGlobal(StringRef name, int64_t size) {
  auto type = emitc::ArrayType::get({size}, b.getIntegerType(64));
  return emitc::GetGlobalOp::create(b, entry.getLoc(), type, name);
}

/// Constants are stored as little-endian 64-bit words so every element type
/// (f16, bf16, i1 as one byte) keeps its exact bits and 8-byte alignment.
/// Splats over 64 bytes keep one element.
ProgramEmitter::ConstantGlobal
ProgramEmitter::constantGlobal(ir::rt::ConstantOp op) {
  auto dense = cast<DenseElementsAttr>(op.getValue());
  MemRefType type = op.getResult().getType();
  Type elt = type.getElementType();
  unsigned width = elt.isInteger(1) ? 8 : elt.getIntOrFloatBitWidth();
  size_t eltBytes = width / 8;
  bool splat = dense.isSplat() && type.getNumElements() * eltBytes > 64;
  int64_t n = splat ? 1 : type.getNumElements();
  std::vector<uint8_t> bytes(size_t(n) * eltBytes);
  if (elt.isInteger(1)) {
    int64_t i = 0;
    for (bool v : dense.getValues<bool>()) {
      if (i == n)
        break;
      bytes[i++] = v ? 1 : 0;
    }
  } else {
    ArrayRef<char> raw = dense.getRawData();
    for (size_t off = 0; off < bytes.size(); off += eltBytes)
      std::memcpy(bytes.data() + off,
                  raw.data() + (dense.isSplat() ? 0 : off), eltBytes);
  }
  size_t words = std::max<size_t>(1, (bytes.size() + 7) / 8);
  bytes.resize(words * 8, 0);
  std::string init = "{";
  for (size_t w = 0; w < words; ++w) {
    uint64_t v = 0;
    for (int k = 7; k >= 0; --k)
      v = (v << 8) | bytes[w * 8 + k];
    init += (w ? ", " : "") + llvm::formatv("{0:x}ULL", v).str();
  }
  init += "}";
  std::string name = "lamina_const_" + std::to_string(numConstants++);
  emitc::GlobalOp::create(
      globals, op.getLoc(), name,
      emitc::ArrayType::get({int64_t(words)}, b.getIntegerType(64, false)),
      opaque(init), /*extern=*/false, /*static=*/true, /*const=*/true);
  return {name, int64_t(words), splat};
}

/// lamina::rt::X -> lamina::rt::cuda::X (gen:: adapters included).
static std::string cudaCallee(StringRef callee) {
  StringRef prefix = "lamina::rt::";
  if (!callee.starts_with(prefix))
    return callee.str();
  return ("lamina::rt::cuda::" + callee.drop_front(prefix.size())).str();
}

void ProgramEmitter::emitCall(ir::rt::CallOp call) {
  SmallVector<Value> operands;
  for (Value v : call.getBuffers())
    operands.push_back(tensorFor(v));
  SmallVector<Attribute> args;
  for (Attribute a : call.getArgs()) {
    if (auto s = dyn_cast<StringAttr>(a)) {
      args.push_back(opaque(s.getValue()));
    } else if (isa<UnitAttr>(a)) {
      args.push_back(opaque("nullptr"));
    } else if (auto array = dyn_cast<DenseI64ArrayAttr>(a)) {
      std::string name = i64Global(array.asArrayRef());
      if (name.empty()) {
        args.push_back(opaque("nullptr"));
        continue;
      }
      operands.push_back(getGlobal(name, array.size()));
      args.push_back(b.getIndexAttr(operands.size() - 1));
    } else if (auto i = dyn_cast<IntegerAttr>(a); i && !i.getType().isIndex() &&
                                                  !i.getType().isInteger(1)) {
      // int64_t literals: spell them so that no value is out of range.
      args.push_back(opaque(("int64_t(" + std::to_string(i.getInt()) + "LL)")));
    } else if (auto f = dyn_cast<FloatAttr>(a)) {
      args.push_back(opaque(doubleLiteral(f.getValueAsDouble())));
    } else {
      args.push_back(a); // index (operand) or bool
    }
  }
  std::string callee = call.getCallee().str();
  if (cuda) {
    // The device twin takes the host arguments plus the stream, last.
    callee = cudaCallee(callee);
    operands.push_back(stream);
    args.push_back(b.getIndexAttr(operands.size() - 1));
  }
  Type status = emitc::OpaqueType::get(ctx(), "lamina::rt::Status");
  auto result = emitc::CallOpaqueOp::create(b, call.getLoc(), TypeRange{status},
                                            callee, operands,
                                            b.getArrayAttr(args));
  emitc::CallOpaqueOp::create(
      b, call.getLoc(), TypeRange{}, "lamina::rt::checkKernel",
      ValueRange{result.getResult(0)},
      b.getArrayAttr({b.getIndexAttr(0), opaque(cString(call.getWhere()))}));
}

Value ProgramEmitter::makeTensor(Location loc, StringRef callee, Value base,
                                 Attribute first, MemRefType type) {
  std::string dtype = dtypeEnumerator(type.getElementType());
  SmallVector<Value> operands{base};
  SmallVector<Attribute> args{b.getIndexAttr(0)};
  if (first)
    args.push_back(first);
  args.append({opaque(dtype), b.getI32IntegerAttr(type.getRank())});
  std::string shape = i64Global(type.getShape());
  if (shape.empty()) {
    args.push_back(opaque("nullptr"));
  } else {
    operands.push_back(getGlobal(shape, type.getRank()));
    args.push_back(b.getIndexAttr(1));
  }
  return emitc::CallOpaqueOp::create(b, loc, TypeRange{tensorType()}, callee,
                                     operands, b.getArrayAttr(args))
      .getResult(0);
}

Value ProgramEmitter::tensorFor(Value v) {
  if (Value t = tensors.lookup(v))
    return t;
  auto type = cast<MemRefType>(v.getType());
  Value t;
  if (auto arg = dyn_cast<BlockArgument>(v)) {
    t = makeTensor(entry.getLoc(), "lamina::rt::gen::arg", argsPtr,
                   opaque(std::to_string(arg.getArgNumber() - 1)), type);
  } else if (auto view = v.getDefiningOp<ir::rt::ViewOp>()) {
    t = makeTensor(view.getLoc(), "lamina::rt::gen::view", arena,
                   opaque(std::to_string(view.getOffset())), type);
  } else {
    auto c = v.getDefiningOp<ir::rt::ConstantOp>();
    const ConstantGlobal &g = constants.lookup(c);
    auto words =
        emitc::ArrayType::get({g.numWords}, b.getIntegerType(64, false));
    Value global = emitc::GetGlobalOp::create(b, c.getLoc(), words, g.name);
    std::string callee = std::string(cuda ? "lamina::rt::cuda::gen::"
                                          : "lamina::rt::gen::") +
                         (g.splat ? "splat" : "constant");
    t = makeTensor(c.getLoc(), callee, global, Attribute(), type);
  }
  tensors[v] = t;
  return t;
}

void ProgramEmitter::emitPart(emitc::FuncOp func,
                              ArrayRef<ir::rt::CallOp> calls) {
  Block *body = func.addEntryBlock();
  b.setInsertionPointToStart(body);
  argsPtr = body->getArgument(0);
  arena = body->getArgument(1);
  tensors.clear();
  // Shapes and arrays this part reads go before it.
  globals.setInsertionPoint(func);
  if (cuda)
    stream = emitc::CallOpaqueOp::create(
                 b, entry.getLoc(),
                 TypeRange{emitc::OpaqueType::get(ctx(), "cudaStream_t")},
                 "lamina::rt::cuda::currentStream", ValueRange{})
                 .getResult(0);
  for (ir::rt::CallOp call : calls)
    emitCall(call);
  emitc::ReturnOp::create(b, entry.getLoc(), Value());
}

LogicalResult ProgramEmitter::emitBody(emitc::FuncOp func) {
  SmallVector<ir::rt::CallOp> calls;
  for (Operation &op : entry.getBody().front()) {
    if (auto c = dyn_cast<ir::rt::ConstantOp>(op))
      constants[c] = constantGlobal(c);
    else if (auto call = dyn_cast<ir::rt::CallOp>(op))
      calls.push_back(call);
    else if (!isa<ir::rt::ViewOp, func::ReturnOp>(op))
      return op.emitError("convert-rt-to-emitc: unexpected op ") << op.getName();
  }
  int64_t perPart = std::max<int64_t>(1, callsPerFunction);
  if (int64_t(calls.size()) <= perPart) {
    emitPart(func, calls);
  } else {
    // noinline: GCC would otherwise inline each once-called part back.
    OpBuilder fb(ctx());
    fb.setInsertionPoint(func);
    SmallVector<std::string> names;
    for (int64_t begin = 0; begin < int64_t(calls.size()); begin += perPart) {
      std::string name =
          (func.getName() + "_part" + Twine(names.size())).str();
      auto part = emitc::FuncOp::create(fb, entry.getLoc(), name,
                                        func.getFunctionType());
      part.setSpecifiersAttr(
          fb.getStrArrayAttr({"__attribute__((noinline)) static"}));
      emitPart(part,
               ArrayRef<ir::rt::CallOp>(calls).slice(
                   begin, std::min<int64_t>(perPart, calls.size() - begin)));
      names.push_back(name);
    }
    Block *body = func.addEntryBlock();
    b.setInsertionPointToStart(body);
    for (const std::string &name : names)
      emitc::CallOpaqueOp::create(b, entry.getLoc(), TypeRange{}, name,
                                  ValueRange(body->getArguments()));
    emitc::ReturnOp::create(b, entry.getLoc(), Value());
  }
  // Tables emitted later (argument specs) go before the entry again.
  globals.setInsertionPoint(func);
  return success();
}

/// The runtime's ArgKind enumerator for a `graph.kind` value.
static StringRef argKindEnumerator(StringAttr kind) {
  if (!kind || kind.getValue() == ir::graph::kKindInput)
    return "Input";
  return llvm::StringSwitch<StringRef>(kind.getValue())
      .Case(ir::graph::kKindTrainable, "Trainable")
      .Case(ir::graph::kKindBoundary, "Boundary")
      .Case(ir::graph::kKindResidual, "Residual")
      .Case(ir::graph::kKindCotangent, "Cotangent")
      .Case(ir::graph::kKindParamCopy, "ParamCopy")
      .Default("Constant");
}

std::string ProgramEmitter::specArray(StringRef name, StringRef type, int64_t n,
                                      const std::string &init) {
  if (n == 0)
    return "nullptr";
  emitc::GlobalOp::create(
      globals, module.getLoc(), name,
      emitc::ArrayType::get({n}, emitc::OpaqueType::get(ctx(), type)),
      opaque("{" + init + "}"), false, true, true);
  return name.str();
}

std::string ProgramEmitter::argsTable(StringRef name) {
  std::string args;
  unsigned numArgs = entry.getNumArguments() - 1;
  for (unsigned i = 0; i < numArgs; ++i) {
    auto argName =
        entry.getArgAttrOfType<StringAttr>(i + 1, ir::graph::kNameAttr);
    auto kind = entry.getArgAttrOfType<StringAttr>(i + 1, ir::graph::kKindAttr);
    auto t = cast<MemRefType>(entry.getArgumentTypes()[i + 1]);
    std::string shape = i64Global(t.getShape());
    std::string n = argName ? argName.getValue().str() : "arg" + std::to_string(i);
    auto split =
        entry.getArgAttrOfType<IntegerAttr>(i + 1, ir::graph::kTpSplitAttr);
    auto parts = entry.getArgAttrOfType<DenseI64ArrayAttr>(
        i + 1, ir::graph::kTpPartsAttr);
    auto experts =
        entry.getArgAttrOfType<IntegerAttr>(i + 1, ir::graph::kEpSplitAttr);
    std::string layout;
    if (split)
      layout = ", " + std::to_string(split.getInt());
    if (split && parts)
      layout += ", " + std::to_string(parts[1]);
    if (experts)
      layout = ", -1, 1, " + std::to_string(experts.getInt());
    args += (i ? ", " : "") +
            llvm::formatv("{{{0}, lamina::rt::ArgKind::{1}, {2}, {3}, {4}{5}}",
                          cString(n), argKindEnumerator(kind),
                          dtypeEnumerator(t.getElementType()), t.getRank(),
                          shape.empty() ? "nullptr" : shape, layout)
                .str();
  }
  return specArray(name, "lamina::rt::ArgSpec", numArgs, args);
}

std::string ProgramEmitter::outputsTable(StringRef name) {
  std::string outputs;
  auto ret = cast<func::ReturnOp>(entry.getBody().front().getTerminator());
  auto names = entry->getAttrOfType<ArrayAttr>(ir::graph::kOutputNamesAttr);
  for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
    auto type = cast<MemRefType>(v.getType());
    auto view = v.getDefiningOp<ir::rt::ViewOp>();
    std::string outName = "output_" + std::to_string(i);
    if (names && i < names.size())
      if (auto s = dyn_cast<StringAttr>(names[i]))
        outName = s.getValue().str();
    std::string shape = i64Global(type.getShape());
    outputs += (i ? ", " : "") +
               llvm::formatv("{{{0}, {1}, {2}, {3}, {4}}", cString(outName),
                             dtypeEnumerator(type.getElementType()),
                             type.getRank(), shape.empty() ? "nullptr" : shape,
                             view ? view.getOffset() : 0)
                   .str();
  }
  return specArray(name, "lamina::rt::OutputSpec", ret.getNumOperands(),
                   outputs);
}

std::string ProgramEmitter::specInitializer(emitc::FuncOp func, StringRef first,
                                            StringRef prefix) {
  std::string argsName = argsTable((prefix + "_args").str());
  std::string outputsName = outputsTable((prefix + "_outputs").str());
  auto arenaBytes = entry->getAttrOfType<IntegerAttr>(ir::rt::kArenaBytesAttr);
  return llvm::formatv(
      "{{{0}, {1}, {2}, {3}, {4}, {5}, {6}}", first, argsName,
      entry.getNumArguments() - 1, outputsName,
      entry.getBody().front().getTerminator()->getNumOperands(),
      arenaBytes ? arenaBytes.getInt() : 0, func.getName());
}

void ProgramEmitter::emitSpecAndMain(emitc::FuncOp func, StringRef evalSpec) {
  Location loc = entry.getLoc();
  std::string spec = specInitializer(func, cString(modelPath), "lamina");
  // The spec follows the entry function it points to.
  OpBuilder after(ctx());
  after.setInsertionPointAfter(func);
  emitc::GlobalOp::create(after, loc, "lamina_program",
                          emitc::OpaqueType::get(ctx(), "lamina::rt::ProgramSpec"),
                          opaque(spec), false, true, true);
  // int main(int argc, char **argv)
  Type i32 = emitc::OpaqueType::get(ctx(), "int");
  Type argv = emitc::PointerType::get(
      emitc::PointerType::get(emitc::OpaqueType::get(ctx(), "char")));
  auto main = emitc::FuncOp::create(after, loc, "main",
                                    b.getFunctionType({i32, argv}, {i32}));
  Block *body = main.addEntryBlock();
  OpBuilder mb = OpBuilder::atBlockEnd(body);
  if (train) {
    // The train spec goes before main, after the program spec.
    std::string trainSpec = llvm::formatv(
        "{{{0}, {1}, {2}, lamina::rt::LossKind::{3}, int64_t({4}LL)}",
        labelsInput.empty() ? "nullptr" : cString(labelsInput), vocab, evalSpec,
        lossKind, ignoreIndex);
    OpBuilder before(ctx());
    before.setInsertionPoint(main);
    emitc::GlobalOp::create(before, loc, "lamina_train",
                            emitc::OpaqueType::get(ctx(), "lamina::rt::TrainSpec"),
                            opaque(trainSpec), false, true, true);
  }
  SmallVector<Attribute> mainArgs = {mb.getIndexAttr(0), mb.getIndexAttr(1),
                                     opaque("lamina_program")};
  if (train)
    mainArgs.push_back(opaque("lamina_train"));
  if (cuda)
    mainArgs.push_back(opaque("lamina::rt::cuda::device()"));
  auto code = emitc::CallOpaqueOp::create(
      mb, loc, TypeRange{i32},
      train ? "lamina::rt::trainMain" : "lamina::rt::programMain",
      ValueRange{body->getArgument(0), body->getArgument(1)},
      mb.getArrayAttr(mainArgs));
  emitc::ReturnOp::create(mb, loc, code.getResult(0));
}

LogicalResult ProgramEmitter::checkEntry() {
  for (Type t : entry.getArgumentTypes().drop_front())
    if (auto m = dyn_cast<MemRefType>(t); !m || dtypeEnumerator(m.getElementType()).empty())
      return entry.emitError("convert-rt-to-emitc: unsupported argument type ") << t;
  for (Value v : entry.getBody().front().getTerminator()->getOperands())
    if (!v.getDefiningOp<ir::rt::ViewOp>())
      return entry.emitError("convert-rt-to-emitc: results must be arena views "
                             "(run convert-graph-to-rt)");
  return success();
}

FailureOr<emitc::FuncOp> ProgramEmitter::emitFunction() {
  if (failed(checkEntry()))
    return failure();
  Type argsType = emitc::PointerType::get(
      emitc::OpaqueType::get(ctx(), "const lamina::rt::Tensor"));
  Type arenaType = emitc::PointerType::get(emitc::OpaqueType::get(ctx(), "void"));
  OpBuilder fb(ctx());
  fb.setInsertionPoint(entry);
  auto func = emitc::FuncOp::create(fb, entry.getLoc(), "lamina_" + entry.getName().str(),
                                    fb.getFunctionType({argsType, arenaType}, {}));
  func.setSpecifiersAttr(fb.getStrArrayAttr({"static"}));
  // Globals go before the function that reads them.
  globals = OpBuilder(ctx());
  globals.setInsertionPoint(func);
  if (failed(emitBody(func)))
    return failure();
  return func;
}

/// `eval` takes what `entry` takes, argument for argument.
static LogicalResult checkSameArguments(func::FuncOp eval, func::FuncOp entry) {
  if (eval.getArgumentTypes() != entry.getArgumentTypes())
    return eval.emitError("convert-rt-to-emitc: the evaluation entry @")
           << eval.getName() << " does not take @" << entry.getName()
           << "'s arguments";
  for (unsigned i = 1; i < entry.getNumArguments(); ++i)
    for (StringRef attr : {ir::graph::kNameAttr, ir::graph::kKindAttr})
      if (eval.getArgAttr(i, attr) != entry.getArgAttr(i, attr))
        return eval.emitError("convert-rt-to-emitc: argument #")
               << i - 1 << " of the evaluation entry @" << eval.getName()
               << " differs from @" << entry.getName() << "'s in '" << attr
               << "'";
  return success();
}

LogicalResult ProgramEmitter::run(func::FuncOp evalEntry) {
  b.setInsertionPointToStart(module.getBody());
  emitc::IncludeOp::create(b, entry.getLoc(),
                           cuda ? "lamina/Runtime/Cuda/Generated.h"
                                : "lamina/Runtime/Generated.h");
  std::string evalSpec = "nullptr";
  if (evalEntry) {
    if (failed(checkSameArguments(evalEntry, entry)))
      return failure();
    func::FuncOp trainEntry = entry;
    entry = evalEntry;
    FailureOr<emitc::FuncOp> func = emitFunction();
    if (failed(func))
      return failure();
    std::string spec =
        specInitializer(*func, cString(modelPath), "lamina_eval");
    OpBuilder after(ctx());
    after.setInsertionPointAfter(*func);
    emitc::GlobalOp::create(
        after, evalEntry.getLoc(), "lamina_eval_program",
        emitc::OpaqueType::get(ctx(), "lamina::rt::ProgramSpec"), opaque(spec),
        false, true, true);
    evalEntry.erase();
    entry = trainEntry;
    evalSpec = "&lamina_eval_program";
  }
  FailureOr<emitc::FuncOp> func = emitFunction();
  if (failed(func))
    return failure();
  emitSpecAndMain(*func, evalSpec);
  entry.erase();
  return success();
}

LogicalResult ProgramEmitter::runDist(ArrayRef<func::FuncOp> funcs,
                                      const DistOptions &opts) {
  Location loc = func::FuncOp(funcs.front()).getLoc();
  b.setInsertionPointToStart(module.getBody());
  emitc::IncludeOp::create(b, loc,
                           cuda ? "lamina/Runtime/Cuda/Generated.h"
                                : "lamina/Runtime/Generated.h");
  emitc::IncludeOp::create(b, loc,
                           cuda ? "lamina/Runtime/Cuda/DistProgram.h"
                                : "lamina/Runtime/DistProgram.h");
  // fwd_k / bwd_k in module order: FunctionSpec initialisers by name.
  std::map<std::string, std::string> specs;
  struct Info {
    std::string name;
    int64_t numIn = 0, numOut = 0, numResiduals = 0;
    bool copiesOnly = true; ///< both functions (dist-hoist-param-casts)
  };
  std::map<int64_t, Info> modules;
  std::set<std::string> inputs;
  for (func::FuncOp f : funcs) {
    auto outlined = f->getAttrOfType<ir::dist::OutlinedAttr>(
        ir::dist::DistDialect::kOutlinedAttr);
    if (!outlined)
      return f.emitError("convert-rt-to-emitc: mode=dist needs the functions "
                         "of dist-outline-modules; @")
             << f.getName() << " has no 'dist.outlined'";
    Info &info = modules[outlined.getModule()];
    info.name = outlined.getName().str();
    info.numIn = outlined.getNumIn();
    info.numOut = outlined.getNumOut();
    info.numResiduals = outlined.getNumResiduals();
    info.copiesOnly &= outlined.getCopiesOnly();
    entry = f;
    for (unsigned i = 1; i < f.getNumArguments(); ++i) {
      auto kind = f.getArgAttrOfType<StringAttr>(i, ir::graph::kKindAttr);
      auto name = f.getArgAttrOfType<StringAttr>(i, ir::graph::kNameAttr);
      if (kind && kind.getValue() == ir::graph::kKindInput && name)
        inputs.insert(name.getValue().str());
    }
    FailureOr<emitc::FuncOp> func = emitFunction();
    if (failed(func))
      return failure();
    std::string name = f.getName().str();
    specs[name] = specInitializer(*func, cString(name), "lamina_" + name);
    f.erase();
  }
  const int64_t numModules = int64_t(modules.size());
  for (int64_t k = 0; k < numModules; ++k)
    if (!modules.count(k) || !specs.count("fwd_" + std::to_string(k)) ||
        !specs.count("bwd_" + std::to_string(k)))
      return mlir::emitError(module.getLoc(), "convert-rt-to-emitc: module ")
             << k << " lacks @fwd_" << k << " or @bwd_" << k;
  // The runtime feeds every input by name (run --data or --data-dir).
  if (inputs.empty())
    return mlir::emitError(module.getLoc(),
                           "convert-rt-to-emitc: the module functions read no "
                           "model input");
  if (opts.numModules != numModules)
    return mlir::emitError(module.getLoc(), "convert-rt-to-emitc: rt.dist has ")
           << opts.numModules << " modules, the program " << numModules;
  if (int64_t(opts.placement.size()) != numModules)
    return mlir::emitError(module.getLoc(),
                           "convert-rt-to-emitc: rt.dist's placement has ")
           << opts.placement.size() << " entries for " << numModules
           << " modules";
  // The step functions, after the module functions they call.
  std::map<std::string, std::pair<int64_t, bool>> callees;
  for (const auto &[k, info] : modules) {
    callees["fwd_" + std::to_string(k)] = {k, false};
    callees["bwd_" + std::to_string(k)] = {k, true};
  }
  FailureOr<StepFunctions> steps =
      lowerStepFunctions(module, callees, opts.pp, cuda);
  if (failed(steps))
    return failure();

  // Tables after the last function: they name the functions.
  globals = OpBuilder(ctx());
  globals.setInsertionPointToEnd(module.getBody());
  std::string moduleInit;
  for (int64_t k = 0; k < numModules; ++k) {
    const Info &info = modules[k];
    moduleInit +=
        llvm::formatv("{0}{{{1}, {2}, {3}, {4}, {5}, {6}, {7}}", k ? ", " : "",
                      cString(info.name), specs["fwd_" + std::to_string(k)],
                      specs["bwd_" + std::to_string(k)], info.numIn,
                      info.numOut, info.numResiduals,
                      info.copiesOnly ? "true" : "false")
            .str();
  }
  specArray("lamina_modules", "lamina::rt::ModuleSpec", numModules, moduleInit);
  // Per pipeline rank its step function; replicas run the same one.
  auto stepTable = [&](const std::vector<std::string> &names,
                       StringRef table) {
    return specArray(table, "lamina::rt::StepFn", int64_t(names.size()),
                     llvm::join(names, ", "));
  };
  std::string train = stepTable(steps->train, "lamina_steps");
  std::string eval = stepTable(steps->eval, "lamina_eval_steps");
  auto bytesTable = [&](const std::vector<int64_t> &bytes, StringRef table) {
    std::string init;
    for (int64_t n : bytes)
      init += (init.empty() ? "" : ", ") + std::to_string(n) + "LL";
    return specArray(table, "int64_t", int64_t(bytes.size()), init);
  };
  std::string trainBytes =
      bytesTable(steps->trainBytes, "lamina_step_buffer_bytes");
  std::string evalBytes =
      bytesTable(steps->evalBytes, "lamina_eval_step_buffer_bytes");
  std::string edges;
  for (const auto &[from, to] : steps->edges)
    edges += (edges.empty() ? "" : ", ") + std::to_string(from) + ", " +
             std::to_string(to);
  std::string edgeTable = specArray("lamina_edges", "int",
                                    2 * int64_t(steps->edges.size()), edges);
  std::string ranks;
  for (int64_t k = 0; k < numModules; ++k)
    ranks += (k ? ", " : "") + std::to_string(opts.placement[size_t(k)]);
  specArray("lamina_module_rank", "int", numModules, ranks);
  if (int64_t(opts.flatParams.size()) != numModules)
    return mlir::emitError(module.getLoc(),
                           "convert-rt-to-emitc: rt.dist's flat_params has ")
           << opts.flatParams.size() << " entries for " << numModules
           << " modules";
  std::string flat;
  for (int64_t n : opts.flatParams)
    flat += (flat.empty() ? "" : ", ") + std::to_string(n) + "LL";
  specArray("lamina_flat_params", "int64_t", numModules, flat);
  std::string spec = llvm::formatv(
      "{{{0}, lamina_modules, {1}, {2}, {3}, {4}, {5}, {6}, {7}, "
      "{8}, {9}, {17}, {18}, {10}, {11}, {12}, lamina_module_rank, "
      "lamina_flat_params, "
      "lamina::rt::LossKind::{13}, {14}, int64_t({15}LL), int64_t({16}LL)"
      "{19}}",
      cString(modelPath), numModules, opts.pp, opts.dp, opts.microBatches,
      opts.zero, cString(opts.kind), opts.recompute ? "true" : "false", train,
      eval, edgeTable, steps->edges.size(), opts.pp * opts.dp * opts.tp,
      opts.lossKind,
      opts.labelsInput.empty() ? "nullptr" : cString(opts.labelsInput),
      opts.vocab, opts.ignoreIndex, trainBytes, evalBytes,
      // Only a tensor-parallel program names its group (DistSpec::tp).
      opts.tp > 1 ? ", " + std::to_string(opts.tp) : std::string());
  emitc::GlobalOp::create(globals, loc, "lamina_dist",
                          emitc::OpaqueType::get(ctx(), "lamina::rt::DistSpec"),
                          opaque(spec), false, true, true);
  Type i32 = emitc::OpaqueType::get(ctx(), "int");
  Type argv = emitc::PointerType::get(
      emitc::PointerType::get(emitc::OpaqueType::get(ctx(), "char")));
  auto main = emitc::FuncOp::create(globals, loc, "main",
                                    b.getFunctionType({i32, argv}, {i32}));
  Block *body = main.addEntryBlock();
  OpBuilder mb = OpBuilder::atBlockEnd(body);
  auto code = emitc::CallOpaqueOp::create(
      mb, loc, TypeRange{i32},
      cuda ? "lamina::rt::cuda::distTrainMain" : "lamina::rt::distTrainMain",
      ValueRange{body->getArgument(0), body->getArgument(1)},
      mb.getArrayAttr({mb.getIndexAttr(0), mb.getIndexAttr(1),
                       opaque("lamina_dist")}));
  emitc::ReturnOp::create(mb, loc, code.getResult(0));
  return success();
}

namespace {
struct ConvertRtToEmitCPass
    : public lamina::impl::ConvertRtToEmitCBase<ConvertRtToEmitCPass> {
  using Base::Base;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (target != "host" && target != "cuda") {
      mlir::emitError(module.getLoc(), "convert-rt-to-emitc: target must be "
                                       "host or cuda, got '")
          << target << "'";
      return signalPassFailure();
    }
    // The mode follows from the IR unless given: a verified schedule is a
    // distributed program, graph.train a training one.
    std::string mode = this->mode;
    if (mode.empty())
      mode = module->hasAttr(ir::rt::kDistAttr) ? "dist"
             : ir::graph::trainAttrOf(module)   ? "train"
                                                : "inference";
    if (mode != "inference" && mode != "train" && mode != "dist") {
      mlir::emitError(module.getLoc(), "convert-rt-to-emitc: mode must be "
                                       "inference, train or dist, got '")
          << mode << "'";
      return signalPassFailure();
    }
    ir::graph::TrainAttr train = ir::graph::trainAttrOf(module);
    if (mode != "inference" && !train) {
      mlir::emitError(module.getLoc(), "convert-rt-to-emitc: mode=")
          << mode << " needs the module's graph.train (the loss the program "
                     "computes; run graph-add-loss)";
      return signalPassFailure();
    }
    // Consumed here, as the schedule is: the C++ program holds it.
    if (train)
      module->removeAttr(ir::graph::kTrainAttr);
    if (mode == "dist")
      return runDist(module, train);
    std::string entryName = this->entryName,
                evalEntryName = this->evalEntryName;
    if (entryName.empty())
      entryName = mode == "train" ? "train_step" : "forward";
    if (evalEntryName.empty() && mode == "train")
      evalEntryName = "eval_step";
    func::FuncOp entry, evalEntry;
    for (auto f : module.getOps<func::FuncOp>()) {
      if (f.getName() == entryName)
        entry = f;
      else if (mode == "train" && !evalEntryName.empty() &&
               f.getName() == evalEntryName)
        evalEntry = f;
      else {
        f.emitError("convert-rt-to-emitc: only the entry @")
            << entryName << " can be lowered";
        return signalPassFailure();
      }
    }
    if (!entry) {
      mlir::emitError(module.getLoc(), "convert-rt-to-emitc: no function @") << entryName;
      return signalPassFailure();
    }
    if (failed(checkRtFunction(entry)) ||
        (evalEntry && failed(checkRtFunction(evalEntry))))
      return signalPassFailure();
    bool training = mode == "train";
    ProgramEmitter emitter(module, entry, modelPath, training,
                           training ? train.getLabels() : StringRef(),
                           training ? train.getVocab() : 0, target == "cuda");
    emitter.callsPerFunction = callsPerFunction;
    if (training) {
      emitter.lossKind = lossKindEnumerator(train);
      emitter.ignoreIndex = train.getIgnoreIndex();
    }
    if (failed(emitter.run(evalEntry)))
      signalPassFailure();
  }

  /// The runtime's LossKind enumerator for graph.train's loss.
  static std::string lossKindEnumerator(ir::graph::TrainAttr train) {
    switch (train.getLoss()) {
    case ir::graph::LossKind::CausalLM:
      return "CausalLM";
    case ir::graph::LossKind::CrossEntropy:
      return "CrossEntropy";
    case ir::graph::LossKind::Output:
      return "Output";
    }
    llvm_unreachable("LossKind");
  }

  LogicalResult checkRtFunction(func::FuncOp f) {
    if (f.getNumArguments() == 0 ||
        !isa<ir::rt::ArenaType>(f.getArgumentTypes()[0]))
      return f.emitError("convert-rt-to-emitc: @")
             << f.getName() << " is not an rt function (run convert-graph-to-rt)";
    return success();
  }

  void runDist(ModuleOp module, ir::graph::TrainAttr train) {
    // The module functions; the step functions are lowered after them.
    SmallVector<func::FuncOp> funcs;
    for (auto f : module.getOps<func::FuncOp>())
      if (!f->hasAttr("rt.step_pp"))
        funcs.push_back(f);
    if (funcs.empty()) {
      mlir::emitError(module.getLoc(), "convert-rt-to-emitc: mode=dist found no functions");
      return signalPassFailure();
    }
    for (func::FuncOp f : funcs)
      if (failed(checkRtFunction(f)))
        return signalPassFailure();
    ProgramEmitter::DistOptions opts;
    auto dist = module->getAttrOfType<ir::rt::DistAttr>(ir::rt::kDistAttr);
    if (!dist) {
      mlir::emitError(module.getLoc(), "convert-rt-to-emitc: mode=dist needs "
                                       "the module's rt.dist and step "
                                       "functions (run convert-dist-to-rt)");
      return signalPassFailure();
    }
    // (The attribute's verifier checked the ranges.)
    opts.kind = dist.getKind().str();
    opts.numModules = dist.getModules();
    opts.pp = dist.getPp();
    opts.dp = dist.getDp();
    opts.tp = dist.getTp();
    opts.microBatches = dist.getMicroBatches();
    opts.zero = dist.getZero();
    ArrayRef<int64_t> placement = dist.getPlacement().asArrayRef();
    ArrayRef<int64_t> flat = dist.getFlatParams().asArrayRef();
    opts.placement.assign(placement.begin(), placement.end());
    opts.flatParams.assign(flat.begin(), flat.end());
    module->removeAttr(ir::rt::kDistAttr);
    // dist-outline-modules recorded whether the backwards recompute.
    for (func::FuncOp f : funcs)
      if (auto outlined = f->getAttrOfType<ir::dist::OutlinedAttr>(
              ir::dist::DistDialect::kOutlinedAttr))
        opts.recompute = outlined.getRecompute();
    opts.lossKind = lossKindEnumerator(train);
    opts.labelsInput = train.getLabels().str();
    opts.vocab = train.getVocab();
    opts.ignoreIndex = train.getIgnoreIndex();
    ProgramEmitter emitter(module, funcs.front(), modelPath, false, "", 0,
                           target == "cuda");
    emitter.callsPerFunction = callsPerFunction;
    if (failed(emitter.runDist(funcs, opts)))
      signalPassFailure();
  }
};
} // namespace
