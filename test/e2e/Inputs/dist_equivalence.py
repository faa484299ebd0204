"""Distributed training equals single-process training (test/e2e/dist-*.test).

  dist_equivalence.py --lamina BIN --mpirun CMD --work DIR [options] CONFIG...

CONFIG is SCHEDULE:P:D:M:ZERO[:none], e.g. breadth-first:2:2:4:3 (the
optional last field is --recompute none). For each, a tiny GPT-2 (--layers
layers) is compiled twice from the same weights: distributed with the
micro-batch size b as its batch dim, and single-process with batch b*m*d
(compiled once per global batch). Both train --steps steps with the same
--optimizer flags (default SGD with momentum and clipping), the same seed,
so they see the same token windows; the loss at every step and every
exported weight (max |difference| over max(1, max |weight|), per tensor)
must agree within --rtol (--weight-rtol for the weights if given).

AdamW divides each update by the gradient's running RMS, so a parameter
whose true gradient is zero (the attention key bias: softmax ignores a
constant added to a row) moves by +-lr on rounding noise alone; any change
in summation order then shows in its weights. Runs with AdamW therefore
check weights with a looser --weight-rtol; its losses still agree to 1e-6.
With --staged, every distributed run is repeated with LAMINA_STAGED_DEVICE=1
(the executor's device paths on the host: separate, NaN-poisoned buffers,
transfers through host copies) and must log the same losses and export the
same bytes.
With --eval, both also evaluate (`run --eval-data`, every 2 steps, 3
batches of a second corpus) and every validation loss must agree within
--rtol too.
With --tcp-control, every distributed run is repeated with its host control
plane over TCP (LAMINA_CONTROL=tcp, MASTER_ADDR=127.0.0.1 and a free port;
docs/distributed.md "The host control plane: MPI or TCP") and must log the
same losses and export the same bytes as the MPI control plane's run.
With --tp T (and --sequence-parallel), every distributed program is also
tensor-parallel: p*d*t ranks, each layer split over t (docs/tp-design.md);
the single-process reference is the same. --model llama trains a LLaMA
(grouped-query attention 4/2 heads, rotary, SwiGLU) instead of GPT-2.
Prints one line per configuration and "ok" at the end, or what differs and
exits 1.
"""
import argparse
import os
import re
import shlex
import socket
import subprocess
import sys

import numpy as np


def run(cmd, log=None, env=None):
    out = subprocess.run(cmd, shell=isinstance(cmd, str), capture_output=True,
                         text=True, env=env)
    if out.returncode != 0:
        sys.stdout.write(f"FAILED ({out.returncode}): {cmd}\n{out.stdout[-3000:]}"
                         f"\n{out.stderr[-3000:]}\n")
        sys.exit(1)
    if log:
        with open(log, "w") as f:
            f.write(out.stdout)
    return out.stdout


def losses(text, kind="loss"):
    return {int(m.group(1)): float(m.group(2))
            for m in re.finditer(rf"^step (\d+) {kind} (\S+)", text, re.M)}


