#!/usr/bin/env python3
"""Reference gradients of a tiny GPT-2 from an independent autodiff (JAX).

Lamina differentiates the imported graph with its own rules
(lib/Dialect/Graph/IR/GraphGradients.cpp). This script checks them against
JAX: it re-implements the tiny GPT-2 forward by hand, reading the ONNX
initializers by name (nothing of Lamina's import or graph is used), adds the
loss of `graph-add-loss kind=causal-lm` (logits of positions 0..S-2 against
the tokens 1..S-1, mean softmax cross-entropy over all B*(S-1) positions),
and records the loss and every parameter's gradient, computed in f64, for a
fixed token batch.

Subcommands:

  generate MODEL.onnx REF.json   (needs jax, onnx, numpy; run once)
      Builds the model with `python3 -m lamina.models gpt2` (the config
      below), replaces every initializer with seeded random values of a
      larger scale (so attention is far from uniform and biases and norm
      parameters are not trivial), writes MODEL.onnx and REF.json. With
      onnxruntime installed, the JAX logits are first checked against it.

  ids REF.json OUT.npy           (standard library only)
      Writes the reference's token batch as an int64 .npy for lamina-eval.

  check REF.json DIR [--rtol R]  (standard library only)
      Compares DIR/loss.npy and DIR/grad%3A<name>.npy, as
      `lamina-eval --loss causal-lm` writes them, with the reference: per
      parameter max|lamina - ref| / max|ref| <= R (default 1e-4), and the loss
      to R relative. Prints one line per tensor and `ok`, or fails.

The committed reference (test/e2e/reference-grads.test) was made with:

  python3 -m venv /tmp/jaxenv && /tmp/jaxenv/bin/pip install jax onnx onnxruntime
  PYTHONPATH=python /tmp/jaxenv/bin/python scripts/reference-grads.py generate \\
      test/Inputs/reference/tiny-gpt2.onnx test/Inputs/reference/tiny-gpt2-grads.json

(jax 0.10.2, onnx 1.23.2, numpy 2.4.6, CPU). Regenerating needs no
bit-stability: the model and the values are committed together.
"""

from __future__ import annotations

import json
import math
import struct
import sys

# The tiny GPT-2 (two blocks, so the residual stream crosses a layer).
CONFIG = dict(layers=2, hidden=16, heads=2, seq=8, batch=2, vocab=32)
SEED = 7
LN_EPS = 1e-5
GELU_C = math.sqrt(2.0 / math.pi)


# --------------------------------------------------------------------- JAX
def _forward(jnp, p: dict, ids, cfg: dict):
    """GPT-2 logits [B, S, V] from parameters named as in the state_dict."""
    import numpy as np
    b, s = ids.shape
    d, h = cfg["hidden"], cfg["heads"]
    hd = d // h

    def ln(x, name):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / jnp.sqrt(var + LN_EPS) * p[name + ".weight"] + p[name + ".bias"]

    def heads(t):  # [B, S, D] -> [B, H, S, hd]
        return t.reshape(b, s, h, hd).transpose(0, 2, 1, 3)

    masked = jnp.triu(jnp.ones((s, s), dtype=bool), k=1)  # future positions
    x = p["transformer.wte.weight"][ids] + p["transformer.wpe.weight"][jnp.arange(s)]
    for i in range(cfg["layers"]):
        pre = f"transformer.h.{i}."
        a = ln(x, pre + "ln_1")
        qkv = a @ p[pre + "attn.c_attn.weight"] + p[pre + "attn.c_attn.bias"]
        q, k, v = (heads(t) for t in jnp.split(qkv, 3, axis=-1))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd)
        scores = jnp.where(masked, float(np.finfo(np.float32).min), scores)
        probs = jnp.exp(scores - scores.max(-1, keepdims=True))
        probs = probs / probs.sum(-1, keepdims=True)
        ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(b, s, d)
        x = x + ctx @ p[pre + "attn.c_proj.weight"] + p[pre + "attn.c_proj.bias"]
        m = ln(x, pre + "ln_2") @ p[pre + "mlp.c_fc.weight"] + p[pre + "mlp.c_fc.bias"]
        m = 0.5 * m * (1 + jnp.tanh(GELU_C * (m + 0.044715 * m ** 3)))
        x = x + m @ p[pre + "mlp.c_proj.weight"] + p[pre + "mlp.c_proj.bias"]
    x = ln(x, "transformer.ln_f")
    return x @ p["transformer.wte.weight"].T  # tied head


