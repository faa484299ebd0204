#!/usr/bin/env python3
"""Self-test of lamina.models and lamina.testing (no pytest needed).

    python3 python/tests/test_models.py [-v]

Builds tiny models for every arch x opset x static/dynamic, checks them with
onnx.checker, runs them in onnxruntime, and checks storage modes, the
175B-shaped benchmark model and the bad-model fixtures. Ends with a
'N passed, N failed, N skipped' line; exits non-zero on any failure.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from lamina.models import build, is_topological, save  # noqa: E402
from lamina.models.storage import ALIGN  # noqa: E402
from lamina.testing import bad_models  # noqa: E402

ARCHS = ("gpt2", "bert", "llama")
OPSETS = (13, 17, 18, 23)
TINY = dict(layers=2, hidden=32, heads=4, seq=8, vocab=64, batch=2, seed=7)
RESULTS = {"passed": 0, "failed": 0, "skipped": 0}
VERBOSE = "-v" in sys.argv


class Skip(Exception):
    pass


def check(name, fn, *args):
    t0 = time.time()
    try:
        fn(*args)
    except Skip as e:
        RESULTS["skipped"] += 1
        print(f"SKIP {name}: {e}")
        return
    except Exception:  # noqa: BLE001 - report every failure and go on
        RESULTS["failed"] += 1
        print(f"FAIL {name}")
        traceback.print_exc(limit=4)
        return
    RESULTS["passed"] += 1
    if VERBOSE:
        print(f"ok   {name} ({time.time() - t0:.2f}s)")


# ----------------------------------------------------------------- helpers
_ORT_OPSETS: dict[int, str | None] = {}


def ort_lacks(opset: int) -> str | None:
    """Why this onnxruntime cannot load a model of ``opset`` (None if it can)."""
    if opset not in _ORT_OPSETS:
        node = helper.make_node("Relu", ["x"], ["y"])
        vi = [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [1]) for n in "xy"]
        m = helper.make_model(helper.make_graph([node], "probe", vi[:1], vi[1:]),
                              opset_imports=[helper.make_opsetid("", opset)])
        try:
            m.ir_version = helper.find_min_ir_version_for(m.opset_import)
            ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
            _ORT_OPSETS[opset] = None
        except Exception as e:  # noqa: BLE001
            _ORT_OPSETS[opset] = (f"onnxruntime {ort.__version__} cannot load opset "
                                  f"{opset}: {str(e).splitlines()[0][:120]}")
    return _ORT_OPSETS[opset]


def feeds(arch, batch, seq, vocab, rng):
    ids = rng.integers(0, vocab, (batch, seq)).astype(np.int64)
    f = {"input_ids": ids}
    if arch == "bert":
        mask = np.ones((batch, seq), np.int64)
        mask[0, seq // 2:] = 0  # padding in the first row
        f["attention_mask"] = mask
        f["token_type_ids"] = (np.arange(seq)[None, :] >= seq // 2).astype(np.int64).repeat(batch, 0)
    return f


def run(model_or_path, f):
    src = model_or_path if isinstance(model_or_path, str) else model_or_path.SerializeToString()
    sess = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
    return sess.run(None, f)[0]


def out_width(arch, cfg):
    return cfg["hidden"] if arch == "bert" else cfg["vocab"]


def tiny(arch, **kw):
    cfg = dict(TINY, **kw)
    if arch == "llama":
        cfg.setdefault("kv_heads", 2)  # exercise grouped-query attention
    return cfg


# ------------------------------------------------------------ model checks
_REFERENCE: dict[str, np.ndarray] = {}


def check_arch(arch, opset, dynamic):
    cfg = tiny(arch)
    model = build(arch, opset=opset, dynamic=dynamic, **cfg)
    onnx.checker.check_model(model, full_check=True)
    assert model.ir_version == helper.find_min_ir_version_for(model.opset_import)
    ops = {n.op_type for n in model.graph.node}
    assert ("Shape" in ops) == dynamic, "Shape ops iff --dynamic"
    _check_spelling(arch, opset, model)
    reason = ort_lacks(opset)
    if reason:
        raise Skip(reason + " (checker passed)")
    rng = np.random.default_rng(0)
    f = feeds(arch, cfg["batch"], cfg["seq"], cfg["vocab"], rng)
    out = run(model, f)
    assert out.shape == (cfg["batch"], cfg["seq"], out_width(arch, cfg)), out.shape
    assert np.isfinite(out).all()
    # Same seed => same weights, so every opset spelling and static/dynamic
    # variant must compute the same function.
    ref = _REFERENCE.setdefault(arch, out)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    if dynamic:  # other sizes than the ones it was built with
        f2 = feeds(arch, 3, 5, cfg["vocab"], rng)
        out2 = run(model, f2)
        assert out2.shape == (3, 5, out_width(arch, cfg)) and np.isfinite(out2).all()


def _check_spelling(arch, opset, model):
    ops = {n.op_type for n in model.graph.node}
    by_op = {}
    for n in model.graph.node:
        by_op.setdefault(n.op_type, n)
    rm = by_op.get("ReduceMean")
    if rm is not None:
        has_attr = any(a.name == "axes" for a in rm.attribute)
        assert has_attr == (opset < 18) and (len(rm.input) == 2) == (opset >= 18)
    uq = by_op["Unsqueeze"] if "Unsqueeze" in by_op else None
    if uq is not None:
        assert (len(uq.input) == 2) == (opset >= 13)
    if arch in ("gpt2", "bert"):
        assert ("LayerNormalization" in ops) == (opset >= 17)
    if arch == "gpt2":
        assert ("Gelu" in ops) == (opset >= 20) and ("Tanh" in ops) == (opset < 20)
        assert "/transformer/h.0/attn/c_attn/MatMul" in {n.name for n in model.graph.node}
    if arch == "bert":
        assert "Erf" in ops and "Gelu" not in ops
    if arch == "llama":
        assert ("RMSNormalization" in ops) == (opset >= 23)
        assert {"Cos", "Sin", "Neg", "Slice", "Expand", "Sigmoid"} <= ops
    names = {t.name for t in model.graph.initializer}
    expect = {"gpt2": "transformer.h.0.attn.c_attn.weight",
              "bert": "bert.encoder.layer.0.attention.self.query.weight",
              "llama": "model.layers.0.self_attn.q_proj.weight"}[arch]
    assert expect in names, sorted(names)[:5]


def check_all_opsets(arch):
    """Every opset 11..28 passes the checker (and ORT where it has the opset)."""
    cfg = tiny(arch, layers=1)
    for opset in range(11, 29):
        for dynamic in (False, True):
            model = build(arch, opset=opset, dynamic=dynamic, **cfg)
            onnx.checker.check_model(model, full_check=True)
            if not ort_lacks(opset):
                out = run(model, feeds(arch, 2, 8, cfg["vocab"], np.random.default_rng(1)))
                assert np.isfinite(out).all(), (opset, dynamic)


def check_causal(arch):
    """Changing the last token leaves earlier positions untouched."""
    cfg = tiny(arch)
    model = build(arch, **cfg)
    f = feeds(arch, 2, cfg["seq"], cfg["vocab"], np.random.default_rng(3))
    a = run(model, f)
    f["input_ids"][:, -1] = (f["input_ids"][:, -1] + 1) % cfg["vocab"]
    b = run(model, f)
    np.testing.assert_allclose(a[:, :-1], b[:, :-1], atol=1e-5)
    assert np.abs(a[:, -1] - b[:, -1]).max() > 1e-6


def check_bert_padding():
    """Tokens under attention_mask == 0 do not influence the others."""
    cfg = tiny("bert")
    model = build("bert", dynamic=True, **cfg)
    f = feeds("bert", 2, cfg["seq"], cfg["vocab"], np.random.default_rng(4))
    a = run(model, f)
    half = cfg["seq"] // 2
    f["input_ids"][0, half:] = (f["input_ids"][0, half:] + 1) % cfg["vocab"]
    b = run(model, f)
    np.testing.assert_allclose(a[0, :half], b[0, :half], atol=1e-5)


def check_kv_heads_validation():
    for bad in (dict(arch="llama", heads=4, kv_heads=3),
                dict(arch="gpt2", heads=4, kv_heads=2),
                dict(arch="gpt2", hidden=30, heads=4)):
        try:
            build(**bad)
        except ValueError:
            continue
        raise AssertionError(f"accepted {bad}")


# ---------------------------------------------------------- storage checks
def _ext_entries(t):
    return {e.key: e.value for e in t.external_data}


def check_external_data(tmp):
    cfg = tiny("llama")
    model = build("llama", opset=18, **cfg)
    path = os.path.join(tmp, "ext", "llama.onnx")
    os.makedirs(os.path.dirname(path))
    save(model, path, external_data=True)
    raw = onnx.load(path, load_external_data=False)
    for t in raw.graph.initializer:
        e = _ext_entries(t)
        assert e["location"] == "llama.onnx.data", e
        assert int(e["offset"]) % ALIGN == 0 and int(e["length"]) > 0
    onnx.checker.check_model(path, full_check=True)
    f = feeds("llama", 2, cfg["seq"], cfg["vocab"], np.random.default_rng(5))
    np.testing.assert_array_equal(run(path, f), run(model, f))


def check_shuffle():
    cfg = tiny("gpt2")
    plain = build("gpt2", dynamic=True, **cfg)
    shuffled = build("gpt2", dynamic=True, shuffle_nodes=True, **cfg)
    assert is_topological(plain.graph) and not is_topological(shuffled.graph)
    assert sorted(n.name for n in plain.graph.node) == sorted(n.name for n in shuffled.graph.node)
    f = feeds("gpt2", 2, cfg["seq"], cfg["vocab"], np.random.default_rng(6))
    np.testing.assert_array_equal(run(shuffled, f), run(plain, f))


def _check_sparse_layout(path):
    raw = onnx.load(path, load_external_data=False)
    end = 0
    for t in raw.graph.initializer:
        if t.data_type != onnx.TensorProto.FLOAT:
            continue
        e = _ext_entries(t)
        off, length = int(e["offset"]), int(e["length"])
        assert e["location"] == os.path.basename(path) + ".data"
        assert off % ALIGN == 0 and off >= end, (t.name, off, end)
        assert length == 4 * int(np.prod(t.dims, dtype=np.int64)), t.name
        end = off + length
    st = os.stat(path + ".data")
    assert st.st_size == end, (st.st_size, end)
    assert st.st_blocks * 512 <= 64 * 1024, f"data file not sparse: {st.st_blocks} blocks"
    return raw, end


def check_no_weights_small(tmp):
    path = os.path.join(tmp, "nw", "bert.onnx")
    os.makedirs(os.path.dirname(path))
    model = build("bert", no_weights_data=True, **tiny("bert"))
    assert all(not t.raw_data for t in model.graph.initializer)
    save(model, path)
    _check_sparse_layout(path)
    onnx.checker.check_model(path)
    # The declared zeros are a valid model too.
    f = feeds("bert", 2, 8, 64, np.random.default_rng(0))
    assert np.isfinite(run(path, f)).all()


def check_gpt3_shape(tmp):
    path = os.path.join(tmp, "gpt3", "gpt3.onnx")
    os.makedirs(os.path.dirname(path))
    t0 = time.time()
    model = build("gpt2", layers=96, hidden=12288, heads=96, seq=2048,
                  vocab=50257, batch=1, no_weights_data=True)
    save(model, path)
    took = time.time() - t0  # reported, not asserted: timings are noisy here
    raw, end = _check_sparse_layout(path)
    n_params = sum(int(np.prod(t.dims, dtype=np.int64)) for t in raw.graph.initializer
                   if t.data_type == onnx.TensorProto.FLOAT)
    assert 174e9 < n_params < 176e9, n_params
    assert os.path.getsize(path) < 8 << 20
    onnx.checker.check_model(path)
    print(f"     gpt3-175B shape: {n_params:,} params, data file {end / 2**30:.0f} GiB "
          f"apparent / {os.stat(path + '.data').st_blocks * 512} bytes on disk, "
          f"{len(raw.graph.node)} nodes, built+saved in {took:.1f}s")


def check_cli(tmp):
    out = os.path.join(tmp, "cli", "m.onnx")
    env = dict(os.environ, PYTHONPATH=ROOT)
    cmd = [sys.executable, "-m", "lamina.models", "llama", "-o", out, "--layers", "1",
           "--hidden", "32", "--heads", "4", "--kv-heads", "1", "--seq", "8",
           "--vocab", "32", "--dynamic", "--opset", "21", "--external-data", "--check"]
    subprocess.run(cmd, check=True, env=env, capture_output=True)
    raw = onnx.load(out, load_external_data=False)
    assert raw.ir_version == 10 and raw.opset_import[0].version == 21
    assert [d.dim_param for d in raw.graph.input[0].type.tensor_type.shape.dim] == ["batch", "seq"]
    bad = subprocess.run([sys.executable, "-m", "lamina.models", "gpt2", "-o", out,
                          "--kv-heads", "2"], env=env, capture_output=True)
    assert bad.returncode == 2


# ------------------------------------------------------------- bad models
def check_bad_models(tmp):
    out = os.path.join(tmp, "bad")
    names = bad_models.write_all(out)
    for n in names:
        assert os.path.exists(os.path.join(out, n)), n
    assert os.readlink(os.path.join(out, "ext_symlink.bin")) == "/etc/hostname"
    for n in ("truncated.onnx", "garbage.onnx"):
        try:
            onnx.load(os.path.join(out, n))
        except Exception:  # noqa: BLE001 - any parse error is the point
            continue
        raise AssertionError(f"{n} parsed")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.full((2, 3), 0.5, np.float32)
    p = lambda n: os.path.join(out, n)  # noqa: E731
    np.testing.assert_allclose(run(p("nested_functions.onnx"), {"x": x, "y": y}), 2.5 * x + y)
    np.testing.assert_allclose(run(p("if_const.onnx"), {"x": x, "y": y}), x + y)
    assert run(p("sequence_concat.onnx"), {"a": x, "b": y, "c": x}).shape == (2, 9)
    ref = 1 / (1 + np.exp(np.maximum(2 * x, 0) - x))
    np.testing.assert_allclose(run(p("out_of_order.onnx"), {"x": x}), ref, rtol=1e-5)
    r = run(p("unbound_dims.onnx"), {"x": np.ones((2, 5, 8), np.float32),
                                     "past": np.ones((2, 8, 7), np.float32)})
    assert r.shape == (2, 5, 7)
    m = onnx.load(p("unsupported_ops.onnx"))
    assert {(n.name, n.op_type) for n in m.graph.node} >= {
        ("conv_node", "ConvTranspose"), ("lstm_node", "LSTM"), ("nms_node", "NonMaxSuppression")}
    m = onnx.load(p("vendor_op.onnx"))
    assert (m.graph.node[0].name, m.graph.node[0].domain) == ("fused_mm", "com.microsoft")
    m = onnx.load(p("out_of_order.onnx"))
    assert [n.name for n in m.graph.node] == ["n4", "n3", "n2", "n1", "n0"]
    assert onnx.load(p("opset_too_new.onnx")).opset_import[0].version == 30


def main() -> int:
    t0 = time.time()
    for arch in ARCHS:
        for opset in OPSETS:
            for dynamic in (False, True):
                check(f"{arch} opset {opset} {'dynamic' if dynamic else 'static'}",
                      check_arch, arch, opset, dynamic)
        check(f"{arch} opsets 11..23", check_all_opsets, arch)
    check("gpt2 causal", check_causal, "gpt2")
    check("llama causal", check_causal, "llama")
    check("bert padding mask", check_bert_padding)
    check("argument validation", check_kv_heads_validation)
    check("shuffle nodes", check_shuffle)
    with tempfile.TemporaryDirectory() as tmp:
        check("external data", check_external_data, tmp)
        check("no-weights-data small", check_no_weights_small, tmp)
        check("no-weights-data gpt3-175B shape", check_gpt3_shape, tmp)
        check("CLI", check_cli, tmp)
        check("bad models", check_bad_models, tmp)
    r = RESULTS
    print(f"({time.time() - t0:.1f}s, onnx {onnx.__version__}, "
          f"onnxruntime {ort.__version__})")
    print(f"{r['passed']} passed, {r['failed']} failed, {r['skipped']} skipped")
    return 1 if r["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
