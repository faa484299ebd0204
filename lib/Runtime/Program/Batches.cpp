//===- Batches.cpp - token recipes and named-input arrays -----------------===//
//
// Batches.h. Two kinds of source: a token file cut into windows by a recipe
// (causal-lm, masked-lm, seq2seq), drawn with SplitMix64 as TokenData
// always has; and a folder of .npy arrays, one per input, mapped and read
// at the examples a shuffled epoch visits. docs/training.md ("Training
// data") states every rule written here.
//
//===----------------------------------------------------------------------===//

#include "Batches.h"

#include "lamina/Runtime/Math.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace lamina::rt;

BatchSource::~BatchSource() = default;

namespace {

bool isInt(DType t) { return !isFloat(t); }

/// Integer element `i` of an integer tensor (bool, signed or unsigned).
int64_t loadInt(const void *p, DType t, int64_t i) {
  switch (t) {
  case DType::I1: return static_cast<const uint8_t *>(p)[i] != 0;
  case DType::U8: return static_cast<const uint8_t *>(p)[i];
  case DType::I8: return static_cast<const int8_t *>(p)[i];
  case DType::I16: return static_cast<const int16_t *>(p)[i];
  case DType::U16: return static_cast<const uint16_t *>(p)[i];
  case DType::I32: return static_cast<const int32_t *>(p)[i];
  case DType::U32: return static_cast<const uint32_t *>(p)[i];
  case DType::I64: return static_cast<const int64_t *>(p)[i];
  default: // U64: values above INT64_MAX read as negative, refused below
    return int64_t(static_cast<const uint64_t *>(p)[i]);
  }
}

/// Whether `v` is a value of `t`.
bool fitsInt(int64_t v, DType t) {
  switch (t) {
  case DType::I1: return v == 0 || v == 1;
  case DType::I8: return v >= INT8_MIN && v <= INT8_MAX;
  case DType::U8: return v >= 0 && v <= UINT8_MAX;
  case DType::I16: return v >= INT16_MIN && v <= INT16_MAX;
  case DType::U16: return v >= 0 && v <= UINT16_MAX;
  case DType::I32: return v >= INT32_MIN && v <= INT32_MAX;
  case DType::U32: return v >= 0 && v <= int64_t(UINT32_MAX);
  case DType::U64: return v >= 0;
  default: return true;
  }
}

void storeInt(void *p, DType t, int64_t i, int64_t v) {
  switch (t) {
  case DType::I1:
  case DType::U8: static_cast<uint8_t *>(p)[i] = uint8_t(v); break;
  case DType::I8: static_cast<int8_t *>(p)[i] = int8_t(v); break;
  case DType::I16: static_cast<int16_t *>(p)[i] = int16_t(v); break;
  case DType::U16: static_cast<uint16_t *>(p)[i] = uint16_t(v); break;
  case DType::I32: static_cast<int32_t *>(p)[i] = int32_t(v); break;
  case DType::U32: static_cast<uint32_t *>(p)[i] = uint32_t(v); break;
  default: static_cast<int64_t *>(p)[i] = v; break;
  }
}

/// Floats that convert exactly: `from` has no more range or precision
/// than `to`. Integers of up to 16 bits are exact in f32 (24-bit
/// significand), up to 32 in f64.
bool exactFloat(DType from, DType to) {
  int toBits = to == DType::F64 ? 53 : to == DType::F32 ? 24 : 0;
  switch (from) {
  case DType::F32: return to == DType::F32 || to == DType::F64;
  case DType::F64: return to == DType::F64;
  case DType::F16: return to == DType::F32 || to == DType::F64;
  case DType::I1: case DType::I8: case DType::U8: case DType::I16:
  case DType::U16:
    return toBits >= 16;
  case DType::I32: case DType::U32: return toBits >= 32;
  default: return false;
  }
}

double loadFloat(const void *p, DType t, int64_t i) {
  switch (t) {
  case DType::F32: return static_cast<const float *>(p)[i];
  case DType::F64: return static_cast<const double *>(p)[i];
  case DType::F16: return math::halfToFloat(static_cast<const uint16_t *>(p)[i]);
  default: return double(loadInt(p, t, i));
  }
}

std::string typeText(DType t, const std::vector<int64_t> &shape) {
  return describeType(t, shape.data(), int(shape.size()));
}

std::string str(int64_t v) { return std::to_string(v); }

/// The value a model input the compiler fills in a training compile
/// (graph-fill-window-inputs) would have had at element `i` of an example
/// of `width` positions: what a recipe feeds it too.
bool fillValue(const std::string &name, int64_t i, int64_t width,
               int64_t &v) {
  if (name == "attention_mask" || name == "decoder_attention_mask")
    v = 1;
  else if (name == "token_type_ids")
    v = 0;
  else if (name == "position_ids")
    v = i % width;
  else
    return false;
  return true;
}

//===----------------------------------------------------------------------===//
// Token recipes
//===----------------------------------------------------------------------===//

/// The recipe's use of each slot.
enum class Role { Tokens, Labels, DecoderInput, Fill };

class RecipeSource : public BatchSource {
public:
  Status open(const TrainOptions &o, const std::string &path,
              const std::vector<BatchSlot> &slots, const LabelInfo &labels);
  Status next(const std::vector<Tensor> &out) override;
  std::vector<uint8_t> state() const override {
    std::vector<uint8_t> s(sizeof(uint64_t));
    std::memcpy(s.data(), &rng.state, sizeof(uint64_t));
    return s;
  }
  Status restore(const std::vector<uint8_t> &s) override {
    if (s.size() != sizeof(uint64_t))
      return Status::error("the checkpoint's sampler state is not a token "
                           "recipe's (was it written training from "
                           "--data-dir?)");
    std::memcpy(&rng.state, s.data(), sizeof(uint64_t));
    return Status::success();
  }
  void rewind() override { rng = evalSampler(); }

private:
  Status token(int64_t pos, int64_t &id) const {
    id = int64_t(data.token(pos));
    if (id >= vocab)
      return Status::error("token data '" + data.path() + "': token " +
                           str(pos) + " is " + str(id) +
                           ", beyond the vocabulary of " + str(vocab));
    return Status::success();
  }
  double uniform() { return double(rng.next() >> 11) * 0x1p-53; }

