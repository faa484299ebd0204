//===- DistBase.td - dist dialect definition ----------------*- tablegen -*-===//
//
// The dist dialect: how a model is split for distributed training. It
// records the module chain (which op belongs to which module) and the
// placement of modules on pipeline ranks as attributes on the graph IR
// (docs/modules.md), and the schedule of a training step as ops
// (DistOps.td, docs/schedules.md).
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_DIST_BASE
#define LAMINA_DIST_BASE

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def Dist_Dialect : Dialect {
  let name = "dist";
  let cppNamespace = "::lamina::ir::dist";
  let summary = "Modules, ranks and placements for distributed training";
  let description = [{
    Attributes that annotate a `func.func` over the graph dialect:

    * `dist.chain = [#dist.module<...>, ...]` on the function: the modules in
      chain order (an optional embedding, the layers, an optional head);
    * `dist.module = N : i64` on every op of its body: the op's module;
      along every def-use edge the index never decreases (the chain has no
      backward edge), which the verifier checks;
    * `dist.discovery = "names" | "metadata" | "structure" | "regex" | "none"`: how the
      chain was found;
    * `dist.placement = #dist.placement<...>` on the function: the pipeline
      rank of each module;
    * `dist.outlined = #dist.outlined<...>` on each outlined module function
      (`@fwd_k`, `@bwd_k`, dist-outline-modules): its module and the counts
      of its contract.

    And ops for the schedule of one training step: `dist.schedule` holds a
    `dist.rank` per global rank, each an ordered list of actions
    (`dist.forward`, `dist.backward`, `dist.send`, `dist.recv`,
    `dist.all_gather`, `dist.reduce_scatter`, `dist.all_reduce`,
    `dist.optimizer_step`), written by `dist-schedule` and
    `dist-insert-comm` and checked by `dist-verify-schedule`.
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasOperationAttrVerify = 1;
  let extraClassDeclaration = [{
    static constexpr ::llvm::StringLiteral kChainAttr = "dist.chain";
    static constexpr ::llvm::StringLiteral kModuleAttr = "dist.module";
    static constexpr ::llvm::StringLiteral kDiscoveryAttr = "dist.discovery";
    static constexpr ::llvm::StringLiteral kPlacementAttr = "dist.placement";
    static constexpr ::llvm::StringLiteral kOutlinedAttr = "dist.outlined";
    static constexpr ::llvm::StringLiteral kNumModulesAttr = "dist.num_modules";
  }];
}

def Dist_ModuleKind : I32EnumAttr<"ModuleKind", "role of a module in the chain", [
    I32EnumAttrCase<"Embedding", 0, "embedding">,
    I32EnumAttrCase<"Layer", 1, "layer">,
    I32EnumAttrCase<"Head", 2, "head">,
  ]> {
  let cppNamespace = "::lamina::ir::dist";
  let genSpecializedAttr = 0;
}

def Dist_PlacementKind : I32EnumAttr<"PlacementKind", "how modules map to ranks", [
    I32EnumAttrCase<"Contiguous", 0, "contiguous">,
    I32EnumAttrCase<"Modular", 1, "modular">,
    I32EnumAttrCase<"Balanced", 2, "balanced">,
  ]> {
  let cppNamespace = "::lamina::ir::dist";
  let genSpecializedAttr = 0;
}

#endif // LAMINA_DIST_BASE
