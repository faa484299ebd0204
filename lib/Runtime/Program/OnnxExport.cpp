//===- OnnxExport.cpp - trained weights back into the ONNX model ----------===//

#include "lamina/Runtime/OnnxExport.h"

#include "FileUtil.h"
#include "OnnxTensor.h"

#include <climits>
#include <cstring>

using namespace lamina::rt;
using ::onnx::TensorProto;

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "ONNX raw_data is little-endian and is copied from memory");

void lamina::rt::setRawData(TensorProto &t, std::string bytes) {
  t.clear_float_data();
  t.clear_int32_data();
  t.clear_int64_data();
  t.clear_double_data();
  t.clear_uint64_data();
  t.clear_external_data();
  t.clear_data_location();
  t.set_raw_data(std::move(bytes));
}

static std::string baseName(const std::string &path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

Status lamina::rt::writeModelFile(::onnx::ModelProto &model,
                                  const std::string &destPath, uint64_t total,
                                  uint64_t inlineLimit) {
  auto fail = [&](const std::string &why) {
    return Status::error("cannot export '" + destPath + "': " + why);
  };
  Status status;
  if (total > inlineLimit) {
    // Too big for one protobuf message: large tensors go to a data file.
    std::string dataName = baseName(destPath) + ".data";
    AtomicWriter data;
    if (Status s = data.open(destPath + ".data"); !s.ok())
      return fail(s.message());
    uint64_t offset = 0;
    static const char zeros[64] = {};
    forEachInitializer(*model.mutable_graph(), [&](TensorProto &t) {
      if (!status.ok() || !t.has_raw_data() || t.raw_data().size() < 1024)
        return;
      uint64_t pad = (64 - offset % 64) % 64;
      uint64_t size = t.raw_data().size();
      Status s = data.write(zeros, pad);
      if (s.ok())
        s = data.write(t.raw_data().data(), size);
      if (!s.ok()) {
        status = fail(s.message());
        return;
      }
      offset += pad;
      t.clear_raw_data();
      t.set_data_location(TensorProto::EXTERNAL);
      auto add = [&t](const char *key, const std::string &value) {
        auto *entry = t.add_external_data();
        entry->set_key(key);
        entry->set_value(value);
      };
      add("location", dataName);
      add("offset", std::to_string(offset));
      add("length", std::to_string(size));
      offset += size;
    });
    if (!status.ok())
      return status;
    if (Status s = data.commit(); !s.ok())
      return fail(s.message());
  }

  size_t size = model.ByteSizeLong();
  if (size > size_t(INT_MAX))
    return fail("the model is " + std::to_string(size) +
                " bytes, over protobuf's 2 GiB limit");
  std::string bytes;
  if (!model.SerializeToString(&bytes))
    return fail("the model cannot be serialized");
  AtomicWriter out;
  Status s = out.open(destPath);
  if (s.ok())
    s = out.write(bytes.data(), bytes.size());
  if (s.ok())
    s = out.commit();
  return s.ok() ? Status::success() : fail(s.message());
}

Status lamina::rt::exportOnnx(const std::string &sourcePath,
                              const std::string &destPath,
                              const NamedView *replacements, int n,
                              uint64_t inlineLimit) {
  const std::string safetensors = ".safetensors";
  if (destPath.size() > safetensors.size() &&
      destPath.compare(destPath.size() - safetensors.size(),
                       safetensors.size(), safetensors) == 0)
    return exportSafetensors(sourcePath, destPath, replacements, n);
  auto fail = [&](const std::string &why) {
    return Status::error("cannot export '" + destPath + "': " + why);
  };
  std::map<std::string, const Tensor *> byName;
  for (int i = 0; i < n; ++i)
    if (!byName.emplace(replacements[i].name, &replacements[i].value).second)
      return fail("initializer '" + replacements[i].name +
                  "' is given twice");
  ::onnx::ModelProto model;
  if (Status s = loadModel(sourcePath, model); !s.ok())
    return fail(s.message());
  TensorDecoder decoder(parentDir(sourcePath));
  std::map<std::string, bool> replaced;
  uint64_t total = 0;
  Status status;
  // Every tensor of a replaced name is rewritten (collectInitializers would
  // give only the first).
  forEachInitializer(*model.mutable_graph(), [&](TensorProto &t) {
    if (!status.ok())
      return;
    auto where = [&](const std::string &why) {
      return fail("initializer '" + t.name() + "' of '" + sourcePath +
                  "': " + why);
    };
    auto it = byName.find(t.name());
    bool external = t.data_location() == TensorProto::EXTERNAL;
    if (it == byName.end() && !external) {
      // Kept as it is (typed fields included).
      total += t.has_raw_data() ? t.raw_data().size() : t.ByteSizeLong();
      return;
    }
    DType dtype;
    std::vector<int64_t> shape;
    if (Status s = decoder.inspect(t, dtype, shape); !s.ok()) {
      status = where(s.message());
      return;
    }
    int64_t count = numElements(shape.data(), int(shape.size()));
    std::string bytes(size_t(count) * dtypeSize(dtype), '\0');
    if (it != byName.end()) {
      const Tensor &v = *it->second;
      bool same = v.dtype == dtype && v.rank == int(shape.size());
      for (int d = 0; same && d < v.rank; ++d)
        same = v.shape[d] == shape[size_t(d)];
      if (!same) {
        status = where("the model has " +
                       describeType(dtype, shape.data(), int(shape.size())) +
                       ", the new value is " +
                       describeType(v.dtype, v.shape, v.rank));
        return;
      }
      if (!bytes.empty())
        std::memcpy(&bytes[0], v.data, bytes.size());
      replaced[t.name()] = true;
    } else if (Status s = decoder.read(t, dtype, count, bytes.data());
               !s.ok()) {
      status = where(s.message());
      return;
    }
    total += bytes.size();
    setRawData(t, std::move(bytes));
  });
  if (!status.ok())
    return status;
  for (const auto &[name, value] : byName)
    if (!replaced.count(name))
      return fail("'" + sourcePath + "' has no initializer named '" + name +
                  "'");

  return writeModelFile(model, destPath, total, inlineLimit);
}

Status lamina::rt::readInitializers(const std::string &path,
                                    std::map<std::string, OwnedTensor> &out,
                                    const std::set<std::string> *only) {
  ::onnx::ModelProto model;
  if (Status s = loadModel(path, model); !s.ok())
    return s;
  std::map<std::string, TensorProto *> inits;
  collectInitializers(*model.mutable_graph(), inits);
  TensorDecoder decoder(parentDir(path));
  for (auto &[name, tensor] : inits) {
    if (only && !only->count(name))
      continue;
    DType dtype;
    if (!dtypeFromOnnx(tensor->data_type(), dtype))
      continue;
    std::vector<int64_t> shape;
    OwnedTensor t;
    Status s = decoder.inspect(*tensor, dtype, shape);
    if (s.ok()) {
      t.allocate(dtype, std::move(shape));
      s = decoder.read(*tensor, dtype, t.numElements(), t.data());
    }
    if (!s.ok())
      return Status::error("initializer '" + name + "' in '" + path +
                           "': " + s.message());
    out[name] = std::move(t);
  }
  return Status::success();
}
