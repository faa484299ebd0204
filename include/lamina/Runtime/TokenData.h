//===- TokenData.h - token-id training data and its sampler -----*- C++ -*-===//
//
// The data format nanoGPT (`train.bin`) and Megatron-style pipelines write:
// a flat file of little-endian uint16 or uint32 token ids with no header.
// The file is mapped read-only (a corpus may be far larger than memory) and
// batches of (inputs, labels = inputs shifted by one) are cut from windows
// at random positions.
//
// Positions come from SplitMix64 (below), a fixed algorithm rather than
// std::uniform_int_distribution (whose output differs between standard
// libraries), so a seed gives the same batches on every machine, and the
// whole sampler state is one uint64 a checkpoint can store.
//
// Implemented in lib/Runtime/Program (library lamina_program).
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_RUNTIME_TOKENDATA_H
#define LAMINA_RUNTIME_TOKENDATA_H

#include "lamina/Runtime/Status.h"
#include "lamina/Runtime/Tensor.h"

#include <stdint.h>
#include <string>

namespace lamina::rt {

/// SplitMix64 (Steele, Lea, Flood 2014): state += 0x9E3779B97F4A7C15, then
/// the output is the state mixed by two xor-shift-multiply rounds.
struct SplitMix64 {
  uint64_t state = 0;

  explicit SplitMix64(uint64_t seed = 0) : state(seed) {}
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, n), n > 0, without modulo bias: draws below the largest
  /// multiple of n are kept, the rest redrawn.
  uint64_t below(uint64_t n) {
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do
      x = next();
    while (x >= limit);
    return x % n;
  }
};

class TokenData {
public:
  TokenData() = default;
  TokenData(const TokenData &) = delete;
  TokenData &operator=(const TokenData &) = delete;
  ~TokenData();

  /// Maps `path`, whose ids are `tokenType` (U16 or U32). Errors: the file
  /// cannot be read, it is empty, or its size is not a multiple of the
  /// element size (a wrong --data-dtype, or a truncated file).
  Status open(const std::string &path, DType tokenType);

  /// Checks the file can give one window of `seqLen` + 1 tokens (inputs
  /// plus the one label past them) and that `vocab` > 0.
  Status checkFits(int64_t seqLen, int64_t vocab) const;

  /// Fills `inputs` and `labels`, both [batch, seq] and I64 or I32, from
  /// `batch` windows whose starts are rng.below(numTokens - seq), drawn in
  /// row order: inputs[b][j] = data[start_b + j], labels[b][j] =
  /// data[start_b + j + 1]. A token id >= `vocab` is an error naming the
  /// file, its token position and value.
  Status sample(SplitMix64 &rng, int64_t vocab, const Tensor &inputs,
                const Tensor &labels) const;

  int64_t numTokens() const { return count; }
  uint32_t token(int64_t i) const {
    return type == DType::U16 ? static_cast<const uint16_t *>(base)[i]
                              : static_cast<const uint32_t *>(base)[i];
  }
  const std::string &path() const { return file; }

private:
  void close();

  const void *base = nullptr;
  size_t mappedBytes = 0;
  int64_t count = 0;
  DType type = DType::U16;
  std::string file;
};

} // namespace lamina::rt

#endif // LAMINA_RUNTIME_TOKENDATA_H
