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

#endif // LAMINA_DIST_ATTRS
