#!/usr/bin/env python3
"""Host (CPU) training step: Lamina against PyTorch eager and torch.compile,
side by side in one run, at each thread count.

Two models, defined in PyTorch below and exported with the TorchScript
exporter (`torch.onnx.export(..., dynamo=False)`, fixed shapes, output
`logits`):

  gpt    GPT-2 style: learned token and position embeddings, pre-LayerNorm
         blocks, causal multi-head attention, GELU (tanh) MLP 4x, final
         LayerNorm, LM head tied to the token embedding (the exporter folds
         the head into a transposed copy of the table; `lamina compile`
         ties it back, docs/training.md "Parameters the exporters merge").
  llama  LLaMA style: RMSNorm, rotary position embeddings (Hugging Face's
         rotate_half form, frequencies in an `inv_freq` buffer, which
         `lamina compile` does not train), grouped-query attention
         (--heads query heads, --kv-heads key/value heads), SwiGLU MLP, no
         biases, untied LM head. Exported without constant folding: it
         would fold the rotary cos/sin tables into initializers, which
         `lamina compile` would then train as parameters.

Each model is compiled once with `lamina compile MODEL.onnx --mode train
--loss causal-lm --logits logits -o OUTDIR` and, per thread count T:

  lamina   OUTDIR/run --data D --steps W+N --lr LR --seed S --threads T
           --log-every 1: AdamW with the program's defaults (betas 0.9/0.999,
           eps 1e-8, weight decay 0.01 on every parameter, constant lr).
           Step time: the program's own clock. Each step's log line gives
           tokens/s since the start of training (to the token), so the time
           at the end of step k is k * batch * seq / tokens/s, and step k
           took the difference to step k-1 (sampling, forward, backward,
           loss read-back, optimizer update). Program start-up (loading the
           weights, allocating the arena) is outside the clock.
  eager    the same model in PyTorch (the initial weights the ONNX file was
           exported with), torch.optim.AdamW with the same settings (its
           default implementation on the CPU: single-tensor), f32,
           torch.set_num_threads(T), the same batches (the program's
           SplitMix64 sampler, lamina.testing.sampler), the same loss (mean
           cross-entropy of logits[:, :-1] against ids[:, 1:]). Each step
           is timed around sampling, forward, backward, optimizer step and
           loss.item().
  compile  the same with torch.compile(model) (inductor; the optimizer
           stays eager). Compilation happens in the warm-up steps and is
           reported separately; a failure is reported as n/a with its
           reason.

Reported per model and thread count: the median ms/step of the N timed
steps after W warm-up steps, the ratios lamina/eager and lamina/compile,
the peak RSS of each (each side runs in its own child process; ru_maxrss
from os.wait4), and the largest relative difference between Lamina's and
PyTorch eager's per-step losses over all W+N steps. PyTorch attention is
torch.nn.functional.scaled_dot_product_attention(is_causal=True) (the
way one writes it in PyTorch; --torch-attention explicit uses the same
matmul/mask/softmax chain the ONNX file has); the export always uses the
explicit chain, which `lamina compile` fuses into one attention op.

The launcher itself imports nothing beyond the standard library (PyTorch
runs in child processes), so the children's ru_maxrss, which on Linux
includes the launcher's pages until the child execs, is not inflated by
it; its own peak RSS is printed as the floor of those figures, and so is
the peak RSS of a process that only imports torch.

Each measurement also says how many CPUs other processes used meanwhile
(/proc/stat's busy ticks less the child's own CPU time; for PyTorch over
the timed steps only); a row where that exceeds 0.2 is marked (!) as
disturbed. Nothing sets OPENBLAS_*, OMP_* or similar variables; the ones
inherited are printed.

Exit status: 0 whatever the timings; 1 if an export, compile or run fails
(a torch.compile failure is reported, not fatal) or the losses differ by
more than --loss-rtol.

usage: bench/host_train_bench.py [--model gpt,llama] [--threads 1,2]
           [--steps 10] [--warmup 3] [--layers 4] [--hidden 256] [--heads 4]
           [--kv-heads 2] [--ffn 704] [--seq 128] [--batch 8] [--vocab 512]
           [--lr 1e-3] [--seed 0] [--no-compile] [--torch-attention sdpa]
           [--output-markdown FILE] [--json FILE] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import array
import json
import math
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)

# Train.cpp's log line (docs/training.md, "OUTDIR/run flags").
_STEP = re.compile(r"^step (\d+) loss (\S+) lr (\S+) tokens/s (\S+) "
                   r"elapsed (\S+?)s(?:\s|$)")
# Lines about the GEMM kernels a program or the compiler says it uses.
_GEMM = re.compile(r"gemm|onednn|dnnl|\bisa\b|openblas|\bblas\b|\bamx\b|"
                   r"avx512|avx2", re.I)


# ======================================================= models (workers)
def build_model(torch, cfg: dict):
    """The model named cfg['model'] (random initial weights from the global
    torch RNG). Attention is chosen per call by model.attention."""
    nn, F = torch.nn, torch.nn.functional
    H, nh, S = cfg["hidden"], cfg["heads"], cfg["seq"]
    hd = H // nh
    nkv = cfg["kv_heads"] if cfg["model"] == "llama" else nh
    scale = 1.0 / math.sqrt(hd)

    def attend(q, k, v, mode):
        # q [B, nh, S, hd]; k, v [B, nkv, S, hd].
        if mode == "sdpa":
            if nkv != nh:
                return F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                      enable_gqa=True)
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        if nkv != nh:  # Hugging Face's repeat_kv: expand, then reshape.
            B, _, Sk, _ = k.shape
            rep = nh // nkv
            k = k[:, :, None].expand(B, nkv, rep, Sk, hd).reshape(B, nh, Sk, hd)
            v = v[:, :, None].expand(B, nkv, rep, Sk, hd).reshape(B, nh, Sk, hd)
        Sq = q.shape[2]
        scores = torch.matmul(q, k.transpose(-2, -1)) * scale
        mask = torch.ones(Sq, Sq, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(mask, torch.finfo(scores.dtype).min)
        return torch.matmul(torch.softmax(scores, dim=-1), v)

    class GptBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(H)
            self.c_attn = nn.Linear(H, 3 * H)
            self.c_proj = nn.Linear(H, H)
            self.ln_2 = nn.LayerNorm(H)
            self.c_fc = nn.Linear(H, 4 * H)
            self.mlp_proj = nn.Linear(4 * H, H)

        def forward(self, x, mode):
            B, T, _ = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(H, dim=2)
            q = q.view(B, T, nh, hd).transpose(1, 2)
            k = k.view(B, T, nh, hd).transpose(1, 2)
            v = v.view(B, T, nh, hd).transpose(1, 2)
            y = attend(q, k, v, mode).transpose(1, 2).reshape(B, T, H)
            x = x + self.c_proj(y)
            h = F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")
            return x + self.mlp_proj(h)

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention = "sdpa"
            self.wte = nn.Embedding(cfg["vocab"], H)
            self.wpe = nn.Embedding(S, H)
            self.h = nn.ModuleList(GptBlock() for _ in range(cfg["layers"]))
            self.ln_f = nn.LayerNorm(H)
            for name, p in self.named_parameters():  # GPT-2's initialisation
                if p.dim() >= 2:
                    nn.init.normal_(p, 0.0, 0.02)
                elif name.endswith("bias"):
                    nn.init.zeros_(p)

        def forward(self, ids):
            T = ids.shape[1]
            pos = torch.arange(T, device=ids.device)
            x = self.wte(ids) + self.wpe(pos)
            for blk in self.h:
                x = blk(x, self.attention)
            return F.linear(self.ln_f(x), self.wte.weight)  # tied head

    class RMSNorm(nn.Module):
        def __init__(self, eps=1e-5):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(H))
            self.eps = eps

        def forward(self, x):  # Hugging Face's LlamaRMSNorm (f32 here)
            var = x.pow(2).mean(-1, keepdim=True)
            return self.weight * (x * torch.rsqrt(var + self.eps))

    class Rotary(nn.Module):
        def __init__(self, theta=10000.0):
            super().__init__()
            inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float32)
                                   / hd))
            self.register_buffer("inv_freq", inv)

        def forward(self, T, device):
            t = torch.arange(T, device=device, dtype=torch.float32)
            # (an outer product; torch.outer exports as Einsum, which
            # lamina does not import)
            freqs = t[:, None] * self.inv_freq[None, :]
            emb = torch.cat((freqs, freqs), dim=-1)
            return emb.cos(), emb.sin()

    def rotate_half(x):
        x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
        return torch.cat((-x2, x1), dim=-1)

    class LlamaBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_layernorm = RMSNorm()
            self.q_proj = nn.Linear(H, nh * hd, bias=False)
            self.k_proj = nn.Linear(H, nkv * hd, bias=False)
            self.v_proj = nn.Linear(H, nkv * hd, bias=False)
            self.o_proj = nn.Linear(nh * hd, H, bias=False)
            self.post_attention_layernorm = RMSNorm()
            self.gate_proj = nn.Linear(H, cfg["ffn"], bias=False)
            self.up_proj = nn.Linear(H, cfg["ffn"], bias=False)
            self.down_proj = nn.Linear(cfg["ffn"], H, bias=False)

        def forward(self, x, cos, sin, mode):
            B, T, _ = x.shape
            h = self.input_layernorm(x)
            q = self.q_proj(h).view(B, T, nh, hd).transpose(1, 2)
            k = self.k_proj(h).view(B, T, nkv, hd).transpose(1, 2)
            v = self.v_proj(h).view(B, T, nkv, hd).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            y = attend(q, k, v, mode).transpose(1, 2).reshape(B, T, nh * hd)
            x = x + self.o_proj(y)
            h = self.post_attention_layernorm(x)
            return x + self.down_proj(F.silu(self.gate_proj(h)) *
                                      self.up_proj(h))

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention = "sdpa"
            self.embed_tokens = nn.Embedding(cfg["vocab"], H)
            self.rotary = Rotary()
            self.layers = nn.ModuleList(LlamaBlock()
                                        for _ in range(cfg["layers"]))
            self.norm = RMSNorm()
            self.lm_head = nn.Linear(H, cfg["vocab"], bias=False)
            for p in self.parameters():
                if p.dim() >= 2:
                    nn.init.normal_(p, 0.0, 0.02)

        def forward(self, ids):
            T = ids.shape[1]
            cos, sin = self.rotary(T, ids.device)
            x = self.embed_tokens(ids)
            for blk in self.layers:
                x = blk(x, cos, sin, self.attention)
            return self.lm_head(self.norm(x))

    if cfg["model"] == "gpt":
        return Gpt()
    if cfg["model"] == "llama":
        return Llama()
    raise ValueError(cfg["model"])


def causal_lm_loss(torch, logits, ids):
    V = logits.shape[-1]
    return torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, V), ids[:, 1:].reshape(-1))


def worker_export(cfg: dict, workdir: str) -> dict:
    """Builds the model, saves its initial weights (init.pt) and exports it
    (model.onnx) with the TorchScript exporter."""
    import torch

    torch.manual_seed(cfg["seed"])
    model = build_model(torch, cfg)
    model.eval()
    torch.save(model.state_dict(), os.path.join(workdir, "init.pt"))
    ids = torch.randint(0, cfg["vocab"], (cfg["batch"], cfg["seq"]))
    path = os.path.join(workdir, "model.onnx")
    model.attention = "explicit"
    # Rotary cos/sin are computed in the graph from `inv_freq` (not folded
    # into initializers, which would be trained as parameters).
    fold = cfg["model"] != "llama"
    with torch.no_grad():
        torch.onnx.export(model, (ids,), path, dynamo=False,
                          input_names=["input_ids"], output_names=["logits"],
                          opset_version=17, do_constant_folding=fold)
        ref = model(ids)
        model.attention = "sdpa"
        sdpa = model(ids)
    n = sum(p.numel() for p in model.parameters())
    err = float((ref - sdpa).abs().max() / ref.abs().max())
    return dict(params=n, sdpa_vs_explicit=err, torch=torch.__version__)


def worker_torch(cfg: dict, workdir: str, mode: str, threads: int,
                 data: str, attention: str) -> dict:
    """Trains warmup+steps steps in PyTorch (eager or compiled); per-step
    seconds and losses."""
    import torch

    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    sys.path.insert(0, HERE)
    import gpu_common as C  # the program's sampler (lamina.testing.sampler)

    model = build_model(torch, cfg)
    model.load_state_dict(torch.load(os.path.join(workdir, "init.pt")))
    model.attention = attention
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"],
                            betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    fwd = model
    if mode == "compile":
        fwd = torch.compile(model)
    sampler = C.TokenSampler(data, cfg["batch"], cfg["seq"], seed=cfg["seed"],
                             vocab=cfg["vocab"])
    times, losses = [], []
    j0 = r0 = None
    for i in range(cfg["warmup"] + cfg["steps"]):
        if i == cfg["warmup"]:  # other processes' CPU use while timed
            j0, r0, w0 = cpu_jiffies(), os.times(), time.monotonic()
        t0 = time.perf_counter()
        ids = torch.from_numpy(sampler.next())
        loss = causal_lm_loss(torch, fwd(ids), ids)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss.item()))
        times.append(time.perf_counter() - t0)
    others = None
    j1, r1, w1 = cpu_jiffies(), os.times(), time.monotonic()
    if j0 and j1 and w1 > w0:
        busy = (j1[0] - j0[0]) / os.sysconf("SC_CLK_TCK")
        mine = r1.user - r0.user + r1.system - r0.system
        others = max(0.0, (busy - mine) / (w1 - w0))
    return dict(times=times, losses=losses, torch=torch.__version__,
                threads=torch.get_num_threads(), others=others)


def worker_main(argv) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--worker", required=True,
                   choices=["export", "torch", "import"])
    p.add_argument("--config", required=True)
    p.add_argument("--result", required=True)
    p.add_argument("--mode", default="eager")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--data")
    p.add_argument("--attention", default="sdpa")
    a = p.parse_args(argv)
    with open(a.config) as f:
        cfg = json.load(f)
    workdir = os.path.dirname(os.path.abspath(a.config))
    try:
        if a.worker == "export":
            res = worker_export(cfg, workdir)
        elif a.worker == "import":  # the floor of the PyTorch peak RSS
            import torch
            res = dict(torch=torch.__version__)
        else:
            res = worker_torch(cfg, workdir, a.mode, a.threads, a.data,
                               a.attention)
    except Exception as e:  # reported by the launcher
        import traceback
        traceback.print_exc()
        first = str(e).strip().splitlines()
        res = dict(error=f"{type(e).__name__}: {first[0] if first else ''}"[:300])
    with open(a.result, "w") as f:
        json.dump(res, f)
    return 0 if "error" not in res else 1


# ============================================================ launcher
def cpu_info() -> dict:
    model, flags = platform.processor() or "unknown", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, val = line.partition(":")
                key = key.strip()
                if key == "model name":
                    model = val.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = set(val.split())
    except OSError:
        pass
    want = ["avx2", "fma", "avx512f", "avx512bw", "avx512_vnni",
            "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8"]
    return dict(model=model, cores=os.cpu_count(),
                flags={k: (k in flags) for k in want})


def cpu_jiffies():
    """(busy, total) clock ticks of all CPUs from /proc/stat (busy counts
    steal: time the hypervisor gave our vCPUs to someone else)."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    user, nice, system, idle, iowait, irq, softirq, steal = v
    return user + nice + system + irq + softirq + steal, sum(v)


