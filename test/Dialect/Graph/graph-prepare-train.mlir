// What lamina compile --mode train does to an export before the loss, one
// pass each, with the remarks its summary prints.
// RUN: lamina-opt %s --mlir-print-op-on-diagnostic=false -graph-fill-window-inputs -graph-freeze-buffers -graph-mark-padding="padding-idx=emb=0" 2>&1 | FileCheck %s
// RUN: lamina-opt %s --mlir-print-op-on-diagnostic=false -graph-fill-window-inputs="keep=attention_mask" 2>&1 | FileCheck %s --check-prefix=KEEP
// RUN: not lamina-opt %s -graph-fill-window-inputs="keep=mask" 2>&1 | FileCheck %s --check-prefix=NOKEEP
// RUN: lamina-opt %s --mlir-print-op-on-diagnostic=false -graph-freeze="regex=^head" 2>&1 | FileCheck %s --check-prefix=FREEZE
// RUN: not lamina-opt %s -graph-freeze="regex=nothing" 2>&1 | FileCheck %s --check-prefix=NOMATCH
// RUN: not lamina-opt %s -graph-freeze="regex=." 2>&1 | FileCheck %s --check-prefix=ALL
// RUN: not lamina-opt %s -graph-mark-padding="padding-idx=head=0" 2>&1 | FileCheck %s --check-prefix=PADNAME
// RUN: not lamina-opt %s -graph-mark-padding="padding-idx=emb" 2>&1 | FileCheck %s --check-prefix=PADVALUE
// RUN: lamina-opt %s -graph-mark-padding="known-padding-idx=head=0" 2>&1 | FileCheck %s --check-prefix=KNOWN
// RUN: lamina-opt %s --mlir-print-op-on-diagnostic=false -graph-mark-padding="unknown-padding=emb,head" 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: lamina-opt %s --mlir-print-op-on-diagnostic=false -graph-mark-padding="unknown-padding=emb padding-idx=emb=1" 2>&1 | FileCheck %s --check-prefix=GIVEN

// The mask and positions are constants folded into their readers; the
// tokens stay; inv_freq is no longer trained; lookups of token 0 train no row.
// CHECK: remark: input attention_mask: all ones (no padding in a window of packed tokens)
// CHECK: remark: input position_ids: 0 to 2 in every row (each window starts a sequence)
// CHECK: remark: not trained: model.rotary.inv_freq (a buffer, not a parameter, in PyTorch)
// CHECK: remark: padding_idx 0 of embedding 'emb': lookups of token 0 do not train its row, as in PyTorch
// CHECK: module {
// CHECK-NEXT: func.func @forward
// CHECK-SAME: (%{{.*}}: tensor<8x4xf32> {graph.kind = "trainable", graph.name = "emb"}, %{{.*}}: tensor<4x8xf32> {graph.kind = "trainable", graph.name = "head"}, %{{.*}}: tensor<2xf32> {graph.kind = "constant", graph.name = "model.rotary.inv_freq"}, %{{.*}}: tensor<2x3xi64> {graph.kind = "input", graph.name = "input_ids"})
// CHECK: graph.gather {{.*}}padding_idx = 0
// CHECK-NOT: attention_mask

// --keep-input: the mask stays an input (padded batches), the positions
// are filled.
// KEEP: remark: input position_ids: 0 to 2
// KEEP-NOT: remark: input attention_mask
// KEEP: graph.kind = "input", graph.name = "attention_mask"
// NOKEEP: error: --keep-input: the model has no input named 'mask'
// FREEZE: remark: not trained: 1 initializers matching --freeze '^head'
// FREEZE: graph.kind = "constant", graph.name = "head"
// NOMATCH: error: --freeze 'nothing' matches no trainable initializer
// ALL: error: --freeze '.' freezes every initializer: nothing to train
// PADNAME: error: --padding-idx: no embedding lookup (a Gather on axis 0) reads an initializer named 'head'
// PADVALUE: error: --padding-idx 'emb' is not NAME=INDEX with INDEX >= 0
// A padding index from the export's metadata need not find a lookup.
// KNOWN-NOT: error
// KNOWN-NOT: remark
// A table the export says nothing about (TorchScript) and that is looked
// up: the remark names the flag; a table nothing gathers from is not named.
// UNKNOWN: remark: embedding 'emb': the export does not say whether PyTorch's embedding had a padding_idx (TorchScript exports drop it); if it had, --padding-idx emb=INDEX keeps that row untrained, as PyTorch does
// UNKNOWN-NOT: embedding 'head'
// GIVEN-NOT: the export does not say
// GIVEN: remark: padding_idx 1 of embedding 'emb'

func.func @forward(%emb: tensor<8x4xf32> {graph.kind = "trainable", graph.name = "emb"},
                   %head: tensor<4x8xf32> {graph.kind = "trainable", graph.name = "head"},
                   %freq: tensor<2xf32> {graph.kind = "trainable", graph.name = "model.rotary.inv_freq"},
                   %ids: tensor<2x3xi64> {graph.kind = "input", graph.name = "input_ids"},
                   %mask: tensor<2x3xi64> {graph.kind = "input", graph.name = "attention_mask"},
                   %pos: tensor<2x3xi64> {graph.kind = "input", graph.name = "position_ids"})
    -> (tensor<2x3x8xf32>, tensor<2x3xi64>, tensor<2xf32>) attributes {graph.output_names = ["logits", "masked", "freq"]} {
  %e = graph.gather %emb, %ids {axis = 0 : i64} : (tensor<8x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
  %l = graph.matmul %e, %head : (tensor<2x3x4xf32>, tensor<4x8xf32>) -> tensor<2x3x8xf32>
  %m = graph.mul %mask, %pos : (tensor<2x3xi64>, tensor<2x3xi64>) -> tensor<2x3xi64>
  return %l, %m, %freq : tensor<2x3x8xf32>, tensor<2x3xi64>, tensor<2xf32>
}
