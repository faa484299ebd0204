//===- RestoreParameters.cpp - the parameters exporters merge -------------===//
//
// Works on the main graph's nodes only; see RestoreParameters.h for the
// rules and why each is safe.
//
//===----------------------------------------------------------------------===//

#include "lamina/Runtime/RestoreParameters.h"

#include "FileUtil.h"
#include "OnnxTensor.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <unistd.h>

using namespace lamina::rt;
using ::onnx::GraphProto;
using ::onnx::NodeProto;
using ::onnx::TensorProto;

namespace {

/// Whether `bytes` holds one value of `size` bytes, repeated.
bool allEqual(const std::string &bytes, size_t size) {
  for (size_t k = size; k < bytes.size(); k += size)
    if (std::memcmp(&bytes[k], &bytes[0], size) != 0)
      return false;
  return true;
}

/// Every name a node of `graph`'s subgraphs reads (outer-scope captures).
void subgraphReads(const GraphProto &graph, std::set<std::string> &out) {
  for (const NodeProto &node : graph.node())
    for (const auto &attr : node.attribute()) {
      auto walk = [&](const GraphProto &body) {
        for (const NodeProto &inner : body.node())
          for (const std::string &in : inner.input())
            out.insert(in);
        subgraphReads(body, out);
      };
      if (attr.has_g())
        walk(attr.g());
      for (const GraphProto &body : attr.graphs())
        walk(body);
    }
}

/// The module a dynamo-exported node belongs to: the second-to-last entry
/// of its `pkg.torch.onnx.name_scopes` (a Python list of strings), or "".
std::string moduleScope(const NodeProto &node) {
  for (const auto &prop : node.metadata_props()) {
    if (prop.key() != "pkg.torch.onnx.name_scopes")
      continue;
    std::vector<std::string> scopes;
    const std::string &v = prop.value();
    for (size_t i = 0; (i = v.find('\'', i)) != std::string::npos;) {
      size_t end = v.find('\'', i + 1);
      if (end == std::string::npos)
        break;
      scopes.push_back(v.substr(i + 1, end - i - 1));
      i = end + 1;
    }
    return scopes.size() >= 2 ? scopes[scopes.size() - 2] : "";
  }
  return "";
}

class Restorer {
public:
  Restorer(::onnx::ModelProto &model, const std::string &dir,
           RestoredParameters &what)
      : graph(*model.mutable_graph()), decoder(dir), what(what) {
    for (int i = 0; i < graph.initializer_size(); ++i)
      inits[graph.initializer(i).name()] = i;
    subgraphReads(graph, captured);
    for (const auto &out : graph.output())
      outputs.insert(out.name());
    for (const auto &node : graph.node())
      for (const std::string &out : node.output())
        taken.insert(out);
    for (const auto &in : graph.input())
      taken.insert(in.name());
    for (const auto &[name, index] : inits)
      taken.insert(name);
  }

  Status run() {
    notePaddingIndices();
    noteBuffers();
    if (Status s = restoreZeroBiases(); !s.ok())
      return s;
    if (Status s = splitIdentities(); !s.ok())
      return s;
    if (Status s = splitMerged(); !s.ok())
      return s;
    return tieEmbeddings();
  }

private:
  /// A float initializer of more than one element that only main-graph
  /// nodes read: a parameter.
  bool isWeight(const std::string &name, DType *dtypeOut = nullptr,
                std::vector<int64_t> *shapeOut = nullptr) {
    auto it = inits.find(name);
    if (it == inits.end() || captured.count(name) || outputs.count(name))
      return false;
    DType dtype;
    std::vector<int64_t> shape;
    if (!decoder.inspect(graph.initializer(it->second), dtype, shape).ok() ||
        !isFloat(dtype) || numElements(shape.data(), int(shape.size())) < 2)
      return false;
    if (dtypeOut)
      *dtypeOut = dtype;
    if (shapeOut)
      *shapeOut = shape;
    return true;
  }

