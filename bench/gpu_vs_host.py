#!/usr/bin/env python3
"""Single-GPU training of the tiny GPT against the host program: the same
model, data, seed and flags compiled twice, losses compared step by step.

    python3 bench/gpu_vs_host.py --workdir /tmp/gvh --json R.json
    python3 bench/gpu_vs_host.py --target host        # host vs host (testing)
    python3 bench/gpu_vs_host.py --cuda-emulator      # no GPU: the CUDA
        # program linked against the CPU kernel emulator (docs/cuda.md)
    python3 bench/gpu_vs_host.py --build-only B       # compile here ...
    python3 bench/gpu_vs_host.py --prebuilt B         # ... run on a GPU node
        # without lamina (scripts/gpu-bundle.sh, docs/cuda.md)

The model and data are test/e2e/train-tiny-gpt.test's: `lamina.models gpt2
--layers 2 --hidden 32 --heads 4 --seq 16 --batch 4 --vocab 32` (seed 0) and
the 8-token corpus 3 1 4 1 5 9 2 6 repeated 1250 times (uint16); the run
flags are the test's (`--lr 1e-2 --seed 1`, AdamW) with `--log-every 1`.
For each `--precision` (default `f32,bf16`) the model is compiled with
`lamina compile --target TARGET --mode train --loss causal-lm --logits
logits --precision P` and with `--target host` and the same precision
(the host runs bf16 matmuls the same way, bf16 operands and f32
accumulation, so only summation order and libm differ), both run
`--steps N` (default 20), and the losses must agree:
|a - b| <= rtol * max(|a|, |b|) + atol,

* f32: the first 10 steps with rtol 2e-5, the later ones with rtol 3e-4,
  atol 0 (only the summation order and nvcc's FMA contraction differ;
  distributed AdamW runs, which also sum in another order, keep their
  losses within 1e-5 of one process's, docs/distributed.md). Measured on
  an H200 (docs/results/performance.md): steps 1-10 agree to 7.5e-6 (1.7e-6 on the
  kernel emulator), then the run passes a stretch (steps 11-13) where
  rounding differences grow with the same shape on every build: 6e-5 on
  most, 1.3e-4 on one whose kernels contracted differently;
* bf16: the first 5 steps, rtol 2e-2, atol 1e-3. At this learning rate
  (1e-2, the test's) a training run is chaotic once a bf16 rounding flips:
  measured on the host, bf16 against f32 differ by 2e-5 at step 1, 3e-3 at
  step 5 and 10-15% at steps 10-14, so later steps of two correct bf16
  programs that sum in different orders need not agree. Beyond step 5 the
  largest difference is reported, not judged.

The losses print with 6 decimals, so the comparison resolves ~1e-6
relative. Both programs must also train (the last loss below the first).

Both runs also evaluate (`--eval-data` on the same corpus, every 10 steps,
2 batches: the evaluation entry): the validation loss before the first
step is judged with the precision's tolerance, the later ones reported.
Then each f32 program runs 5 steps more with `--grad-accum 2` (the
weighted gradient sum on the device), judged with f32's tolerance. With
--target cuda the device program trains once more with
LAMINA_CUDA_GRAPHS=1 (its step and evaluation replayed as CUDA graphs,
docs/cuda.md), judged against its own launched run with the precision's
tolerance.

`--build-only DIR` writes the model, the data and the compiled programs
into DIR (`manifest.json` says which) and runs nothing; `--prebuilt DIR`
then runs and compares them on a machine that has no lamina, each program
with `--model` pointing at the model it was compiled from. The programs run
in a copy of DIR under --workdir (they write their logs beside themselves).

Exit status 0 when every comparison passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

import gpu_common as C  # noqa: E402

# precision -> (rtol, atol, steps judged with rtol: None = all, rtol of the
# later steps: None = reported only)
TOL = {"f32": (2e-5, 0.0, 10, 3e-4), "bf16": (2e-2, 1e-3, 5, None)}


def sh(cmd, **kw):
    print("$ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, **kw)


def prepare(workdir: str, python: str) -> tuple[str, str]:
    model = os.path.join(workdir, "gpt2.onnx")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + env.get("PYTHONPATH", "")
    r = sh([python, "-m", "lamina.models", "gpt2", "--layers", "2", "--hidden",
            "32", "--heads", "4", "--seq", "16", "--batch", "4", "--vocab", "32",
            "-o", model], env=env)
    if r.returncode != 0:
        raise RuntimeError("model generation failed")
    data = os.path.join(workdir, "data.bin")
    np.tile(np.array([3, 1, 4, 1, 5, 9, 2, 6], dtype=np.uint16), 1250).tofile(data)
    return model, data


def val_losses(log_path: str) -> list:
    with open(log_path) as f:
        return [float(m.group(1)) for m in
                re.finditer(r"^step \d+ val loss (\S+) ", f.read(), re.M)]


def rerun(out: str, data: str, args: list, timeout) -> list:
    """The compiled program again with `args`: its losses (None: failed)."""
    log = os.path.join(out, "accum.log")
    cmd = [os.path.join(out, "run"), "--data", data, "--lr", "1e-2",
           "--log-every", "1", "--seed", "1", *args]
    print("$ " + " ".join(cmd), flush=True)
    r = C.run_logged(cmd, log, timeout=timeout, echo=False)
    return [s["loss"] for s in r["steps"]] if r["rc"] == 0 else None


def compile_program(lamina, model, target, precision, out, timeout,
                    extra=()) -> dict:
    """`lamina compile` of the tiny GPT's train step into `out`."""
    t0 = time.monotonic()
    c = sh([lamina, "compile", model, "--target", target, "--mode", "train",
            "--loss", "causal-lm", "--logits", "logits", "--precision", precision,
            "-o", out, *extra], capture_output=True, text=True, timeout=timeout)
    sys.stdout.write(c.stdout)
    sys.stdout.write(c.stderr)
    res = dict(target=target, precision=precision, out=out,
               compile_s=time.monotonic() - t0)
    if c.returncode != 0:
        res.update(ok=False, error=f"compile exited {c.returncode}: "
                   + (c.stderr.strip().splitlines() or [""])[-1])
    return res


