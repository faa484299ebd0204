"""Pieces shared by bench/gpu_bench.py, bench/torch_gpt.py and
bench/gpu_vs_host.py. Standard library and numpy only (no torch), so every
part is testable on a machine without a GPU: `python3 bench/gpu_common.py`
runs the self-test.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time

import numpy as np

# ------------------------------------------------------------------ data
# The training program's sampler (include/lamina/Runtime/TokenData.h), so
# the PyTorch reference sees exactly the batches the Lamina program sees.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "python"))
from lamina.testing.sampler import SplitMix64, windows  # noqa: E402


class TokenSampler:
    """TokenData::sample: per row, start = rng.below(N - seq); inputs =
    data[start : start + seq] (the causal-LM loss uses the inputs shifted by
    one, so the labels the sampler also draws are not needed)."""

    def __init__(self, path: str, batch: int, seq: int, seed: int = 0,
                 dtype: str = "uint16", vocab: int | None = None):
        self.data = np.memmap(path, dtype=np.dtype(dtype).newbyteorder("<"),
                              mode="r")
        if self.data.size < seq + 1:
            raise ValueError(f"{path}: {self.data.size} tokens, need {seq + 1}")
        self.batch, self.seq, self.vocab = batch, seq, vocab
        self.rng = SplitMix64(seed)

    def next(self) -> np.ndarray:
        out = windows(self.data, self.batch, self.seq, self.rng)
        if self.vocab is not None and int(out.max()) >= self.vocab:
            raise ValueError("token id beyond the vocabulary")
        return out


def write_tokens(path: str, n: int, high: int, seed: int = 0,
                 dtype: str = "uint16") -> None:
    """n random token ids in [0, high), little-endian, no header (the
    training program's --data format, docs/training.md)."""
    if dtype == "uint16" and high > 65536:
        raise ValueError("uint16 ids need a vocabulary <= 65536")
    rng = np.random.default_rng(seed)
    rng.integers(0, high, size=n, dtype=np.int64).astype(
        np.dtype(dtype).newbyteorder("<")).tofile(path)


# ------------------------------------------------------------- the model
def read_initializers(path: str) -> dict:
    """name -> numpy array (f32 external data is memory-mapped read-only),
    for every initializer of the ONNX file, in graph order."""
    import onnx
    from onnx import numpy_helper

    m = onnx.load(path, load_external_data=False)
    base = os.path.dirname(os.path.abspath(path))
    out = {}
    for t in m.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            kv = {e.key: e.value for e in t.external_data}
            dt = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type))
            shape = tuple(int(d) for d in t.dims)
            count = int(np.prod(shape, dtype=np.int64))
            arr = np.memmap(os.path.join(base, kv["location"]),
                            dtype=dt.newbyteorder("<"), mode="r",
                            offset=int(kv.get("offset", 0)), shape=(count,))
            if "length" in kv and int(kv["length"]) != count * dt.itemsize:
                raise ValueError(f"{t.name}: length {kv['length']} is not "
                                 f"{count} x {dt.itemsize}")
            out[t.name] = arr.reshape(shape)
        else:
            out[t.name] = numpy_helper.to_array(t)
    return out


def model_config(path: str) -> dict:
    """layers/hidden/heads/seq/vocab of a lamina.models gpt2 file, from its
    doc string (`lamina.models gpt2 layers=.. hidden=..`) and initializers."""
    import onnx

    m = onnx.load(path, load_external_data=False)
    doc = dict(kv.split("=", 1) for kv in m.doc_string.split() if "=" in kv)
    dims = {t.name: [int(d) for d in t.dims] for t in m.graph.initializer}
    vocab, hidden = dims["transformer.wte.weight"]
    layers = sum(1 for n in dims if n.endswith(".ln_1.weight"))
    cfg = dict(layers=layers, hidden=hidden, heads=int(doc["heads"]),
               seq=dims["transformer.wpe.weight"][0], vocab=vocab)
    cfg["params"] = sum(int(np.prod(d, dtype=np.int64)) for d in dims.values())
    return cfg


# ------------------------------------------------------------------- MFU
# Dense bf16 tensor-core peak (no sparsity), by device name substring,
# first match wins. NVIDIA's data sheets: H100 SXM5 989.4 TFLOPS (H200 is
# the same GH100 die and clocks with more HBM), H100 PCIe 756, H100 NVL
# 835, A100 312.
PEAK_BF16 = [
    ("H200", 989.4e12),
    ("H100 PCIe", 756.0e12),
    ("H100 NVL", 835.0e12),
    ("H100", 989.4e12),   # SXM5 / "H100 80GB HBM3"
    ("GH200", 989.4e12),
    ("A100", 312.0e12),
]