def _causal_lm_loss(jnp, logits, ids):
    """graph-add-loss kind=causal-lm: no label is -100 here, so the mean is
    over all B*(S-1) positions."""
    x = logits[:, :-1, :]
    y = ids[:, 1:]
    logp = x - x.max(-1, keepdims=True)
    logp = logp - jnp.log(jnp.exp(logp).sum(-1, keepdims=True))
    picked = jnp.take_along_axis(logp, y[..., None], axis=-1)[..., 0]
    return -picked.mean()


def generate(model_path: str, ref_path: str) -> int:
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import numpy as np
    import onnx
    from onnx import numpy_helper

    from lamina.models import build

    cfg = CONFIG
    model = build("gpt2", layers=cfg["layers"], hidden=cfg["hidden"],
                  heads=cfg["heads"], seq=cfg["seq"], vocab=cfg["vocab"],
                  batch=cfg["batch"], seed=SEED)
    rng = np.random.default_rng(SEED)
    params = {}
    for init in model.graph.initializer:
        if init.data_type != onnx.TensorProto.FLOAT:
            continue
        shape = tuple(init.dims)
        if init.name.endswith(".weight") and len(shape) == 1:  # norm scales
            arr = 1 + 0.2 * rng.standard_normal(shape)
        elif len(shape) == 1:  # biases
            arr = 0.1 * rng.standard_normal(shape)
        else:
            arr = rng.standard_normal(shape) / math.sqrt(shape[0]) * 1.5
        arr = arr.astype(np.float32)
        init.CopyFrom(numpy_helper.from_array(arr, init.name))
        params[init.name] = arr
    onnx.checker.check_model(model)
    onnx.save(model, model_path)

    ids = rng.integers(0, cfg["vocab"], size=(cfg["batch"], cfg["seq"]), dtype=np.int64)
    p64 = {k: jnp.asarray(v, dtype=jnp.float64) for k, v in params.items()}
    logits = np.asarray(_forward(jnp, p64, jnp.asarray(ids), cfg))

    try:  # the hand-written forward against the ONNX graph itself
        import onnxruntime as ort
        sess = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
        ort_logits = sess.run(["logits"], {"input_ids": ids})[0]
        err = np.abs(ort_logits - logits).max() / np.abs(logits).max()
        print(f"logits vs onnxruntime: max rel error {err:.2e}")
        if err > 1e-5:
            print("error: the JAX forward disagrees with the ONNX model", file=sys.stderr)
            return 1
    except ImportError:
        print("onnxruntime not installed: logits not cross-checked")

    loss_fn = lambda p: _causal_lm_loss(jnp, _forward(jnp, p, jnp.asarray(ids), cfg),
                                        jnp.asarray(ids))
    loss, grads = jax.value_and_grad(loss_fn)(p64)
    ref = {
        "about": "scripts/reference-grads.py generate: JAX (f64) gradients of "
                 "the causal-LM loss of tiny-gpt2.onnx for input_ids",
        "config": cfg,
        "input_ids": ids.tolist(),
        "loss": float(loss),
        "grads": {name: {"shape": list(params[name].shape),
                         "values": [float(f"{v:.9g}") for v in
                                    np.asarray(grads[name]).ravel()]}
                  for name in params},
    }
    with open(ref_path, "w") as f:
        json.dump(ref, f, separators=(",", ":"))
        f.write("\n")
    print(f"loss {float(loss):.6f}; {len(params)} parameters -> {ref_path}")
    return 0


