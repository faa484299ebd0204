#!/usr/bin/env python3
"""Distributed training runs measured against `lamina plan`.

For a tiny GPT-2 (5 layers, h 32, 4 heads, s 16, vocab 32, tied LM head,
compiled batch dim = micro-batch size b = 2) and a set of parallel
configurations: compile the SPMD program (`lamina compile --mode train
--pp --dp --micro-batches --schedule --zero --recompute`), run a few steps
under `mpirun` with `--stats`, plan the same configuration with
`lamina plan --precision fp32 --micro-batch-size 2 --recompute full|none
--format json` (the bf16 configurations: compiled with `--precision bf16
--param-reads=copies`, planned with `--precision bf16-copies`), and print
per global rank, side by side:

* bytes sent per step point-to-point and on data-parallel (and
  shared-parameter) collectives, measured (runtime counters, ring volumes)
  against the plan's RankTraffic for that rank's pipeline rank; the
  training state a rank keeps (`state_bytes`) against the plan's weights +
  grads + optimizer; at ZeRO 2-3 the peak of full gradients and
  reduce-scatter parts against the plan's `gradient_buffers`. These must
  be equal (lamina.distcheck.bytes_equal): the script exits 1 when any
  differs.
* the idle fraction: measured `1 - compute/wall` against the plan's
  `idle / (busy + idle)` on a hardware file for this host (`--hardware`;
  the default, lamina.distcheck.HOST_HARDWARE, describes a small CPU: what
  matters is the schedule's bubble, not the absolute times).
* the step buffer (boundary values, their gradients and residuals at the
  compiler's offsets) against the plan's `step_buffers`, the same
  computation: equal (checked with the bytes); without recompute the plan
  is given the compile's loss flags and takes the residuals from the
  model as the compile outlines it;
* memory: the runtime's step buffer and arena (its largest module
  function's working memory, where recomputed activations live) against
  the plan's activation memory (checkpoints held forward-to-backward plus
  one stage's regenerated activations) and transient (largest
  intermediate).

Nothing is left outside the plan for this model: the tied embedding/LM-head
table, which the runtime keeps whole on every rank that reads it and
synchronises over all its holders (an all-reduce at ZeRO 0; at ZeRO >= 1 a
reduce-scatter and an all-gather of the updated part), is priced the same
way by the plan
(`ModelDesc::sharedParams`, docs/plan.md "Shared parameters"). One
runtime difference this model does not show: a boundary whose bytes are not
a multiple of 64 is sent with its packing padding (docs/results/performance.md,
"Distributed runs against the plan"); every boundary here is 4,096 B.

  python3 bench/dist_vs_plan.py --lamina build/bin/lamina [--steps 3]
      [--workdir DIR] [--only NAME,...] [--markdown FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
from lamina import distcheck  # noqa: E402  (rows, tables, host hardware)

# name, schedule, pp, dp, micro-batches, zero, recompute (compile spelling)
# [, flags: "bf16": compiled with --precision bf16 --param-reads=copies,
# planned with --precision bf16-copies; "tp2": --tp 2 (t x p x d ranks),
# planned with the loss flags, which give the plan the split modules;
# "sp": --sequence-parallel too; "llama": the LLaMA below instead of GPT-2]
CONFIGS = [
    ("bf-p2-m4", "breadth-first", 2, 1, 4, 0, "modules"),
    ("gpipe-p2-m2", "gpipe", 2, 1, 2, 0, "none"),
    ("1f1b-p2-m4", "1f1b", 2, 1, 4, 0, "none"),
    # 5 layers divide by p only for p = 5 (one layer per chunk, v = 1).
    ("il-p5-m5", "interleaved-1f1b", 5, 1, 5, 0, "none"),
    ("layered-d2-z0", "layered", 1, 2, 2, 0, "modules"),
    ("layered-d2-z3", "layered", 1, 2, 2, 3, "modules"),
    ("bf-p2-d2-z3", "breadth-first", 2, 2, 4, 3, "modules"),
    ("1f1b-p2-m4-bf16", "1f1b", 2, 1, 4, 0, "none", "bf16"),
    ("layered-d2-z1-bf16", "layered", 1, 2, 2, 1, "modules", "bf16"),
    ("bf-p2-d2-z3-bf16", "breadth-first", 2, 2, 4, 3, "modules", "bf16"),
    ("tp2-bf-p2-d2-z3", "breadth-first", 2, 2, 4, 3, "modules", "tp2"),
    ("tp2-llama-bf-p2-d2-z3", "breadth-first", 2, 2, 4, 3, "modules", "tp2",
     "llama"),
    ("tp2-sp-llama-1f1b-p2", "1f1b", 2, 1, 2, 0, "none", "tp2", "sp",
     "llama"),
]

MODEL = dict(layers=5, hidden=32, heads=4, seq=16, batch=2, vocab=32)
# Grouped-query attention (4 query, 2 key/value heads), rotary, SwiGLU.
LLAMA = dict(layers=4, hidden=32, heads=4, kv_heads=2, seq=16, batch=2,
             vocab=32)

def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout}\n"
                 f"{r.stderr}")
    return r.stdout


def mpi_env():
    env = dict(os.environ)
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_mpi_yield_when_idle="1")
    return env


def measure(args, work, model, data, hw, cfg):
    name, sched, pp, dp, m, zero, recompute = cfg[:7]
    flags = set(cfg[7:])
    bf16 = "bf16" in flags
    tp = 2 if "tp2" in flags else 1
    split = (["--tp", str(tp)] if tp > 1 else []) + \
        (["--sequence-parallel"] if "sp" in flags else [])
    if "llama" in flags:
        model = model.replace("gpt.onnx", "llama.onnx")
    out = os.path.join(work, name)
    if not os.path.exists(os.path.join(out, "run")):
        run([args.lamina, "compile", model, "--mode", "train", "--loss",
             "causal-lm", "--logits", "logits", "--pp", str(pp), "--dp",
             str(dp), "--micro-batches", str(m), "--schedule", sched,
             "--zero", str(zero), "--recompute", recompute, "-o", out,
             "--quiet"] + split +
            (["--precision", "bf16", "--param-reads=copies"] if bf16 else []))
    stats = os.path.join(out, "stats.json")
    run(["mpirun", "--oversubscribe", "-np", str(pp * dp * tp),
         os.path.join(out, "run"), "--data", data, "--steps",
         str(args.steps), "--threads", "1", "--stats", stats],
        env=mpi_env())
    with open(stats, encoding="utf-8") as f:
        measured = json.load(f)
    plan_cmd = [args.lamina, "plan", model, "--pp", str(pp), "--dp", str(dp),
                "--micro-batches", str(m), "--micro-batch-size",
                str(MODEL["batch"]), "--schedule", sched, "--zero",
                str(zero), "--recompute",
                "full" if recompute == "modules" else "none",
                "--precision", "bf16-copies" if bf16 else "fp32",
                "--hardware", hw, "--format", "json"]
    # Without recompute the plan takes the residuals from the model as the
    # compile outlines it (the same loss flags); with --tp the split
    # modules' collectives, weights and boundaries.
    plan_cmd += split
    if recompute != "modules" or tp > 1:
        plan_cmd += ["--loss", "causal-lm", "--logits", "logits"]
    plan = json.loads(run(plan_cmd))
    return measured, plan, plan_cmd


def rows_for(cfg, measured, plan):
    return distcheck.rows(measured, plan)


def table(cfg, rows):
    flags = set(cfg[7:])
    return [f"### {cfg[0]}: {cfg[1]} p{cfg[2]} d{cfg[3]} m{cfg[4]} "
            f"zero{cfg[5]} recompute {cfg[6]}" +
            (" bf16 (plan: bf16-copies)" if "bf16" in flags else "") +
            (" t2" if "tp2" in flags else "") +
            (" sequence-parallel" if "sp" in flags else "") +
            (" (LLaMA)" if "llama" in flags else ""), ""] + \
        distcheck.markdown(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lamina", default=os.path.join(ROOT, "build/bin/lamina"))
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--workdir", help="keep compiled programs here (reused)")
    ap.add_argument("--only", help="comma-separated configuration names")
    ap.add_argument("--hardware", help="hardware JSON for the plan "
                    "(default: a small CPU, lamina.distcheck.HOST_HARDWARE)")
    ap.add_argument("--markdown", help="also write the tables here")
    args = ap.parse_args()
    args.lamina = os.path.abspath(args.lamina)
    work = args.workdir or tempfile.mkdtemp(prefix="dist-vs-plan-")
    os.makedirs(work, exist_ok=True)
    model = os.path.join(work, "gpt.onnx")
    data = os.path.join(work, "data.bin")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    for family, shape, path in (("gpt2", MODEL, model),
                                ("llama", LLAMA,
                                 os.path.join(work, "llama.onnx"))):
        if not os.path.exists(path):
            run([sys.executable, "-m", "lamina.models", family] +
                [a for k, v in shape.items()
                 for a in (f"--{k.replace('_', '-')}", str(v))] +
                ["-o", path], env=env)
    if not os.path.exists(data):
        import numpy as np
        np.tile(np.array([3, 1, 4, 1, 5, 9, 2, 6], dtype=np.uint16),
                1250).tofile(data)
    hw = args.hardware
    if not hw:
        hw = os.path.join(work, "host-cpu.json")
        distcheck.write_host_hardware(hw)
    only = set(args.only.split(",")) if args.only else None
    out, bad = [], []
    for cfg in CONFIGS:
        if only and cfg[0] not in only:
            continue
        measured, plan, plan_cmd = measure(args, work, model, data, hw, cfg)
        rows = rows_for(cfg, measured, plan)
        lines = table(cfg, rows)
        lines += ["", "plan: `" + " ".join(
            os.path.basename(a) if a in (model, hw) or a.endswith(".onnx")
            else a
            for a in plan_cmd[1:]) + "`", ""]
        print("\n".join(lines), flush=True)
        out += lines
        for r in rows:
            if not distcheck.bytes_equal(r):
                bad.append(f"{cfg[0]} rank {r['rank']}")
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write("\n".join(out) + "\n")
    if bad:
        print("bytes differ from the plan: " + ", ".join(bad),
              file=sys.stderr)
        return 1
    print("every bytes figure equals the plan's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