  Status readBytes(const std::string &name, std::string &bytes) {
    const TensorProto &t = graph.initializer(inits.at(name));
    DType dtype;
    std::vector<int64_t> shape;
    if (Status s = decoder.inspect(t, dtype, shape); !s.ok())
      return s;
    int64_t count = numElements(shape.data(), int(shape.size()));
    bytes.assign(size_t(count) * dtypeSize(dtype), '\0');
    return decoder.read(t, dtype, count, bytes.data());
  }

  /// A fresh name from `want`: itself, or with a numeric suffix.
  std::string unique(const std::string &want) {
    std::string name = want;
    for (int k = 1; taken.count(name); ++k)
      name = want + "." + std::to_string(k);
    taken.insert(name);
    return name;
  }

  /// A copy of initializer `from` named `name`.
  void copyInitializer(const std::string &from, const std::string &name) {
    TensorProto copy = graph.initializer(inits.at(from));
    copy.set_name(name);
    inits[name] = graph.initializer_size();
    *graph.add_initializer() = std::move(copy);
  }

  /// A node's metadata entry `key`, or "".
  static std::string metadata(const NodeProto &node, const char *key) {
    for (const auto &prop : node.metadata_props())
      if (prop.key() == key)
        return prop.value();
    return "";
  }

  /// Dynamo: initializers that were buffers in PyTorch (the exported
  /// program's input kind, in the value's metadata), which it does not
  /// train.
  void noteBuffers() {
    std::set<std::string> listed;
    auto note = [&](const ::onnx::ValueInfoProto &value) {
      for (const auto &prop : value.metadata_props())
        if (prop.key() == "pkg.torch.export.graph_signature.InputSpec.kind" &&
            prop.value() == "BUFFER" && inits.count(value.name()) &&
            listed.insert(value.name()).second)
          what.buffers.push_back(value.name());
    };
    for (const auto &value : graph.input())
      note(value);
    for (const auto &value : graph.value_info())
      note(value);
  }

  /// Dynamo: an embedding with a padding_idx (the FX node's third
  /// argument), whose row PyTorch's lookups never train; ONNX cannot say
  /// it, so the compile marks the Gather instead.
  void notePaddingIndices() {
    const std::string call =
        "target=torch.ops.aten.embedding.default](args = (";
    for (const NodeProto &node : graph.node()) {
      std::string fx = metadata(node, "pkg.torch.onnx.fx_node");
      size_t at = fx.find(call);
      if (node.op_type() != "Gather" || node.input_size() != 2 ||
          at == std::string::npos)
        continue;
      std::string args = fx.substr(at + call.size());
      args = args.substr(0, args.find(')'));
      size_t last = args.find_last_of(',');
      if (std::count(args.begin(), args.end(), ',') != 2 ||
          last == std::string::npos)
        continue;
      std::string index = args.substr(last + 1);
      index.erase(0, index.find_first_not_of(' '));
      if (index.empty() || index.size() > 18 ||
          index.find_first_not_of("0123456789") != std::string::npos)
        continue;
      what.paddingIndices.push_back({node.input(0), std::stoll(index)});
    }
    // Lookups of a weight table with no FX node behind them (TorchScript
    // exports, hand-built files): whether PyTorch had a padding_idx is
    // unknown, which the compile says.
    std::set<std::string> listed;
    for (const NodeProto &node : graph.node()) {
      bool axis0 = true;
      for (const auto &attr : node.attribute())
        if (attr.name() == "axis" && attr.i() != 0)
          axis0 = false;
      if (node.op_type() != "Gather" || node.input_size() != 2 || !axis0 ||
          !metadata(node, "pkg.torch.onnx.fx_node").empty())
        continue;
      std::vector<int64_t> shape;
      if (isWeight(node.input(0), nullptr, &shape) && shape.size() == 2 &&
          listed.insert(node.input(0)).second)
        what.unknownPaddingIndex.push_back(node.input(0));
    }
  }

