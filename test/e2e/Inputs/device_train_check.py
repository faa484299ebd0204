"""Trains one model with two targets of lamina compile (default: host and
cuda) on the same data, seed and flags, and compares them: every logged
loss and every exported weight within --rtol (relative to the largest
magnitude). Prints the differences and "ok", or why not.

SGD with momentum, not AdamW: AdamW divides by the root of the second moment,
so a parameter with a zero true gradient (GPT-2's attention key bias) moves by
~lr on rounding noise alone, and two correct runs drift apart there.
"""
import argparse
import os
import re
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def losses(log):
    return [float(m.group(1)) for m in re.finditer(r"^step \d+ loss (\S+) ", log,
                                                    re.M)]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lamina", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--rtol", type=float, default=1e-4)
    p.add_argument("--precision", default="f32")
    p.add_argument("--targets", default="host,cuda")
    p.add_argument("--target-arg", action="append", default=[],
                   help="a lamina compile argument for the non-host targets "
                        "(--target-arg=--cuda-emulator)")
    args = p.parse_args()

    os.makedirs(args.work, exist_ok=True)
    runs = []
    for i, target in enumerate(args.targets.split(",")):
        out = os.path.join(args.work, "%s-%d" % (target, i))
        subprocess.run([args.lamina, "compile", args.model, "--target", target,
                        "--mode", "train", "--loss", "causal-lm", "--logits",
                        "logits", "--precision", args.precision, "--quiet",
                        "-o", out] +
                       (args.target_arg if target != "host" else []),
                       check=True)
        export = os.path.join(args.work, "%s-%d.onnx" % (target, i))
        proc = subprocess.run(
            [os.path.join(out, "run"), "--data", args.data, "--steps",
             str(args.steps), "--optimizer", "sgd", "--momentum", "0.9",
             "--lr", "0.05", "--clip", "1.0", "--log-every", "1", "--seed",
             "1", "--export", export],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            sys.stdout.write(proc.stderr)
            print("%s program failed" % target)
            return 1
        weights = {t.name: numpy_helper.to_array(t)
                   for t in onnx.load(export).graph.initializer}
        runs.append((losses(proc.stdout), weights))

    (la, wa), (lb, wb) = runs
    ok = len(la) == len(lb) == args.steps
    diff = max(abs(a - b) / max(abs(a), 1e-30) for a, b in zip(la, lb))
    print("losses: max rel difference %.3g over %d steps (first %.6f, last "
          "%.6f)" % (diff, len(la), la[0], la[-1]))
    ok = ok and diff <= args.rtol and la[-1] < la[0]
    worst = 0.0
    for name, a in wa.items():
        if not np.issubdtype(a.dtype, np.floating) or name not in wb:
            continue
        scale = float(np.max(np.abs(a))) or 1.0
        worst = max(worst, float(np.max(np.abs(a - wb[name]))) / scale)
    print("exported weights: max rel difference %.3g" % worst)
    ok = ok and worst <= args.rtol
    print("ok" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
