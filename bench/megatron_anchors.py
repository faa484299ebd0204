#!/usr/bin/env python3
"""Cost model against Megatron-LM's published throughput (ANCHORS.md).

For each row of Narayanan et al. 2021, Table 1 (A100-80GB, interleaved 1F1B,
full recompute, s=2048, V=51200), plan the same t, p, d and batch with
`lamina plan` on the a100-80g preset and compare TFLOP/s per GPU counted the
way the paper counts them: 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) per step.

The model is either a synthetic GPT description (`gpt:layers=...`, the
default: closed-form per-layer costs, lib/Plan/Synthetic.cpp) or, with
--onnx, a structure-only GPT-2 ONNX file written by
`python3 -m lamina.models gpt2 --no-weights-data` and described from the IR.

Also times `lamina plan` on the 175B shape for 1024 GPUs and `--search`.

  python3 bench/megatron_anchors.py --lamina build/bin/lamina [--onnx DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

S, V = 2048, 51200

# params (B), heads, h, layers, t, p, d, batch, published TFLOP/s per GPU
ROWS = [
    (1.7, 24, 2304, 24, 1, 1, 32, 512, 137),
    (3.6, 32, 3072, 30, 2, 1, 32, 512, 138),
    (7.5, 32, 4096, 36, 4, 1, 32, 512, 142),
    (18.4, 48, 6144, 40, 8, 1, 32, 1024, 135),
    (39.1, 64, 8192, 48, 8, 2, 32, 1536, 138),
    (76.1, 80, 10240, 60, 8, 4, 32, 1792, 140),
    (145.6, 96, 12288, 80, 8, 8, 24, 2304, 148),
    (310.1, 128, 16384, 96, 8, 16, 15, 2160, 155),
    (529.6, 128, 20480, 105, 8, 35, 9, 2520, 163),
    (1008.0, 160, 25600, 128, 8, 64, 6, 3072, 163),
]
# METHODS.md: GPT-3 175B on 1024 GPUs at 138 TFLOP/s; t = p = 8 and batch
# 1536 are Megatron's usual 175B setting (assumed: the text gives GPUs only).
GPT3 = (174.6, 96, 12288, 96, 8, 8, 16, 1536, 138)


def megatron_flops(layers: int, h: int, batch: int) -> float:
    return 96 * batch * S * layers * h * h * (
        1 + S / (6 * h) + V / (16 * layers * h))


def model_arg(row, onnx_dir: str | None) -> list[str]:
    _, heads, h, layers = row[:4]
    if not onnx_dir:
        return [f"gpt:layers={layers},hidden={h},heads={heads},seq={S},"
                f"vocab={V},batch=1"]
    path = os.path.join(onnx_dir, f"gpt-l{layers}-h{h}.onnx")
    if not os.path.exists(path):
        env = dict(os.environ, PYTHONPATH=os.path.join(
            os.path.dirname(__file__), "..", "python"))
        subprocess.run([sys.executable, "-m", "lamina.models", "gpt2", "-o",
                        path, "--layers", str(layers), "--hidden", str(h),
                        "--heads", str(heads), "--seq", str(S), "--vocab",
                        str(V), "--batch", "1", "--no-weights-data"],
                       check=True, env=env, stdout=subprocess.DEVNULL)
    return [path]


def plan(lamina: str, row, onnx_dir, b: int, extra=()) -> tuple[dict, float]:
    _, _, h, layers, t, p, d, batch, _ = row
    m = batch // (d * b)
    cmd = [lamina, "plan", *model_arg(row, onnx_dir), "--pp", str(p),
           "--dp", str(d), "--tp", str(t), "--micro-batches", str(m),
           "--micro-batch-size", str(b), "--schedule", "interleaved-1f1b",
           "--zero", "0", "--recompute", "full", "--hardware", "a100-80g",
           "--format", "json", *extra]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout), time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lamina", default="build/bin/lamina")
    ap.add_argument("--onnx", metavar="DIR",
                    help="plan structure-only ONNX files written here")
    ap.add_argument("--micro-batch-size", type=int, default=1)
    ap.add_argument("--skip-search", action="store_true")
    args = ap.parse_args()
    if args.onnx:
        os.makedirs(args.onnx, exist_ok=True)

    print("| model | t | p | d | GPUs | batch | published TFLOP/s | "
          "predicted | ratio | bubble | peak GiB | plan time |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    ratios = []
    for row in ROWS + [GPT3]:
        params, _, h, layers, t, p, d, batch, published = row
        j, secs = plan(args.lamina, row, args.onnx, args.micro_batch_size)
        step = j["summary"]["step_time_s"]
        gpus = t * p * d
        predicted = megatron_flops(layers, h, batch) / step / gpus / 1e12
        ratio = predicted / published
        ratios.append(ratio)
        name = f"{params}B" + (" (GPT-3, 1024 GPUs)" if row is GPT3 else "")
        print(f"| {name} | {t} | {p} | {d} | {gpus} | {batch} | {published} | "
              f"{predicted:.1f} | {ratio:.2f} | "
              f"{j['summary']['bubble_fraction'] * 100:.1f}% | "
              f"{j['summary']['peak_memory_bytes'] / 2**30:.1f} | "
              f"{secs:.2f} s |")
    within = sum(abs(r - 1) <= 0.2 for r in ratios)
    print(f"\n{within} of {len(ratios)} within 20%; ratio range "
          f"{min(ratios):.2f}-{max(ratios):.2f}")

    _, secs = plan(args.lamina, GPT3, args.onnx, args.micro_batch_size)
    print(f"\n`lamina plan` 175B shape, 1024 GPUs: {secs:.2f} s wall")
    if not args.skip_search:
        cmd = [args.lamina, "plan", *model_arg(GPT3, args.onnx), "--search",
               "--gpus", "1024", "--global-batch", "1536", "--hardware",
               "a100-80g", "--format", "json"]
        t0 = time.perf_counter()
        out = subprocess.run(cmd, check=True, capture_output=True, text=True)
        secs = time.perf_counter() - t0
        r = json.loads(out.stdout)
        best = r["best"][0]
        print(f"`lamina plan --search` 175B, 1024 GPUs, batch 1536: "
              f"{r['enumerated']} configurations priced, {r['simulated']} "
              f"simulated, {secs:.2f} s wall; best {best['config']} "
              f"{best['step_time_s']:.2f} s/step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
