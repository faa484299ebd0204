//===- TokenData.cpp - token-id training data and its sampler -------------===//

#include "lamina/Runtime/TokenData.h"

#include "FileUtil.h"

#include <cerrno>
#include <cstring>
#include <sys/mman.h>

using namespace lamina::rt;

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "token files are little-endian and read in place");

TokenData::~TokenData() { close(); }

void TokenData::close() {
  if (base && mappedBytes)
    ::munmap(const_cast<void *>(base), mappedBytes);
  base = nullptr;
  mappedBytes = 0;
  count = 0;
}

Status TokenData::open(const std::string &path, DType tokenType) {
  close();
  file = path;
  if (tokenType != DType::U16 && tokenType != DType::U32)
    return Status::error(std::string("token data type must be uint16 or "
                                     "uint32, not ") +
                         dtypeName(tokenType));
  type = tokenType;
  File f;
  uint64_t size = 0;
  if (Status s = f.openForRead(path, size); !s.ok())
    return s;
  size_t elem = dtypeSize(tokenType);
  const char *typeName = tokenType == DType::U16 ? "uint16" : "uint32";
  if (size == 0)
    return Status::error("token data '" + path + "' is empty");
  if (size % elem != 0)
    return Status::error("token data '" + path + "' has " +
                         std::to_string(size) + " bytes, not a multiple of " +
                         std::to_string(elem) + " (" + typeName +
                         " ids): a truncated file or the wrong --data-dtype?");
  void *p = ::mmap(nullptr, size_t(size), PROT_READ, MAP_PRIVATE, f.fd(), 0);
  if (p == MAP_FAILED)
    return Status::error("cannot map token data '" + path +
                         "': " + std::strerror(errno));
  // Windows are read at random positions: readahead would be wasted.
  ::madvise(p, size_t(size), MADV_RANDOM);
  base = p;
  mappedBytes = size_t(size);
  count = int64_t(size / elem);
  return Status::success();
}

Status TokenData::checkFits(int64_t seqLen, int64_t vocab) const {
  if (!base)
    return Status::error("token data is not open");
  if (seqLen <= 0)
    return Status::error("sequence length must be positive, got " +
                         std::to_string(seqLen));
  if (vocab <= 0)
    return Status::error("vocabulary size must be positive, got " +
                         std::to_string(vocab));
  if (count < seqLen + 1)
    return Status::error("token data '" + file + "' holds " +
                         std::to_string(count) + " tokens; one sample of "
                         "sequence length " + std::to_string(seqLen) +
                         " needs at least " + std::to_string(seqLen + 1));
  return Status::success();
}

template <typename T>
static void store(void *dst, int64_t i, uint32_t v) {
  static_cast<T *>(dst)[i] = T(v);
}

Status TokenData::sample(SplitMix64 &rng, int64_t vocab, const Tensor &inputs,
                         const Tensor &labels) const {
  for (const Tensor *t : {&inputs, &labels})
    if (t->rank != 2 || (t->dtype != DType::I64 && t->dtype != DType::I32))
      return Status::error("token batches must be [batch, seq] tensors of "
                           "i64 or i32");
  if (inputs.dtype != labels.dtype || inputs.shape[0] != labels.shape[0] ||
      inputs.shape[1] != labels.shape[1])
    return Status::error("token batch inputs and labels must have the same "
                         "type and shape");
  int64_t batch = inputs.shape[0], seq = inputs.shape[1];
  if (Status s = checkFits(seq, vocab); !s.ok())
    return s;
  if (vocab > int64_t(UINT32_MAX) + 1 ||
      (inputs.dtype == DType::I32 && vocab > int64_t(INT32_MAX) + 1))
    return Status::error("vocabulary size " + std::to_string(vocab) +
                         " does not fit the token tensors");
  auto put = inputs.dtype == DType::I64 ? store<int64_t> : store<int32_t>;
  // Windows start in [0, count - seq - 1], so the label past the last input
  // is always inside the file.
  uint64_t starts = uint64_t(count - seq);
  for (int64_t b = 0; b < batch; ++b) {
    int64_t start = int64_t(rng.below(starts));
    for (int64_t j = 0; j <= seq; ++j) {
      uint32_t id = token(start + j);
      if (int64_t(id) >= vocab)
        return Status::error("token data '" + file + "': token " +
                             std::to_string(start + j) + " is " +
                             std::to_string(id) +
                             ", beyond the vocabulary of " +
                             std::to_string(vocab));
      if (j < seq)
        put(inputs.data, b * seq + j, id);
      if (j > 0)
        put(labels.data, b * seq + j - 1, id);
    }
  }
  return Status::success();
}
