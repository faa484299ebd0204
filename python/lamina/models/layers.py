"""Transformer pieces shared by gpt2/bert/llama, written as exporters emit them."""

from __future__ import annotations

import numpy as np

from .builder import GraphBuilder


def linear(g: GraphBuilder, x: str, weight: str, bias: str | None = None,
           torch_layout: bool = True) -> str:
    """nn.Linear: weight is [out, in] as in the state_dict, so it is
    transposed in-graph (what exporters write without constant folding).
    GPT-2's Conv1D stores [in, out] and passes torch_layout=False."""
    w = g.op("Transpose", weight, perm=[1, 0]) if torch_layout else weight
    y = g.op("MatMul", x, w)
    # TorchScript puts the bias first: Add(bias, MatMul(...)).
    return g.op("Add", bias, y) if bias is not None else y


def split_heads(g: GraphBuilder, x: str, b, s, heads: int, head_dim: int,
                perm=(0, 2, 1, 3)) -> str:
    """[B, S, heads*hd] -> Reshape [B, S, heads, hd] -> Transpose(perm)."""
    return g.op("Transpose", g.reshape(x, [b, s, heads, head_dim]), perm=list(perm))


def merge_heads(g: GraphBuilder, x: str, b, s, width: int) -> str:
    """[B, heads, S, hd] -> Transpose -> Reshape [B, S, heads*hd]."""
    return g.reshape(g.op("Transpose", x, perm=[0, 2, 1, 3]), [b, s, width])


def attend(g: GraphBuilder, q: str, k_t: str, v: str, head_dim: int, *,
           scale_by_mul: bool = False, where_mask: str | None = None,
           add_mask: str | None = None) -> str:
    """softmax(q @ k_t / sqrt(hd) + mask) @ v on [B, heads, S, *] tensors.

    ``where_mask``: bool, True = masked (GPT-2 style torch.where).
    ``add_mask``: float additive mask (BERT/LLaMA style)."""
    scores = g.op("MatMul", q, k_t)
    if scale_by_mul:
        scores = g.op("Mul", scores, g.const(1.0 / np.sqrt(head_dim)))
    else:
        scores = g.op("Div", scores, g.const(np.sqrt(head_dim)))
    if where_mask is not None:
        scores = g.op("Where", where_mask, g.const(np.float32(g.mask_fill)), scores)
    if add_mask is not None:
        scores = g.op("Add", scores, add_mask)
    probs = g.op("Softmax", scores, axis=-1)
    return g.op("MatMul", probs, v)
