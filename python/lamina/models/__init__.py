"""Builders of transformer ONNX models spelled the way real exporters do.

    from lamina.models import build, save
    model = build("gpt2", layers=2, opset=17, dynamic=True)
    save(model, "gpt2.onnx", external_data=True)

Only ``onnx.helper`` and numpy are used (no torch).
"""

from __future__ import annotations

import onnx

from . import bert, gpt2, llama
from .builder import GraphBuilder, is_topological
from .builder import shuffle_nodes as _shuffle_nodes
from .storage import save

ARCHS = {"gpt2": gpt2.build, "bert": bert.build, "llama": llama.build}

__all__ = ["ARCHS", "build", "save", "is_topological"]


def build(arch: str, *, layers: int = 2, hidden: int = 64, heads: int = 4,
          kv_heads: int | None = None, seq: int = 16, vocab: int = 128,
          batch: int = 2, dynamic: bool = False, opset: int = 17,
          ir_version: int | None = None, seed: int = 0,
          no_weights_data: bool = False,
          shuffle_nodes: bool = False,
          mask_fill: float | None = None) -> onnx.ModelProto:
    """Build a model. ``no_weights_data`` declares weights without allocating
    them (then ``save`` must be used, it points them at a sparse file);
    ``shuffle_nodes`` lists nodes in a random non-topological order;
    ``mask_fill`` is the value GPT-2's causal mask writes over masked scores
    (default the f32 minimum; -1e4 is the classic Transformers
    ``masked_bias``)."""
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; choose from {sorted(ARCHS)}")
    if kv_heads is None:
        kv_heads = heads
    elif arch != "llama" and kv_heads != heads:
        raise ValueError("--kv-heads applies to llama only")
    if min(layers, hidden, heads, kv_heads, seq, vocab, batch) < 1:
        raise ValueError("sizes must be positive")
    if hidden % heads or heads % kv_heads:
        raise ValueError("hidden must divide by heads, and heads by kv_heads")
    if arch == "llama" and (hidden // heads) % 2:
        raise ValueError("rotary embeddings need an even head size")
    cfg = dict(layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads,
               seq=seq, vocab=vocab, batch=batch)
    g = GraphBuilder(opset, seed=seed, dynamic=dynamic,
                     materialize=not no_weights_data)
    if mask_fill is not None:
        if arch != "gpt2":
            raise ValueError("--mask-fill applies to gpt2 only")
        g.mask_fill = mask_fill
    ARCHS[arch](g, cfg)
    doc = f"lamina.models {arch} " + " ".join(f"{k}={v}" for k, v in cfg.items())
    model = g.make_model(ir_version=ir_version, doc=doc)
    if shuffle_nodes:
        # Own RNG stream: weights are the same with or without shuffling.
        _shuffle_nodes(model, seed + 1)
    return model