  /// Dynamo: a linear layer whose bias its optimizer removed because it was
  /// zero, or a Conv (ViT's patch embedding) whose bias it removed
  /// (the FX node, in the metadata, still calls addmm, linear or conv with a
  /// bias; the Gemm has no C, or the MatMul no Add). The bias comes back, zero,
  /// named
  /// `<module>.bias`.
  Status restoreZeroBiases() {
    // The nodes one FX node became: an Add among them is the bias, kept.
    std::set<std::string> withAdd;
    for (const NodeProto &node : graph.node())
      if (node.op_type() == "Add")
        withAdd.insert(metadata(node, "pkg.torch.onnx.fx_node"));
    std::vector<NodeProto> nodes;
    for (NodeProto &node : *graph.mutable_node()) {
      std::string fx = metadata(node, "pkg.torch.onnx.fx_node");
      std::string module = moduleScope(node);
      // linear(x, w, b): three arguments before the kwargs.
      bool linearWithBias = false;
      if (size_t at = fx.find("target=torch.ops.aten.linear.default](args = (");
          at != std::string::npos &&
          fx.find("), kwargs", at) != std::string::npos) {
        std::string args = fx.substr(at, fx.find("), kwargs", at) - at);
        linearWithBias = std::count(args.begin(), args.end(), ',') == 2 &&
                         args.find("None") == std::string::npos;
      }
      bool gemm = node.op_type() == "Gemm" && node.input_size() == 2 &&
                  (linearWithBias ||
                   fx.find("target=torch.ops.aten.addmm.default](args = (%") !=
                       std::string::npos);
      bool matmul = node.op_type() == "MatMul" && node.input_size() == 2 &&
                    linearWithBias;
      // conv1d/2d/3d(x, w, b, ...) or convolution(x, w, b, ...): the bias
      // is the third argument, a value unless None (the rewriter's
      // RemoveOptionalBiasFromConv drops a zero one from the Conv).
      bool conv = false;
      if (node.op_type() == "Conv" && node.input_size() == 2)
        for (const char *target : {"conv1d", "conv2d", "conv3d", "convolution"}) {
          std::string call = std::string("target=torch.ops.aten.") + target +
                             ".default](args = (";
          size_t at = fx.find(call);
          if (at == std::string::npos)
            continue;
          std::string args = fx.substr(at + call.size());
          size_t first = args.find(", ");
          size_t second = first == std::string::npos
                              ? std::string::npos
                              : args.find(", ", first + 2);
          conv = second != std::string::npos &&
                 args.compare(second + 2, 1, "%") == 0;
        }
      DType dtype;
      std::vector<int64_t> ws;
      if ((!gemm && !matmul && !conv) || module.empty() || withAdd.count(fx) ||
          !isWeight(node.input(1), &dtype, &ws) ||
          (conv ? ws.size() < 3 : ws.size() != 2)) {
        nodes.push_back(std::move(node));
        continue;
      }
      bool transB = false;
      for (const auto &attr : node.attribute())
        if (attr.name() == "transB")
          transB = attr.i() != 0;
      // A Conv's bias has one value per output channel (weight dim 0).
      int64_t n = conv || transB ? ws[0] : ws[1];
      std::string name = unique(module + ".bias");
      TensorProto bias;
      bias.set_name(name);
      bias.set_data_type(
          graph.initializer(inits.at(node.input(1))).data_type());
      bias.add_dims(n);
      setRawData(bias, std::string(size_t(n) * dtypeSize(dtype), '\0'));
      inits[name] = graph.initializer_size();
      *graph.add_initializer() = std::move(bias);
      what.restored.push_back(name);
      if (gemm || conv) {
        node.add_input(name);
        nodes.push_back(std::move(node));
        continue;
      }
      NodeProto add;
      add.set_op_type("Add");
      add.set_name(node.name() + "_bias");
      std::string product = unique(node.output(0) + "_without_bias");
      add.add_input(product);
      add.add_input(name);
      add.add_output(node.output(0));
      node.set_output(0, product);
      nodes.push_back(std::move(node));
      nodes.push_back(std::move(add));
    }
    graph.clear_node();
    for (NodeProto &node : nodes)
      *graph.add_node() = std::move(node);
    return Status::success();
  }

