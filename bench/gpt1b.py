#!/usr/bin/env python3
"""Writes the ~1B-parameter GPT-2-architecture ONNX model of the GPU benchmark.

    PYTHONPATH=python python3 bench/gpt1b.py -o DIR/gpt1b.onnx
    PYTHONPATH=python python3 bench/gpt1b.py -o DIR/tiny.onnx --tiny

The graph is `python -m lamina.models gpt2 --dynamic` (HF GPT2LMHeadModel
layout: pre-LN blocks, Conv1D weights [in, out], the tanh GELU, a causal
`Where` mask, the LM head tied to `transformer.wte.weight`) with symbolic
`batch` and `seq` dims, so one file serves every batch size
(`--dim batch=B --dim seq=2048`). Default shape: hidden 2048, 16 layers, 16
heads, 2048 positions, vocabulary 50304 (GPT-2's 50257 padded up to a
multiple of 64, as nanoGPT does: the LM-head GEMM's n dim then tiles evenly;
token data only uses ids below 50257): 912,953,344 parameters, 3.65 GB f32.

The weights go to `<model>.data` next to the model (4096-aligned offsets),
written one tensor at a time, so peak memory is the largest tensor (wte,
412 MB), not the whole model. The values are exactly what
`lamina.models.build("gpt2", seed=S)` materialises in memory -- one
`numpy.random.default_rng(seed)` stream, N(0, 1) * 0.02 per initializer in
graph order, plus 1 for the layer-norm scales -- which `--self-test` checks
on a small shape.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

from lamina.models import build  # noqa: E402
from lamina.models.storage import _align, _point_at, PROTO_LIMIT  # noqa: E402

GPT1B = dict(layers=16, hidden=2048, heads=16, seq=2048, vocab=50304)
# The tiny GPT of test/e2e/train-tiny-gpt.test, for testing the scripts.
TINY = dict(layers=2, hidden=32, heads=4, seq=16, vocab=32)

# GraphBuilder.param(..., "ones"): only the layer-norm scales.
_ONES = re.compile(r"(^|\.)ln_(1|2|f)\.weight$")


def param_count(layers: int, hidden: int, heads: int, seq: int, vocab: int,
                **_) -> dict:
    """Parameters of the GPT-2 graph by kind (every one is an initializer)."""
    h = hidden
    per_layer = (2 * 2 * h            # ln_1, ln_2 weight + bias
                 + h * 3 * h + 3 * h  # c_attn
                 + h * h + h          # attn.c_proj
                 + h * 4 * h + 4 * h  # mlp.c_fc
                 + 4 * h * h + h)     # mlp.c_proj
    counts = dict(wte=vocab * h, wpe=seq * h, layers=layers * per_layer,
                  ln_f=2 * h)
    counts["total"] = sum(counts.values())
    return counts


def write(path: str, *, layers: int, hidden: int, heads: int, seq: int,
          vocab: int, seed: int = 0, opset: int = 17, quiet: bool = False
          ) -> dict:
    """Writes the model and its data file; returns facts about them."""
    t0 = time.time()
    model = build("gpt2", layers=layers, hidden=hidden, heads=heads, seq=seq,
                  vocab=vocab, batch=1, dynamic=True, opset=opset, seed=seed,
                  no_weights_data=True)
    path = os.path.abspath(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data_name = os.path.basename(path) + ".data"
    data_path = os.path.join(os.path.dirname(path), data_name)
    rng = np.random.default_rng(seed)
    n_params = 0
    with open(data_path, "wb") as f:
        for t in model.graph.initializer:
            shape = [int(d) for d in t.dims]
            # GraphBuilder.param, value for value.
            arr = rng.standard_normal(shape, dtype=np.float32)
            arr *= np.float32(0.02)
            if _ONES.search(t.name):
                arr += np.float32(1.0)
            offset = _align(f.tell())
            f.seek(offset)
            f.write(memoryview(arr).cast("B"))  # no copy
            _point_at(t, data_name, offset, arr.nbytes)
            n_params += arr.size
            del arr
        data_bytes = f.tell()
    if model.ByteSize() > PROTO_LIMIT:
        raise RuntimeError("graph exceeds protobuf's 2 GiB limit")
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    info = dict(path=path, data=data_path, params=n_params,
                data_bytes=data_bytes, onnx_bytes=os.path.getsize(path),
                nodes=len(model.graph.node), seconds=time.time() - t0,
                layers=layers, hidden=hidden, heads=heads, seq=seq,
                vocab=vocab, seed=seed, opset=opset)
    expected = param_count(layers, hidden, heads, seq, vocab)["total"]
    if n_params != expected:
        raise RuntimeError(f"{n_params} parameters written, {expected} "
                           "expected: the GPT-2 builder changed")
    if not quiet:
        print(f"{path}: {layers} layers, hidden {hidden}, {heads} heads, "
              f"seq {seq}, vocab {vocab}: {n_params:,} parameters, "
              f"{data_bytes / 1e9:.2f} GB data, {len(model.graph.node)} nodes, "
              f"{info['seconds']:.1f} s")
    return info


def self_test() -> int:
    """The streamed weights equal lamina.models.build's materialised ones."""
    import tempfile

    import onnx
    from onnx import numpy_helper

    cfg = dict(layers=2, hidden=32, heads=4, seq=16, vocab=40)
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "m.onnx")
        write(p, **cfg, seed=7, quiet=True)
        ours = onnx.load(p)  # loads the external data
        ref = build("gpt2", **cfg, batch=1, dynamic=True, seed=7)
        a = {t.name: numpy_helper.to_array(t) for t in ours.graph.initializer}
        b = {t.name: numpy_helper.to_array(t) for t in ref.graph.initializer}
        assert list(a) == list(b), "initializer names or order differ"
        for k in a:
            assert a[k].shape == b[k].shape and np.array_equal(a[k], b[k]), k
        ours_graph = onnx.load(p, load_external_data=False).graph
        assert [n.op_type for n in ours_graph.node] == \
            [n.op_type for n in ref.graph.node]
        onnx.checker.check_model(p)
        n = sum(v.size for v in a.values())
        assert n == param_count(**cfg)["total"], (n, param_count(**cfg))
    print(f"self-test ok: {len(a)} initializers, {n} parameters equal "
          "lamina.models.build's")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-o", "--output", help="OUT.onnx (data: OUT.onnx.data)")
    p.add_argument("--tiny", action="store_true",
                   help="the tiny GPT of train-tiny-gpt.test instead")
    for k, v in GPT1B.items():
        p.add_argument("--" + k, type=int, default=None, help=f"default {v}")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--self-test", action="store_true")
    a = p.parse_args(argv)
    if a.self_test:
        return self_test()
    if not a.output:
        p.error("-o is required")
    cfg = dict(TINY if a.tiny else GPT1B)
    for k in GPT1B:
        if getattr(a, k) is not None:
            cfg[k] = getattr(a, k)
    write(a.output, **cfg, seed=a.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
