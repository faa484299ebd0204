//===- Checkpoint.cpp - training checkpoints that lose nothing ------------===//

#include "lamina/Runtime/Checkpoint.h"

#include "FileUtil.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <sys/mman.h>
#include <unistd.h>

using namespace lamina::rt;

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "checkpoints store host integers and tensors as little-endian");

static const char kMagic[8] = {'L', 'A', 'M', 'I', 'N', 'A', 'C', 'K'};
static const char kEndMagic[8] = {'L', 'M', 'C', 'K', 'E', 'N', 'D', '\0'};
static constexpr uint32_t kVersion = 1;
static constexpr size_t kTrailer = sizeof(kEndMagic) + 4;
static constexpr int kMaxRank = 64;

//===----------------------------------------------------------------------===//
// CRC-32C
//===----------------------------------------------------------------------===//

static uint32_t crcTable(const uint8_t *p, size_t n, uint32_t crc) {
  static const auto table = [] {
    std::vector<uint32_t> t(256);
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k)
        c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1; // reflected Castagnoli
      t[i] = c;
    }
    return t;
  }();
  for (size_t i = 0; i < n; ++i)
    crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
// The crc32 instruction computes exactly CRC-32C; checkpoints of a large
// model are gigabytes, and the table runs at well under 1 GB/s.
__attribute__((target("sse4.2"))) static uint32_t
crcHardware(const uint8_t *p, size_t n, uint32_t crc) {
  uint64_t c = crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = __builtin_ia32_crc32di(c, word);
  }
  uint32_t c32 = uint32_t(c);
  for (; n > 0; --n, ++p)
    c32 = __builtin_ia32_crc32qi(c32, *p);
  return c32;
}
#endif

uint32_t lamina::rt::crc32c(const void *data, size_t n, uint32_t crc) {
  auto *p = static_cast<const uint8_t *>(data);
  crc = ~crc;
#if defined(__x86_64__)
  static const bool hw = __builtin_cpu_supports("sse4.2");
  if (hw)
    return ~crcHardware(p, n, crc);
#endif
  return ~crcTable(p, n, crc);
}

uint32_t lamina::rt::crc32cPortable(const void *data, size_t n, uint32_t crc) {
  return ~crcTable(static_cast<const uint8_t *>(data), n, ~crc);
}

//===----------------------------------------------------------------------===//
// Fingerprint
//===----------------------------------------------------------------------===//

static void fnv(uint64_t &h, const void *data, size_t n) {
  auto *p = static_cast<const uint8_t *>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001B3ull;
  }
}

uint64_t lamina::rt::modelFingerprint(const NamedView *params, int n) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (int i = 0; i < n; ++i) {
    // Lengths are hashed too, so ("ab", "c") and ("a", "bc") differ.
    uint64_t len = params[i].name.size();
    fnv(h, &len, 8);
    fnv(h, params[i].name.data(), params[i].name.size());
    uint8_t dtype = uint8_t(params[i].value.dtype);
    fnv(h, &dtype, 1);
    int64_t rank = params[i].value.rank;
    fnv(h, &rank, 8);
    fnv(h, params[i].value.shape, size_t(rank) * 8);
  }
  return h;
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

namespace {
/// Buffers small fields and keeps the running checksum.
class Writer {
public:
  explicit Writer(AtomicWriter &out) : out(out) {}
  Status put(const void *data, size_t n) {
    crc = crc32c(data, n, crc);
    if (n >= kBuffer) { // tensor data: straight through
      if (Status s = flush(); !s.ok())
        return s;
      return out.write(data, n);
    }
    if (buffer.size() + n > kBuffer)
      if (Status s = flush(); !s.ok())
        return s;
    auto *p = static_cast<const uint8_t *>(data);
    buffer.insert(buffer.end(), p, p + n);
    return Status::success();
  }
  template <typename T> Status value(T v) { return put(&v, sizeof(T)); }
  Status flush() {
    Status s = out.write(buffer.data(), buffer.size());
    buffer.clear();
    return s;
  }
  uint32_t checksum() const { return crc; }

private:
  static constexpr size_t kBuffer = 1 << 20;
  AtomicWriter &out;
  std::vector<uint8_t> buffer;
  uint32_t crc = 0;
};
} // namespace

