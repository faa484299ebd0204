"""BERT encoder (HF BertModel layout): post-LN, exact (Erf) GELU, padding mask."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from .builder import GraphBuilder
from .layers import attend, linear, merge_heads, split_heads

LN_EPS = 1e-12
TYPE_VOCAB = 2


def _ln(g: GraphBuilder, x: str, prefix: str, hidden: int) -> str:
    w = g.param(prefix + ".weight", [hidden], "ones")
    b = g.param(prefix + ".bias", [hidden])
    return g.layer_norm(x, w, b, LN_EPS)


def _dense(g: GraphBuilder, x: str, prefix: str, n_in: int, n_out: int) -> str:
    w = g.param(prefix + ".weight", [n_out, n_in])
    b = g.param(prefix + ".bias", [n_out])
    return linear(g, x, w, b)


def _self_attention(g, x, p, cfg, ext_mask):
    hidden, heads = cfg["hidden"], cfg["heads"]
    hd = hidden // heads
    b, s = g.batch_seq(x, cfg["batch"], cfg["seq"])
    proj = {}
    for name in ("query", "key", "value"):
        with g.scope(name):
            proj[name] = _dense(g, x, p + name, hidden, hidden)
    q = split_heads(g, proj["query"], b, s, heads, hd)
    k_t = split_heads(g, proj["key"], b, s, heads, hd, perm=(0, 2, 3, 1))
    v = split_heads(g, proj["value"], b, s, heads, hd)
    return merge_heads(g, attend(g, q, k_t, v, hd, add_mask=ext_mask), b, s, hidden)


def _layer(g: GraphBuilder, x: str, i: int, cfg: dict, ext_mask: str) -> str:
    hidden = cfg["hidden"]
    p = f"bert.encoder.layer.{i}."
    with g.scope("attention"):
        with g.scope("self"):
            h = _self_attention(g, x, p + "attention.self.", cfg, ext_mask)
        with g.scope("output"):
            with g.scope("dense"):
                h = _dense(g, h, p + "attention.output.dense", hidden, hidden)
            h = g.op("Add", h, x)
            with g.scope("LayerNorm"):
                x = _ln(g, h, p + "attention.output.LayerNorm", hidden)
    with g.scope("intermediate"):
        with g.scope("dense"):
            h = _dense(g, x, p + "intermediate.dense", hidden, 4 * hidden)
        with g.scope("intermediate_act_fn"):
            h = g.gelu_erf(h)
    with g.scope("output"):
        with g.scope("dense"):
            h = _dense(g, h, p + "output.dense", 4 * hidden, hidden)
        h = g.op("Add", h, x)
        with g.scope("LayerNorm"):
            return _ln(g, h, p + "output.LayerNorm", hidden)


def build(g: GraphBuilder, cfg: dict) -> None:
    hidden, vocab, seq = cfg["hidden"], cfg["vocab"], cfg["seq"]
    dims = ["batch", "seq"] if g.dynamic else [cfg["batch"], seq]
    ids = g.input("input_ids", TensorProto.INT64, dims)
    mask = g.input("attention_mask", TensorProto.INT64, dims)
    types = g.input("token_type_ids", TensorProto.INT64, dims)
    pe = "bert.embeddings."
    word = g.param(pe + "word_embeddings.weight", [vocab, hidden])
    # max_position_embeddings == --seq.
    posw = g.param(pe + "position_embeddings.weight", [seq, hidden])
    typew = g.param(pe + "token_type_embeddings.weight", [TYPE_VOCAB, hidden])
    with g.scope("bert"):
        # extended mask = (1 - mask[:, None, None, :]) * finfo.min
        m = g.unsqueeze(g.unsqueeze(mask, [1]), [2])
        m = g.op("Cast", m, to=TensorProto.FLOAT)
        ext = g.op("Mul", g.op("Sub", g.const(1.0), m),
                   g.const(np.finfo(np.float32).min))
        with g.scope("embeddings"):
            _, s = g.batch_seq(ids, cfg["batch"], seq)
            pos = g.positions(s)
            with g.scope("word_embeddings"):
                x = g.op("Gather", word, ids)
            with g.scope("token_type_embeddings"):
                t = g.op("Gather", typew, types)
            x = g.op("Add", x, t)
            with g.scope("position_embeddings"):
                pemb = g.op("Gather", posw, pos)
            x = g.op("Add", x, pemb)
            with g.scope("LayerNorm"):
                x = _ln(g, x, pe + "LayerNorm", hidden)
        with g.scope("encoder"):
            for i in range(cfg["layers"]):
                with g.scope(f"layer.{i}"):
                    x = _layer(g, x, i, cfg, ext)
    g.output(x, "last_hidden_state", TensorProto.FLOAT, dims + [hidden])