# ------------------------------------------------------ standard library
def _npy_header(dtype: str, shape) -> bytes:
    shape_text = "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
    header = f"{{'descr': '{dtype}', 'fortran_order': False, 'shape': {shape_text}, }}"
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode()


def _read_npy(path: str):
    """(shape, values) of a C-order little-endian f4/f8 .npy file."""
    import ast
    with open(path, "rb") as f:
        data = f.read()
    if data[:6] != b"\x93NUMPY":
        raise ValueError(f"{path}: not a .npy file")
    if data[6] == 1:
        (n,), start = struct.unpack("<H", data[8:10]), 10
    else:
        (n,), start = struct.unpack("<I", data[8:12]), 12
    header = ast.literal_eval(data[start:start + n].decode("latin1"))
    code = {"<f4": "f", "<f8": "d"}.get(header["descr"])
    if code is None or header["fortran_order"]:
        raise ValueError(f"{path}: unsupported dtype {header['descr']}")
    shape = list(header["shape"])
    count = math.prod(shape)
    values = struct.unpack(f"<{count}{code}", data[start + n:start + n + count * struct.calcsize(code)])
    return shape, values


def write_ids(ref_path: str, out_path: str) -> int:
    with open(ref_path) as f:
        ids = json.load(f)["input_ids"]
    flat = [v for row in ids for v in row]
    with open(out_path, "wb") as f:
        f.write(_npy_header("<i8", [len(ids), len(ids[0])]))
        f.write(struct.pack(f"<{len(flat)}q", *flat))
    return 0


def _file_name(name: str) -> str:
    """rt::outputFileName: bytes outside [A-Za-z0-9_-.] become %XX."""
    out = []
    for i, c in enumerate(name.encode()):
        ch = chr(c)
        if ch.isascii() and (ch.isalnum() or ch in "_-" or (ch == "." and i > 0)):
            out.append(ch)
        else:
            out.append(f"%{c:02X}")
    return "".join(out)


def check(ref_path: str, out_dir: str, rtol: float) -> int:
    with open(ref_path) as f:
        ref = json.load(f)
    failed = False
    _, (loss,) = _read_npy(f"{out_dir}/loss.npy")
    err = abs(loss - ref["loss"]) / abs(ref["loss"])
    print(f"loss: lamina {loss:.7f} reference {ref['loss']:.7f} rel error {err:.2e}")
    failed |= not err <= rtol
    worst = 0.0
    for name, g in ref["grads"].items():
        shape, values = _read_npy(f"{out_dir}/{_file_name('grad:' + name)}.npy")
        if shape != g["shape"]:
            print(f"{name}: shape {shape}, reference {g['shape']}")
            failed = True
            continue
        scale = max(abs(v) for v in g["values"])
        diff = max(abs(a - b) for a, b in zip(values, g["values"]))
        err = diff / scale if scale else diff
        worst = max(worst, err)
        print(f"grad:{name}: max|ref| {scale:.3e} rel error {err:.2e}")
        failed |= not err <= rtol
    print(f"{len(ref['grads'])} gradients, worst rel error {worst:.2e} (tolerance {rtol:g})")
    print("FAILED" if failed else "ok")
    return 1 if failed else 0


def main(argv) -> int:
    if len(argv) >= 3 and argv[0] == "generate":
        return generate(argv[1], argv[2])
    if len(argv) == 3 and argv[0] == "ids":
        return write_ids(argv[1], argv[2])
    if len(argv) in (3, 5) and argv[0] == "check":
        rtol = float(argv[4]) if len(argv) == 5 and argv[3] == "--rtol" else 1e-4
        return check(argv[1], argv[2], rtol)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