Status lamina::rt::writeCheckpoint(const std::string &path, uint64_t step,
                                   uint64_t fingerprint,
                                   const std::vector<uint8_t> &rng,
                                   const NamedView *tensors, int n) {
  AtomicWriter file;
  if (Status s = file.open(path); !s.ok())
    return s;
  Writer w(file);
  Status s = w.put(kMagic, 8);
  auto chain = [&s](Status next) {
    if (s.ok())
      s = std::move(next);
  };
  chain(w.value(kVersion));
  chain(w.value(uint32_t(0)));
  chain(w.value(step));
  chain(w.value(fingerprint));
  chain(w.value(uint32_t(rng.size())));
  chain(w.put(rng.data(), rng.size()));
  chain(w.value(uint32_t(n)));
  for (int i = 0; i < n && s.ok(); ++i) {
    const Tensor &t = tensors[i].value;
    if (t.rank < 0 || t.rank > kMaxRank)
      return Status::error("checkpoint tensor '" + tensors[i].name +
                           "' has an unsupported rank " +
                           std::to_string(t.rank));
    chain(w.value(uint32_t(tensors[i].name.size())));
    chain(w.put(tensors[i].name.data(), tensors[i].name.size()));
    chain(w.value(uint8_t(t.dtype)));
    chain(w.value(uint8_t(t.rank)));
    chain(w.put(t.shape, size_t(t.rank) * 8));
    chain(w.value(uint64_t(t.byteSize())));
    chain(w.put(t.data, t.byteSize()));
  }
  chain(w.put(kEndMagic, 8));
  uint32_t crc = w.checksum();
  chain(w.put(&crc, 4));
  chain(w.flush());
  if (s.ok())
    s = file.commit();
  if (!s.ok())
    return Status::error("cannot write checkpoint '" + path +
                         "': " + s.message());
  return Status::success();
}

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

namespace {
/// A read-only mapping of a whole file.
struct Mapping {
  const uint8_t *data = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (data)
      ::munmap(const_cast<uint8_t *>(data), size);
  }
};

/// Bounds-checked reads from the mapping.
struct Cursor {
  const uint8_t *p, *end;
  bool take(void *dst, size_t n) {
    if (size_t(end - p) < n)
      return false;
    if (n) // dst is null for a scalar's empty shape
      std::memcpy(dst, p, n);
    p += n;
    return true;
  }
  template <typename T> bool value(T &v) { return take(&v, sizeof(T)); }
};
} // namespace

const OwnedTensor *Checkpoint::find(const std::string &name) const {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name)
      return &tensors[i];
  return nullptr;
}

static Status parse(Cursor c, Checkpoint &out) {
  char magic[8];
  uint32_t version = 0, reserved, rngBytes, count;
  c.take(magic, 8);
  c.value(version);
  if (!c.value(reserved) || !c.value(out.step) || !c.value(out.fingerprint) ||
      !c.value(rngBytes) || size_t(c.end - c.p) < rngBytes)
    return Status::error("the header is cut short");
  out.rng.assign(c.p, c.p + rngBytes);
  c.p += rngBytes;
  if (!c.value(count))
    return Status::error("the header is cut short");
  for (uint32_t i = 0; i < count; ++i) {
    std::string where = "tensor " + std::to_string(i);
    uint32_t nameBytes;
    uint8_t dtype, rank;
    if (!c.value(nameBytes) || size_t(c.end - c.p) < nameBytes)
      return Status::error(where + ": the name runs past the end");
    std::string name(reinterpret_cast<const char *>(c.p), nameBytes);
    c.p += nameBytes;
    where = "tensor '" + name + "'";
    if (!c.value(dtype) || !c.value(rank))
      return Status::error(where + " is cut short");
    if (dtype > uint8_t(DType::U64))
      return Status::error(where + " has an unknown dtype " +
                           std::to_string(dtype));
    if (rank > kMaxRank)
      return Status::error(where + " has rank " + std::to_string(rank));
    std::vector<int64_t> shape(rank);
    uint64_t bytes;
    if (!c.take(shape.data(), size_t(rank) * 8) || !c.value(bytes))
      return Status::error(where + " is cut short");
    int64_t n = checkedNumElements(shape.data(), rank);
    if (n < 0)
      return Status::error(where + " has invalid dims");
    if (bytes != uint64_t(n) * dtypeSize(DType(dtype)))
      return Status::error(where + ": " + std::to_string(bytes) +
                           " data bytes do not match its shape");
    if (uint64_t(c.end - c.p) < bytes)
      return Status::error(where + ": the data runs past the end");
    OwnedTensor t;
    t.allocate(DType(dtype), std::move(shape));
    c.take(t.data(), size_t(bytes));
    out.names.push_back(std::move(name));
    out.tensors.push_back(std::move(t));
  }
  if (c.p != c.end)
    return Status::error(std::to_string(c.end - c.p) +
                         " stray bytes after the last tensor");
  return Status::success();
}