def train(res: dict, data, steps, timeout, model=None, env_vars=None,
          log="train.log") -> dict:
    """Runs the program compiled into res["out"] for `steps` steps (with
    --model when given: a program built on another machine; `env_vars`
    added to the environment)."""
    out = res["out"]
    res["model"] = model
    cmd = [os.path.join(out, "run"), "--data", data, "--steps", str(steps),
           "--lr", "1e-2", "--log-every", "1", "--seed", "1",
           "--eval-data", data, "--eval-every", "10", "--eval-batches", "2"]
    if model:
        cmd += ["--model", model]
    print("$ " + " ".join(f"{k}={v}" for k, v in (env_vars or {}).items())
          + (" " if env_vars else "") + " ".join(cmd), flush=True)
    r = C.run_logged(cmd, os.path.join(out, log), timeout=timeout,
                     echo=False,
                     env=dict(os.environ, **env_vars) if env_vars else None)
    res.update(run_s=r["wall_s"], losses=[s["loss"] for s in r["steps"]],
               val=val_losses(os.path.join(out, log)), rc=r["rc"])
    if r["rc"] != 0 or len(r["steps"]) != steps:
        with open(os.path.join(out, log)) as f:
            tail = f.read().strip().splitlines()[-3:]
        res.update(ok=False, error=f"run exited {r['rc']} after "
                   f"{len(r['steps'])} of {steps} steps: " + " / ".join(tail))
        return res
    res["ok"] = True
    return res


def compare(a: list, b: list, rtol: float, atol: float, window=None,
            later_rtol=None) -> dict:
    """Judges steps 1..window (all when None) with rtol and the later ones
    with later_rtol (not at all when None); reports the largest relative
    difference over steps 1..window and over all of them."""
    worst, worst_step, worst_all = 0.0, None, 0.0
    ok = len(a) == len(b) and len(a) > 0
    for k, (x, y) in enumerate(zip(a, b), 1):
        d = abs(x - y)
        rel = d / max(abs(x), abs(y), 1e-30)
        worst_all = max(worst_all, rel)
        if window is not None and k > window:
            if later_rtol is not None and d > later_rtol * max(abs(x), abs(y)) + atol:
                ok = False
            continue
        if rel > worst:
            worst, worst_step = rel, k
        if d > rtol * max(abs(x), abs(y)) + atol:
            ok = False
    return dict(ok=ok, max_rel=worst, at_step=worst_step, rtol=rtol,
                atol=atol, judged_steps=window or len(a), max_rel_all=worst_all,
                later_rtol=later_rtol)


