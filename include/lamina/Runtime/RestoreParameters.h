//===- RestoreParameters.h - the parameters exporters merge -----*- C++ -*-===//
//
// An ONNX file written for inference need not say which initializers were
// distinct parameters of the model it came from, and the exporters lose it:
//
// * torch.onnx.export (TorchScript) merges initializers of equal value and
//   keeps the others' names as Identity nodes of the one left (every
//   LayerNorm weight of a fresh model is ones);
// * the dynamo exporter's optimizer merges them too, with no trace but the
//   readers' module scopes (node metadata `pkg.torch.onnx.name_scopes`);
// * both fold the transpose of a tied embedding into a second initializer
//   for the LM head, so the tie is gone.
//
// Training such a file as it stands trains another model: merged norms
// share one weight, the LM head and the embedding drift apart. This puts
// the parameters back, in a copy of the model:
//
// * an Identity of a float initializer becomes an initializer of its own,
//   named by the Identity's output, with the same value;
// * an initializer of equal elements (a value no trained weight has, so
//   only a merge shares it) read by several modules, or with no scopes by
//   several nodes, becomes one per module (named `<module>.<leaf>`, the
//   PyTorch name) or per node (`<name>.<k>`) -- but not an embedding's
//   table that a head also reads (a tie, whatever the value: a
//   structure-only file's weights read as zeros);
// * a linear layer or a convolution whose zero bias the dynamo exporter's
//   optimizer removed (the node's FX metadata still calls addmm, linear or
//   conv2d with a bias) gets
//   it back, zero, named `<module>.bias`;
// * a 2-D initializer read only as a matmul operand that is exactly the
//   transpose (or a copy) of an embedding's table (a Gather's data) becomes
//   a Transpose (Identity) node of that table -- unless the table's
//   elements are all equal (a structure-only file's zeros, which every head
//   of the shape would equal: no evidence of a tie).
//
// Nodes in subgraphs and functions keep reading what they read: an
// initializer they name is left alone. An embedding's padding_idx (its row
// is not trained by lookups of it) is returned, not written: ONNX has no
// way to say it; nor is a buffer the dynamo export marks as one (a
// graph input's or value_info's metadata
// `pkg.torch.export.graph_signature.InputSpec.kind = BUFFER`, as BART's
// `final_logits_bias`), which PyTorch does not train.
//
// Implemented in lib/Runtime/Program (library lamina_program).
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_RUNTIME_RESTOREPARAMETERS_H
#define LAMINA_RUNTIME_RESTOREPARAMETERS_H

#include "lamina/Runtime/Status.h"

#include <stdint.h>
#include <string>
#include <utility>
#include <vector>

namespace lamina::rt {

struct RestoredParameters {
  /// "NEW (a copy of OLD)" per parameter split off a merged one.
  std::vector<std::string> untied;
  /// "COPY = transpose(TABLE)" (or "= TABLE") per tie put back.
  std::vector<std::string> tied;
  /// Zero biases put back.
  std::vector<std::string> restored;
  /// (table, index) per embedding whose PyTorch padding_idx the dynamo
  /// metadata shows: lookups of that index must not train the row. Not in
  /// the ONNX file (it cannot say it); the compile marks the Gather.
  std::vector<std::pair<std::string, int64_t>> paddingIndices;
  /// Embedding tables (2-D weights read by an axis-0 Gather) whose lookups
  /// carry no FX metadata (TorchScript exports): PyTorch's padding_idx, if
  /// any, is unknown.
  std::vector<std::string> unknownPaddingIndex;
  /// Initializers the dynamo export marks as PyTorch buffers (registered
  /// with register_buffer, not parameters): not trained.
  std::vector<std::string> buffers;
  bool changed() const {
    return !untied.empty() || !tied.empty() || !restored.empty();
  }
  /// "N split off initializers the exporter merged, M tied back, K zero
  /// biases the exporter removed", for the tools' logs.
  std::string summary() const;
};

/// Reads the model at `sourcePath` (external data under the program
/// driver's rules) and, when it finds merged or untied parameters, writes
/// the repaired model to `destPath` (its weights inline, or in
/// `<destPath>.data` when large). Writes nothing when nothing changes.
/// With `inlineData` false the copy keeps external data references as
/// they are, relative to `destPath`'s folder: a structure-only model for
/// importers that accept missing external data (`lamina plan`).
Status restoreParameters(const std::string &sourcePath,
                         const std::string &destPath, RestoredParameters &what,
                         bool inlineData = true);

/// restoreParameters into `model.onnx` of a fresh temporary folder, which
/// goes with this object (lamina plan and lamina-eval read the copy and
/// need it no longer).
class TemporaryRestore {
public:
  TemporaryRestore() = default;
  TemporaryRestore(const TemporaryRestore &) = delete;
  TemporaryRestore &operator=(const TemporaryRestore &) = delete;
  ~TemporaryRestore();

  Status create(const std::string &sourcePath, bool inlineData);
  /// The copy when something changed, else `sourcePath`.
  const std::string &path() const { return modelPath; }
  const RestoredParameters &what() const { return restored; }

private:
  std::string dir, modelPath;
  RestoredParameters restored;
};

} // namespace lamina::rt

#endif // LAMINA_RUNTIME_RESTOREPARAMETERS_H