Status lamina::rt::readCheckpoint(const std::string &path, Checkpoint &out) {
  out = Checkpoint();
  auto fail = [&](const std::string &why) {
    return Status::error("checkpoint '" + path + "' " + why);
  };
  File file;
  uint64_t size = 0;
  if (Status s = file.openForRead(path, size); !s.ok())
    return s;
  const size_t header = 8 + 4 + 4 + 8 + 8 + 4 + 4;
  if (size < header + kTrailer) {
    if (size >= 8) {
      char magic[8];
      if (file.readAt(magic, 8, 0).ok() && std::memcmp(magic, kMagic, 8))
        return fail("is not a Lamina checkpoint (bad magic)");
    }
    return fail("is truncated (" + std::to_string(size) + " bytes)");
  }
  Mapping map;
  void *p = ::mmap(nullptr, size_t(size), PROT_READ, MAP_PRIVATE, file.fd(), 0);
  if (p == MAP_FAILED)
    return fail(std::string("cannot be mapped: ") + std::strerror(errno));
  map.data = static_cast<const uint8_t *>(p);
  map.size = size_t(size);
  if (std::memcmp(map.data, kMagic, 8) != 0)
    return fail("is not a Lamina checkpoint (bad magic)");
  uint32_t version;
  std::memcpy(&version, map.data + 8, 4);
  if (version != kVersion)
    return fail("has format version " + std::to_string(version) +
                "; this program reads version " + std::to_string(kVersion));
  size_t body = map.size - kTrailer;
  if (std::memcmp(map.data + body, kEndMagic, 8) != 0)
    return fail("is truncated or corrupt (no end marker; an interrupted "
                "write?)");
  uint32_t stored, actual = crc32c(map.data, body + 8);
  std::memcpy(&stored, map.data + body + 8, 4);
  if (stored != actual) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "(stored %08x, computed %08x)", stored,
                  actual);
    return fail("is corrupt: checksum mismatch " + std::string(buf));
  }
  if (Status s = parse(Cursor{map.data, map.data + body}, out); !s.ok())
    return fail("is malformed: " + s.message());
  return Status::success();
}

Status lamina::rt::restoreTensors(const Checkpoint &ck, const NamedView *views,
                                  int n) {
  std::vector<const OwnedTensor *> found(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const Tensor &v = views[i].value;
    const OwnedTensor *t = ck.find(views[i].name);
    if (!t)
      return Status::error("the checkpoint has no tensor '" + views[i].name +
                           "'");
    bool same = t->dtype == v.dtype && int(t->shape.size()) == v.rank;
    for (int d = 0; same && d < v.rank; ++d)
      same = t->shape[size_t(d)] == v.shape[d];
    if (!same)
      return Status::error(
          "checkpoint tensor '" + views[i].name + "' is " +
          describeType(t->dtype, t->shape.data(), int(t->shape.size())) +
          ", expected " + describeType(v.dtype, v.shape, v.rank));
    found[size_t(i)] = t;
  }
  for (int i = 0; i < n; ++i)
    if (size_t bytes = found[size_t(i)]->byteSize())
      std::memcpy(views[i].value.data, found[size_t(i)]->data(), bytes);
  return Status::success();
}

std::vector<NamedView> lamina::rt::optimizerState(Optimizer &opt) {
  std::vector<NamedView> out;
  for (int p = 0; p < opt.numParams(); ++p)
    for (int s = 0; s < opt.numSlots(); ++s)
      out.push_back({opt.paramName(p) + "." + opt.slotName(s), opt.state(p, s)});
  out.push_back({"optimizer.step", opt.stepCountView()});
  return out;
}

