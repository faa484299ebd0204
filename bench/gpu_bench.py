#!/usr/bin/env python3
"""The ~1B GPT training-step benchmark: Lamina's single-GPU program against
PyTorch eager, on the same model, weights, batches, loss and optimizer.

    python3 bench/gpu_bench.py --workdir /tmp/gb --json R.json --markdown R.md
    python3 bench/gpu_bench.py --target host --tiny --torch-device cpu   # test the script

1. the model: `bench/gpt1b.py` (hidden 2048, 16 layers, 16 heads, seq 2048,
   vocab 50304, 912,953,344 parameters, seed 0) written into the work dir,
   or `--model FILE`;
2. the data: random token ids in [0, min(vocab, 50257)) as uint16, the
   training program's format;
3. `lamina compile MODEL --target cuda --mode train --loss causal-lm
   --logits logits --dim batch=B --dim seq=S --precision bf16 -o OUT`, in
   the background while PyTorch runs (it only uses the CPU; `--serial`
   compiles first), bounded by --compile-timeout and, per process, an
   address-space limit (--compile-mem-gib);
4. after the PyTorch run, `OUT/run --data DATA --steps W+N --log-every 1 --optimizer adamw --lr 1e-4
   --seed 0`; each logged step ends after the loss was read back from the
   device, so the time of the last N steps is elapsed(W+N) - elapsed(W)
   (from the program's own clock: tokens/s, printed to the token, gives
   elapsed more precisely than its 0.1 s field);
5. (before 4) `bench/torch_gpt.py` in its own process on the same file, batch, data and
   seed (the same sampler, so step k is the same batch on both sides), with
   the ONNX graph's attention (`eager`) and with
   scaled_dot_product_attention (`sdpa`);
6. a table (tokens/s, ms/step, MFU, lamina/torch), the step-1 losses of
   both sides compared (same weights, same batch: they must agree to bf16
   rounding), memory (torch.cuda.max_memory_allocated; for Lamina the
   largest nvidia-smi memory.used seen during its run), JSON (--json) and a
   markdown snippet (--markdown) for docs/results/performance.md.

MFU = tokens/s x (6 N + 12 L H S) / peak (gpu_common.flops_per_token;
N = all 912,953,344 parameters, embeddings included), peak = dense bf16 of
the GPU by name (H100/H200 SXM 989.4 TFLOPS, A100 312) or --peak-tflops.

Batch size (default 4, each sequence 2048 tokens: 8192 tokens per step):
both sides keep fp32 weights + gradients + AdamW m and v = 16 B/param =
13.6 GiB. Lamina's program keeps every forward activation until the
backward pass (no recompute), f32 except the bf16 matmul operands; its
arena (activations + gradients of a step), measured with `lamina compile
--target host --no-build`: 12.6 GiB at batch 1 (f32), 53.4 GiB at batch 4
(bf16), so ~64 GiB in all at batch 4. PyTorch eager at batch 4 holds per
layer the f32 softmax output and its bf16 copy (1.5 GiB) and the other
activations: ~50 GiB (estimate). Batch 8 would need ~115 GiB on Lamina's
side. docs/results/performance.md, "GPU (CUDA) benchmark".

`--program DIR` skips the compile and runs a program compiled elsewhere
(scripts/gpu-bundle.sh compiles it on a machine with lamina, for a GPU
node without it) with `--model MODEL`: the weights come from the model
generated here, by name, dtype and shape. `--build-only DIR` is that
compile: it writes the program, its compile log and `compile.json`.

Exit status: 0 when everything ran and the step-1 losses agree, 1 when a
step failed (compile, run, torch), 3 when they ran but the losses differ.
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

import gpu_common as C  # noqa: E402
import gpt1b  # noqa: E402

GPT2_VOCAB = 50257  # ids the data holds (the model's vocab may be padded)


def _arena_bytes(text: str):
    m = re.search(r"memory plan: arena .*?\(peak, (\d+) bytes\)", text)
    return int(m.group(1)) if m else None


class Budget:
    def __init__(self, seconds: float | None):
        self.end = time.monotonic() + seconds if seconds else None

    def left(self) -> float | None:
        return None if self.end is None else self.end - time.monotonic()


class Compile:
    """`lamina compile` in the background (it uses the CPU only, so it can
    overlap the PyTorch run on the GPU; --serial waits for it first), under
    /usr/bin/time -v when present for its peak RSS."""

    def __init__(self, args, model: str, cfg: dict, out: str):
        self.cmd = [args.lamina, "compile", model, "--target", args.target,
                    "--mode", "train", "--loss", "causal-lm", "--logits",
                    "logits", "--dim", f"batch={args.batch}", "--dim",
                    f"seq={cfg['seq']}", "--precision", args.precision,
                    "--timing", "-o", out]
        time_v = "/usr/bin/time" if os.path.exists("/usr/bin/time") else None
        full = ([time_v, "-v"] + self.cmd) if time_v else self.cmd
        print("$ " + " ".join(self.cmd) + "   (in the background)", flush=True)
        self.log_out = os.path.join(args.workdir, "compile.out")
        self.log_err = os.path.join(args.workdir, "compile.err")
        self.t0 = time.monotonic()
        limit = int(args.compile_mem_gib * 2**30) if args.compile_mem_gib else None

        def cap():  # in the child: every process of the compile gets it
            import resource
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

        with open(self.log_out, "w") as o, open(self.log_err, "w") as e:
            self.proc = subprocess.Popen(full, stdout=o, stderr=e,
                                         preexec_fn=cap if limit else None)
        self.timeout = args.compile_timeout

    def finish(self, budget: Budget) -> dict:
        limit = self.timeout - (time.monotonic() - self.t0)
        left = budget.left()
        if left is not None:
            limit = min(limit, left)
        try:
            rc = self.proc.wait(timeout=max(limit, 1))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            rc = None
        secs = time.monotonic() - self.t0
        with open(self.log_out) as f:
            out = f.read()
        with open(self.log_err) as f:
            err_all = f.read()
        sys.stdout.write(out)
        rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", err_all)
        err = "\n".join(l for l in err_all.splitlines()
                        if not l.startswith("\t") and "Command being timed" not in l)
        res = dict(ok=rc == 0, rc=rc, seconds=secs, cmd=self.cmd,
                   peak_rss_mib=int(rss.group(1)) / 1024 if rss else None,
                   arena_bytes=_arena_bytes(out))
        if rc is None:
            res["error"] = (f"no program after {secs:.0f} s (--compile-timeout "
                            f"{self.timeout:.0f} s or the budget); killed")
        elif rc != 0:
            res["error"] = err.strip()[-2000:] or f"exit {rc}"
        if not res["ok"]:
            sys.stdout.write(err + "\n")
            print(f"lamina compile: FAILED: {res['error'].splitlines()[-1] if res['error'] else ''}",
                  flush=True)
        return res


def run_lamina(args, out: str, data: str, cfg: dict, budget: Budget,
               model: str | None = None, attention: str | None = None,
               env_vars: dict | None = None) -> dict:
    """The program's timed run; `model` for one compiled elsewhere
    (--program), `attention` a LAMINA_CUDA_ATTENTION value for this run,
    `env_vars` more environment (LAMINA_CUDA_GRAPHS)."""
    total = args.warmup + args.steps
    cmd = [os.path.join(out, "run"), "--data", data, "--steps", str(total),
           "--log-every", "1", "--optimizer", "adamw", "--lr", str(args.lr),
           "--seed", str(args.seed)]
    if model:  # a program compiled elsewhere (--program)
        cmd += ["--model", model]
    print("$ " + " ".join(cmd), flush=True)
    left = budget.left()
    extra = dict(env_vars or {})
    if attention is not None:
        extra["LAMINA_CUDA_ATTENTION"] = attention
    if args.target == "cuda":  # the entry's GPU time per step, at exit
        extra.setdefault("LAMINA_CUDA_TIMING", "1")
    env = dict(os.environ, **extra) if extra else None
    r = C.run_logged(cmd, os.path.join(args.workdir, "lamina-run.log"),
                     timeout=max(left, 1) if left is not None else None,
                     env=env)
    res = dict(cmd=cmd, rc=r["rc"], wall_s=r["wall_s"],
               gpu_mem_used_mib=r["gpu_mem_used_mib"],
               gpu_mem_baseline_mib=r["gpu_mem_baseline_mib"],
               losses=[s["loss"] for s in r["steps"]])
    if r["timed_out"]:
        res.update(ok=False, error="run ran out of the time budget")
        return res
    if r["rc"] != 0 or len(r["steps"]) < total:
        res.update(ok=False, error=f"run exited {r['rc']} after "
                   f"{len(r['steps'])} of {total} steps")
        return res
    res["entry_gpu_ms"] = entry_gpu_ms(os.path.join(args.workdir,
                                                     "lamina-run.log"))
    tokens_step = args.batch * cfg["seq"]
    secs, n = C.timed_window(r["steps"], tokens_step, args.warmup) \
        if args.warmup > 0 else (C.step_times(r["steps"], tokens_step)[total], total)
    host = r["arrivals"]
    res.update(ok=True, seconds=secs, steps=n, step_s=secs / n,
               tokens_per_s=tokens_step * n / secs,
               host_clock_s=(host[total] - host[args.warmup]) if args.warmup > 0 else None)
    return res


def entry_gpu_ms(log_path: str):
    """LAMINA_CUDA_TIMING's mean GPU time per run after the first two, of
    the entry run most often (the train step); None without the line."""
    best = None
    with open(log_path) as f:
        for m in re.finditer(r"LAMINA_CUDA_TIMING: entry \d+: (\d+) runs, .*?"
                             r"then mean ([0-9.]+)", f.read()):
            if best is None or int(m.group(1)) > best[0]:
                best = (int(m.group(1)), float(m.group(2)))
    return best[1] if best else None


def run_torch(args, model: str, data: str, budget: Budget) -> dict:
    out = os.path.join(args.workdir, "torch.json")
    if os.path.exists(out):
        os.remove(out)
    cmd = [args.python, os.path.join(HERE, "torch_gpt.py"), "--model", model,
           "--data", data, "--batch", str(args.batch), "--warmup",
           str(args.warmup), "--steps", str(args.steps), "--lr", str(args.lr),
           "--seed", str(args.seed), "--precision", args.precision,
           "--attention", args.attention, "--device", args.torch_device,
           "--json", out]
    if args.peak_tflops:
        cmd += ["--peak-tflops", str(args.peak_tflops)]
    print("$ " + " ".join(cmd), flush=True)
    left = budget.left()
    t0 = time.monotonic()
    try:
        r = subprocess.run(cmd, timeout=max(left, 1) if left is not None else None)
        rc = r.returncode
    except subprocess.TimeoutExpired:
        rc = None
    res = dict(cmd=cmd, rc=rc, wall_s=time.monotonic() - t0)
    if os.path.exists(out):
        with open(out) as f:
            res.update(json.load(f))
    res["ok"] = rc == 0
    if rc is None:
        res["error"] = "torch ran out of the time budget"
    elif rc != 0 and "rows" not in res:
        res["error"] = f"torch_gpt.py exited {rc}"
    return res


def loss_check(lam: dict, tor: dict, precision: str) -> dict | None:
    """Step-1 losses (same weights, same batch) of Lamina and torch eager."""
    rows = [r for r in tor.get("rows", []) if "losses" in r]
    if not lam.get("losses") or not rows:
        return None
    tol = 2e-2 if precision == "bf16" else 1e-4
    out = dict(tolerance=tol, lamina=lam["losses"][0], rows={})
    ok = True
    for r in rows:
        a, b = lam["losses"][0], r["losses"][0]
        rel = abs(a - b) / max(abs(a), abs(b), 1e-12)
        out["rows"][r["attention"]] = dict(torch=b, rel=rel, ok=rel <= tol)
        ok &= rel <= tol
    out["ok"] = ok
    return out


def fmt(v, spec, none="-"):
    return none if v is None else format(v, spec)


def report(res: dict) -> str:
    """The side-by-side table as markdown."""
    cfg, lam, tor = res["model"], res.get("lamina", {}), res.get("torch", {})
    ft = res["flops_per_token"]
    lines = [
        f"GPT {cfg['layers']} layers, hidden {cfg['hidden']}, {cfg['heads']} heads, "
        f"seq {cfg['seq']}, vocab {cfg['vocab']}: {cfg['params']:,} parameters; "
        f"batch {res['batch']} ({res['batch'] * cfg['seq']} tokens/step), "
        f"{res['precision']}, AdamW; {res['warmup']} warm-up + {res['steps']} timed steps "
        f"on {res.get('device') or 'unknown device'}; lamina's attention kernels: "
        f"{res.get('attention_kernels', 'default (fused)')}, bias epilogue: "
        f"{res.get('bias_epilogue', 'cuBLASLt')}",
        "",
        f"Model FLOPs/token {ft['total'] / 1e9:.2f} G (6N {ft['dense'] / 1e9:.2f} G + "
        f"attention 12LHS {ft['attention'] / 1e9:.2f} G); peak "
        f"{fmt(res.get('peak_flops') and res['peak_flops'] / 1e12, '.1f')} TFLOPS "
        f"({res.get('peak_source')})",
        "",
        "| run | tokens/s | ms/step | MFU | memory | lamina / this |",
        "|---|---|---|---|---|---|",
    ]
    lt = lam.get("tokens_per_s") if lam.get("ok") else None

    def row(name, tps, step_s, mfu, mem, err=None):
        if err:
            return f"| {name} | failed: {err.splitlines()[0][:120]} | | | | |"
        ratio = f"{lt / tps:.2f}" if lt and tps else "-"
        return (f"| {name} | {fmt(tps, ',.0f')} | {fmt(step_s and step_s * 1e3, '.1f')} | "
                f"{fmt(mfu and 100 * mfu, '.1f')}{'%' if mfu else ''} | {mem} | {ratio} |")

    if "skipped" in lam:
        lines.append(f"| lamina --target {res['target']} | skipped: {lam['skipped']} | | | | |")
    else:
        mem = (f"{lam['gpu_mem_used_mib'] / 1024:.1f} GiB used (nvidia-smi)"
               if lam.get("gpu_mem_used_mib") is not None else "-")
        lines.append(row(f"lamina --target {res['target']}", lt, lam.get("step_s"),
                         lam.get("mfu"), mem, None if lam.get("ok") else lam.get("error", "failed")))
    variants = {f"LAMINA_CUDA_ATTENTION={m}": v
                for m, v in res.get("lamina_attention_variants", {}).items()}
    variants.update(res.get("lamina_env_variants", {}))
    for label, var in variants.items():
        mem = (f"{var['gpu_mem_used_mib'] / 1024:.1f} GiB used (nvidia-smi)"
               if var.get("gpu_mem_used_mib") is not None else "-")
        lines.append(row(f"lamina, {label}",
                         var.get("tokens_per_s"), var.get("step_s"), var.get("mfu"),
                         mem, None if var.get("ok") else var.get("error", "failed")))
    if "skipped" in tor:
        lines.append(f"| torch eager | skipped: {tor['skipped']} | | | | |")
    for r in tor.get("rows", []):
        mem = (f"{r['max_memory_allocated_gib']:.1f} GiB allocated"
               if "max_memory_allocated_gib" in r else "-")
        name = "torch eager, " + ("graph's attention" if r["attention"] == "eager"
                                  else "SDPA (flash)")
        lines.append(row(name, r.get("tokens_per_s"), r.get("step_s"), r.get("mfu"),
                         mem, r.get("error")))
    if tor.get("error") and not tor.get("rows"):
        lines.append(f"| torch eager | failed: {tor['error']} | | | | |")
    timed = [(name, r["entry_gpu_ms"], r["step_s"])
             for name, r in [("lamina", lam)] + [(f"lamina, {k}", v)
                                                  for k, v in variants.items()]
             if r.get("ok") and r.get("entry_gpu_ms")]
    if timed:
        lines.append("")
        lines.append("GPU time of the train step's entry (LAMINA_CUDA_TIMING: "
                     "events around it, mean after two runs) against the "
                     "step's wall time: " + "; ".join(
                         f"{n} {g:.1f} of {w * 1e3:.1f} ms" for n, g, w in timed))
    lc = res.get("loss_check")
    if lc:
        lines.append("")
        parts = ", ".join(f"torch {k} {v['torch']:.6f} (rel {v['rel']:.1e})"
                          for k, v in lc["rows"].items())
        lines.append(f"Step-1 loss (same weights, same batch): lamina {lc['lamina']:.6f}, "
                     f"{parts}: {'agree' if lc['ok'] else 'DIFFER'} "
                     f"(tolerance {lc['tolerance']:g} relative)")
    comp = res.get("compile")
    if comp:
        lines.append("")
        arena = (f", arena {comp['arena_bytes'] / 2**30:.1f} GiB"
                 if comp.get("arena_bytes") else "")
        where = ("; compiled on another machine (--program)"
                 if comp.get("elsewhere") else "")
        lines.append(f"lamina compile: {fmt(comp.get('seconds'), '.1f')} s, peak RSS "
                     f"{fmt(comp.get('peak_rss_mib') and comp['peak_rss_mib'] / 1024, '.2f')} GiB{arena}"
                     + ("; it ran on the CPU during the PyTorch run (--serial to avoid)"
                        if res.get("compile_overlapped_torch") else "") + where)
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lamina", default=os.path.join(ROOT, "build", "bin", "lamina"))
    p.add_argument("--workdir", default=None, help="default: a temporary dir, removed")
    p.add_argument("--model", default=None, help="an existing model (default: generate)")
    p.add_argument("--tiny", action="store_true",
                   help="the tiny GPT of train-tiny-gpt.test (testing the script)")
    p.add_argument("--target", default="cuda", choices=["cuda", "host"])
    p.add_argument("--precision", default="bf16", choices=["bf16", "f32"])
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tokens", type=int, default=1 << 22, help="token file size")
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--compile-timeout", type=float, default=300,
                   help="seconds for lamina compile (default 300)")
    p.add_argument("--compile-mem-gib", type=float, default=64,
                   help="address-space limit of each compile process "
                        "(RLIMIT_AS; 0: none), so a runaway C++ build cannot "
                        "take the machine's memory from the PyTorch run")
    p.add_argument("--serial", action="store_true",
                   help="compile before the PyTorch run, not during it")
    p.add_argument("--no-lamina", action="store_true")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--program", metavar="DIR", default=None,
                   help="a program compiled elsewhere (--build-only): "
                        "no compile here, run with --model")
    g.add_argument("--build-only", metavar="DIR", default=None,
                   help="compile the program into DIR (needs --model); "
                        "run nothing")
    p.add_argument("--attention", default="eager,sdpa")
    p.add_argument("--also-attention", default="",
                   help="comma list of LAMINA_CUDA_ATTENTION values (e.g. "
                        "tensor-core): the lamina run again with each, as "
                        "more rows")
    p.add_argument("--also-env", action="append", default=[],
                   metavar="VAR=VALUE",
                   help="the lamina run again with this environment variable "
                        "set (e.g. LAMINA_CUDA_GRAPHS=1), as one more row; "
                        "repeatable")
    p.add_argument("--torch-device", default="cuda")
    p.add_argument("--python", default=sys.executable, help="for torch_gpt.py")
    p.add_argument("--peak-tflops", type=float, default=None)
    p.add_argument("--budget", type=float, default=None,
                   help="seconds for everything; later parts are skipped "
                        "(and said so) when it runs out")
    p.add_argument("--json", default=None)
    p.add_argument("--markdown", default=None)
    p.add_argument("--keep", action="store_true", help="keep a temporary workdir")
    args = p.parse_args(argv)
    for setting in args.also_env:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", setting):
            p.error(f"--also-env {setting!r}: expected VAR=VALUE")
    budget = Budget(args.budget)
    tmp = None
    if args.workdir is None:
        tmp = args.workdir = tempfile.mkdtemp(prefix="gpu-bench-")
    os.makedirs(args.workdir, exist_ok=True)
    args.workdir = os.path.abspath(args.workdir)
    args.lamina = os.path.abspath(args.lamina)
    if args.build_only:
        if not args.model:
            p.error("--build-only needs --model")
        return build_only(args)
    try:
        return _main(args, budget)
    finally:
        if tmp and not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


def build_only(args) -> int:
    """--build-only DIR: the compile of a --program DIR run elsewhere; its
    facts (time, peak RSS, arena) go to DIR/compile.json."""
    cfg = C.model_config(args.model)
    out = os.path.abspath(args.build_only)
    args.workdir = os.path.dirname(out)
    os.makedirs(args.workdir, exist_ok=True)
    comp = Compile(args, args.model, cfg, out).finish(Budget(None))
    if comp["ok"]:  # the logs beside the program
        for name in ("compile.out", "compile.err"):
            shutil.move(os.path.join(args.workdir, name), os.path.join(out, name))
    C.write_json(os.path.join(out, "compile.json"), comp)
    return 0 if comp["ok"] else 1


def _main(args, budget: Budget) -> int:
    t_start = time.monotonic()
    model = args.model
    gen = None
    if model is None:
        model = os.path.join(args.workdir, "tiny.onnx" if args.tiny else "gpt1b.onnx")
        cfg0 = gpt1b.TINY if args.tiny else gpt1b.GPT1B
        gen = gpt1b.write(model, **cfg0, seed=0)
    cfg = C.model_config(model)
    data = os.path.join(args.workdir, "tokens.bin")
    C.write_tokens(data, max(args.tokens, 4 * (cfg["seq"] + 1)),
                   min(cfg["vocab"], GPT2_VOCAB), seed=1)
    dev_name = C.nvidia_smi("name") if args.target == "cuda" or args.torch_device == "cuda" else None
    if args.target == "host" and args.torch_device == "cpu":
        dev_name = f"cpu ({os.cpu_count()} cores)"
    peak, peak_src = C.peak_flops(dev_name or "", args.peak_tflops)
    res = dict(model=cfg, batch=args.batch, precision=args.precision,
               warmup=args.warmup, steps=args.steps, target=args.target,
               device=dev_name, peak_flops=peak, peak_source=peak_src,
               flops_per_token=C.flops_per_token(cfg), generate=gen,
               tokens_per_step=args.batch * cfg["seq"],
               # Set by scripts/gpu-check.sh when cuDNN's or the tensor-core
               # attention failed its tests.
               attention_kernels=os.environ.get(
                   "LAMINA_CUDA_ATTENTION",
                   "default (cuDNN where it takes the call, else the fused kernels)"),
               # Likewise when cuBLASLt's bias epilogue failed them.
               bias_epilogue=("off (GEMM + add kernel)"
                              if os.environ.get("LAMINA_CUDA_EPILOGUE")
                              in ("off", "0") else "cuBLASLt"),
               memory_note="params + grads + AdamW m, v: 16 B/param = "
                           f"{16 * cfg['params'] / 2**30:.1f} GiB on each side")
    print(f"model {model}: {cfg['params']:,} parameters; device {dev_name}; "
          f"{res['memory_note']}", flush=True)

    failed = False
    comp = None
    out = args.program
    if args.no_lamina:
        res["lamina"] = dict(skipped="--no-lamina")
    elif args.program:
        path = os.path.join(args.program, "compile.json")
        if os.path.exists(path):
            with open(path) as f:
                res["compile"] = dict(json.load(f), elsewhere=True)
        else:
            res["compile"] = dict(ok=True, elsewhere=True, seconds=None)
    else:
        out = os.path.join(args.workdir, f"lamina-{args.target}")
        comp = Compile(args, model, cfg, out)
        if args.serial:
            res["compile"] = comp.finish(budget)

    res["compile_overlapped_torch"] = (comp is not None and not args.serial
                                       and not args.no_torch)
    if args.no_torch:
        res["torch"] = dict(skipped="--no-torch")
    elif budget.left() is not None and budget.left() < 60:
        res["torch"] = dict(skipped=f"time budget: {budget.left():.0f} s left")
        print(f"torch: skipped, {budget.left():.0f} s of the budget left", flush=True)
        failed = True
    else:
        res["torch"] = run_torch(args, model, data, budget)
        failed |= not res["torch"]["ok"]

    if "compile" in res or comp is not None:
        if "compile" not in res:
            res["compile"] = comp.finish(budget)
        c = res["compile"]
        if c.get("arena_bytes"):
            print(f"lamina arena (activations + gradients of one step): "
                  f"{c['arena_bytes'] / 2**30:.1f} GiB", flush=True)
        if not c["ok"]:
            res["lamina"] = dict(ok=False, error="compile: " + (c.get("error") or "failed"))
            failed = True
        else:
            weights = model if args.program else None
            lam = run_lamina(args, out, data, cfg, budget, weights)
            lam["mfu"] = C.mfu(lam["tokens_per_s"], cfg, peak) if lam.get("ok") else None
            # When the run fails or its losses miss PyTorch's, run the same
            # program once more without cuDNN's attention, then on the
            # generic kernels (LAMINA_CUDA_ATTENTION is read at run time).
            first = loss_check(lam, res["torch"], args.precision)
            now = os.environ.get("LAMINA_CUDA_ATTENTION")
            nxt = {None: "tensor-core", "cudnn": "tensor-core",
                   "tensor-core": "generic"}.get(now)
            if (args.target == "cuda" and nxt
                    and (not lam.get("ok") or (first is not None and not first["ok"]))
                    and (budget.left() is None or budget.left() > 60)):
                print(f"lamina: again with LAMINA_CUDA_ATTENTION={nxt}", flush=True)
                res["attention_kernels"] = (f"{nxt} (the run with "
                                            f"{now or 'the default'} failed or "
                                            "missed the losses)")
                res["lamina_first_attempt"] = lam
                lam = run_lamina(args, out, data, cfg, budget, weights, nxt)
                lam["mfu"] = (C.mfu(lam["tokens_per_s"], cfg, peak)
                              if lam.get("ok") else None)
            res["lamina"] = lam
            failed |= not lam["ok"]
            # The same program with other attention paths, side by side.
            for mode in [m for m in args.also_attention.split(",") if m]:
                if budget.left() is not None and budget.left() < 60:
                    break
                print(f"lamina: again with LAMINA_CUDA_ATTENTION={mode} "
                      "(--also-attention)", flush=True)
                var = run_lamina(args, out, data, cfg, budget, weights, mode)
                var["mfu"] = (C.mfu(var["tokens_per_s"], cfg, peak)
                              if var.get("ok") else None)
                res.setdefault("lamina_attention_variants", {})[mode] = var
            # The same program with other runtime settings (--also-env).
            for setting in args.also_env:
                if budget.left() is not None and budget.left() < 60:
                    break
                name, _, value = setting.partition("=")
                print(f"lamina: again with {setting} (--also-env)", flush=True)
                var = run_lamina(args, out, data, cfg, budget, weights,
                                 None, {name: value})
                var["mfu"] = (C.mfu(var["tokens_per_s"], cfg, peak)
                              if var.get("ok") else None)
                var["loss_check"] = loss_check(var, res["torch"], args.precision)
                res.setdefault("lamina_env_variants", {})[setting] = var
            if lam.get("ok"):
                print(f"lamina: {lam['step_s'] * 1e3:.1f} ms/step, "
                      f"{lam['tokens_per_s']:,.0f} tokens/s over steps "
                      f"{args.warmup + 1}..{args.warmup + args.steps}", flush=True)
    lc = loss_check(res["lamina"], res["torch"], args.precision)
    res["loss_check"] = lc
    res["seconds"] = time.monotonic() - t_start
    md = report(res)
    print("\n" + md, flush=True)
    if args.json:
        C.write_json(args.json, res)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(md)
    if failed:
        return 1
    if lc is not None and not lc["ok"]:
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