def run_child(cmd, log_path, env=None, timeout=None):
    """Runs cmd to completion, output to log_path. Returns a dict: rc, its
    own peak RSS in KiB (ru_maxrss), wall seconds, output text, and
    `others`: the CPUs (average count) that anything but the child used
    meanwhile, a sign of a disturbed measurement."""
    tick = os.sysconf("SC_CLK_TCK")
    j0, self0 = cpu_jiffies(), os.times()
    t0 = time.monotonic()
    with open(log_path, "w") as log:
        child = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                 env=env)
        killer = None
        if timeout:
            killer = threading.Timer(timeout, child.kill)
            killer.start()
        try:
            _, status, usage = os.wait4(child.pid, 0)
        finally:
            if killer:
                killer.cancel()
        child.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - t0
    j1, self1 = cpu_jiffies(), os.times()
    others = None
    if j0 and j1 and wall > 0:
        busy = (j1[0] - j0[0]) / tick
        mine = usage.ru_utime + usage.ru_stime + (
            self1.user - self0.user + self1.system - self0.system)
        others = max(0.0, (busy - mine) / wall)
    with open(log_path, errors="replace") as f:
        text = f.read()
    return dict(rc=child.returncode, rss=usage.ru_maxrss, wall=wall,
                text=text, others=others)


