"""LLaMA (HF LlamaForCausalLM layout): RMSNorm, rotary embeddings,
grouped-query attention, SiLU-gated MLP, no biases, untied LM head."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from .builder import GraphBuilder
from .layers import attend, linear, merge_heads, split_heads

RMS_EPS = 1e-5
ROPE_THETA = 10000.0
INT64_MAX = np.iinfo(np.int64).max


def intermediate_size(hidden: int) -> int:
    """LLaMA's 8/3 * hidden rounded up to a multiple of 32 (11008 for 4096
    uses multiple_of=256; 32 keeps tiny models tiny)."""
    return -(-int(8 * hidden / 3) // 32) * 32


def _rotary_tables(g: GraphBuilder, pos_ids: str, head_dim: int):
    """cos/sin [1, 1, S, hd] as LlamaRotaryEmbedding computes them."""
    inv = 1.0 / ROPE_THETA ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim)
    with g.scope("rotary_emb"):
        inv_e = g.const(inv[None, :, None])                       # [1, hd/2, 1]
        pos_e = g.op("Cast", g.unsqueeze(pos_ids, [1]), to=TensorProto.FLOAT)
        freqs = g.op("Transpose", g.op("MatMul", inv_e, pos_e), perm=[0, 2, 1])
        emb = g.op("Concat", freqs, freqs, axis=-1)               # [1, S, hd]
        cos, sin = g.op("Cos", emb), g.op("Sin", emb)
    return g.unsqueeze(cos, [1]), g.unsqueeze(sin, [1])


def _rotate_half(g: GraphBuilder, x: str, head_dim: int) -> str:
    half = head_dim // 2
    ax, one = g.i64([-1]), g.i64([1])
    x1 = g.op("Slice", x, g.i64([0]), g.i64([half]), ax, one)
    x2 = g.op("Slice", x, g.i64([half]), g.i64([INT64_MAX]), ax, one)
    return g.op("Concat", g.op("Neg", x2), x1, axis=-1)


def _apply_rotary(g, x, cos, sin, head_dim):
    return g.op("Add", g.op("Mul", x, cos),
                g.op("Mul", _rotate_half(g, x, head_dim), sin))


def _repeat_kv(g, x, b, s, kv_heads, n_rep, head_dim):
    """[B, K, S, hd] -> [B, K*n_rep, S, hd] via Unsqueeze/Expand/Reshape."""
    x = g.unsqueeze(x, [2])
    x = g.op("Expand", x, g.shape([b, kv_heads, n_rep, s, head_dim]))
    return g.reshape(x, [b, kv_heads * n_rep, s, head_dim])


def _attention(g, x, p, cfg, cos, sin, mask):
    hidden, heads, kv = cfg["hidden"], cfg["heads"], cfg["kv_heads"]
    hd = hidden // heads
    b, s = g.batch_seq(x, cfg["batch"], cfg["seq"])
    proj = {}
    for name, width in (("q", heads), ("k", kv), ("v", kv)):
        with g.scope(f"{name}_proj"):
            w = g.param(f"{p}{name}_proj.weight", [width * hd, hidden])
            proj[name] = linear(g, x, w)
    q = _apply_rotary(g, split_heads(g, proj["q"], b, s, heads, hd), cos, sin, hd)
    k = _apply_rotary(g, split_heads(g, proj["k"], b, s, kv, hd), cos, sin, hd)
    v = split_heads(g, proj["v"], b, s, kv, hd)
    if kv < heads:
        k = _repeat_kv(g, k, b, s, kv, heads // kv, hd)
        v = _repeat_kv(g, v, b, s, kv, heads // kv, hd)
    k_t = g.op("Transpose", k, perm=[0, 1, 3, 2])
    ctx = merge_heads(g, attend(g, q, k_t, v, hd, scale_by_mul=True, add_mask=mask),
                      b, s, hidden)
    with g.scope("o_proj"):
        return linear(g, ctx, g.param(p + "o_proj.weight", [hidden, hidden]))


def _mlp(g, x, p, hidden):
    inter = intermediate_size(hidden)
    with g.scope("gate_proj"):
        gate = linear(g, x, g.param(p + "gate_proj.weight", [inter, hidden]))
    with g.scope("act_fn"):
        gate = g.op("Mul", gate, g.op("Sigmoid", gate))            # SiLU
    with g.scope("up_proj"):
        up = linear(g, x, g.param(p + "up_proj.weight", [inter, hidden]))
    h = g.op("Mul", gate, up)
    with g.scope("down_proj"):
        return linear(g, h, g.param(p + "down_proj.weight", [hidden, inter]))


def build(g: GraphBuilder, cfg: dict) -> None:
    hidden, vocab, heads = cfg["hidden"], cfg["vocab"], cfg["heads"]
    dims = ["batch", "seq"] if g.dynamic else [cfg["batch"], cfg["seq"]]
    ids = g.input("input_ids", TensorProto.INT64, dims)
    embed = g.param("model.embed_tokens.weight", [vocab, hidden])
    with g.scope("model"):
        with g.scope("embed_tokens"):
            x = g.op("Gather", embed, ids)
        _, s = g.batch_seq(ids, cfg["batch"], cfg["seq"])
        cos, sin = _rotary_tables(g, g.positions(s), hidden // heads)
        # Additive causal mask [S, S]: finfo.min above the diagonal, else 0.
        mask = g.op("Where", g.causal_mask(s), g.const(np.finfo(np.float32).min),
                    g.const(0.0))
        for i in range(cfg["layers"]):
            p = f"model.layers.{i}."
            with g.scope(f"layers.{i}"):
                with g.scope("input_layernorm"):
                    h = g.rms_norm(x, g.param(p + "input_layernorm.weight",
                                              [hidden], "ones"), RMS_EPS)
                with g.scope("self_attn"):
                    h = _attention(g, h, p + "self_attn.", cfg, cos, sin, mask)
                x = g.op("Add", x, h)
                with g.scope("post_attention_layernorm"):
                    h = g.rms_norm(x, g.param(p + "post_attention_layernorm.weight",
                                              [hidden], "ones"), RMS_EPS)
                with g.scope("mlp"):
                    h = _mlp(g, h, p + "mlp.", hidden)
                x = g.op("Add", x, h)
        with g.scope("norm"):
            x = g.rms_norm(x, g.param("model.norm.weight", [hidden], "ones"), RMS_EPS)
    with g.scope("lm_head"):
        logits = linear(g, x, g.param("lm_head.weight", [vocab, hidden]))
    g.output(logits, "logits", TensorProto.FLOAT, dims + [vocab])
