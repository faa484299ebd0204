//===- PrepareTrain.h - @forward made ready for training --------*- C++ -*-===//
//
// What `lamina compile --mode train` and `lamina-eval --loss` do to an
// imported Hugging Face export before the loss and autodiff, so both train
// what PyTorch trains (docs/training.md, "Parameters the exporters merge"
// and "Inputs besides the tokens").
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_DIALECT_GRAPH_TRANSFORMS_PREPARETRAIN_H
#define LAMINA_DIALECT_GRAPH_TRANSFORMS_PREPARETRAIN_H

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <stdint.h>
#include <string>
#include <utility>
#include <vector>

namespace lamina::graph {

/// Makes the [batch, seq] integer inputs named attention_mask,
/// position_ids and token_type_ids (never `labels`) the constants a window
/// of packed tokens gives them (ones, 0..seq-1 per row, zeros) and removes
/// them from the signature, so the masks fold and one token input is left.
/// `filled` gets "NAME: what" per input.
mlir::LogicalResult fillWindowInputs(mlir::func::FuncOp forward,
                                     llvm::StringRef labels,
                                     std::vector<std::string> &filled);

/// Turns trainable arguments that are buffers, not parameters, in the
/// PyTorch modules exporters write them from (rotary `inv_freq`) into
/// constants; `frozen` gets their names.
void freezeKnownBuffers(mlir::func::FuncOp forward,
                        std::vector<std::string> &frozen);

/// Sets `padding_idx` on every axis-0 gather of the arguments named in
/// `pads` (PyTorch's embedding padding index: those lookups train nothing).
/// Entries from `firstRequired` on (a user's flags) must each find a
/// gather; the error names the table.
mlir::LogicalResult
markPaddingIndices(mlir::func::FuncOp forward,
                   llvm::ArrayRef<std::pair<std::string, int64_t>> pads,
                   size_t firstRequired);

/// Makes `forward` (after graph-add-loss) a function that computes only
/// its output named `loss`, renamed `name`: the evaluation entry of a
/// training program (`run --eval-data`), the forward without the other
/// outputs and what only they read.
mlir::LogicalResult keepOnlyLoss(mlir::func::FuncOp forward,
                                 llvm::StringRef loss, llvm::StringRef name);

} // namespace lamina::graph

#endif // LAMINA_DIALECT_GRAPH_TRANSFORMS_PREPARETRAIN_H
