#!/usr/bin/env python3
"""Host backend benchmark: GPT-2-small forward pass, Lamina against
onnxruntime, side by side in one run.

Generates a GPT-2-small-shaped model (12 layers, hidden 768, 12 heads,
sequence 128, batch 4, vocab 50257; random weights) with the project's own
builder, compiles it with `lamina compile --target host --mode inference`,
and times on the same input and the same thread count:

  lamina       OUTDIR/run --repeat N --time (the mean of N forward passes
               inside one process, weights loaded once)
  onnxruntime  InferenceSession.run, N times after one warm-up run, CPU
               provider, intra_op_num_threads = inter_op = the same count,
               graph optimizations at their default (ORT_ENABLE_ALL)

and checks that the two outputs agree (max relative error). Then it reports
the memory plan (arena peak against the sum of all intermediate values) and
the process's peak RSS against arena + weights.

usage: bench/host_forward_bench.py [--threads T] [--repeat N] [--layers L]
           [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_model() -> str:
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"


def cpu_flags() -> str:
    """The vector extensions that decide the GEMM kernels."""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                have = set(line.split(":", 1)[1].split())
                want = ["avx2", "fma", "avx512f", "avx512_bf16", "amx_tile"]
                return " ".join(w + ("=yes" if w in have else "=no")
                                for w in want)
    return "flags unknown"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--repeat", type=int, default=5,
                   help="forward passes per timing (default 5)")
    p.add_argument("--rounds", type=int, default=3,
                   help="alternating lamina/onnxruntime timings; the median "
                        "of each is reported (default 3)")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--lamina", default=os.path.join(SRC, "build", "bin", "lamina"))
    p.add_argument("--keep", metavar="DIR", help="work here and keep the files")
    args = p.parse_args()

    import numpy as np
    import onnxruntime as ort

    work = args.keep or tempfile.mkdtemp(prefix="lamina-bench-")
    os.makedirs(work, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.path.join(SRC, "python"))
    model = os.path.join(work, "gpt2-small.onnx")
    if not os.path.exists(model):
        subprocess.run([sys.executable, "-m", "lamina.models", "gpt2",
                        "--layers", str(args.layers), "--hidden", "768",
                        "--heads", "12", "--seq", str(args.seq), "--batch",
                        str(args.batch), "--vocab", "50257", "-o", model],
                       check=True, env=env, stdout=subprocess.DEVNULL)
    outdir = os.path.join(work, "program")
    t0 = time.monotonic()
    proc = subprocess.run([args.lamina, "compile", model, "--target", "host",
                           "--mode", "inference", "-o", outdir],
                          check=True, capture_output=True, text=True)
    compile_s = time.monotonic() - t0
    print(proc.stdout.rstrip())
    arena = int(re.search(r"peak, (\d+) bytes", proc.stdout).group(1))
    m = re.search(r"for ([\d.]+ \w+) of intermediate values \(([\d.]+)x",
                  proc.stdout)
    tensors_text, reuse = m.group(1), float(m.group(2))

    rng = np.random.default_rng(0)
    ids = rng.integers(0, 50257, (args.batch, args.seq)).astype(np.int64)
    ids_path = os.path.join(work, "input_ids.npy")
    np.save(ids_path, ids)

    # Lamina: one process per round, weights loaded once, N timed runs.
    out = os.path.join(work, "out")
    cmd = [os.path.join(outdir, "run"), "--input", "input_ids=" + ids_path,
           "--output-dir", out, "--threads", str(args.threads), "--repeat",
           str(args.repeat), "--time"]

    # Nothing here sets a threading or BLAS variable; those inherited are
    # reported, since they could change what the peers run.
    inherited = sorted(k for k in os.environ
                       if k.startswith(("OPENBLAS_", "OMP_", "MKL_", "DNNL_",
                                        "ONEDNN_")))

    kernels = ""

    def time_lamina():
        nonlocal kernels
        # os.wait4 gives this child's own peak RSS (not the compiler's).
        child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True)
        stderr = child.stderr.read()
        _, status, usage = os.wait4(child.pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit("run failed: " + stderr)
        # "time: X ms per run (mean of N) on host, T threads, GEMM ..."
        m = re.search(r"([\d.]+) ms per run \(mean of \d+\)(?: on (.*))?",
                      stderr)
        kernels = m.group(2) or ""
        return float(m.group(1)), usage.ru_maxrss

    # Peak RSS from a run before this process holds onnxruntime's session:
    # a forked child counts the parent's pages until it execs.
    _, rss_kib = time_lamina()

    # onnxruntime, same input, same threads.
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = args.threads
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    sess.run(None, {"input_ids": ids})

    def time_ort():
        t0 = time.perf_counter()
        for _ in range(args.repeat):
            result = sess.run(None, {"input_ids": ids})[0]
        return (time.perf_counter() - t0) * 1000 / args.repeat, result

    lamina_times, ort_times = [], []
    for _ in range(args.rounds):
        ms, _ = time_lamina()
        lamina_times.append(ms)
        ms, ref = time_ort()
        ort_times.append(ms)
    median = lambda v: sorted(v)[len(v) // 2]
    lamina_ms, ort_ms = median(lamina_times), median(ort_times)
    got = np.load(os.path.join(out, "logits.npy"))
    rel = float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))

    weights = os.path.getsize(model) + sum(
        os.path.getsize(os.path.join(work, f)) for f in os.listdir(work)
        if f.endswith(".data"))
    print()
    print("GPT-2 small forward: %d layers, hidden 768, 12 heads, batch %d, "
          "seq %d; %d threads; median of %d rounds of %d runs" % (
              args.layers, args.batch, args.seq, args.threads, args.rounds,
              args.repeat))
    print("  cpu: %s; %s" % (cpu_model(), cpu_flags()))
    print("  inherited threading/BLAS variables: %s" % (
        ", ".join(inherited) if inherited else "none"))
    print("  %-12s %10.1f ms   (rounds: %s; %s)" % ("lamina", lamina_ms,
          ", ".join("%.0f" % t for t in lamina_times), kernels))
    print("  %-12s %10.1f ms   (rounds: %s; onnxruntime %s)" % (
        "onnxruntime", ort_ms, ", ".join("%.0f" % t for t in ort_times),
        ort.__version__))
    print("  ratio lamina / onnxruntime: %.2f (goal <= 1.0)  %s" % (
        lamina_ms / ort_ms, "PASS" if lamina_ms / ort_ms <= 1.0 else "MISS"))
    print("  outputs agree: max rel error %.2e" % rel)
    print("memory plan:")
    print("  arena peak %.1f MiB for %s of intermediate values (%.1fx reuse)"
          % (arena / 2**20, tensors_text, reuse))
    model_mib = weights / 2**20
    expected = arena + weights
    print("  process peak RSS %.1f MiB; arena + weights (model file) %.1f MiB: "
          "%+.1f%%" % (rss_kib / 1024, expected / 2**20,
                       100 * (rss_kib * 1024 - expected) / expected))
    print("  compile (import, lower, C++ build): %.1f s" % compile_s)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