  /// TorchScript: Identity(initializer) -> an initializer of its own.
  Status splitIdentities() {
    std::vector<NodeProto> nodes;
    for (NodeProto &node : *graph.mutable_node()) {
      if (node.op_type() == "Identity" && node.input_size() == 1 &&
          node.output_size() == 1 && isWeight(node.input(0)) &&
          !outputs.count(node.output(0)) && !inits.count(node.output(0))) {
        copyInitializer(node.input(0), node.output(0));
        what.untied.push_back(node.output(0) + " (a copy of " + node.input(0) +
                              ")");
        continue;
      }
      nodes.push_back(std::move(node));
    }
    graph.clear_node();
    for (NodeProto &node : nodes)
      *graph.add_node() = std::move(node);
    return Status::success();
  }

  /// Whether `name` is an embedding's table (a Gather's data) that another
  /// of its readers `nodes` reads otherwise (a tied LM head: a MatMul, a
  /// Gemm, a Transpose before one). That is a tie, whatever its value: a
  /// structure-only file's weights read as zeros (`lamina plan`, models
  /// written with --no-weights-data), and an exporter merges by value only
  /// the values fresh parameters share (norm weights, biases), not tables.
  bool tiedTable(const std::string &name, const std::vector<int> &nodes) {
    bool table = false, other = false;
    for (int n : nodes) {
      const NodeProto &node = graph.node(n);
      bool lookup = node.op_type() == "Gather" && node.input_size() > 0 &&
                    node.input(0) == name;
      (lookup ? table : other) = true;
    }
    return table && other;
  }

  /// Equal-element initializers read by several modules (or nodes).
  Status splitMerged() {
    std::map<std::string, std::vector<int>> readers;
    for (int n = 0; n < graph.node_size(); ++n) {
      std::set<std::string> seen;
      for (const std::string &in : graph.node(n).input())
        if (seen.insert(in).second && isWeight(in))
          readers[in].push_back(n);
    }
    for (auto &[name, nodes] : readers) {
      if (nodes.size() < 2 || tiedTable(name, nodes))
        continue;
      std::string bytes;
      if (Status s = readBytes(name, bytes); !s.ok())
        return Status::error("initializer '" + name + "': " + s.message());
      DType dtype = DType::F32;
      isWeight(name, &dtype);
      if (!allEqual(bytes, dtypeSize(dtype)))
        continue; // a real tie: random values are never merged by chance
      // Group the readers: by module when every one names it.
      std::string leaf = name.substr(name.find_last_of('.') + 1);
      std::vector<std::pair<std::string, std::vector<int>>> groups;
      bool scoped = true;
      for (int n : nodes)
        scoped = scoped && !moduleScope(graph.node(n)).empty();
      for (size_t i = 0; i < nodes.size(); ++i) {
        std::string key = scoped
                              ? moduleScope(graph.node(nodes[i])) + "." + leaf
                              : std::to_string(i);
        auto it = std::find_if(groups.begin(), groups.end(),
                               [&](auto &g) { return g.first == key; });
        if (it == groups.end())
          groups.push_back({key, {nodes[i]}});
        else
          it->second.push_back(nodes[i]);
      }
      if (groups.size() < 2)
        continue;
      // The group the name belongs to keeps the initializer.
      size_t owner = 0;
      for (size_t g = 0; g < groups.size(); ++g)
        if (groups[g].first == name)
          owner = g;
      for (size_t g = 0; g < groups.size(); ++g) {
        if (g == owner)
          continue;
        std::string fresh = unique(scoped ? groups[g].first : name);
        copyInitializer(name, fresh);
        for (int n : groups[g].second)
          for (std::string &in : *graph.mutable_node(n)->mutable_input())
            if (in == name)
              in = fresh;
        what.untied.push_back(fresh + " (a copy of " + name + ")");
      }
    }
    return Status::success();
  }