def program_model(out: str, model: str) -> str:
    """The model a program compiled into `out` from `model` reads its
    weights from: the copy compile wrote when it restored parameters, else
    the model itself."""
    copy = os.path.join(out, "model.onnx")
    return copy if os.path.exists(copy) else model


def build_only(args, lamina: str, precisions: list, extra: list) -> int:
    """--build-only: the model, data and programs into args.build_only."""
    dest = os.path.abspath(args.build_only)
    os.makedirs(dest, exist_ok=True)
    model, data = prepare(dest, args.python)
    ok = True
    for prec in precisions:
        for target, flags in (("host", ()), (args.target, extra)):
            res = compile_program(lamina, model, target, prec,
                                  os.path.join(dest, f"{target}-{prec}"),
                                  args.timeout, flags)
            if "error" in res:
                print(f"gpu_vs_host: {target} {prec}: {res['error']}", flush=True)
                ok = False
    C.write_json(os.path.join(dest, "manifest.json"),
                 dict(target=args.target, precision=",".join(precisions),
                      cuda_emulator=bool(extra)))
    return 0 if ok else 1


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lamina", default=os.path.join(ROOT, "build", "bin", "lamina"))
    p.add_argument("--target", default="cuda", help="the side compared with the host")
    p.add_argument("--precision", default="f32,bf16")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--workdir", default=None)
    p.add_argument("--timeout", type=float, default=300, help="per command")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--json", default=None)
    p.add_argument("--markdown", default=None)
    p.add_argument("--cuda-emulator", action="store_true",
                   help="build the --target cuda side with --cuda-emulator")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--build-only", metavar="DIR",
                   help="compile the programs into DIR; run nothing")
    g.add_argument("--prebuilt", metavar="DIR",
                   help="run the programs a --build-only wrote into DIR")
    args = p.parse_args(argv)
    if args.prebuilt:
        with open(os.path.join(args.prebuilt, "manifest.json")) as f:
            manifest = json.load(f)
        args.target, args.precision = manifest["target"], manifest["precision"]
        args.cuda_emulator = manifest["cuda_emulator"]
    extra = ["--cuda-emulator"] if args.cuda_emulator else []
    if extra and args.target != "cuda":
        p.error("--cuda-emulator needs --target cuda")
    precisions = [x for x in args.precision.split(",") if x]
    if any(x not in TOL for x in precisions):
        p.error("--precision: a comma list of f32, bf16")
    tmp = None
    if args.workdir is None:
        tmp = args.workdir = tempfile.mkdtemp(prefix="gpu-vs-host-")
    os.makedirs(args.workdir, exist_ok=True)
    lamina = os.path.abspath(args.lamina)
    try:
        if args.build_only:
            return build_only(args, lamina, precisions, extra)
        if args.prebuilt:
            src = os.path.abspath(args.prebuilt)
            for name in os.listdir(src):
                (shutil.copytree if os.path.isdir(os.path.join(src, name))
                 else shutil.copy2)(os.path.join(src, name),
                                    os.path.join(args.workdir, name))
            model = os.path.join(args.workdir, "gpt2.onnx")
            data = os.path.join(args.workdir, "data.bin")
        else:
            model, data = prepare(args.workdir, args.python)
        results, all_ok = [], True

        def side(target, prec, flags=()):
            out = os.path.join(args.workdir, f"{target}-{prec}")
            if not args.prebuilt:
                res = compile_program(lamina, model, target, prec, out,
                                      args.timeout, flags)
                if "error" in res:
                    return res
                return train(res, data, args.steps, args.timeout)
            res = dict(target=target, precision=prec, out=out, compile_s=None)
            return train(res, data, args.steps, args.timeout,
                         program_model(out, model))

        for prec in precisions:
            rtol, atol, window, later = TOL[prec]
            ref = side("host", prec)
            dut = side(args.target, prec, extra)
            row = dict(precision=prec, host=ref, target=dut)
            if ref.get("ok") and dut.get("ok"):
                row["compare"] = compare(dut["losses"], ref["losses"], rtol,
                                         atol, window, later)
                trains = (ref["losses"][-1] < ref["losses"][0]
                          and dut["losses"][-1] < dut["losses"][0])
                row["host_trains"] = trains
                row["val"] = compare(dut["val"], ref["val"], rtol, atol, 1)
                row["ok"] = row["compare"]["ok"] and trains and row["val"]["ok"]
                if args.target == "cuda":
                    # The same program with its step replayed as a CUDA
                    # graph (docs/cuda.md): the eager run's losses, within
                    # the precision's tolerance (cuDNN's attention gradient
                    # need not be bitwise repeatable on a GPU).
                    g = train(dict(out=dut["out"]), data, args.steps,
                              args.timeout, dut["model"],
                              {"LAMINA_CUDA_GRAPHS": "1"}, "graphs.log")
                    row["graphs"] = (compare(g["losses"], dut["losses"], rtol,
                                             atol, window, later)
                                     if g.get("ok") else
                                     dict(ok=False, error=g.get("error")))
                    row["ok"] &= row["graphs"]["ok"]
                if prec == "f32":
                    acc = [rerun(o["out"], data,
                                 ["--steps", "5", "--grad-accum", "2"]
                                 + (["--model", o["model"]] if o["model"] else []),
                                 args.timeout)
                           for o in (ref, dut)]
                    row["accum"] = (compare(acc[1], acc[0], rtol, atol)
                                    if acc[0] and acc[1] else dict(ok=False))
                    row["ok"] &= row["accum"]["ok"]
            else:
                row["ok"] = False
            all_ok &= row["ok"]
            results.append(row)
        lines = [f"tiny GPT (2 layers, hidden 32, vocab 32, batch 4, seq 16), "
                 f"{args.steps} AdamW steps, lr 1e-2, seed 1: "
                 f"--target {args.target}{' --cuda-emulator' if extra else ''}"
                 " against --target host", "",
                 "| precision | host loss 1 -> N | " + args.target +
                 " loss 1 -> N | max rel diff, judged steps (at) | all steps "
                 "| val losses: step 0, all | --grad-accum 2 | CUDA graphs: max "
                 "rel diff to the launches | tolerance | result |",
                 "|---|---|---|---|---|---|---|---|---|---|"]
        for row in results:
            h, t = row["host"], row["target"]
            hl = (f"{h['losses'][0]:.6f} -> {h['losses'][-1]:.6f}" if h.get("ok")
                  else "failed: " + h.get("error", "")[:100])
            tl = (f"{t['losses'][0]:.6f} -> {t['losses'][-1]:.6f}" if t.get("ok")
                  else "failed: " + t.get("error", "")[:100])
            c = row.get("compare")
            cd = (f"{c['max_rel']:.2e}, steps 1-{c['judged_steps']} (step {c['at_step']})"
                  if c else "-")
            ca = f"{c['max_rel_all']:.2e}" if c else "-"
            v = row.get("val")
            vd = (f"{v['max_rel']:.2e}, {v['max_rel_all']:.2e} ({len(t['val'])})"
                  if v else "-")
            a = row.get("accum")
            ad = ("-" if a is None else
                  f"{a['max_rel']:.2e}" if "max_rel" in a else "failed")
            g = row.get("graphs")
            gd = ("-" if g is None else
                  f"{g['max_rel_all']:.2e}" if "max_rel_all" in g else
                  "failed: " + (g.get("error") or "")[:100])
            rt, at, win, later = TOL[row["precision"]]
            tol = (f"rtol {rt:g} (steps 1-{win}), "
                   + (f"{later:g} after" if later is not None else "then reported")
                   + f", atol {at:g}")
            lines.append(f"| {row['precision']} | {hl} | {tl} | {cd} | {ca} | {vd} "
                         f"| {ad} | {gd} | {tol} | {'ok' if row['ok'] else 'FAIL'} |")
        md = "\n".join(lines) + "\n"
        print("\n" + md, flush=True)
        if args.json:
            C.write_json(args.json, dict(target=args.target, steps=args.steps,
                                         results=results, ok=all_ok))
        if args.markdown:
            with open(args.markdown, "w") as f:
                f.write(md)
        return 0 if all_ok else 1
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
