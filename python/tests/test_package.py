"""The ``lamina`` Python package against the built tools (docs/python.md).

Run from the repository root after the build:
``python3 -m pytest -q python/tests/test_package.py`` (the package from
``pip install ./python`` or ``PYTHONPATH=python``; the tools from
``LAMINA_HOME``, the checkout's ``build/bin`` or ``PATH``). The torch tests
skip without torch, the distributed ones without ``mpirun``.
"""

from __future__ import annotations

import os
import shutil
import sys

import numpy as np
import pytest

import lamina
from lamina.safetensors_io import load_file, save_file
from lamina.testing.sampler import SplitMix64, epoch_order, windows

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:  # the torch tests skip
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed "
                                 "(pip install torch); the module tests need it")
needs_mpirun = pytest.mark.skipif(shutil.which("mpirun") is None,
                                  reason="mpirun is not on PATH (openmpi-bin)")

VOCAB, SEQ, BATCH = 32, 16, 4
CORPUS = np.tile(np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3]), 64)


def test_tools_found():
    assert os.access(lamina.find_tool(), os.X_OK)


def test_missing_tool_is_an_error(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(lamina.LaminaError, match="LAMINA_HOME"):
        lamina.find_tool("lamina-no-such-tool")


def test_lamina_home(monkeypatch, tmp_path):
    (tmp_path / "bin").mkdir()
    fake = tmp_path / "bin" / "lamina"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("LAMINA_HOME", str(tmp_path))
    assert lamina.find_tool() == str(fake)


def test_safetensors_format(tmp_path):
    tensors = {"a.weight": np.arange(6, dtype=np.float32).reshape(2, 3),
               "b": np.array([1, -2], dtype=np.int64),
               "c": np.float32(3.5) * np.ones((), np.float32)}
    path = tmp_path / "t.safetensors"
    save_file(tensors, path, metadata={"format": "pt"})
    back = load_file(path)
    assert set(back) == set(tensors)
    for k, v in tensors.items():
        assert back[k].dtype == v.dtype and np.array_equal(back[k], v)
    st = pytest.importorskip("safetensors.numpy")
    for k, v in st.load_file(str(path)).items():
        assert np.array_equal(v, tensors[k])


@pytest.fixture(scope="module")
def gpt2_onnx(tmp_path_factory):
    from lamina.models import build, save
    path = tmp_path_factory.mktemp("onnx") / "gpt2.onnx"
    save(build("gpt2", layers=1, hidden=32, heads=4, seq=SEQ, batch=BATCH,
               vocab=VOCAB), str(path))
    return str(path)


def test_onnx_file_trains_and_exports(gpt2_onnx, tmp_path):
    prog = lamina.compile(gpt2_onnx, logits="logits", out_dir=tmp_path / "p")
    run = prog.train(CORPUS, 10, lr=1e-2, eval_data=CORPUS, eval_every=5,
                     eval_batches=2, threads=1, progress=False)
    records = list(run)
    assert [r.step for r in records] == list(range(0, 11))
    assert records[0].loss is None and records[0].eval_loss is not None
    assert records[5].eval_loss is not None and records[4].eval_loss is None
    assert records[10].loss < records[1].loss and records[1].lr == 1e-2
    onnx_path = prog.export(tmp_path / "w.onnx")
    st_path = prog.export(tmp_path / "w.safetensors")
    import onnx
    from onnx import numpy_helper
    inits = {t.name: numpy_helper.to_array(t)
             for t in onnx.load(onnx_path).graph.initializer}
    weights = load_file(st_path)
    assert set(weights) == set(inits)
    assert all(np.array_equal(weights[k], inits[k]) for k in inits)
    # The trained weights in an inference program agree with onnxruntime.
    ort = pytest.importorskip("onnxruntime")
    ids = windows(CORPUS, BATCH, SEQ, SplitMix64(7))
    got = prog.run({"input_ids": ids})["logits"]
    want = ort.InferenceSession(onnx_path).run(["logits"], {"input_ids": ids})[0]
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
    # A program reopened from its folder has the same weights.
    again = lamina.load(tmp_path / "p").state_dict()
    assert all(np.array_equal(again[k], inits[k]) for k in inits)


@needs_torch
def test_named_inputs_train_as_torch(tmp_path):
    """An MLP on float features with class labels, fed a mapping of arrays
    by input name (run --data-dir): PyTorch's losses on the same batches."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rs = np.random.RandomState(3)
    w1, b1 = rs.randn(8, 5).astype(np.float32), rs.randn(8).astype(np.float32)
    w2, b2 = rs.randn(3, 8).astype(np.float32), rs.randn(3).astype(np.float32)
    x = rs.randn(10, 5).astype(np.float32)
    y = rs.randint(0, 3, 10)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
         helper.make_node("Relu", ["h"], ["a"]),
         helper.make_node("Gemm", ["a", "w2", "b2"], ["logits"], transB=1)],
        "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5]),
                helper.make_tensor_value_info("y", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(v, k)
         for k, v in dict(w1=w1, b1=b1, w2=w2, b2=b2).items()])
    path = tmp_path / "mlp.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), path)
    prog = lamina.compile(path, loss="cross-entropy", logits="logits",
                          labels="y", out_dir=tmp_path / "p")
    got = [r.loss for r in prog.train({"x": x, "y": y.astype(np.int32)}, 8,
                                      lr=0.1, optimizer="sgd", seed=4,
                                      progress=False) if r.loss is not None]
    params = [torch.tensor(v, requires_grad=True) for v in (w1, b1, w2, b2)]
    opt = torch.optim.SGD(params, lr=0.1)
    order, want = epoch_order(4, 10), []
    for _ in range(8):
        idx = [next(order) for _ in range(2)]
        h = F.relu(torch.tensor(x[idx]) @ params[0].T + params[1])
        loss = F.cross_entropy(h @ params[2].T + params[3], torch.tensor(y[idx]))
        opt.zero_grad()
        loss.backward()
        opt.step()
        want.append(loss.item())
    assert np.allclose(got, want, rtol=1e-5, atol=0)


def test_errors_carry_the_tools_message(gpt2_onnx, tmp_path):
    with pytest.raises(lamina.LaminaError, match="unknown --schedule .zigzag."):
        lamina.compile(gpt2_onnx, logits="logits", pp=2, schedule="zigzag",
                       out_dir=tmp_path / "bad")
    prog = lamina.compile(gpt2_onnx, logits="logits", out_dir=tmp_path / "p")
    with pytest.raises(lamina.LaminaError, match="vocabulary|beyond|out of") as e:
        prog.train(np.array([1, 2, 3, 40] * 20), 2, progress=False).wait()
    assert e.value.returncode == 1 and e.value.command[0] == prog.executable
    with pytest.raises(lamina.LaminaError, match="no such file"):
        lamina.compile(str(tmp_path / "missing.onnx"))


def test_stopping_early(gpt2_onnx, tmp_path):
    prog = lamina.compile(gpt2_onnx, logits="logits", out_dir=tmp_path / "p")
    with prog.train(CORPUS, 100000, threads=1, progress=False) as run:
        first = next(run)
    assert first.step == 1 and run._proc.poll() is not None


def test_checkpoints_and_resume(gpt2_onnx, tmp_path, capsys):
    prog = lamina.compile(gpt2_onnx, logits="logits", out_dir=tmp_path / "p")
    full = prog.train(CORPUS, 8, seed=2, threads=1, progress=False).wait()
    ckpt = tmp_path / "ckpt"
    prog.train(CORPUS, 4, seed=2, threads=1, checkpoint_dir=ckpt,
               checkpoint_every=2, progress=True).wait()  # a tqdm bar
    rest = prog.train(CORPUS, 8, seed=2, threads=1, checkpoint_dir=ckpt,
                      resume=True, progress=False)
    assert [r.step for r in rest.wait()] == [5, 6, 7, 8]
    assert [r.loss for r in rest.records] == [r.loss for r in full[4:]]
    assert any("resumed from step 4" in line for line in rest.log)


def test_plan_and_search(gpt2_onnx, tmp_path):
    p = lamina.plan(gpt2_onnx, pp=1, dp=2, micro_batches=2, zero=1)
    assert p.summary["step_time_s"] > 0 and p.config["dp"] == 2
    assert len(p.ranks) == 1 and p.ranks[0].memory.total > 0
    assert "<svg" in p._repr_html_() and p.to_json().startswith("{")
    p.to_json(tmp_path / "p.json")
    from lamina.planfile import load_plan
    assert load_plan(str(tmp_path / "p.json")).config["zero"] == 1
    plans = lamina.search("gpt:layers=4,hidden=256,heads=4,seq=256,vocab=1024",
                          gpus=2, global_batch=8, top=2)
    assert 1 <= len(plans) <= 2
    assert all(isinstance(x, lamina.Plan) and x.summary["fits"] for x in plans)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return  # plotting is optional
    p.plot(tmp_path / "plan.png")
    assert (tmp_path / "plan.png").stat().st_size > 0


# -- a torch module, trained on the host and on 2 MPI ranks ---------------

if torch is not None:
    class Block(nn.Module):
        def __init__(self, d: int, heads: int) -> None:
            super().__init__()
            self.heads, self.d = heads, d
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            b, t, c = x.shape[0], x.shape[1], self.d
            q, k, v = (y.view(b, t, self.heads, c // self.heads).transpose(1, 2)
                       for y in self.qkv(self.ln1(x)).split(c, dim=2))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class TinyGPT(nn.Module):
        """Tied embedding and head, a causal-mask buffer it never trains."""

        def __init__(self, vocab: int = VOCAB, d: int = 32, heads: int = 4,
                     layers: int = 2, seq: int = SEQ) -> None:
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(seq, d)
            self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
            self.ln = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab, bias=False)
            self.head.weight = self.wte.weight
            self.register_buffer("scale", torch.ones(d))
            for p in self.parameters():
                if p.dim() == 2:
                    nn.init.normal_(p, std=0.02)

        def forward(self, input_ids):
            t = input_ids.shape[1]
            x = self.wte(input_ids) + self.wpe(torch.arange(t))
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln(x) * self.scale)


def _torch_logits(module, ids: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return module(torch.from_numpy(ids)).numpy()


def _check_round_trip(prog, tmp_path, name: str, batch: int) -> None:
    """safetensors -> load_state_dict(strict) -> PyTorch's logits are Lamina's."""
    import safetensors.torch
    path = prog.export(tmp_path / f"{name}.safetensors")
    module = TinyGPT()
    module.load_state_dict(safetensors.torch.load_file(path), strict=True)
    ids = windows(CORPUS, batch, SEQ, SplitMix64(11))
    ours = prog.run({"input_ids": ids})["logits"]
    theirs = _torch_logits(module, ids)
    rel = np.abs(ours - theirs).max() / np.abs(theirs).max()
    assert rel <= 1e-6, f"logits differ by {rel:.2e} (relative)"
    assert torch.equal(module.scale, torch.ones(32))  # the buffer: not trained


@pytest.fixture(scope="module")
def host_run(tmp_path_factory):
    torch.manual_seed(0)
    module = TinyGPT()
    tmp = tmp_path_factory.mktemp("host")
    prog = lamina.compile(module, example_inputs=torch.zeros(BATCH, SEQ, dtype=torch.long),
                          dims={"batch": BATCH, "seq": SEQ}, out_dir=tmp / "p")
    records = prog.train(CORPUS, 20, lr=1e-2, seed=3, threads=1,
                         progress=False).wait()
    return module, prog, records, tmp


@needs_torch
def test_torch_module_host(host_run):
    module, prog, records, tmp = host_run
    assert [r.step for r in records] == list(range(1, 21))
    assert records[-1].loss < 0.8 * records[0].loss
    # Step 1's loss is PyTorch's on the batch the program drew.
    ids = torch.from_numpy(windows(CORPUS, BATCH, SEQ, SplitMix64(3)))
    with torch.no_grad():
        logits = module(ids)
    ref = F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
    assert abs(records[0].loss - ref.item()) <= 1e-5 * ref.item()
    _check_round_trip(prog, tmp, "host", BATCH)
    # The tie stays a tie: one trained tensor under both names.
    sd = prog.state_dict()
    assert np.array_equal(sd["head.weight"], sd["wte.weight"])
    assert not np.array_equal(sd["wte.weight"], module.wte.weight.detach().numpy())


@needs_torch
@needs_mpirun
def test_torch_module_two_ranks(host_run):
    module, _, host_records, tmp = host_run
    torch.manual_seed(0)
    fresh = TinyGPT()  # the host run's initial weights
    prog = lamina.compile(fresh, example_inputs=torch.zeros(2, SEQ, dtype=torch.long),
                          dims={"batch": 2, "seq": SEQ}, pp=2, micro_batches=2,
                          schedule="1f1b", out_dir=tmp / "dist")
    records = prog.train(CORPUS, 20, lr=1e-2, seed=3, threads=1,
                         progress=False).wait()
    # pp 2 x 2 micro-batches of 2 = one process with batch 4, step for step.
    worst = max(abs(a.loss - b.loss) / b.loss for a, b in zip(records, host_records))
    assert len(records) == 20 and worst <= 1e-5, worst
    _check_round_trip(prog, tmp, "dist", 2)


@needs_torch
def test_docs_example(tmp_path):
    """docs/python.md's example runs as written (from a folder holding README.md)."""
    import re
    import subprocess
    pytest.importorskip("matplotlib")
    pytest.importorskip("safetensors")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "docs", "python.md"), encoding="utf-8") as f:
        doc = f.read()
    code = re.search(r"## Example.*?```python\n(.*?)```", doc, re.S).group(1)
    shutil.copy(os.path.join(root, "README.md"), tmp_path / "README.md")
    (tmp_path / "example.py").write_text(code)
    proc = subprocess.run([sys.executable, "example.py"], cwd=tmp_path,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rel = float(re.search(r"max relative difference (\S+)", proc.stdout).group(1))
    assert rel <= 1e-6 and "step 300: validation loss" in proc.stdout
    for name in ("loss.png", "plan.png", "plan.html", "gpt.safetensors"):
        assert (tmp_path / "gpt-example" / name).stat().st_size > 0