  /// An LM head that is the embedding table, transposed or copied.
  Status tieEmbeddings() {
    std::map<std::string, std::vector<int>> readers;
    for (int n = 0; n < graph.node_size(); ++n)
      for (const std::string &in : graph.node(n).input())
        readers[in].push_back(n);
    std::set<std::string> tables;
    for (const NodeProto &node : graph.node())
      if (node.op_type() == "Gather" && node.input_size() == 2)
        tables.insert(node.input(0));
    std::vector<NodeProto> added;
    for (const std::string &table : tables) {
      std::vector<int64_t> ts;
      DType tdt;
      if (!isWeight(table, &tdt, &ts) || ts.size() != 2)
        continue;
      std::string tableBytes;
      for (auto &[name, nodes] : readers) {
        std::vector<int64_t> s;
        DType dt;
        if (name == table || !isWeight(name, &dt, &s) || dt != tdt ||
            s.size() != 2 ||
            !std::all_of(nodes.begin(), nodes.end(), [&](int n) {
              const std::string &op = graph.node(n).op_type();
              return op == "MatMul" || op == "Gemm";
            }))
          continue;
        bool transposed = s[0] == ts[1] && s[1] == ts[0];
        bool copied = s == ts;
        if (!transposed && !copied)
          continue;
        if (tableBytes.empty())
          if (Status st = readBytes(table, tableBytes); !st.ok())
            return Status::error("initializer '" + table +
                                 "': " + st.message());
        // A table of equal elements is no embedding that was trained or
        // initialised: a structure-only file's zeros, which every head of
        // the shape would equal.
        if (allEqual(tableBytes, dtypeSize(tdt)))
          break;
        std::string bytes;
        if (Status st = readBytes(name, bytes); !st.ok())
          return Status::error("initializer '" + name + "': " + st.message());
        size_t size = dtypeSize(dt);
        int64_t rows = ts[0], cols = ts[1];
        bool same = bytes.size() == tableBytes.size();
        bool isTranspose = same && transposed, isCopy = same && copied;
        for (int64_t i = 0; isTranspose && i < rows; ++i)
          for (int64_t j = 0; isTranspose && j < cols; ++j)
            isTranspose =
                std::memcmp(&tableBytes[size_t(i * cols + j) * size],
                            &bytes[size_t(j * rows + i) * size], size) == 0;
        isCopy = isCopy && bytes == tableBytes;
        if (!isTranspose && !isCopy)
          continue;
        NodeProto node;
        node.set_op_type(isTranspose ? "Transpose" : "Identity");
        node.set_name("lamina_tie_" + name);
        node.add_input(table);
        node.add_output(name);
        if (isTranspose) {
          auto *perm = node.add_attribute();
          perm->set_name("perm");
          perm->set_type(::onnx::AttributeProto::INTS);
          perm->add_ints(1);
          perm->add_ints(0);
        }
        added.push_back(std::move(node));
        removed.insert(name);
        what.tied.push_back(name + (isTranspose ? " = transpose(" : " = (") +
                            table + ")");
      }
    }
    if (added.empty())
      return Status::success();
    // The ties first: their table is an initializer, so any order of the
    // rest stays topological.
    std::vector<NodeProto> nodes(added.begin(), added.end());
    for (NodeProto &node : *graph.mutable_node())
      nodes.push_back(std::move(node));
    graph.clear_node();
    for (NodeProto &node : nodes)
      *graph.add_node() = std::move(node);
    auto *list = graph.mutable_initializer();
    for (int i = list->size() - 1; i >= 0; --i)
      if (removed.count(list->Get(i).name()))
        list->DeleteSubrange(i, 1);
    auto *inputs = graph.mutable_input();
    for (int i = inputs->size() - 1; i >= 0; --i)
      if (removed.count(inputs->Get(i).name()))
        inputs->DeleteSubrange(i, 1);
    return Status::success();
  }

