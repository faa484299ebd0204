"""CLI: python3 -m lamina.models ARCH -o OUT.onnx [options]"""

from __future__ import annotations

import argparse
import os
import sys
import time

import onnx

from . import ARCHS, build, save


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python3 -m lamina.models",
                                description="Build a transformer ONNX model.")
    p.add_argument("arch", choices=sorted(ARCHS))
    p.add_argument("-o", "--output", required=True, help="OUT.onnx")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=None,
                   help="llama only: grouped-query attention (default: --heads)")
    p.add_argument("--seq", type=int, default=16,
                   help="sequence length, also the max positions")
    p.add_argument("--vocab", type=int, default=128)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--dynamic", action="store_true",
                   help="symbolic 'batch' and 'seq' dims; shapes computed in-graph")
    p.add_argument("--opset", type=int, default=17, help="11..28")
    p.add_argument("--ir-version", type=int, default=None,
                   help="default: the minimum the opset allows")
    p.add_argument("--seed", type=int, default=0)
    store = p.add_mutually_exclusive_group()
    store.add_argument("--external-data", action="store_true",
                       help="weights in OUT.onnx.data next to the model")
    store.add_argument("--no-weights-data", action="store_true",
                       help="declare weights in a sparse OUT.onnx.data; "
                            "no weight is allocated or written")
    p.add_argument("--mask-fill", type=float, default=None,
                   help="gpt2: the value the causal mask writes over masked "
                        "scores (default: the f32 minimum; -1e4 is the "
                        "classic Transformers masked_bias)")
    p.add_argument("--shuffle-nodes", action="store_true",
                   help="list nodes in a random non-topological order")
    p.add_argument("--check", action="store_true",
                   help="run onnx.checker on the written file")
    return p


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    t0 = time.time()
    try:
        model = build(args.arch, layers=args.layers, hidden=args.hidden,
                      heads=args.heads, kv_heads=args.kv_heads, seq=args.seq,
                      vocab=args.vocab, batch=args.batch, dynamic=args.dynamic,
                      opset=args.opset, ir_version=args.ir_version,
                      seed=args.seed, no_weights_data=args.no_weights_data,
                      shuffle_nodes=args.shuffle_nodes,
                      mask_fill=args.mask_fill)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out_dir = os.path.dirname(os.path.abspath(args.output))
    os.makedirs(out_dir, exist_ok=True)
    save(model, args.output, external_data=args.external_data,
         no_weights_data=args.no_weights_data)
    if args.check:
        # The checker rejects non-topological graphs, so skip it when shuffled.
        if args.shuffle_nodes:
            print("note: --check skipped for --shuffle-nodes", file=sys.stderr)
        else:
            onnx.checker.check_model(args.output)
    n_params = sum(_numel(t) for t in model.graph.initializer)
    print(f"{args.output}: {args.arch} opset {args.opset} ir {model.ir_version}, "
          f"{len(model.graph.node)} nodes, {len(model.graph.initializer)} "
          f"initializers, {n_params:,} parameters, {time.time() - t0:.1f}s")
    return 0


def _numel(t) -> int:
    n = 1
    for d in t.dims:
        n *= d
    return n


if __name__ == "__main__":
    sys.exit(main())