def peak_flops(device_name: str, override_tflops: float | None = None):
    """(peak FLOP/s or None, where it came from)."""
    if override_tflops:
        return override_tflops * 1e12, "--peak-tflops"
    for key, v in PEAK_BF16:
        if key.lower() in device_name.lower():
            return v, f"table ({key})"
    return None, "unknown device: pass --peak-tflops"


def flops_per_token(cfg: dict) -> dict:
    """PaLM's model FLOPs per token of a training step (Chowdhery et al.
    2022, appendix B): 6 N + 12 L H S. N = every parameter of the model,
    embeddings included (the tied wte is the LM head's weight, so its
    2 V H multiply-adds per token forward are real matmul work; wpe and the
    norms/biases are counted though they do almost no FLOPs: 0.5% of N
    here). 12 L H S: the attention score and context matmuls, forward and
    backward, over the full S x S square (PaLM's convention; causal masking
    is not discounted). No recompute is counted (neither side recomputes)."""
    n, L, H, S = cfg["params"], cfg["layers"], cfg["hidden"], cfg["seq"]
    return dict(params=n, dense=6 * n, attention=12 * L * H * S,
                total=6 * n + 12 * L * H * S)


def mfu(tokens_per_s: float, cfg: dict, peak: float | None):
    if not peak:
        return None
    return tokens_per_s * flops_per_token(cfg)["total"] / peak


# --------------------------------------------------------- program logs
# Train.cpp's log line; fields a later version may append are ignored.
_STEP = re.compile(r"^step (\d+) loss (\S+) lr (\S+) tokens/s (\S+) "
                   r"elapsed (\S+?)s(?:\s|$)")


def parse_step(line: str):
    m = _STEP.match(line.strip())
    if not m:
        return None
    return dict(step=int(m.group(1)), loss=float(m.group(2)),
                lr=float(m.group(3)), tokens_per_s=float(m.group(4)),
                elapsed=float(m.group(5)))


def step_times(steps: list, tokens_per_step: int) -> dict:
    """Seconds since the program's start at each logged step. The program
    prints elapsed with 0.1 s resolution but tokens/s (the average since the
    start, tokens * steps / elapsed) to the token, so elapsed is recovered
    from tokens/s where it is nonzero; 'host_s' (the arrival time of the
    line here) is kept alongside when present."""
    out = {}
    for s in steps:
        t = s["elapsed"]
        if s["tokens_per_s"] > 0:
            t = tokens_per_step * s["step"] / s["tokens_per_s"]
        out[s["step"]] = t
    return out


def timed_window(steps: list, tokens_per_step: int, warmup: int):
    """(seconds, steps) of the logged steps after `warmup`: from the line of
    step `warmup` to that of the last step. A line is printed after the
    step's loss was read back from the device, which waits for that step's
    forward and backward and everything before it (the optimizer update is
    enqueued after the read-back, so each end of the window has one update
    in flight: the window is N steady-state steps)."""
    t = step_times(steps, tokens_per_step)
    last = max(t)
    if warmup not in t or last <= warmup:
        raise ValueError(f"need steps {warmup} and later in the log "
                         f"(have {sorted(t)})")
    return t[last] - t[warmup], last - warmup


def run_logged(cmd: list, log_path: str, timeout: float | None = None,
               env=None, echo: bool = True) -> dict:
    """Runs cmd, copying its output to log_path (and stdout when echo),
    stamping each step line with its arrival time here; returns rc, steps,
    the stamped times, wall seconds and the peak GPU memory nvidia-smi saw
    (None without it)."""
    mem = GpuMemoryPoller()
    mem.start()
    t0 = time.monotonic()
    steps, arrivals, timed_out = [], {}, False
    with open(log_path, "w") as log:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, env=env,
                             bufsize=1)
        killer = None
        if timeout:
            def kill():
                nonlocal timed_out
                timed_out = True
                p.kill()
            killer = threading.Timer(timeout, kill)
            killer.start()
        try:
            for line in p.stdout:
                now = time.monotonic() - t0
                log.write(line)
                log.flush()
                if echo:
                    sys.stdout.write(line)
                    sys.stdout.flush()
                s = parse_step(line)
                if s:
                    steps.append(s)
                    arrivals[s["step"]] = now
            rc = p.wait()
        finally:
            if killer:
                killer.cancel()
    wall = time.monotonic() - t0
    mem.stop()
    return dict(rc=rc, steps=steps, arrivals=arrivals, wall_s=wall,
                timed_out=timed_out, gpu_mem_used_mib=mem.peak_mib,
                gpu_mem_baseline_mib=mem.baseline_mib)