//===----------------------------------------------------------------------===//
// A folder of checkpoints
//===----------------------------------------------------------------------===//

std::string lamina::rt::checkpointPath(const std::string &dir,
                                       uint64_t step) {
  char name[40];
  std::snprintf(name, sizeof name, "ckpt-%012llu.lmc",
                static_cast<unsigned long long>(step));
  return dir + "/" + name;
}

/// The step of a name `ckpt-<digits>.lmc`, or false.
static bool parseName(const std::string &name, uint64_t &step) {
  const std::string prefix = "ckpt-", suffix = ".lmc";
  if (name.size() <= prefix.size() + suffix.size() ||
      name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return false;
  std::string digits = name.substr(
      prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.size() > 19)
    return false;
  step = 0;
  for (char c : digits) {
    if (c < '0' || c > '9')
      return false;
    step = step * 10 + uint64_t(c - '0');
  }
  return true;
}

/// Checkpoint files in `dir`, highest step first; `temps` receives the
/// temporary files writers leave behind when killed.
static Status listCheckpoints(const std::string &dir,
                              std::vector<std::pair<uint64_t, std::string>> &out,
                              std::vector<std::string> *temps = nullptr) {
  DIR *d = ::opendir(dir.c_str());
  if (!d)
    return Status::error("cannot open checkpoint folder '" + dir +
                         "': " + std::strerror(errno));
  while (struct dirent *e = ::readdir(d)) {
    std::string name = e->d_name;
    uint64_t step;
    if (parseName(name, step))
      out.emplace_back(step, dir + "/" + name);
    else if (temps && name.compare(0, 6, ".ckpt-") == 0 &&
             name.find(".lmc.tmp-") != std::string::npos)
      temps->push_back(dir + "/" + name);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end(),
            [](const auto &a, const auto &b) { return a.first > b.first; });
  return Status::success();
}

Status lamina::rt::saveCheckpoint(const std::string &dir, int keep,
                                  uint64_t step, uint64_t fingerprint,
                                  const std::vector<uint8_t> &rng,
                                  const NamedView *tensors, int n) {
  if (keep < 2)
    return Status::error("at least 2 checkpoints must be kept, got " +
                         std::to_string(keep));
  std::vector<std::pair<uint64_t, std::string>> files;
  std::vector<std::string> temps;
  if (Status s = listCheckpoints(dir, files, &temps); !s.ok())
    return s;
  // One writer per folder: a temporary file here is a dead writer's.
  for (const std::string &t : temps)
    ::unlink(t.c_str());
  if (Status s = writeCheckpoint(checkpointPath(dir, step), step, fingerprint,
                                 rng, tensors, n);
      !s.ok())
    return s;
  files.clear();
  if (Status s = listCheckpoints(dir, files); !s.ok())
    return s;
  bool removed = false;
  for (size_t i = size_t(keep); i < files.size(); ++i)
    removed |= ::unlink(files[i].second.c_str()) == 0;
  return removed ? syncDir(dir) : Status::success();
}

Status lamina::rt::loadLatestCheckpoint(const std::string &dir,
                                        uint64_t fingerprint, Checkpoint &out,
                                        bool &found,
                                        std::vector<std::string> *warnings) {
  found = false;
  std::vector<std::pair<uint64_t, std::string>> files;
  if (Status s = listCheckpoints(dir, files); !s.ok())
    return s;
  if (files.empty())
    return Status::success();
  for (const auto &[step, path] : files) {
    Status s = readCheckpoint(path, out);
    if (!s.ok()) {
      if (warnings)
        warnings->push_back(s.message() + "; trying an older one");
      continue;
    }
    if (out.fingerprint != fingerprint) {
      char buf[96];
      std::snprintf(buf, sizeof buf, " (fingerprint %016llx, expected %016llx)",
                    static_cast<unsigned long long>(out.fingerprint),
                    static_cast<unsigned long long>(fingerprint));
      return Status::error("checkpoint '" + path +
                           "' belongs to another model: its parameters' "
                           "names, types or shapes differ" + buf);
    }
    found = true;
    return Status::success();
  }
  return Status::error("no valid checkpoint in '" + dir + "': all " +
                       std::to_string(files.size()) +
                       " checkpoint files are truncated or corrupt");
}