  std::string recipe;
  std::vector<BatchSlot> slots;
  std::vector<Role> roles;
  int tokens = -1, labelSlot = -1, decoder = -1;
  bool shiftLabels = false; // causal-lm into a cross-entropy labels input
  TokenData data;
  SplitMix64 rng;
  int64_t vocab = 0, ignoreIndex = -100, maskToken = -1, decoderStart = -1;
  double maskRate = 0.15;
  OwnedTensor scratchTokens, scratchLabels;
};

Status RecipeSource::open(const TrainOptions &o, const std::string &path,
                          const std::vector<BatchSlot> &s,
                          const LabelInfo &labels) {
  recipe = o.recipe.empty() ? "causal-lm" : o.recipe;
  slots = s;
  ignoreIndex = labels.ignoreIndex;
  maskRate = o.maskRate;
  maskToken = o.maskToken;
  decoderStart = o.decoderStart;
  rng = SplitMix64(uint64_t(o.seed));
  auto fail = [&](const std::string &why) {
    return Status::error("--recipe " + recipe + ": " + why);
  };
  // Which input is which: by the names Transformers models use.
  roles.assign(slots.size(), Role::Fill);
  std::vector<int> rest;
  for (size_t i = 0; i < slots.size(); ++i) {
    const std::string &n = slots[i].name;
    int64_t v;
    if (n == labels.input) {
      labelSlot = int(i);
      roles[i] = Role::Labels;
    } else if (recipe == "seq2seq" && n == "decoder_input_ids") {
      decoder = int(i);
      roles[i] = Role::DecoderInput;
    } else if (n == "input_ids") {
      tokens = int(i);
      roles[i] = Role::Tokens;
    } else if (!fillValue(n, 0, 1, v)) {
      rest.push_back(int(i));
    }
  }
  if (tokens < 0 && rest.size() == 1 && recipe != "seq2seq") {
    tokens = rest[0];
    roles[size_t(tokens)] = Role::Tokens;
    rest.clear();
  }
  std::string names;
  for (const BatchSlot &b : slots)
    names += (names.empty() ? "'" : ", '") + b.name + "'";
  if (!rest.empty())
    return fail("no value for input '" + slots[size_t(rest[0])].name +
                "' (the program's inputs: " + names + "); write one .npy "
                "per input and train with --data-dir");
  if (tokens < 0)
    return fail("no token input among the program's inputs (" + names +
                ")" + (recipe == "seq2seq" ? "; it feeds 'input_ids'" : ""));
  if (recipe != "causal-lm" && labelSlot < 0)
    return fail(labels.loss == LossKind::CausalLM
                    ? "the program computes a causal-LM loss; compile with "
                      "--loss cross-entropy --labels NAME, or --loss-output "
                      "with a 'labels' input"
                    : "the program has no labels input (" + names + ")");
  if (recipe == "seq2seq" && decoder < 0)
    return fail("the program has no input 'decoder_input_ids' (" + names +
                ")");
  // Every input is integer ids, [seq] per example.
  for (size_t i = 0; i < slots.size(); ++i) {
    const BatchSlot &b = slots[i];
    if (b.example.size() != 1 || !isInt(b.dtype) || b.dtype == DType::I1)
      return fail("input '" + b.name + "' takes " +
                  typeText(b.dtype, b.example) +
                  " per example; a token recipe feeds [seq] integers (train "
                  "other inputs with --data-dir)");
  }
  int64_t seq = slots[size_t(tokens)].example[0];
  int64_t target = recipe == "seq2seq" ? slots[size_t(decoder)].example[0]
                                       : seq;
  if (labelSlot >= 0 && slots[size_t(labelSlot)].example[0] != target)
    return fail("labels input '" + labels.input + "' has " +
                str(slots[size_t(labelSlot)].example[0]) + " positions, " +
                (recipe == "seq2seq" ? "'decoder_input_ids'" : "the tokens") +
                " " + str(target));
  for (size_t i = 0; i < slots.size(); ++i)
    if (roles[i] == Role::Fill && slots[i].example[0] !=
                                      (slots[i].name.rfind("decoder_", 0) == 0
                                           ? target
                                           : seq))
      return fail("input '" + slots[i].name + "' has " +
                  str(slots[i].example[0]) + " positions, not " + str(seq));
  shiftLabels = recipe == "causal-lm" && labels.loss == LossKind::CrossEntropy;

  // The vocabulary: the program's (its logits' last dim), --vocab, or for
  // the causal LM alone whatever the token type holds.
  vocab = labels.vocab;
  if (o.vocab > 0 && vocab > 0 && o.vocab != vocab)
    return Status::error("--vocab " + str(o.vocab) + ": the program's "
                         "vocabulary is " + str(vocab));
  if (vocab <= 0)
    vocab = o.vocab;
  if (vocab <= 0) {
    if (recipe == "masked-lm")
      return fail("the program does not know its vocabulary (the model "
                  "computes its own loss): give --vocab N, the range "
                  "random replacements are drawn from");
    vocab = tokenVocab(0, slots[size_t(tokens)].dtype);
  }
  if (recipe == "masked-lm") {
    if (maskToken < 0)
      return fail("give the mask token's id with --mask-token ID");
    if (maskToken >= vocab)
      return fail("--mask-token " + str(maskToken) +
                  " is beyond the vocabulary of " + str(vocab));
  }
  if (recipe == "seq2seq") {
    if (decoderStart < 0)
      return fail("give the decoder start token's id with "
                  "--decoder-start-token ID");
    if (decoderStart >= vocab)
      return fail("--decoder-start-token " + str(decoderStart) +
                  " is beyond the vocabulary of " + str(vocab));
  }
  for (size_t i = 0; i < slots.size(); ++i)
    if (!fitsInt(vocab - 1, slots[i].dtype) && roles[i] != Role::Fill)
      return fail("input '" + slots[i].name + "' (" +
                  dtypeName(slots[i].dtype) + ") cannot hold ids below " +
                  str(vocab));

  int64_t window = recipe == "causal-lm"   ? seq + 1
                   : recipe == "seq2seq" ? seq + target
                                         : seq;
  if (Status st = data.open(path, o.dataDtype == "uint32" ? DType::U32
                                                          : DType::U16);
      !st.ok())
    return st;
  if (data.numTokens() < window)
    return Status::error("token data '" + path + "' holds " +
                         str(data.numTokens()) + " tokens; one " +
                         (recipe == "causal-lm"
                              ? "sample of sequence length " + str(seq)
                              : recipe + " example") +
                         " needs at least " + str(window));
  return Status::success();
}

Status RecipeSource::next(const std::vector<Tensor> &out) {
  int64_t rows = out[0].shape[0];
  int64_t seq = slots[size_t(tokens)].example[0];
  const Tensor &tok = out[size_t(tokens)];
  const Tensor *lab = labelSlot >= 0 ? &out[size_t(labelSlot)] : nullptr;
  if (recipe == "causal-lm") {
    // TokenData::sample's windows and labels, so a program with one token
    // input draws what it always drew.
    scratchTokens.allocate(DType::I64, {rows, seq});
    scratchLabels.allocate(DType::I64, {rows, seq});
    if (Status s = data.sample(rng, vocab, scratchTokens.view(),
                               scratchLabels.view());
        !s.ok())
      return s;
    auto *t = static_cast<const int64_t *>(scratchTokens.data());
    auto *l = static_cast<const int64_t *>(scratchLabels.data());
    for (int64_t i = 0; i < rows * seq; ++i) {
      storeInt(tok.data, tok.dtype, i, t[i]);
      if (lab)
        storeInt(lab->data, lab->dtype, i, shiftLabels ? l[i] : t[i]);
    }
  } else if (recipe == "masked-lm") {
    // DataCollatorForLanguageModeling: each position is chosen with
    // probability --mask-rate; a chosen one is labelled with its id and
    // becomes the mask token (80%), a random id (10%) or stays (10%).
    uint64_t starts = uint64_t(data.numTokens() - seq + 1);
    for (int64_t b = 0; b < rows; ++b) {
      int64_t start = int64_t(rng.below(starts));
      for (int64_t j = 0; j < seq; ++j) {
        int64_t id, label = ignoreIndex;
        if (Status s = token(start + j, id); !s.ok())
          return s;
        if (uniform() < maskRate) {
          label = id;
          double r = uniform();
          if (r < 0.8)
            id = maskToken;
          else if (r < 0.9)
            id = int64_t(rng.below(uint64_t(vocab)));
        }
        storeInt(tok.data, tok.dtype, b * seq + j, id);
        storeInt(lab->data, lab->dtype, b * seq + j, label);
      }
    }
  } else { // seq2seq
    // The encoder reads a window, the decoder predicts the tokens after it.
    int64_t target = slots[size_t(decoder)].example[0];
    const Tensor &dec = out[size_t(decoder)];
    uint64_t starts = uint64_t(data.numTokens() - seq - target + 1);
    for (int64_t b = 0; b < rows; ++b) {
      int64_t start = int64_t(rng.below(starts)), id, prev = decoderStart;
      for (int64_t j = 0; j < seq; ++j) {
        if (Status s = token(start + j, id); !s.ok())
          return s;
        storeInt(tok.data, tok.dtype, b * seq + j, id);
      }
      for (int64_t j = 0; j < target; ++j) {
        if (Status s = token(start + seq + j, id); !s.ok())
          return s;
        storeInt(lab->data, lab->dtype, b * target + j, id);
        storeInt(dec.data, dec.dtype, b * target + j, prev);
        prev = id;
      }
    }
  }
  for (size_t i = 0; i < slots.size(); ++i) {
    if (roles[i] != Role::Fill)
      continue;
    int64_t width = slots[i].example[0], v = 0;
    for (int64_t e = 0; e < rows * width; ++e) {
      fillValue(slots[i].name, e, width, v);
      storeInt(out[i].data, out[i].dtype, e, v);
    }
  }
  return Status::success();
}

//===----------------------------------------------------------------------===//
// Named-input arrays
//===----------------------------------------------------------------------===//

/// One mapped .npy file.
struct Mapped {
  std::string path;
  NpyInfo info;
  const char *base = nullptr; // the mapping
  size_t bytes = 0;
  const char *data() const { return base + info.dataOffset; }
  ~Mapped() {
    if (base && bytes)
      ::munmap(const_cast<char *>(base), bytes);
  }
  Status map() {
    if (Status s = readNpyHeader(path, info); !s.ok())
      return s;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      return Status::error("cannot open '" + path +
                           "': " + std::strerror(errno));
    struct stat st;
    if (::fstat(fd, &st) != 0 || uint64_t(st.st_size) != info.fileSize) {
      ::close(fd);
      return Status::error("'" + path + "' changed while it was opened");
    }
    void *p = ::mmap(nullptr, size_t(info.fileSize), PROT_READ, MAP_PRIVATE,
                     fd, 0);
    ::close(fd);
    if (p == MAP_FAILED)
      return Status::error("cannot map '" + path +
                           "': " + std::strerror(errno));
    // Examples are read in shuffled order: readahead would be wasted.
    ::madvise(p, size_t(info.fileSize), MADV_RANDOM);
    base = static_cast<const char *>(p);
    bytes = size_t(info.fileSize);
    return Status::success();
  }
};

class ArraySource : public BatchSource {
public:
  Status open(const TrainOptions &o, const std::string &dir,
              const std::vector<BatchSlot> &slots, const LabelInfo &labels);
  Status next(const std::vector<Tensor> &out) override;
  std::vector<uint8_t> state() const override;
  Status restore(const std::vector<uint8_t> &s) override;
  void rewind() override {
    shuffle = false; // evaluation reads the examples in order
    pos = 0;
  }

private:
  void newEpoch();
  Status copyExample(size_t slot, uint64_t example, const Tensor &out,
                     int64_t row) const;

