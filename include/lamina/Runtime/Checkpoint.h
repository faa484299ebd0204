//===- Checkpoint.h - training checkpoints that lose nothing ----*- C++ -*-===//
//
// A checkpoint holds everything a training run needs to continue exactly:
// the step, named tensors (parameters and optimizer state), and opaque RNG
// state. The file format (docs/training.md, "Checkpoints"), all integers
// little-endian:
//
//   "LAMINACK"  u32 version (1)  u32 0  u64 step  u64 fingerprint
//   u32 rngBytes, rng bytes
//   u32 tensors, then per tensor: u32 nameBytes, name, u8 dtype, u8 rank,
//                                 i64 dims[rank], u64 dataBytes, data
//   "LMCKEND\0"  u32 CRC-32C of every byte before it
//
// The fingerprint (modelFingerprint) identifies the model the checkpoint
// belongs to, so one from another model is refused rather than loaded into
// the wrong tensors. Nothing the file says is trusted: sizes are checked
// against the file before anything is allocated, and the checksum is
// verified before anything is returned.
//
// Implemented in lib/Runtime/Program (library lamina_program).
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_RUNTIME_CHECKPOINT_H
#define LAMINA_RUNTIME_CHECKPOINT_H

#include "lamina/Runtime/Optimizer.h"
#include "lamina/Runtime/Status.h"
#include "lamina/Runtime/Tensor.h"
#include "lamina/Runtime/TensorIO.h"

#include <stddef.h>
#include <stdint.h>
#include <string>
#include <vector>

namespace lamina::rt {

/// CRC-32C (Castagnoli), continuing from `crc` (0 to start): the SSE4.2
/// instruction where the CPU has it, a table otherwise.
uint32_t crc32c(const void *data, size_t n, uint32_t crc = 0);
/// The table implementation crc32c falls back to, exposed for tests.
uint32_t crc32cPortable(const void *data, size_t n, uint32_t crc = 0);

/// A tensor to save: a name and a view of its data.
struct NamedView {
  std::string name;
  Tensor value;
};

/// 64-bit FNV-1a over the parameters' names, dtypes and shapes, in order.
/// Two models with the same parameters have the same fingerprint.
uint64_t modelFingerprint(const NamedView *params, int n);

/// What a checkpoint file holds once read.
struct Checkpoint {
  uint64_t step = 0;
  uint64_t fingerprint = 0;
  std::vector<uint8_t> rng;
  std::vector<std::string> names;
  std::vector<OwnedTensor> tensors;

  /// The tensor called `name`, or nullptr.
  const OwnedTensor *find(const std::string &name) const;
};

/// Copies each view's tensor of the same name out of `ck` into the view's
/// memory. A missing name or a different dtype or shape is an error naming
/// the tensor; nothing is half-restored (all are checked before copying).
Status restoreTensors(const Checkpoint &ck, const NamedView *views, int n);

/// Views of all of `opt`'s state: "<param>.<slot>" (e.g. "wte.exp_avg")
/// per parameter and slot, then "optimizer.step" (i64 scalar). Saved with
/// the parameters and given back to restoreTensors, an optimizer continues
/// exactly where it stopped.
std::vector<NamedView> optimizerState(Optimizer &opt);

/// Writes one checkpoint file atomically (temporary file, fsync, rename,
/// fsync of the folder).
Status writeCheckpoint(const std::string &path, uint64_t step,
                       uint64_t fingerprint, const std::vector<uint8_t> &rng,
                       const NamedView *tensors, int n);

/// Reads and verifies a checkpoint file: magic, version, structure and
/// checksum. A truncated or corrupt file is an error saying so. The
/// fingerprint is returned, not checked: see loadLatestCheckpoint.
Status readCheckpoint(const std::string &path, Checkpoint &out);

/// Checkpoints of one run in a folder: `ckpt-<step, 12 digits>.lmc`.
/// Saving writes the new file atomically, then deletes all but the newest
/// `keep` (>= 2, so the previous one survives a corrupt newest one) and any
/// temporary file a killed writer left.
Status saveCheckpoint(const std::string &dir, int keep, uint64_t step,
                      uint64_t fingerprint, const std::vector<uint8_t> &rng,
                      const NamedView *tensors, int n);

/// Loads the newest valid checkpoint in `dir`: candidates are tried from the
/// highest step down; one that fails to read (truncated, bad checksum) is
/// skipped with a line in `warnings` naming it and why. A valid checkpoint
/// whose fingerprint differs from `fingerprint` is an error (a checkpoint
/// from another model), as is a folder without any valid checkpoint.
/// `found` is false (and the result success) when `dir` has no checkpoint
/// files at all.
Status loadLatestCheckpoint(const std::string &dir, uint64_t fingerprint,
                            Checkpoint &out, bool &found,
                            std::vector<std::string> *warnings = nullptr);

/// "DIR/ckpt-000000000042.lmc".
std::string checkpointPath(const std::string &dir, uint64_t step);

} // namespace lamina::rt

#endif // LAMINA_RUNTIME_CHECKPOINT_H
