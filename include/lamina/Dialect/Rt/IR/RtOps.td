//===- RtOps.td - rt dialect: runtime calls on buffers -----*- tablegen -*-===//
//
// The rt dialect is one step above the emitted C++: buffers are memrefs that
// live at fixed offsets of a per-function arena (the static memory plan),
// and computation is a sequence of calls into the Lamina runtime library.
// convert-graph-to-rt produces it; convert-rt-to-emitc turns it into EmitC.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_RT_OPS
#define LAMINA_RT_OPS

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Rt_Dialect : Dialect {
  let name = "rt";
  let cppNamespace = "::lamina::ir::rt";
  let summary = "Runtime calls on arena buffers";
  let description = [{
    A function in the rt dialect takes an `!rt.arena` (the scratch memory of
    one call, whose size the memory plan fixed) and its parameters and inputs
    as memrefs; every intermediate is an `rt.view` at a constant offset of the
    arena, and every op of the model is an `rt.call` of a runtime kernel.
    The function attribute `rt.arena_bytes` is the arena size (the peak of
    the memory plan); `rt.tensor_bytes` is what the same values would need
    without reuse.
  }];
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
}

class Rt_Op<string mnemonic, list<Trait> traits = []>
    : Op<Rt_Dialect, mnemonic, traits>;

def Rt_ArenaType : TypeDef<Rt_Dialect, "Arena"> {
  let mnemonic = "arena";
  let summary = "the scratch memory of one function call";
}

def Rt_DistAttr : AttrDef<Rt_Dialect, "Dist"> {
  let mnemonic = "dist";
  let summary = "A distributed program's settings, the module's `rt.dist`";
  let description = [{
    What convert-dist-to-rt records of the training `dist.program` for
    rt-plan-step-buffers and convert-rt-to-emitc: the schedule's `kind`,
    the number of `modules`, the pipeline (`pp`) and data-parallel (`dp`)
    ranks, the `micro_batches`, the ZeRO level (`zero`), each module's
    pipeline rank (`placement`), each module's flat parameter layout in
    elements (`flat_params`) and, printed only above 1, the
    tensor-parallel group's size (`tp`).

    ```mlir
    module attributes {rt.dist = #rt.dist<kind = "1f1b", modules = 2, pp = 2,
        dp = 1, micro_batches = 2, zero = 0, placement = [0, 1],
        flat_params = [16, 16]>}
    ```
  }];
  let parameters = (ins
    StringRefParameter<"the schedule's name">:$kind,
    AttrParameter<"int64_t", "the number of modules">:$modules,
    AttrParameter<"int64_t", "pipeline ranks">:$pp,
    AttrParameter<"int64_t", "data-parallel replicas">:$dp,
    AttrParameter<"int64_t", "micro-batches per step">:$micro_batches,
    AttrParameter<"int64_t", "the ZeRO level, 0 to 3">:$zero,
    AttrParameter<"::mlir::DenseI64ArrayAttr",
                  "each module's pipeline rank">:$placement,
    AttrParameter<"::mlir::DenseI64ArrayAttr",
                  "each module's flat parameter count">:$flat_params,
    DefaultValuedParameter<"int64_t", "1",
                           "the tensor-parallel group's size">:$tp);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

// Buffers: dense row-major memrefs with static shapes (identity layout).
def Rt_Buffer : MemRefRankOf<[AnyFloat, AnyInteger], [0, 1, 2, 3, 4, 5, 6, 7, 8]>;

def Rt_ViewOp : Rt_Op<"view", [Pure]> {
  let summary = "a buffer at a fixed byte offset of the arena";
  let description = [{
    ```mlir
    %0 = rt.view %arena[1024] : memref<4x768xf32>
    ```
    Two views may overlap only when the memory plan proved their values are
    never live at the same time (or they alias on purpose, as a reshape does).
  }];
  let arguments = (ins Rt_ArenaType:$arena, I64Attr:$offset);
  let results = (outs Rt_Buffer:$result);
  let assemblyFormat = "$arena `[` $offset `]` attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Rt_ConstantOp : Rt_Op<"constant", [Pure]> {
  let summary = "a read-only buffer in static storage";
  let description = [{
    Holds a small constant of the model (a folded shape, a mask); weights are
    never constants: they are function arguments read from the ONNX file at
    start-up.
    ```mlir
    %c = rt.constant dense<[0, 2, 1]> : memref<3xi64>
    ```
  }];
  let arguments = (ins ElementsAttr:$value);
  let results = (outs Rt_Buffer:$result);
  let assemblyFormat = "$value attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Rt_CallOp : Rt_Op<"call"> {
  let summary = "a call of a runtime kernel";
  let description = [{
    `callee` is a function of the Lamina runtime (`include/lamina/Runtime/`).
    `args` gives the C++ argument list in order, as in `emitc.call_opaque`:
    an `index` attribute refers to an operand (passed as a
    `lamina::rt::Tensor` view), an integer, float or bool attribute is a
    literal, a `DenseI64ArrayAttr` is a constant `int64_t` array, a string is
    a C++ enumerator (`lamina::rt::UnaryOp::Exp`), and a unit attribute is an
    absent optional tensor (`nullptr`). The trailing operands, one per
    result of the graph op the call computes (one for most ops, two or
    three for the norms' fused gradients), are written; the others are
    read. `where` names the ONNX node for error messages.
    ```mlir
    rt.call "lamina::rt::unary"(%x, %y)
        {args = ["lamina::rt::UnaryOp::Exp", 0 : index, 1 : index],
         where = "node 'Exp_3' (graph.exp)"} : memref<4xf32>, memref<4xf32>
    ```
  }];
  let arguments = (ins StrAttr:$callee, ArrayAttr:$args, StrAttr:$where,
                       Variadic<Rt_Buffer>:$buffers);
  let assemblyFormat = [{
    $callee `(` $buffers `)` attr-dict `:` type($buffers)
  }];
  let hasVerifier = 1;
}

include "lamina/Dialect/Rt/IR/RtStepOps.td"

#endif // LAMINA_RT_OPS