  GraphProto &graph;
  TensorDecoder decoder;
  RestoredParameters &what;
  std::map<std::string, int> inits;
  std::set<std::string> captured, outputs, taken, removed;
};

} // namespace

Status lamina::rt::restoreParameters(const std::string &sourcePath,
                                     const std::string &destPath,
                                     RestoredParameters &what,
                                     bool inlineData) {
  what = RestoredParameters();
  ::onnx::ModelProto model;
  if (Status s = loadModel(sourcePath, model); !s.ok())
    return s;
  // Before IR 4 every initializer must also be a graph input; such old
  // files are left as they are.
  if (model.ir_version() < 4)
    return Status::success();
  std::string dir = parentDir(sourcePath);
  Restorer restorer(model, dir, what);
  if (Status s = restorer.run(); !s.ok())
    return s;
  if (!what.changed())
    return Status::success();
  // The copy holds its data itself: external files stay with the source.
  TensorDecoder decoder(dir);
  uint64_t total = 0;
  Status status;
  forEachInitializer(*model.mutable_graph(), [&](TensorProto &t) {
    if (!status.ok())
      return;
    if (t.data_location() == TensorProto::EXTERNAL && !inlineData)
      return; // structure only: the reference stays
    if (t.data_location() != TensorProto::EXTERNAL) {
      total += t.has_raw_data() ? t.raw_data().size() : t.ByteSizeLong();
      return;
    }
    DType dtype;
    std::vector<int64_t> shape;
    if (Status s = decoder.inspect(t, dtype, shape); !s.ok()) {
      status = Status::error("initializer '" + t.name() + "': " + s.message());
      return;
    }
    int64_t count = numElements(shape.data(), int(shape.size()));
    std::string bytes(size_t(count) * dtypeSize(dtype), '\0');
    if (Status s = decoder.read(t, dtype, count, bytes.data()); !s.ok()) {
      status = Status::error("initializer '" + t.name() + "': " + s.message());
      return;
    }
    total += bytes.size();
    setRawData(t, std::move(bytes));
  });
  if (!status.ok())
    return status;
  return writeModelFile(model, destPath, total,
                        (uint64_t(1) << 31) - (64u << 20));
}

std::string RestoredParameters::summary() const {
  return std::to_string(untied.size()) +
         " split off initializers the exporter merged, " +
         std::to_string(tied.size()) + " tied back, " +
         std::to_string(restored.size()) + " zero biases the exporter removed";
}

TemporaryRestore::~TemporaryRestore() {
  if (dir.empty())
    return;
  ::unlink((dir + "/model.onnx").c_str());
  ::unlink((dir + "/model.onnx.data").c_str());
  ::rmdir(dir.c_str());
}

Status TemporaryRestore::create(const std::string &sourcePath,
                                bool inlineData) {
  const char *tmp = std::getenv("TMPDIR");
  std::string pattern =
      std::string(tmp && *tmp ? tmp : "/tmp") + "/lamina-restore-XXXXXX";
  if (!::mkdtemp(&pattern[0]))
    return Status::error("cannot create a temporary folder '" + pattern +
                         "': " + std::strerror(errno));
  dir = pattern;
  modelPath = sourcePath;
  std::string copy = dir + "/model.onnx";
  if (Status s = restoreParameters(sourcePath, copy, restored, inlineData);
      !s.ok())
    return s;
  if (restored.changed())
    modelPath = copy;
  return Status::success();
}
