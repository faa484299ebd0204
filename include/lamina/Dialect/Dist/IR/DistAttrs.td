//===- DistAttrs.td - dist dialect attributes ---------------*- tablegen -*-===//
#ifndef LAMINA_DIST_ATTRS
#define LAMINA_DIST_ATTRS

include "lamina/Dialect/Dist/IR/DistBase.td"

class Dist_Attr<string name, string attrMnemonic> : AttrDef<Dist_Dialect, name> {
  let mnemonic = attrMnemonic;
}

def Dist_ModuleAttr : Dist_Attr<"Module", "module"> {
  let summary = "One module of the chain";
  let description = [{
    A module's name, its role and, for layers, the index of its body:
    isomorphic layers share one body (`-1`: its own, as for embedding and
    head).

    ```mlir
    #dist.module<"layer.3", layer, body = 0>
    #dist.module<"embedding", embedding>
    ```
  }];
  let parameters = (ins
    StringRefParameter<"module name">:$name,
    EnumParameter<Dist_ModuleKind>:$kind,
    DefaultValuedParameter<"int64_t", "-1">:$body
  );
  let assemblyFormat = "`<` $name `,` $kind (`,` `body` `=` $body^)? `>`";
  let genVerifyDecl = 1;
}

def Dist_PlacementAttr : Dist_Attr<"Placement", "placement"> {
  let summary = "Modules on pipeline ranks";
  let description = [{
    `ranks[m]` is the pipeline rank of module `m` of the function's
    `dist.chain`, one of `pp` ranks; `kind` says how it was chosen
    (`dist-partition`).

    ```mlir
    #dist.placement<pp = 2, contiguous, ranks = [0, 0, 1, 1]>
    ```
  }];
  let parameters = (ins
    "int64_t":$pp,
    EnumParameter<Dist_PlacementKind>:$kind,
    ArrayRefParameter<"int64_t">:$ranks
  );
  let assemblyFormat =
      "`<` `pp` `=` $pp `,` $kind `,` `ranks` `=` `[` $ranks `]` `>`";
  let genVerifyDecl = 1;
}

def Dist_OutlinedAttr : Dist_Attr<"Outlined", "outlined"> {
  let summary = "An outlined module function's contract, its `dist.outlined`";
  let description = [{
    What dist-outline-modules records on module k's `@fwd_k` and `@bwd_k`
    (the same attribute on both): the `module` index k, the module's
    `name` (its chain modules' names joined by `+`), the number of boundary
    inputs (`num_in`, the forward's arguments of kind `boundary`) and
    outputs (`num_out`), the residuals the forward returns after them for
    the backward (`num_residuals`) and, printed only when false, whether
    the backward recomputes the forward (`recompute`). dist-hoist-param-casts
    adds `copies_only = true` when every read of a weight goes through its
    low-precision copy (the runtime then leaves the f32 weights unbound).

    ```mlir
    func.func private @fwd_0(...) attributes {dist.outlined =
        #dist.outlined<module = 0, name = "embedding+layer.0", num_in = 0,
                       num_out = 1, num_residuals = 16, recompute = false>}
    ```
  }];
  let parameters = (ins
    AttrParameter<"int64_t", "the module's index k">:$module,
    StringRefParameter<"the module's name">:$name,
    AttrParameter<"int64_t", "boundary inputs">:$num_in,
    AttrParameter<"int64_t", "boundary outputs">:$num_out,
    AttrParameter<"int64_t", "residuals after the boundary outputs">:
        $num_residuals,
    DefaultValuedParameter<"bool", "true",
                           "whether the backward recomputes">:$recompute,
    DefaultValuedParameter<"bool", "false",
                           "every weight read goes through its copy">:
        $copies_only);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

#endif // LAMINA_DIST_ATTRS