def weights(path):
    import onnx
    from onnx import numpy_helper
    return {t.name: numpy_helper.to_array(t)
            for t in onnx.load(path).graph.initializer}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lamina", required=True)
    ap.add_argument("--mpirun", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--b", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--weight-rtol", type=float, default=None)
    ap.add_argument("--optimizer",
                    default="--optimizer sgd --momentum 0.9 --lr 0.05 --clip 1.0")
    ap.add_argument("--model", choices=["gpt2", "llama"], default="gpt2")
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--sequence-parallel", action="store_true")
    ap.add_argument("--tp-replicate", default=None)
    ap.add_argument("--staged", action="store_true")
    ap.add_argument("--tcp-control", action="store_true")
    ap.add_argument("--eval", action="store_true")
    ap.add_argument("configs", nargs="+")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    w = lambda *p: os.path.join(args.work, *p)
    data = w("data.bin")
    # A corpus with some structure but not trivially periodic.
    rng = np.random.default_rng(5)
    np.tile(rng.integers(0, 32, 97).astype(np.uint16), 60).tofile(data)
    train = (f"--data {data} --steps {args.steps} {args.optimizer} "
             f"--seed 3 --log-every 1")
    if args.eval:
        val = w("val.bin")
        np.tile(rng.integers(0, 32, 89).astype(np.uint16), 10).tofile(val)
        train += f" --eval-data {val} --eval-every 2 --eval-batches 3"
    weight_rtol = args.weight_rtol if args.weight_rtol is not None else args.rtol
    loss_flags = "--mode train --loss causal-lm --logits logits"

    def model(batch):
        path = w(f"{args.model}-b{batch}.onnx")
        extra = (["--kv-heads", str(args.kv_heads)] if args.model == "llama"
                 else [])
        if not os.path.exists(path):
            run([sys.executable, "-m", "lamina.models", args.model, "--layers",
                 str(args.layers), "--hidden", str(args.hidden), "--heads",
                 str(args.heads), "--seq",
                 "16", "--batch", str(batch), "--vocab", "32", "-o", path] +
                extra)
        return path

    refs = {}

    def reference(batch):
        if batch not in refs:
            out = w(f"ref-b{batch}-" + str(abs(hash(args.optimizer)) % 10**6))
            run(f"{args.lamina} compile {model(batch)} {loss_flags} --quiet -o {out}")
            log = run(f"{out}/run {train} --export {out}/trained.onnx")
            refs[batch] = (losses(log), weights(f"{out}/trained.onnx"),
                           losses(log, "val loss"))
        return refs[batch]

    failed = False
    for config in args.configs:
        fields = config.split(":")
        sched, p, d, m, zero = fields[0], *map(int, fields[1:5])
        recompute = fields[5] if len(fields) > 5 else None
        ref_losses, ref_weights, ref_val = reference(args.b * m * d)
        out = w("dist-" + config.replace(":", "-"))
        extra = f" --recompute {recompute}" if recompute else ""
        if args.tp > 1:
            extra += f" --tp {args.tp}"
        if args.sequence_parallel:
            extra += " --sequence-parallel"
        if args.tp_replicate:
            extra += f" --tp-replicate '{args.tp_replicate}'"
        ranks = p * d * args.tp
        run(f"{args.lamina} compile {model(args.b)} {loss_flags} --pp {p} "
            f"--dp {d} --micro-batches {m} --schedule {sched} --zero {zero}"
            f"{extra} --quiet -o {out}")
        log = run(f"{args.mpirun} -np {ranks} {out}/run {train} "
                  f"--export {out}/trained.onnx", w(out + ".log"))
        got = losses(log)
        if sorted(got) != sorted(ref_losses):
            print(f"{config}: steps {sorted(got)} vs {sorted(ref_losses)}")
            failed = True
            continue
        loss_err = max(abs(got[k] - ref_losses[k]) / max(1.0, abs(ref_losses[k]))
                       for k in got)
        trained = weights(f"{out}/trained.onnx")
        weight_err = max(float(np.abs(trained[k] - ref_weights[k]).max() /
                               max(1.0, np.abs(ref_weights[k]).max()))
                         for k in ref_weights)
        ok = loss_err <= args.rtol and weight_err <= weight_rtol
        evaluated = ""
        if args.eval:
            got_val = losses(log, "val loss")
            val_err = max((abs(got_val[k] - ref_val[k]) / max(1.0, abs(ref_val[k]))
                           for k in ref_val if k in got_val), default=0.0)
            same_steps = sorted(got_val) == sorted(ref_val) and ref_val
            ok &= bool(same_steps) and val_err <= args.rtol
            evaluated = (f", {len(got_val)} val losses rel err {val_err:.1e}"
                         if same_steps else
                         f", val losses at steps {sorted(got_val)} vs {sorted(ref_val)}")
        staged = ""
        if args.staged:
            env = dict(os.environ, LAMINA_STAGED_DEVICE="1")
            slog = run(f"{args.mpirun} -np {ranks} {out}/run {train} "
                       f"--export {out}/staged.onnx", w(out + ".staged.log"),
                       env=env)
            same = (losses(slog) == got and
                    losses(slog, "val loss") == losses(log, "val loss") and
                    open(f"{out}/staged.onnx", "rb").read() ==
                    open(f"{out}/trained.onnx", "rb").read())
            ok &= same
            staged = ", staged run " + ("identical" if same else "DIFFERS")
        tcp = ""
        if args.tcp_control:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = str(sock.getsockname()[1])
            env = dict(os.environ, LAMINA_CONTROL="tcp",
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                       LAMINA_CONTROL_PORT=port)
            tlog = run(f"{args.mpirun} -np {ranks} {out}/run {train} "
                       f"--export {out}/tcp.onnx", w(out + ".tcp.log"),
                       env=env)
            same = (losses(tlog) == got and
                    losses(tlog, "val loss") == losses(log, "val loss") and
                    open(f"{out}/tcp.onnx", "rb").read() ==
                    open(f"{out}/trained.onnx", "rb").read())
            ok &= same
            tcp = ", tcp control plane " + ("identical" if same else "DIFFERS")
        failed |= not ok
        print(f"{config}: {'ok' if ok else 'DIFFERS'} ranks {ranks}, "
              f"loss rel err {loss_err:.1e}, weight rel err {weight_err:.1e}"
              f"{evaluated}{staged}{tcp}")
    print("FAILED" if failed else "ok")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
