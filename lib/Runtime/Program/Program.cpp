//===- Program.cpp - the driver of a generated program --------------------===//
//
// programMain's order is what makes "no output on error" hold: parse the
// command line, check the spec, read and check every input, load and check
// every initializer, run the entry, and only then create the output folder
// and write the outputs (each to a temporary file first, all renamed into
// place once every one has been written).
//
//===----------------------------------------------------------------------===//

#include "lamina/Runtime/Program.h"

#include "Args.h"
#include "FileUtil.h"
#include "OnnxTensor.h"
#include "lamina/Runtime/Device.h"
#include "lamina/Runtime/Kernels.h"
#include "lamina/Runtime/TensorIO.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

using namespace lamina::rt;

namespace {

const char *const kUsage =
    "usage: run --input NAME=FILE ... --output-dir DIR [--model FILE]\n"
    "           [--threads N] [--repeat N] [--time] [--kernels] [--help]\n"
    "\n"
    "  --input NAME=FILE  value of model input NAME: a .npy file or a\n"
    "                     serialized ONNX TensorProto (.pb); once per input\n"
    "  --output-dir DIR   where <output name>.npy files are written\n"
    "                     (created if missing)\n"
    "  --model FILE       ONNX file to read the weights from (default: the\n"
    "                     model the program was compiled from)\n"
    "  --threads N        kernel threads (default: all cores)\n"
    "  --repeat N         run the model N times (outputs of the last run)\n"
    "  --time             print the mean time per run in ms to stderr\n"
    "  --kernels          print what runs the kernels (device, threads, the\n"
    "                     GEMM kernel family picked for this CPU) and exit\n";

struct Options {
  std::vector<std::string> inputs; // "NAME=FILE" as given
  std::string outputDir, model;
  int threads = 0, repeat = 1;
  bool time = false, help = false, kernels = false;
};

/// A positive count below 10^9 (an int), as --threads and --repeat take.
bool parseSmallCount(const std::string &s, int &out) {
  int64_t v;
  if (!parseCount(s, v, 1) || v >= 1000000000)
    return false;
  out = int(v);
  return true;
}

/// Parses argv; "" on success, else a usage message.
std::string parseOptions(int argc, char **argv, Options &o) {
  ArgReader args(argc, argv);
  while (args.next()) {
    const std::string &arg = args.name();
    std::string v;
    if (arg == "--help" || arg == "-h") {
      o.help = true;
    } else if (args.isFlag("--time")) {
      o.time = true;
    } else if (args.isFlag("--kernels")) {
      o.kernels = true;
    } else if (arg == "--input") {
      if (!args.take(v))
        return "--input needs NAME=FILE";
      if (v.find('=') == std::string::npos)
        return "--input '" + v + "' is not NAME=FILE";
      o.inputs.push_back(v);
    } else if (arg == "--output-dir") {
      if (!args.take(o.outputDir) || o.outputDir.empty())
        return "--output-dir needs a folder";
    } else if (arg == "--model") {
      if (!args.take(o.model) || o.model.empty())
        return "--model needs a file";
    } else if (arg == "--threads") {
      if (!args.take(v) || !parseSmallCount(v, o.threads))
        return "--threads needs a positive number";
    } else if (arg == "--repeat") {
      if (!args.take(v) || !parseSmallCount(v, o.repeat))
        return "--repeat needs a positive number";
    } else {
      return "unknown argument '" + std::string(args.raw()) + "'";
    }
  }
  if (!o.help && !o.kernels && o.outputDir.empty())
    return "--output-dir is required";
  return "";
}

/// Splits "NAME=FILE". Names may contain '=' (ONNX allows any string): the
/// split is at the first '=' whose left side names an input of the spec,
/// else at the first '='.
std::pair<std::string, std::string> splitInput(const std::string &text,
                                               const ProgramSpec &spec) {
  for (size_t eq = text.find('='); eq != std::string::npos;
       eq = text.find('=', eq + 1))
    for (int i = 0; i < spec.numArgs; ++i)
      if (spec.args[i].kind == ArgKind::Input &&
          text.compare(0, eq, spec.args[i].name) == 0 &&
          std::strlen(spec.args[i].name) == eq)
        return {text.substr(0, eq), text.substr(eq + 1)};
  size_t eq = text.find('=');
  return {text.substr(0, eq), text.substr(eq + 1)};
}

bool endsWith(const std::string &s, const char *suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

std::string describeArg(const ArgSpec &a) {
  return describeType(a.dtype, a.shape, a.rank);
}

bool sameShape(const std::vector<int64_t> &shape, const int64_t *spec,
               int rank) {
  if (int(shape.size()) != rank)
    return false;
  for (int i = 0; i < rank; ++i)
    if (shape[i] != spec[i])
      return false;
  return true;
}

/// The program's state between the steps of programMain.
class Driver {
public:
  Driver(const ProgramSpec &spec, const Options &options, Device &device)
      : spec(spec), options(options), device(device),
        values(size_t(spec.numArgs)), owned(size_t(spec.numArgs)) {}

  Status checkSpec();
  Status readInputs();
  Status loadWeights();
  /// Copies the arguments to the device (unless it is the host).
  Status upload();
  Status run();
  /// Copies the outputs off the device (unless it is the host).
  Status download();
  Status writeOutputs();

private:
  const ProgramSpec &spec;
  const Options &options;
  Device &device;
  std::vector<Tensor> values;                   // per arg, what the entry sees
  std::vector<std::unique_ptr<OwnedTensor>> owned; // storage behind values
  ::onnx::ModelProto model; // initializers read in place live here
  std::vector<DeviceBuffer> deviceArgs; // device copies behind values
  DeviceBuffer arena;
  std::vector<OwnedTensor> outputs; // host copies, when not the host
};

Status Driver::checkSpec() {
  for (int i = 0; i < spec.numOutputs; ++i) {
    const OutputSpec &o = spec.outputs[i];
    int64_t n = checkedNumElements(o.shape, o.rank);
    size_t bytes = size_t(n) * dtypeSize(o.dtype);
    if (n < 0 || o.offset > spec.arenaBytes ||
        bytes > spec.arenaBytes - o.offset)
      return Status::error("the program is inconsistent: output '" +
                           std::string(o.name) + "' lies outside the arena");
  }
  return Status::success();
}

Status Driver::readInputs() {
  std::map<std::string, int> given; // input name -> arg index
  for (const auto &entry : options.inputs) {
    auto [name, path] = splitInput(entry, spec);
    int index = -1;
    for (int i = 0; i < spec.numArgs; ++i)
      if (spec.args[i].kind == ArgKind::Input && name == spec.args[i].name)
        index = i;
    if (index < 0) {
      std::string known;
      for (int i = 0; i < spec.numArgs; ++i)
        if (spec.args[i].kind == ArgKind::Input)
          known += std::string(known.empty() ? "" : ", ") + "'" +
                   spec.args[i].name + "'";
      return Status::error("unknown input '" + name + "' (the model's inputs: " +
                           (known.empty() ? "none" : known) + ")");
    }
    if (!given.emplace(name, index).second)
      return Status::error("input '" + name + "' is given more than once");
    auto t = std::make_unique<OwnedTensor>();
    Status s;
    if (endsWith(path, ".npy"))
      s = readNpy(path, *t);
    else if (endsWith(path, ".pb"))
      s = readTensorProto(path, *t);
    else
      s = Status::error("'" + path + "' is neither a .npy nor a .pb file");
    if (!s.ok())
      return Status::error("input '" + name + "': " + s.message());
    const ArgSpec &a = spec.args[index];
    // .npy has no bf16: a u2 file holds bf16 bit patterns (see writeNpy).
    if (a.dtype == DType::BF16 && t->dtype == DType::U16 &&
        endsWith(path, ".npy"))
      t->dtype = DType::BF16;
    if (t->dtype != a.dtype || !sameShape(t->shape, a.shape, a.rank))
      return Status::error(
          "input '" + name + "': expected " + describeArg(a) + ", got " +
          describeType(t->dtype, t->shape.data(), int(t->shape.size())) +
          " from '" + path + "'");
    values[size_t(index)] = Tensor{t->data(), a.dtype, a.rank, a.shape};
    owned[size_t(index)] = std::move(t);
  }
  for (int i = 0; i < spec.numArgs; ++i)
    if (spec.args[i].kind == ArgKind::Input && !given.count(spec.args[i].name))
      return Status::error("missing input '" + std::string(spec.args[i].name) +
                           "' (" + describeArg(spec.args[i]) +
                           "): pass --input " + spec.args[i].name + "=FILE");
  return Status::success();
}

Status Driver::loadWeights() {
  bool needed = false;
  for (int i = 0; i < spec.numArgs; ++i)
    needed |= spec.args[i].kind != ArgKind::Input;
  if (!needed)
    return Status::success();
  std::string path = !options.model.empty() ? options.model
                     : spec.modelPath       ? spec.modelPath
                                            : "";
  if (path.empty())
    return Status::error("the program has weights but no model file; pass "
                         "--model FILE");
  if (Status s = loadModel(path, model); !s.ok())
    return Status::error("cannot read the weights: " + s.message());
  std::map<std::string, ::onnx::TensorProto *> inits;
  collectInitializers(*model.mutable_graph(), inits);
  TensorDecoder decoder(parentDir(path));
  for (int i = 0; i < spec.numArgs; ++i) {
    const ArgSpec &a = spec.args[i];
    if (a.kind == ArgKind::Input)
      continue;
    auto it = inits.find(a.name);
    if (it == inits.end())
      return Status::error("no initializer named '" + std::string(a.name) +
                           "' in '" + path + "' (the program expects " +
                           describeArg(a) + ")");
    ::onnx::TensorProto &tensor = *it->second;
    auto fail = [&](const std::string &why) {
      return Status::error("initializer '" + std::string(a.name) + "' in '" +
                           path + "': " + why);
    };
    DType dtype;
    std::vector<int64_t> shape;
    if (Status s = decoder.inspect(tensor, dtype, shape); !s.ok())
      return fail(s.message());
    if (dtype != a.dtype || !sameShape(shape, a.shape, a.rank))
      return fail("expected " + describeArg(a) + ", got " +
                  describeType(dtype, shape.data(), int(shape.size())));
    int64_t n = numElements(a.shape, a.rank);
    // (mutable_raw_data() would mark raw_data present: test first.)
    bool inPlace = tensor.data_location() != ::onnx::TensorProto::EXTERNAL &&
                   tensor.has_raw_data() && n > 0 &&
                   reinterpret_cast<uintptr_t>(tensor.raw_data().data()) %
                           dtypeSize(dtype) ==
                       0;
    if (inPlace) {
      // Use raw_data in place: weights are not held twice in memory.
      std::string &raw = *tensor.mutable_raw_data();
      auto *p = reinterpret_cast<uint8_t *>(&raw[0]);
      if (dtype == DType::I1)
        for (size_t k = 0; k < raw.size(); ++k)
          p[k] = p[k] != 0;
      values[size_t(i)] = Tensor{p, a.dtype, a.rank, a.shape};
      continue;
    }
    auto t = std::make_unique<OwnedTensor>();
    t->allocate(dtype, std::move(shape));
    if (Status s = decoder.read(tensor, dtype, n, t->data()); !s.ok())
      return fail(s.message());
    tensor.Clear(); // the copy is what the program uses
    values[size_t(i)] = Tensor{t->data(), a.dtype, a.rank, a.shape};
    owned[size_t(i)] = std::move(t);
  }
  // Initializers the program does not take (folded into its code) need not
  // stay in memory.
  for (auto &[name, tensor] : inits) {
    bool used = false;
    for (int i = 0; i < spec.numArgs && !used; ++i)
      used = spec.args[i].kind != ArgKind::Input && name == spec.args[i].name;
    if (!used)
      tensor->Clear();
  }
  return Status::success();
}

Status Driver::upload() {
  if (device.isHost())
    return Status::success();
  deviceArgs.resize(size_t(spec.numArgs));
  for (int i = 0; i < spec.numArgs; ++i) {
    Tensor &v = values[size_t(i)];
    if (Status s = deviceArgs[size_t(i)].upload(device, v.data, v.byteSize());
        !s.ok())
      return Status::error("argument '" + std::string(spec.args[i].name) +
                           "': " + s.message());
    v.data = deviceArgs[size_t(i)].data();
  }
  // The host copies are no longer needed.
  owned.clear();
  model.Clear();
  return Status::success();
}

Status Driver::run() {
  if (Status s = arena.allocate(device, spec.arenaBytes); !s.ok())
    return Status::error("cannot allocate the " +
                         std::to_string(spec.arenaBytes) +
                         "-byte arena: " + s.message());
  if (options.threads > 0)
    if (Status s = device.setThreads(options.threads); !s.ok())
      return s;
  auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < options.repeat; ++r)
    if (Status s = device.run(spec.entry, values.data(), spec.numArgs, arena.data());
        !s.ok())
      return s;
  auto end = std::chrono::steady_clock::now();
  if (options.time) {
    double ms = std::chrono::duration<double, std::milli>(end - start).count();
    std::fprintf(stderr, "time: %.3f ms per run (mean of %d) on %s\n",
                 ms / options.repeat, options.repeat,
                 device.kernels().c_str());
  }
  return Status::success();
}

Status Driver::download() {
  if (device.isHost())
    return Status::success();
  outputs.resize(size_t(spec.numOutputs));
  for (int i = 0; i < spec.numOutputs; ++i) {
    const OutputSpec &o = spec.outputs[i];
    OwnedTensor &t = outputs[size_t(i)];
    t.allocate(o.dtype, std::vector<int64_t>(o.shape, o.shape + o.rank));
    if (Status s = device.download(
            t.data(), static_cast<char *>(arena.data()) + o.offset,
            t.byteSize());
        !s.ok())
      return Status::error("output '" + std::string(o.name) +
                           "': " + s.message());
  }
  return Status::success();
}

} // namespace