# ----------------------------------------------------------------- GPU
def nvidia_smi(query: str):
    """First GPU's value of nvidia-smi --query-gpu=QUERY, or None."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        r = subprocess.run([exe, f"--query-gpu={query}",
                            "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode != 0 or not r.stdout.strip():
        return None
    return r.stdout.strip().splitlines()[0].strip()


class GpuMemoryPoller:
    """Largest memory.used (MiB) of GPU 0 while running, polled twice a
    second; None without nvidia-smi. baseline_mib: the value at start."""

    def __init__(self, interval: float = 0.5):
        self.interval = interval
        self.peak_mib = None
        self.baseline_mib = None
        self._stop = threading.Event()
        self._thread = None

    def _read(self):
        v = nvidia_smi("memory.used")
        try:
            return float(v) if v is not None else None
        except ValueError:
            return None

    def start(self):
        self.baseline_mib = self._read()
        if self.baseline_mib is None:
            return
        self.peak_mib = self.baseline_mib

        def loop():
            while not self._stop.wait(self.interval):
                v = self._read()
                if v is not None and v > self.peak_mib:
                    self.peak_mib = v
        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()

    def stop(self):
        self._stop.set()
        if self._thread:
            self._thread.join()


def write_json(path: str, obj) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")


# ------------------------------------------------------------ self-test
def _self_test() -> int:
    import tempfile

    # SplitMix64: the reference splitmix64.c outputs for seed 1234567
    # (also unittests/Runtime/TokenDataTest.cpp).
    r = SplitMix64(1234567)
    got = [r.next() for _ in range(3)]
    want = [6457827717110365317, 3203168211198807973, 9817491932198370423]
    assert got == want, got
    # below(): no modulo bias path exercised, values in range.
    r = SplitMix64(5)
    assert all(0 <= r.below(7) < 7 for _ in range(1000))
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "t.bin")
        write_tokens(p, 1000, 50257, seed=3)
        a = np.fromfile(p, dtype="<u2")
        assert a.size == 1000 and a.max() < 50257
        s = TokenSampler(p, batch=2, seq=8, seed=1)
        b = s.next()
        r = SplitMix64(1)
        st = r.below(1000 - 8)
        assert (b[0] == a[st:st + 8]).all()
    line = "step 12 loss 10.834214 lr 0.0001 tokens/s 8123 elapsed 12.1s eta 3.0s"
    s = parse_step(line)
    assert s == dict(step=12, loss=10.834214, lr=1e-4, tokens_per_s=8123.0,
                     elapsed=12.1), s
    assert parse_step("resumed from step 3") is None
    assert parse_step(line.replace("eta 3.0s", "eta 3.0s mem 1.0GiB")) == s
    assert parse_step(line.replace(" eta 3.0s", "")) == s
    steps = [dict(step=k, loss=1.0, lr=1.0, tokens_per_s=1000.0 * k / (k + 1),
                  elapsed=0.0) for k in range(1, 6)]
    secs, n = timed_window(steps, 1000, 2)
    assert n == 3 and abs(secs - 3.0) < 1e-9, secs
    cfg = dict(params=912953344, layers=16, hidden=2048, seq=2048)
    f = flops_per_token(cfg)
    assert f["total"] == 6 * 912953344 + 12 * 16 * 2048 * 2048
    assert peak_flops("NVIDIA H200")[0] == 989.4e12
    assert peak_flops("NVIDIA H100 PCIe")[0] == 756e12
    assert peak_flops("NVIDIA H100 80GB HBM3")[0] == 989.4e12
    assert peak_flops("NVIDIA A100-SXM4-80GB")[0] == 312e12
    assert peak_flops("Tesla T4")[0] is None
    assert peak_flops("Tesla T4", 65)[0] == 65e12
    print("gpu_common self-test ok")
    return 0


if __name__ == "__main__":
    sys.exit(_self_test())