  std::vector<BatchSlot> slots;
  std::vector<std::unique_ptr<Mapped>> files;
  std::vector<bool> isLabels; // checked against the classes
  LabelInfo labels;
  uint64_t count = 0; // examples
  // The sampler: epoch `epoch` is a Fisher-Yates shuffle drawn from
  // SplitMix64 at `epochStart`; `pos` examples of it are used.
  bool shuffle = true;
  SplitMix64 rng;
  uint64_t epochStart = 0, pos = 0, epoch = 0;
  std::vector<uint32_t> order;
};

Status ArraySource::open(const TrainOptions &o, const std::string &dir,
                         const std::vector<BatchSlot> &s,
                         const LabelInfo &l) {
  slots = s;
  labels = l;
  std::string names;
  for (const BatchSlot &b : slots)
    names += (names.empty() ? "" : ", ") + b.name;
  for (const BatchSlot &b : slots) {
    auto m = std::make_unique<Mapped>();
    m->path = dir + "/" + outputFileName(b.name.c_str());
    std::string what = "input '" + b.name + "' ('" + m->path + "')";
    struct stat st;
    if (::stat(m->path.c_str(), &st) != 0)
      return Status::error("input '" + b.name + "': no file '" + m->path +
                           "' (the data folder holds one .npy per model "
                           "input: " + names + ")");
    if (Status st2 = m->map(); !st2.ok())
      return Status::error(what + ": " + st2.message());
    const NpyInfo &info = m->info;
    std::vector<int64_t> want = b.example;
    want.insert(want.begin(), int64_t(-1));
    bool shapeOk = info.shape.size() == want.size();
    for (size_t d = 1; shapeOk && d < want.size(); ++d)
      shapeOk = info.shape[d] == want[d];
    std::string per = typeText(b.dtype, b.example);
    if (!shapeOk)
      return Status::error(
          what + " is " + typeText(info.dtype, info.shape) +
          "; it must be [N, ...] with one " + per +
          " example per row, N the number of examples");
    if (info.shape[0] < 1)
      return Status::error(what + " holds no examples");
    if (files.empty())
      count = uint64_t(info.shape[0]);
    else if (uint64_t(info.shape[0]) != count)
      return Status::error(what + " holds " + str(info.shape[0]) +
                           " examples, '" + files[0]->path + "' " +
                           str(int64_t(count)));
    bool ok = info.dtype == b.dtype ||
              (isInt(b.dtype) && isInt(info.dtype)) ||
              (isFloat(b.dtype) && exactFloat(info.dtype, b.dtype));
    if (!ok)
      return Status::error(
          what + " holds " + dtypeName(info.dtype) + ", the input is " +
          dtypeName(b.dtype) +
          (isFloat(info.dtype) && isInt(b.dtype)
               ? ": floats are not converted to integers"
               : ": not converted without loss") +
          "; write the array as " + dtypeName(b.dtype));
    isLabels.push_back((!labels.input.empty() && b.name == labels.input) ||
                       (labels.loss == LossKind::CausalLM &&
                        isInt(b.dtype) && b.example.size() == 1 &&
                        labels.vocab > 0));
    files.push_back(std::move(m));
  }
  if (count > uint64_t(UINT32_MAX))
    return Status::error("--data-dir: more than 2^32 examples");
  // A .npy for an input the compile filled with what a window of packed
  // tokens has (graph-fill-window-inputs) must hold just that; any other
  // file no input reads is reported.
  if (DIR *d = ::opendir(dir.c_str())) {
    std::vector<std::string> extra;
    while (dirent *e = ::readdir(d)) {
      std::string f = e->d_name;
      if (f.size() < 5 || f.compare(f.size() - 4, 4, ".npy") != 0)
        continue;
      bool used = false;
      for (const BatchSlot &b : slots)
        used |= outputFileName(b.name.c_str()) == f;
      if (!used)
        extra.push_back(f);
    }
    ::closedir(d);
    for (const std::string &f : extra) {
      std::string name = f.substr(0, f.size() - 4), path = dir + "/" + f;
      int64_t v;
      if (!fillValue(name, 0, 1, v)) {
        std::fprintf(stderr, "warning: '%s' feeds no input of the program "
                             "(its inputs: %s)\n", path.c_str(),
                     names.c_str());
        continue;
      }
      Mapped m;
      m.path = path;
      if (Status st = m.map(); !st.ok())
        return st;
      if (!isInt(m.info.dtype) || m.info.shape.size() != 2)
        return Status::error("'" + path + "': the program fills input '" +
                             name + "' itself; this file is not [N, seq] "
                             "integers");
      int64_t width = m.info.shape[1],
              n = m.info.shape[0] * m.info.shape[1];
      for (int64_t i = 0; i < n; ++i) {
        int64_t want;
        fillValue(name, i, width, want);
        if (loadInt(m.data(), m.info.dtype, i) != want)
          return Status::error(
              "'" + path + "': example " + str(i / width) + " has " +
              str(loadInt(m.data(), m.info.dtype, i)) + " at position " +
              str(i % width) + ", but the training compile fixed input '" +
              name + "' to " + str(want) +
              " there (graph-fill-window-inputs: a window of packed "
              "tokens); compile with --keep-input " +
              name + " to feed it");
      }
    }
  }
  rng = SplitMix64(uint64_t(o.seed));
  newEpoch();
  epoch = 0;
  return Status::success();
}

void ArraySource::newEpoch() {
  order.resize(size_t(count));
  for (uint64_t i = 0; i < count; ++i)
    order[size_t(i)] = uint32_t(i);
  epochStart = rng.state;
  for (uint64_t i = count; i > 1; --i)
    std::swap(order[size_t(i - 1)], order[size_t(rng.below(i))]);
  pos = 0;
  ++epoch;
}

Status ArraySource::copyExample(size_t k, uint64_t example, const Tensor &out,
                                int64_t row) const {
  const Mapped &m = *files[k];
  const BatchSlot &b = slots[k];
  int64_t n = numElements(b.example.data(), int(b.example.size()));
  int64_t from = int64_t(example) * n, to = row * n;
  if (m.info.dtype == b.dtype && !isLabels[k] && b.dtype != DType::I1) {
    size_t bytes = size_t(n) * dtypeSize(b.dtype);
    std::memcpy(static_cast<char *>(out.data) + size_t(to) * dtypeSize(b.dtype),
                m.data() + size_t(from) * dtypeSize(b.dtype), bytes);
    return Status::success();
  }
  auto where = [&](int64_t i) {
    return "input '" + b.name + "' ('" + m.path + "'): example " +
           str(int64_t(example)) + ", element " + str(i) + " is ";
  };
  for (int64_t i = 0; i < n; ++i) {
    if (isFloat(b.dtype)) {
      double v = loadFloat(m.data(), m.info.dtype, from + i);
      if (b.dtype == DType::F32)
        static_cast<float *>(out.data)[to + i] = float(v);
      else if (b.dtype == DType::F64)
        static_cast<double *>(out.data)[to + i] = v;
      else
        return Status::error("input '" + b.name + "': " +
                             dtypeName(b.dtype) + " inputs are not fed");
      continue;
    }
    int64_t v = loadInt(m.data(), m.info.dtype, from + i);
    if (m.info.dtype == DType::U64 && v < 0)
      return Status::error(where(i) + "beyond int64");
    if (!fitsInt(v, b.dtype))
      return Status::error(where(i) + str(v) + ", which " +
                           dtypeName(b.dtype) + " cannot hold");
    if (isLabels[k] && labels.vocab > 0 && v != labels.ignoreIndex &&
        (v < 0 || v >= labels.vocab))
      return Status::error(
          where(i) + str(v) + ", outside [0, " + str(labels.vocab) + ")" +
          (b.name == labels.input
               ? " (the classes) and not the ignored label " +
                     str(labels.ignoreIndex)
               : " (the vocabulary)"));
    storeInt(out.data, b.dtype, to + i, v);
  }
  return Status::success();
}

Status ArraySource::next(const std::vector<Tensor> &out) {
  int64_t rows = out[0].shape[0];
  for (int64_t r = 0; r < rows; ++r) {
    if (pos == count) {
      if (shuffle)
        newEpoch();
      else
        pos = 0;
    }
    uint64_t example = shuffle ? order[size_t(pos)] : pos;
    ++pos;
    for (size_t k = 0; k < slots.size(); ++k)
      if (Status s = copyExample(k, example, out[k], r); !s.ok())
        return s;
  }
  return Status::success();
}

// Four little-endian u64: the examples, the generator at the epoch's
// start, the examples used of it, the epoch (1-based).
std::vector<uint8_t> ArraySource::state() const {
  uint64_t v[4] = {count, epochStart, pos, epoch};
  std::vector<uint8_t> s(sizeof v);
  std::memcpy(s.data(), v, sizeof v);
  return s;
}

Status ArraySource::restore(const std::vector<uint8_t> &s) {
  uint64_t v[4];
  if (s.size() != sizeof v)
    return Status::error("the checkpoint's sampler state is not a --data-dir "
                         "sampler's (was it written training from a token "
                         "file?)");
  std::memcpy(v, s.data(), sizeof v);
  if (v[0] != count)
    return Status::error("the checkpoint was written drawing from " +
                         str(int64_t(v[0])) + " examples; --data-dir holds " +
                         str(int64_t(count)));
  if (v[2] > count || v[3] < 1)
    return Status::error("the checkpoint's sampler state is corrupt");
  rng.state = v[1];
  newEpoch(); // the same permutation, from the same generator state
  pos = v[2];
  epoch = v[3];
  return Status::success();
}

} // namespace

