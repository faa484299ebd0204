//===- SafetensorsExport.cpp - trained weights as a .safetensors file -----===//
//
// `run --export model.safetensors`: every initializer of the model the
// program reads (the trained values where the program has them) in the
// safetensors format (an 8-byte little-endian header length, a JSON header
// naming each tensor's dtype, shape and byte range, the raw bytes), which
// `safetensors.torch.load_file` reads into a state dict. Tensors are named
// as the ONNX initializers are; the Python package (python/lamina) exports
// torch modules so that those are the modules' parameter names.
//
//===----------------------------------------------------------------------===//

#include "lamina/Runtime/OnnxExport.h"

#include "FileUtil.h"

#include "lamina/Support/Json.h"

#include <cstdio>
#include <cstring>
#include <map>

using namespace lamina::rt;
namespace json = lamina::json;

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian and is copied from memory");

/// The safetensors dtype name, or null when it has none.
static const char *safetensorsDType(DType t) {
  switch (t) {
  case DType::F32: return "F32";
  case DType::F64: return "F64";
  case DType::F16: return "F16";
  case DType::BF16: return "BF16";
  case DType::I1: return "BOOL";
  case DType::I8: return "I8";
  case DType::I16: return "I16";
  case DType::I32: return "I32";
  case DType::I64: return "I64";
  case DType::U8: return "U8";
  case DType::U16: return "U16";
  case DType::U32: return "U32";
  case DType::U64: return "U64";
  }
  return nullptr;
}

Status lamina::rt::exportSafetensors(const std::string &sourcePath,
                                     const std::string &destPath,
                                     const NamedView *replacements, int n) {
  auto fail = [&](const std::string &why) {
    return Status::error("cannot export '" + destPath + "': " + why);
  };
  std::map<std::string, OwnedTensor> inits;
  if (Status s = readInitializers(sourcePath, inits); !s.ok())
    return fail(s.message());
  // What the program trained replaces what the file holds.
  std::map<std::string, const Tensor *> trained;
  for (int i = 0; i < n; ++i) {
    const NamedView &r = replacements[i];
    auto it = inits.find(r.name);
    if (it == inits.end())
      return fail("'" + sourcePath + "' has no initializer named '" + r.name +
                  "'");
    const OwnedTensor &old = it->second;
    bool same = r.value.dtype == old.dtype &&
                r.value.rank == int(old.shape.size());
    for (int d = 0; same && d < r.value.rank; ++d)
      same = r.value.shape[d] == old.shape[size_t(d)];
    if (!same)
      return fail("initializer '" + r.name + "': the model has " +
                  describeType(old.dtype, old.shape.data(),
                               int(old.shape.size())) +
                  ", the new value is " +
                  describeType(r.value.dtype, r.value.shape, r.value.rank));
    if (!trained.emplace(r.name, &r.value).second)
      return fail("initializer '" + r.name + "' is given twice");
  }
  // The header, names in order (std::map): offsets follow it.
  std::string header;
  json::Writer w(header, json::Layout::Compact);
  w.beginObject().key("__metadata__").beginObject().field("format", "pt");
  w.endObject();
  uint64_t offset = 0;
  for (const auto &[name, t] : inits) {
    const char *dtype = safetensorsDType(t.dtype);
    if (!dtype)
      return fail("initializer '" + name + "' has no safetensors dtype");
    w.key(name).beginObject().field("dtype", dtype).key("shape").beginArray();
    for (int64_t d : t.shape)
      w.value(d);
    uint64_t end = offset + t.byteSize();
    w.endArray().key("data_offsets").beginArray().value(offset).value(end);
    w.endArray().endObject();
    offset = end;
  }
  w.endObject();
  // Padded with spaces so the data starts 8-byte aligned (as the reference
  // writer does).
  header.append((8 - header.size() % 8) % 8, ' ');
  uint64_t length = header.size();
  AtomicWriter out;
  Status s = out.open(destPath);
  if (s.ok())
    s = out.write(&length, sizeof length);
  if (s.ok())
    s = out.write(header.data(), header.size());
  for (const auto &[name, t] : inits) {
    if (!s.ok())
      break;
    auto it = trained.find(name);
    const void *bytes = it != trained.end() ? it->second->data : t.data();
    s = out.write(bytes, t.byteSize());
  }
  if (s.ok())
    s = out.commit();
  return s.ok() ? Status::success() : fail(s.message());
}