std::string lamina::rt::outputFileName(const char *name) {
  // Bytes outside [A-Za-z0-9_-.] (and a leading '.') become %XX: the mapping
  // is injective, so distinct outputs never share a file, and names such as
  // "logits" stay as they are.
  static const char hex[] = "0123456789ABCDEF";
  std::string out;
  for (const char *p = name; *p; ++p) {
    unsigned char c = static_cast<unsigned char>(*p);
    bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                 (c >= '0' && c <= '9') || c == '_' || c == '-' ||
                 (c == '.' && p != name);
    if (plain) {
      out += char(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  if (out.empty())
    out = "%"; // an empty name; no other name encodes to a lone '%'
  return out + ".npy";
}

namespace {

/// mkdir -p.
Status makeDirs(const std::string &dir) {
  std::string prefix;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    prefix = dir.substr(0, pos);
    if (prefix.empty() || prefix == "/")
      continue;
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST)
      return Status::error("cannot create '" + prefix +
                           "': " + std::strerror(errno));
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return Status::error("'" + dir + "' is not a folder");
  return Status::success();
}

} // namespace

Status Driver::writeOutputs() {
  if (Status s = makeDirs(options.outputDir); !s.ok())
    return s;
  std::vector<std::pair<std::string, std::string>> files; // (temp, final)
  auto removeTemps = [&] {
    for (const auto &f : files)
      ::unlink(f.first.c_str());
  };
  std::string suffix = ".tmp" + std::to_string(::getpid());
  for (int i = 0; i < spec.numOutputs; ++i) {
    const OutputSpec &o = spec.outputs[i];
    std::string path =
        options.outputDir + "/" + outputFileName(o.name);
    files.emplace_back(path + suffix, path);
    Tensor t = device.isHost()
                   ? Tensor{static_cast<char *>(arena.data()) + o.offset,
                            o.dtype, o.rank, o.shape}
                   : outputs[size_t(i)].view();
    if (Status s = writeNpy(files.back().first, t); !s.ok()) {
      removeTemps();
      return Status::error("output '" + std::string(o.name) +
                           "': " + s.message());
    }
  }
  for (const auto &f : files)
    if (::rename(f.first.c_str(), f.second.c_str()) != 0) {
      Status s = Status::error("cannot write '" + f.second +
                               "': " + std::strerror(errno));
      removeTemps();
      return s;
    }
  return Status::success();
}

int lamina::rt::programMain(int argc, char **argv, const ProgramSpec &spec) {
  return programMain(argc, argv, spec, hostDevice());
}

int lamina::rt::printKernels(Device &device, int64_t threads) {
  if (threads > 0)
    if (Status s = device.setThreads(int(threads)); !s.ok()) {
      std::fprintf(stderr, "error: --threads: %s\n", s.message().c_str());
      return 2;
    }
  std::printf("%s\n", device.kernels().c_str());
  return 0;
}

int lamina::rt::programMain(int argc, char **argv, const ProgramSpec &spec,
                            Device &device) {
  Options options;
  if (std::string err = parseOptions(argc, argv, options); !err.empty()) {
    std::fprintf(stderr, "error: %s\n%s", err.c_str(), kUsage);
    return 2;
  }
  if (options.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (options.kernels)
    return printKernels(device, options.threads);
  Driver driver(spec, options, device);
  Status s = driver.checkSpec();
  if (s.ok())
    s = driver.readInputs();
  if (s.ok())
    s = driver.loadWeights();
  if (s.ok())
    s = driver.upload();
  if (s.ok())
    s = driver.run();
  if (s.ok())
    s = driver.download();
  if (s.ok())
    s = driver.writeOutputs();
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.message().c_str());
    return 1;
  }
  return 0;
}

void lamina::rt::checkKernel(const Status &status, const char *where) {
  if (status.ok())
    return;
  std::fprintf(stderr, "error: at %s: %s\n", where, status.message().c_str());
  std::exit(1);
}