LabelInfo lamina::rt::labelInfo(const TrainSpec &ts,
                                const std::vector<BatchSlot> &slots) {
  LabelInfo l;
  l.loss = ts.loss;
  l.vocab = ts.vocab;
  l.ignoreIndex = ts.ignoreIndex;
  if (ts.labelsInput)
    l.input = ts.labelsInput;
  else if (ts.loss == LossKind::Output)
    for (const BatchSlot &b : slots)
      if (b.name == "labels")
        l.input = b.name;
  return l;
}

int lamina::rt::countedSlot(const std::vector<BatchSlot> &slots,
                            const LabelInfo &labels, bool &skipFirst) {
  skipFirst = false;
  // The model's own loss: its labels input when it has one (by name), whose
  // counted labels weigh the parts as a token-mean cross-entropy's do.
  if (labels.loss == LossKind::Output) {
    for (size_t i = 0; i < slots.size(); ++i)
      if (!labels.input.empty() && slots[i].name == labels.input &&
          isInt(slots[i].dtype))
        return int(i);
    return -1;
  }
  for (size_t i = 0; i < slots.size(); ++i)
    if (labels.loss == LossKind::CrossEntropy ? slots[i].name == labels.input
                                              : isInt(slots[i].dtype)) {
      skipFirst = labels.loss == LossKind::CausalLM;
      return int(i);
    }
  return -1;
}