def write_tokens(path, n, vocab, seed):
    """A learnable corpus: random 'phrases' (8-32 tokens) of a 64-phrase
    vocabulary, concatenated in random order, as uint16 (the loss falls from
    ln(vocab) in the first steps, so a wrong update shows)."""
    rng = random.Random(seed)
    phrases = [[rng.randrange(vocab) for _ in range(rng.randint(8, 32))]
               for _ in range(64)]
    out = array.array("H")
    while len(out) < n:
        out.extend(rng.choice(phrases))
    del out[n:]
    if sys.byteorder != "little":
        out.byteswap()
    with open(path, "wb") as f:
        out.tofile(f)


def lamina_step_times(steps, tokens_per_step):
    """Per-step seconds from the program's log lines (--log-every 1)."""
    end = {0: 0.0}
    for s in steps:
        end[s["step"]] = (tokens_per_step * s["step"] / s["tokens_per_s"]
                          if s["tokens_per_s"] > 0 else s["elapsed"])
    return [end[k] - end[k - 1] for k in range(1, max(end) + 1)]


def parse_steps(text):
    out = []
    for line in text.splitlines():
        m = _STEP.match(line.strip())
        if m:
            out.append(dict(step=int(m.group(1)), loss=float(m.group(2)),
                            tokens_per_s=float(m.group(4)),
                            elapsed=float(m.group(5))))
    return out


