#!/usr/bin/env python3
"""Elementwise fusion on the host: kernel calls, arena bytes and train step
time of a GPT-2 training program, for one or more lamina binaries (e.g. one
built before graph-fuse-elementwise and one after).

For each binary: `lamina compile --mode train --loss causal-lm` of the same
generated GPT-2 (random weights), the kernel calls and arena bytes it
prints, the elementwise calls in model.cpp (unary, binary,
fusedElementwise), then `run --steps N --threads T` alternated between the
binaries for --rounds rounds; the median tokens/s of the last log line
gives the step time.

usage: bench/fuse_bench.py --lamina A [--lamina B ...] [--layers L]
           [--hidden H] [--seq S] [--batch B] [--steps N] [--threads T]
           [--model FILE.onnx --vocab V]

`--model` benchmarks that file (e.g. a real exporter's, with symbolic
`batch` and `seq` bound to --batch and --seq) instead of a generated GPT-2.

`--lamina 'PATH --flag ...'` adds compile flags to that binary's compile,
so one binary can be compared with itself: e.g. `--lamina build/bin/lamina
--lamina 'build/bin/lamina --no-fuse-attention'`.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import tempfile

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lamina", action="append", required=True)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--precision", default="f32")
    p.add_argument("--workdir", help="work here (default: a temp folder)")
    p.add_argument("--model", help="an ONNX file with token input and "
                   "logits output instead of the generated GPT-2")
    args = p.parse_args()

    work = args.workdir or tempfile.mkdtemp(prefix="lamina-fuse-")
    os.makedirs(work, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.path.join(SRC, "python"))
    model = args.model or os.path.join(work, "gpt2.onnx")
    dims = (["--dim", f"batch={args.batch}", "--dim", f"seq={args.seq}"]
            if args.model else [])
    if not args.model:
        subprocess.run(
            ["python3", "-m", "lamina.models", "gpt2", "--layers",
             str(args.layers), "--hidden", str(args.hidden), "--heads",
             str(args.heads), "--seq", str(args.seq), "--batch",
             str(args.batch), "--vocab", str(args.vocab), "-o", model],
            check=True, env=env, stdout=subprocess.DEVNULL)
    data = os.path.join(work, "data.bin")
    import numpy as np
    np.random.default_rng(0).integers(0, args.vocab, 200000,
                                      dtype=np.uint16).tofile(data)

    rows = []
    for i, lamina in enumerate(args.lamina):
        out = os.path.join(work, f"train{i}")
        binary, *flags = lamina.split()
        log = subprocess.run(
            [binary, "compile", model, "--mode", "train", "--loss", "causal-lm",
             "--logits", "logits", "--precision", args.precision, "-o", out,
             *dims, *flags], check=True, capture_output=True, text=True).stdout
        calls = int(re.search(r"kernel calls: (\d+)", log).group(1))
        arena = int(re.search(r"\((?:peak, )?(\d+) bytes\)", log).group(1))
        cpp = open(os.path.join(out, "model.cpp")).read()
        counts = {k: len(re.findall(r"lamina::rt::(?:gen::)?%s\(" % k, cpp))
                  for k in ("unary", "binary", "fusedElementwise",
                            "attention")}
        rows.append(dict(lamina=lamina, run=os.path.join(out, "run"),
                         calls=calls, arena=arena, times=[], **counts))

    tokens = args.batch * args.seq
    for _ in range(args.rounds):
        for r in rows:
            log = subprocess.run(
                [r["run"], "--data", data, "--steps", str(args.steps),
                 "--log-every", str(args.steps), "--threads",
                 str(args.threads)], check=True, capture_output=True,
                text=True).stdout
            tps = float(re.findall(r"tokens/s (\d+)", log)[-1])
            r["times"].append(1000.0 * tokens / tps)

    what = (os.path.basename(args.model) if args.model else
            f"GPT-2 {args.layers} layers, hidden {args.hidden}")
    print(f"{what}, seq {args.seq}, "
          f"batch {args.batch}, vocab {args.vocab}, {args.precision}; "
          f"{args.threads} thread(s), median of {args.rounds} x {args.steps} "
          "steps")
    print(f"{'lamina':40} {'calls':>6} {'unary':>6} {'binary':>6} "
          f"{'fused':>6} {'attn':>5} {'arena bytes':>12} {'ms/step':>8}")
    for r in rows:
        print(f"{r['lamina'][-40:]:40} {r['calls']:6} {r['unary']:6} "
              f"{r['binary']:6} {r['fusedElementwise']:6} {r['attention']:5} "
              f"{r['arena']:12} "
              f"{statistics.median(r['times']):8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