Status lamina::rt::openBatches(const TrainOptions &o, bool eval,
                               const std::vector<BatchSlot> &slots,
                               const LabelInfo &labels,
                               std::unique_ptr<BatchSource> &out) {
  if (slots.empty())
    return Status::error("the program has no inputs to feed");
  std::string path = eval ? o.evalData : !o.dataDir.empty() ? o.dataDir : o.data;
  struct stat st;
  bool isDir = ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  if (!o.dataDir.empty()) {
    if (!isDir)
      return Status::error("'" + path + "' is not a folder (" +
                           (eval ? "--eval-data" : "--data-dir") +
                           " of .npy arrays)");
    // --vocab bounds the labels (and a causal LM's ids) of a program that
    // does not know its vocabulary.
    LabelInfo bounded = labels;
    if (o.vocab > 0 && labels.vocab > 0 && o.vocab != labels.vocab)
      return Status::error("--vocab " + str(o.vocab) +
                           ": the program's vocabulary is " +
                           str(labels.vocab));
    if (bounded.vocab <= 0)
      bounded.vocab = o.vocab;
    auto a = std::make_unique<ArraySource>();
    if (Status s = a->open(o, path, slots, bounded); !s.ok())
      return s;
    if (o.recipe == "classification") {
      // Class labels: one per example.
      for (const BatchSlot &b : slots)
        if (b.name == labels.input && !b.example.empty())
          return Status::error("--recipe classification: labels input '" +
                               b.name + "' takes " +
                               typeText(b.dtype, b.example) +
                               " per example, not one class");
    }
    out = std::move(a);
    if (eval)
      out->rewind();
    return Status::success();
  }
  if (isDir)
    return Status::error("'" + path + "' is a folder: train from .npy arrays "
                         "with --data-dir");
  auto r = std::make_unique<RecipeSource>();
  if (Status s = r->open(o, path, slots, labels); !s.ok())
    return s;
  out = std::move(r);
  if (eval)
    out->rewind();
  return Status::success();
}
