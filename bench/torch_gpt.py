#!/usr/bin/env python3
"""The PyTorch eager reference of the GPU benchmark: the GPT-2 graph of a
`bench/gpt1b.py` (or `lamina.models gpt2`) ONNX file, written out as an
nn.Module, its weights loaded from the file's initializers by name, trained
with the same batches, loss and optimizer as the Lamina program.

    python3 bench/torch_gpt.py --model M.onnx --data D.bin --batch 4 \
        --warmup 3 --steps 10 [--attention eager,sdpa] [--json F]

The math is the ONNX graph's (python/lamina/models/gpt2.py): token + position
embeddings; per block x += attn(ln_1(x)); x += mlp(ln_2(x)) with
LayerNorm(eps 1e-5), Conv1D weights [in, out] (x @ W + b, as HF's Conv1D:
torch.addmm), the tanh GELU (the graph's 0.5 x (1 + tanh(sqrt(2/pi)(x +
0.044715 x^3))): F.gelu(approximate="tanh")); attention
softmax(q k^T / sqrt(d), future positions set to the dtype's lowest value)
v; final LayerNorm; logits = x @ wte^T (tied head). Loss: the mean
cross-entropy of logits[:, :-1] against ids[:, 1:] (graph-add-loss
causal-lm). Two attention rows:

* `eager`: the graph's attention op by op (QK^T, divide, masked_fill,
  softmax, PV): the same work as the ONNX graph;
* `sdpa`: torch.nn.functional.scaled_dot_product_attention(is_causal=True)
  (flash attention where available): the stronger baseline.

Precision: bf16 autocast (torch.autocast(device, dtype=torch.bfloat16)) with
fp32 master weights, AdamW (torch.optim.AdamW, foreach default, lr
--lr, weight decay 0.01, betas 0.9/0.999, eps 1e-8: the Lamina program's
`--optimizer adamw` defaults); `--precision f32` turns autocast off (TF32
stays off, PyTorch's default for matmuls). Batches: the training program's
own sampler (SplitMix64, --seed), so step k sees the batch the Lamina
program's step k sees. Timing: W warm-up steps, then N steps between two
torch.cuda.synchronize(); every step reads its loss back (.item()), as the
Lamina program does when it logs every step. No torch.compile, no network.
`--device cpu` runs the same code on the CPU (for testing the script on a
machine without a GPU; autocast then uses the CPU bf16 path).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

import gpu_common as C  # noqa: E402


def build_module(torch, cfg: dict, weights: dict, attention: str, device):
    nn, F = torch.nn, torch.nn.functional
    H, nh, V = cfg["hidden"], cfg["heads"], cfg["vocab"]
    hd = H // nh
    eps = 1e-5

    def param(name):
        # Always a fresh host copy (on the CPU the parameter would otherwise
        # share, and train, the array the next row starts from), then device.
        t = torch.from_numpy(np.array(weights[name], dtype=np.float32, copy=True))
        return nn.Parameter(t.to(device=device, dtype=torch.float32))

    class Block(nn.Module):
        def __init__(self, i):
            super().__init__()
            p = f"transformer.h.{i}."
            self.ln_1_w, self.ln_1_b = param(p + "ln_1.weight"), param(p + "ln_1.bias")
            self.attn_w, self.attn_b = param(p + "attn.c_attn.weight"), param(p + "attn.c_attn.bias")
            self.attn_pw, self.attn_pb = param(p + "attn.c_proj.weight"), param(p + "attn.c_proj.bias")
            self.ln_2_w, self.ln_2_b = param(p + "ln_2.weight"), param(p + "ln_2.bias")
            self.fc_w, self.fc_b = param(p + "mlp.c_fc.weight"), param(p + "mlp.c_fc.bias")
            self.mp_w, self.mp_b = param(p + "mlp.c_proj.weight"), param(p + "mlp.c_proj.bias")

        @staticmethod
        def conv1d(x, w, b):
            # HF Conv1D: addmm(bias, x.view(-1, in), weight [in, out]).
            y = torch.addmm(b, x.reshape(-1, x.shape[-1]), w)
            return y.view(*x.shape[:-1], w.shape[1])

        def forward(self, x, mask):
            B, S, _ = x.shape
            h = F.layer_norm(x, (H,), self.ln_1_w, self.ln_1_b, eps)
            qkv = self.conv1d(h, self.attn_w, self.attn_b)
            q, k, v = qkv.split(H, dim=2)
            q = q.view(B, S, nh, hd).transpose(1, 2)
            k = k.view(B, S, nh, hd).transpose(1, 2)
            v = v.view(B, S, nh, hd).transpose(1, 2)
            if attention == "sdpa":
                ctx = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(hd)
                scores = scores.masked_fill(mask, torch.finfo(scores.dtype).min)
                probs = torch.softmax(scores, dim=-1)
                ctx = torch.matmul(probs, v)  # autocast: bf16 probs
            ctx = ctx.transpose(1, 2).reshape(B, S, H)
            x = x + self.conv1d(ctx, self.attn_pw, self.attn_pb)
            h = F.layer_norm(x, (H,), self.ln_2_w, self.ln_2_b, eps)
            h = F.gelu(self.conv1d(h, self.fc_w, self.fc_b), approximate="tanh")
            return x + self.conv1d(h, self.mp_w, self.mp_b)

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = param("transformer.wte.weight")
            self.wpe = param("transformer.wpe.weight")
            self.blocks = nn.ModuleList(Block(i) for i in range(cfg["layers"]))
            self.ln_f_w = param("transformer.ln_f.weight")
            self.ln_f_b = param("transformer.ln_f.bias")

        def forward(self, ids):
            S = ids.shape[1]
            x = F.embedding(ids, self.wte) + self.wpe[:S]
            mask = torch.ones(S, S, dtype=torch.bool, device=ids.device).triu(1)
            for blk in self.blocks:
                x = blk(x, mask)
            x = F.layer_norm(x, (H,), self.ln_f_w, self.ln_f_b, eps)
            return torch.matmul(x, self.wte.t())  # tied LM head

    model = GPT()
    n = sum(p.numel() for p in model.parameters())
    if n != cfg["params"]:
        raise RuntimeError(f"module has {n} parameters, the model {cfg['params']}")
    return model


def causal_lm_loss(torch, logits, ids):
    V = logits.shape[-1]
    return torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, V).float(), ids[:, 1:].reshape(-1))


def run_one(torch, args, cfg, weights, attention: str) -> dict:
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    t_load = time.perf_counter()
    model = build_module(torch, cfg, weights, attention, dev)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr,
                            betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=args.weight_decay)
    load_s = time.perf_counter() - t_load
    sampler = C.TokenSampler(args.data, args.batch, cfg["seq"], seed=args.seed,
                             dtype=args.data_dtype, vocab=cfg["vocab"])
    bf16 = args.precision == "bf16"
    losses, t0 = [], None
    total = args.warmup + args.steps
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    sync()
    t_start = time.perf_counter()
    for i in range(total):
        ids = torch.from_numpy(sampler.next()).to(dev)
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16,
                            enabled=bf16):
            logits = model(ids)
            loss = causal_lm_loss(torch, logits, ids)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del logits
        losses.append(float(loss.item()))  # a device sync, as the program's log
        if not math.isfinite(losses[-1]):
            raise RuntimeError(f"{attention}: loss {losses[-1]} at step {i + 1}")
        if i + 1 == args.warmup:
            sync()
            t0 = time.perf_counter()
        if args.verbose:
            print(f"  torch {attention} step {i + 1} loss {losses[-1]:.6f} "
                  f"{time.perf_counter() - t_start:.2f}s", flush=True)
    sync()
    t1 = time.perf_counter()
    if t0 is None:  # --warmup 0
        t0 = t_start
    secs = t1 - t0
    tokens = args.batch * cfg["seq"] * args.steps
    row = dict(attention=attention, steps=args.steps, warmup=args.warmup,
               seconds=secs, step_s=secs / args.steps, tokens_per_s=tokens / secs,
               losses=losses, load_s=load_s, first_steps_s=t0 - t_start)
    if cuda:
        row["max_memory_allocated_gib"] = torch.cuda.max_memory_allocated() / 2**30
        row["max_memory_reserved_gib"] = torch.cuda.max_memory_reserved() / 2**30
    del model, opt
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return row


def check_onnxruntime(args) -> int:
    """The module's f32 logits against onnxruntime's on the ONNX file, for
    one batch of the data (a small model: this runs on the CPU)."""
    import numpy as np
    import onnxruntime as ort
    import torch

    cfg = C.model_config(args.model)
    weights = C.read_initializers(args.model)
    model = build_module(torch, cfg, weights, "eager", torch.device("cpu"))
    ids = C.TokenSampler(args.data, args.batch, cfg["seq"], seed=args.seed,
                         dtype=args.data_dtype, vocab=cfg["vocab"]).next()
    sess = ort.InferenceSession(args.model, providers=["CPUExecutionProvider"])
    want = sess.run(["logits"], {"input_ids": ids})[0]
    worst = 0.0
    with torch.no_grad():
        for mode in ("eager", "sdpa"):
            model = build_module(torch, cfg, weights, mode, torch.device("cpu"))
            got = model(torch.from_numpy(ids)).numpy()
            err = float(np.abs(got - want).max() / np.abs(want).max())
            print(f"{mode}: logits max error {err:.2e} of the largest")
            worst = max(worst, err)
    print("ok" if worst < 1e-5 else "MISMATCH")
    return 0 if worst < 1e-5 else 1


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="PyTorch eager reference of the "
                                "GPT benchmark (bench/gpu_bench.py)")
    p.add_argument("--model", required=True, help="the ONNX file")
    p.add_argument("--data", required=True, help="token file (uint16/uint32)")
    p.add_argument("--data-dtype", default="uint16", choices=["uint16", "uint32"])
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0, help="the sampler's seed")
    p.add_argument("--precision", default="bf16", choices=["bf16", "f32"])
    p.add_argument("--attention", default="eager,sdpa",
                   help="comma list of eager, sdpa")
    p.add_argument("--device", default="cuda")
    p.add_argument("--peak-tflops", type=float, default=None)
    p.add_argument("--json", default=None)
    p.add_argument("--verbose", action="store_true")
    p.add_argument("--check-onnxruntime", action="store_true",
                   help="compare the module's f32 logits with onnxruntime "
                        "on the CPU (small models) and exit")
    args = p.parse_args(argv)
    if args.check_onnxruntime:
        return check_onnxruntime(args)
    modes = [m for m in args.attention.split(",") if m]
    if not modes or any(m not in ("eager", "sdpa") for m in modes):
        p.error("--attention: a comma list of eager, sdpa")
    if args.steps < 1 or args.warmup < 0 or args.batch < 1:
        p.error("--steps >= 1, --warmup >= 0, --batch >= 1")

    try:
        import torch
    except ImportError as e:
        print(f"torch_gpt: cannot import torch ({e}); run it with a python "
              "that has PyTorch", file=sys.stderr)
        return 1

    cfg = C.model_config(args.model)
    dev = torch.device(args.device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            print("torch_gpt: CUDA is not available to PyTorch", file=sys.stderr)
            return 1
        name = torch.cuda.get_device_name(dev)
    else:
        name = f"cpu ({os.cpu_count()} cores)"
    peak, peak_src = C.peak_flops(name, args.peak_tflops)
    weights = C.read_initializers(args.model)
    info = dict(device=name, torch=torch.__version__,
                cuda=getattr(torch.version, "cuda", None), batch=args.batch,
                seq=cfg["seq"], model=cfg, precision=args.precision,
                flops_per_token=C.flops_per_token(cfg), peak_flops=peak,
                peak_source=peak_src, rows=[])
    print(f"torch {torch.__version__} on {name}: batch {args.batch}, seq "
          f"{cfg['seq']}, {cfg['params']:,} parameters, {args.precision}, "
          f"{args.warmup} warm-up + {args.steps} timed steps", flush=True)
    for mode in modes:
        try:
            row = run_one(torch, args, cfg, weights, mode)
        except RuntimeError as e:  # e.g. CUDA out of memory: report, go on
            msg = str(e).splitlines()[0] if str(e) else repr(e)
            print(f"torch {mode}: FAILED: {msg}", flush=True)
            row = dict(attention=mode, error=msg)
            gc.collect()
            if dev.type == "cuda":
                torch.cuda.empty_cache()
        else:
            row["mfu"] = C.mfu(row["tokens_per_s"], cfg, peak)
            mem = (f", max allocated {row['max_memory_allocated_gib']:.1f} GiB"
                   if "max_memory_allocated_gib" in row else "")
            mfu = f", MFU {100 * row['mfu']:.1f}%" if row["mfu"] else ""
            print(f"torch {mode}: {row['step_s'] * 1e3:.1f} ms/step, "
                  f"{row['tokens_per_s']:,.0f} tokens/s{mfu}{mem}; losses "
                  f"{row['losses'][0]:.4f} .. {row['losses'][-1]:.4f}", flush=True)
        info["rows"].append(row)
    if args.json:
        C.write_json(args.json, info)
    return 0 if all("error" not in r for r in info["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