def gemm_lines(text):
    seen, out = set(), []
    for line in text.splitlines():
        line = line.strip()
        if line and not _STEP.match(line) and _GEMM.search(line) \
                and line not in seen:
            seen.add(line)
            out.append(line)
    return out


# Average CPUs used by other processes above which a row is flagged.
BUSY = 0.2


def others_note(v):
    if v is None:
        return ""
    return (f"; other processes used {v:.2f} CPUs" +
            (": DISTURBED" if v > BUSY else ""))


def fmt_ms(v):
    return "n/a" if v is None else f"{v:.1f}"


def fmt_ratio(a, b):
    return "n/a" if a is None or b is None else f"{a / b:.2f}"


def fmt_mib(kib):
    return "n/a" if kib is None else f"{kib / 1024:.0f}"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--worker" in argv:
        return worker_main(argv)
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="gpt,llama", help="comma list of gpt, llama")
    p.add_argument("--threads", default="1,2", help="comma list of thread counts")
    p.add_argument("--steps", type=int, default=10, help="timed steps (10)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (3)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2, help="llama only (2)")
    p.add_argument("--ffn", type=int, default=None,
                   help="llama's MLP width (default 8/3 hidden rounded up to 64)")
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0,
                   help="model initialisation and batch sampler seed")
    p.add_argument("--tokens", type=int, default=1 << 20,
                   help="size of the generated token file")
    p.add_argument("--no-compile", action="store_true",
                   help="skip torch.compile")
    p.add_argument("--torch-attention", default="sdpa",
                   choices=["sdpa", "explicit"],
                   help="PyTorch's attention: F.scaled_dot_product_attention "
                        "(default) or the exported matmul/mask/softmax chain")
    p.add_argument("--loss-rtol", type=float, default=1e-4,
                   help="fail above this relative loss difference (1e-4)")
    p.add_argument("--lamina", default=os.path.join(SRC, "build", "bin", "lamina"))
    p.add_argument("--compile-flag", action="append", default=[],
                   help="extra flag for lamina compile (repeatable)")
    p.add_argument("--workdir", help="work (and keep the files) here")
    p.add_argument("--output-markdown", metavar="FILE")
    p.add_argument("--json", metavar="FILE")
    p.add_argument("--timeout", type=float, default=1800,
                   help="seconds per child process (1800)")
    args = p.parse_args(argv)

    models = [m for m in args.model.split(",") if m]
    if not models or any(m not in ("gpt", "llama") for m in models):
        p.error("--model: a comma list of gpt, llama")
    try:
        threads = [int(t) for t in args.threads.split(",") if t]
    except ValueError:
        threads = []
    if not threads or min(threads) < 1:
        p.error("--threads: a comma list of positive integers")
    if args.steps < 1 or args.warmup < 0:
        p.error("--steps >= 1 and --warmup >= 0")
    if args.hidden % args.heads or args.heads % args.kv_heads:
        p.error("--hidden must be a multiple of --heads, --heads of --kv-heads")
    if (args.hidden // args.heads) % 2:
        p.error("the head size must be even (rotary embeddings)")
    if args.vocab > 65536:
        p.error("--vocab <= 65536 (uint16 token file)")
    ffn = args.ffn or -(-(8 * args.hidden // 3) // 64) * 64
    if not os.access(args.lamina, os.X_OK):
        print(f"host_train_bench: no lamina at {args.lamina} (build it, or "
              "pass --lamina)", file=sys.stderr)
        return 1

    work = args.workdir or tempfile.mkdtemp(prefix="lamina-train-bench-")
    os.makedirs(work, exist_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(SRC, "python")] +
        ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    me = os.path.abspath(__file__)
    failures = []

    cpu = cpu_info()
    flags = " ".join(f"{k}={'yes' if v else 'no'}" for k, v in cpu["flags"].items())
    print(f"CPU: {cpu['model']}, {cpu['cores']} cores visible")
    print(f"CPU flags: {flags}")
    threading_env = sorted(
        f"{k}={v}" for k, v in os.environ.items()
        if re.match(r"(OPENBLAS|OMP|GOMP|KMP|MKL|DNNL|ONEDNN)_", k))
    print("threading environment (inherited, not set here): "
          + (" ".join(threading_env) or "none"))
    total_steps = args.warmup + args.steps
    print(f"steps: {args.warmup} warm-up + {args.steps} timed (median), "
          f"AdamW lr {args.lr:g}, f32; threads {args.threads}")

    load_before = os.getloadavg()
    print("load average: %.2f %.2f %.2f (timings are only meaningful on an "
          "otherwise idle machine)" % load_before)

    data = os.path.join(work, "train.bin")
    write_tokens(data, args.tokens, args.vocab, args.seed)

    # What `import torch` alone costs in RSS (every PyTorch figure has it).
    import_kib = None
    cfg_path = os.path.join(work, "import.json")
    with open(cfg_path, "w") as f:
        json.dump({}, f)
    r = run_child(
        [sys.executable, me, "--worker", "import", "--config", cfg_path,
         "--result", os.path.join(work, "import-result.json")],
        os.path.join(work, "import.log"), env, args.timeout)
    if r["rc"] == 0:
        import_kib = r["rss"]
        print(f"peak RSS of a process that only imports torch: "
              f"{import_kib / 1024:.0f} MiB")

    results, torch_version = [], None
    for name in models:
        cfg = dict(model=name, layers=args.layers, hidden=args.hidden,
                   heads=args.heads, kv_heads=args.kv_heads, ffn=ffn,
                   seq=args.seq, batch=args.batch, vocab=args.vocab,
                   lr=args.lr, seed=args.seed, warmup=args.warmup,
                   steps=args.steps)
        mdir = os.path.join(work, name)
        os.makedirs(mdir, exist_ok=True)
        cfg_path = os.path.join(mdir, "config.json")
        with open(cfg_path, "w") as f:
            json.dump(cfg, f)
        shape = (f"{args.layers} layers, hidden {args.hidden}, "
                 + (f"{args.heads} heads" if name == "gpt" else
                    f"{args.heads} q / {args.kv_heads} kv heads, ffn {ffn}")
                 + f", seq {args.seq}, batch {args.batch}, vocab {args.vocab}")
        print(f"\n== {name}: {shape}", flush=True)

        # Export (a child: the launcher never imports torch).
        res_path = os.path.join(mdir, "export.json")
        r = run_child(
            [sys.executable, me, "--worker", "export", "--config", cfg_path,
             "--result", res_path], os.path.join(mdir, "export.log"), env,
            args.timeout)
        exp = json.load(open(res_path)) if os.path.exists(res_path) else {}
        if r["rc"] != 0 or "error" in exp:
            print(f"export failed: {exp.get('error', r['text'][-2000:])}")
            failures.append(f"{name}: export")
            continue
        torch_version = exp["torch"]
        print(f"exported {mdir}/model.onnx ({exp['params']:,} parameters; "
              f"{r['wall']:.1f} s); PyTorch sdpa vs explicit attention logits: "
              f"{exp['sdpa_vs_explicit']:.1e} of the largest")

        # Compile.
        outdir = os.path.join(mdir, "program")
        cmd = [args.lamina, "compile", os.path.join(mdir, "model.onnx"),
               "--target", "host", "--mode", "train", "--loss", "causal-lm",
               "--logits", "logits", "-o", outdir] + args.compile_flag
        r = run_child(cmd, os.path.join(mdir, "compile.log"), env,
                      args.timeout)
        rc, compile_s, text = r["rc"], r["wall"], r["text"]
        if rc != 0:
            print("lamina compile failed:\n" + text[-4000:])
            failures.append(f"{name}: lamina compile")
            continue
        print(f"lamina compile: {compile_s:.1f} s")
        for line in text.splitlines():
            if line.strip():
                print("  | " + line.rstrip())
        compile_gemm = gemm_lines(text)

        for T in threads:
            row = dict(model=name, threads=T, params=exp["params"],
                       lamina_compile_s=compile_s)
            print(f"-- {name}, {T} thread{'s' if T > 1 else ''}", flush=True)
            # Lamina.
            log = os.path.join(mdir, f"lamina-t{T}.log")
            cmd = [os.path.join(outdir, "run"), "--data", data, "--steps",
                   str(total_steps), "--lr", repr(args.lr), "--seed",
                   str(args.seed), "--threads", str(T), "--log-every", "1"]
            r = run_child(cmd, log, env, args.timeout)
            rc, rss, wall, text = r["rc"], r["rss"], r["wall"], r["text"]
            steps = parse_steps(text)
            if rc != 0 or len(steps) != total_steps:
                print(f"lamina run failed (exit {rc}; {len(steps)} of "
                      f"{total_steps} steps logged); {log}:\n{text[-3000:]}")
                failures.append(f"{name} t{T}: lamina run")
                row["lamina_error"] = f"exit {rc}"
                results.append(row)
                continue
            st = lamina_step_times(steps, args.batch * args.seq)
            row.update(lamina_ms=1e3 * statistics.median(st[args.warmup:]),
                       lamina_rss_kib=rss, lamina_wall_s=wall,
                       lamina_losses=[s["loss"] for s in steps],
                       lamina_first_ms=1e3 * st[0],
                       lamina_others=r["others"])
            # What ran the kernels: `run --kernels` names the device, the
            # threads and the GEMM kernel family oneDNN picked for this CPU.
            kernels = subprocess.run(
                [os.path.join(outdir, "run"), "--kernels", "--threads",
                 str(T)], capture_output=True, text=True, env=env)
            gemm = [l.strip() for l in kernels.stdout.splitlines()
                    if l.strip()] or gemm_lines(text) or compile_gemm
            for line in gemm:
                print(f"  lamina kernels: {line}")
            row["lamina_gemm"] = gemm
            print(f"  lamina   {row['lamina_ms']:8.1f} ms/step  peak RSS "
                  f"{rss / 1024:6.0f} MiB  (first step "
                  f"{row['lamina_first_ms']:.0f} ms, "
                  f"process {wall:.1f} s{others_note(r['others'])})",
                  flush=True)

            # PyTorch eager, then torch.compile.
            for mode in ["eager"] + ([] if args.no_compile else ["compile"]):
                res_path = os.path.join(mdir, f"torch-{mode}-t{T}.json")
                if os.path.exists(res_path):
                    os.unlink(res_path)
                r = run_child(
                    [sys.executable, me, "--worker", "torch", "--config",
                     cfg_path, "--result", res_path, "--mode", mode,
                     "--threads", str(T), "--data", data, "--attention",
                     args.torch_attention],
                    os.path.join(mdir, f"torch-{mode}-t{T}.log"), env,
                    args.timeout)
                rc, rss, wall, text = r["rc"], r["rss"], r["wall"], r["text"]
                res = json.load(open(res_path)) if os.path.exists(res_path) else {}
                if rc != 0 or "error" in res or "times" not in res:
                    why = res.get("error") or (
                        text.strip().splitlines()[-1] if text.strip()
                        else f"exit {rc}")
                    print(f"  {mode:8s}      n/a          ({why})", flush=True)
                    row[f"{mode}_error"] = why
                    if mode == "eager":
                        failures.append(f"{name} t{T}: torch eager")
                    continue
                t = res["times"]
                row[f"{mode}_ms"] = 1e3 * statistics.median(t[args.warmup:])
                row[f"{mode}_rss_kib"] = rss
                row[f"{mode}_losses"] = res["losses"]
                row[f"{mode}_warmup_s"] = sum(t[:args.warmup])
                row[f"{mode}_others"] = res.get("others")
                extra = (f"warm-up (compiling) {row['compile_warmup_s']:.1f} s"
                         if mode == "compile" else
                         f"first step {1e3 * t[0]:.0f} ms")
                print(f"  {mode:8s} {row[f'{mode}_ms']:8.1f} ms/step  peak RSS "
                      f"{rss / 1024:6.0f} MiB  ({extra}, process {wall:.1f} s"
                      f"{others_note(res.get('others'))})", flush=True)

            # Loss agreement.
            for mode in ("eager", "compile"):
                theirs = row.get(f"{mode}_losses")
                if not theirs:
                    continue
                mine = row["lamina_losses"]
                rel = max(abs(a - b) / max(abs(b), 1e-30)
                          for a, b in zip(mine, theirs))
                row[f"{mode}_loss_rel"] = rel
            if "eager_loss_rel" in row:
                rel = row["eager_loss_rel"]
                ok = rel <= args.loss_rtol
                row["loss_ok"] = ok
                print(f"  losses: lamina {row['lamina_losses'][0]:.6f} .. "
                      f"{row['lamina_losses'][-1]:.6f}, eager "
                      f"{row['eager_losses'][0]:.6f} .. "
                      f"{row['eager_losses'][-1]:.6f}; max rel diff "
                      f"{rel:.1e} ({'ok' if ok else 'DISAGREE'}, limit "
                      f"{args.loss_rtol:g})"
                      + (f"; compile vs lamina {row['compile_loss_rel']:.1e}"
                         if "compile_loss_rel" in row else ""), flush=True)
                if not ok:
                    failures.append(f"{name} t{T}: losses differ by {rel:.1e}")
            results.append(row)

    # Summary.
    launcher_kib = __import__("resource").getrusage(
        __import__("resource").RUSAGE_SELF).ru_maxrss
    head = ["model", "threads", "lamina ms/step", "eager ms/step",
            "compile ms/step", "lamina/eager", "lamina/compile",
            "RSS lamina MiB", "RSS eager MiB", "RSS compile MiB",
            "loss max rel diff"]
    table = []
    disturbed = 0.0
    for r in results:
        busy = max([r.get(f"{k}_others") or 0.0
                    for k in ("lamina", "eager", "compile")])
        r["others_max"] = busy
        if busy > BUSY:
            disturbed = max(disturbed, busy)
        table.append([
            r["model"] + (" (!)" if busy > BUSY else ""), str(r["threads"]),
            fmt_ms(r.get("lamina_ms")), fmt_ms(r.get("eager_ms")), fmt_ms(r.get("compile_ms")),
            fmt_ratio(r.get("lamina_ms"), r.get("eager_ms")),
            fmt_ratio(r.get("lamina_ms"), r.get("compile_ms")),
            fmt_mib(r.get("lamina_rss_kib")), fmt_mib(r.get("eager_rss_kib")),
            fmt_mib(r.get("compile_rss_kib")),
            ("n/a" if "eager_loss_rel" not in r else
             f"{r['eager_loss_rel']:.1e}")])
    notes = []
    if disturbed:
        notes.append(f"(!) other processes used up to {disturbed:.2f} CPUs "
                     "during these measurements (timed steps): their "
                     "timings are unreliable, rerun on an idle machine")
    for r in results:
        if "compile_error" in r:
            notes.append(f"torch.compile n/a for {r['model']} at "
                         f"{r['threads']} threads: {r['compile_error']}")
    widths = [max(len(h), *(len(row[i]) for row in table)) if table else len(h)
              for i, h in enumerate(head)]
    print(f"\nHost training step, median of {args.steps} steps after "
          f"{args.warmup} warm-up (ms/step; ratio < 1: Lamina faster)")
    print("  ".join(h.rjust(w) for h, w in zip(head, widths)))
    for row in table:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths)))
    for n in notes:
        print(n)
    print(f"(launcher peak RSS {launcher_kib / 1024:.0f} MiB: the floor of "
          "the children's figures"
          + (f"; `import torch` alone: {import_kib / 1024:.0f} MiB, in every "
             "PyTorch figure" if import_kib else "") + ")")
    load_after = os.getloadavg()
    print("load average: %.2f %.2f %.2f" % load_after)
    gemm = sorted({g for r in results for g in r.get("lamina_gemm", [])})

    if args.output_markdown:
        md = [f"### Host training step: Lamina against PyTorch "
              f"(`bench/host_train_bench.py`)", "",
              f"CPU: {cpu['model']}, {cpu['cores']} cores; {flags}. "
              f"PyTorch {torch_version}. f32, AdamW (lr {args.lr:g}, betas "
              f"0.9/0.999, eps 1e-8, weight decay 0.01), batch {args.batch} x "
              f"seq {args.seq}, vocab {args.vocab}, {args.layers} layers, "
              f"hidden {args.hidden}"
              + ("; gpt: LayerNorm, GELU MLP 4x, "
                 f"{args.heads} heads, tied head" if "gpt" in models else "")
              + (f"; llama: RMSNorm, rotary, {args.heads} q / "
                 f"{args.kv_heads} kv heads, SwiGLU {ffn}, untied head"
                 if "llama" in models else "")
              + f". Median ms/step of {args.steps} steps "
              f"after {args.warmup} warm-up; PyTorch attention: "
              f"{args.torch_attention}.", ""]
        md.append("| " + " | ".join(head) + " |")
        md.append("|" + "---|" * len(head))
        for row in table:
            md.append("| " + " | ".join(row) + " |")
        md.append("")
        for n in notes:
            md.append(f"* {n}")
        for g in gemm:
            md.append(f"* Lamina: `{g}`")
        md.append(f"* Peak RSS: ru_maxrss of each child process (the "
                  f"launcher's {launcher_kib / 1024:.0f} MiB is a floor"
                  + (f"; a process that only imports torch peaks at "
                     f"{import_kib / 1024:.0f} MiB" if import_kib else "")
                  + ").")
        md.append("* Load average %.2f before, %.2f after (1 min); "
                  "threading environment: %s."
                  % (load_before[0], load_after[0],
                     " ".join(f"`{e}`" for e in threading_env) or "none"))
        with open(args.output_markdown, "w") as f:
            f.write("\n".join(md) + "\n")
        print(f"wrote {args.output_markdown}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(cpu=cpu, torch=torch_version, args=vars(args),
                           torch_import_rss_kib=import_kib,
                           load_before=load_before, load_after=load_after,
                           rows=results), f, indent=2)
    if failures:
        print("FAILED: " + "; ".join(failures))
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"files kept in {work}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
