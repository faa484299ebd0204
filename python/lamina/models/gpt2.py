"""GPT-2 (HF GPT2LMHeadModel layout): pre-LN blocks, Conv1D weights, tied LM head."""

from __future__ import annotations

from onnx import TensorProto

from .builder import GraphBuilder
from .layers import attend, linear, merge_heads, split_heads

LN_EPS = 1e-5


def _ln(g: GraphBuilder, x: str, prefix: str, hidden: int) -> str:
    w = g.param(prefix + ".weight", [hidden], "ones")
    b = g.param(prefix + ".bias", [hidden])
    return g.layer_norm(x, w, b, LN_EPS)


def _attention(g: GraphBuilder, x: str, p: str, cfg: dict, mask: str) -> str:
    hidden, heads = cfg["hidden"], cfg["heads"]
    hd = hidden // heads
    b, s = g.batch_seq(x, cfg["batch"], cfg["seq"])
    with g.scope("c_attn"):
        # Conv1D: weight is [in, out], no transpose needed.
        qkv = linear(g, x, g.param(p + "c_attn.weight", [hidden, 3 * hidden]),
                     g.param(p + "c_attn.bias", [3 * hidden]), torch_layout=False)
    q, k, v = g.split(qkv, [hidden] * 3, axis=2)
    q = split_heads(g, q, b, s, heads, hd)
    k_t = split_heads(g, k, b, s, heads, hd, perm=(0, 2, 3, 1))
    v = split_heads(g, v, b, s, heads, hd)
    ctx = merge_heads(g, attend(g, q, k_t, v, hd, where_mask=mask), b, s, hidden)
    with g.scope("c_proj"):
        return linear(g, ctx, g.param(p + "c_proj.weight", [hidden, hidden]),
                      g.param(p + "c_proj.bias", [hidden]), torch_layout=False)


def _mlp(g: GraphBuilder, x: str, p: str, hidden: int) -> str:
    inner = 4 * hidden
    with g.scope("c_fc"):
        h = linear(g, x, g.param(p + "c_fc.weight", [hidden, inner]),
                   g.param(p + "c_fc.bias", [inner]), torch_layout=False)
    with g.scope("act"):
        h = g.gelu_tanh(h)
    with g.scope("c_proj"):
        return linear(g, h, g.param(p + "c_proj.weight", [inner, hidden]),
                      g.param(p + "c_proj.bias", [hidden]), torch_layout=False)


def build(g: GraphBuilder, cfg: dict) -> None:
    hidden, vocab, seq = cfg["hidden"], cfg["vocab"], cfg["seq"]
    dims = ["batch", "seq"] if g.dynamic else [cfg["batch"], seq]
    ids = g.input("input_ids", TensorProto.INT64, dims)
    wte = g.param("transformer.wte.weight", [vocab, hidden])
    # n_positions == --seq: the longest sequence the model accepts.
    wpe = g.param("transformer.wpe.weight", [seq, hidden])
    with g.scope("transformer"):
        _, s = g.batch_seq(ids, cfg["batch"], seq)
        pos = g.positions(s)
        with g.scope("wte"):
            tok = g.op("Gather", wte, ids)
        with g.scope("wpe"):
            pe = g.op("Gather", wpe, pos)
        x = g.op("Add", tok, pe)
        mask = g.causal_mask(s)
        for i in range(cfg["layers"]):
            p = f"transformer.h.{i}."
            with g.scope(f"h.{i}"):
                with g.scope("ln_1"):
                    h = _ln(g, x, p + "ln_1", hidden)
                with g.scope("attn"):
                    h = _attention(g, h, p + "attn.", cfg, mask)
                x = g.op("Add", h, x)
                with g.scope("ln_2"):
                    h = _ln(g, x, p + "ln_2", hidden)
                with g.scope("mlp"):
                    h = _mlp(g, h, p + "mlp.", hidden)
                x = g.op("Add", x, h)
        with g.scope("ln_f"):
            x = _ln(g, x, "transformer.ln_f", hidden)
    with g.scope("lm_head"):
        # Tied weights: the head reads wte through a Transpose.
        logits = g.op("MatMul", x, g.op("Transpose", wte, perm=[1, 0]))
    g.output(logits, "logits", TensorProto.FLOAT, dims + [vocab])
