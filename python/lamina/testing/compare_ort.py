#!/usr/bin/env python3
"""Runs an ONNX model with onnxruntime and with Lamina on the same random
inputs and compares the outputs.

usage: python -m lamina.testing.compare_ort TOOL MODEL.onnx WORKDIR
           [--vocab V] [--rtol R] [--dim NAME=V]...

TOOL is `lamina-eval` (the reference evaluator) or `lamina` (then the model
is built with `lamina compile --target host --mode inference` into
WORKDIR/program and WORKDIR/program/run computes the outputs).

Inputs are generated from the model's (static) graph inputs: float inputs
are standard normal, `*mask*` inputs are ones with the last position of the
second row masked, `*token_type*` inputs are zeros and other integer
inputs are token ids in [0, V). Prints per output
`NAME: max rel error: X` (max |lamina - ort| / max |ort|) and then `ok` if
every output matches with np.allclose(rtol=R, atol=R * max |ort|), else
`MISMATCH`.
"""
import argparse
import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper


def npy_name(name):
    """The file an output is written to (lamina::rt::outputFileName)."""
    text = ""
    for i, b in enumerate(name.encode("utf-8")):
        c = chr(b)
        if c.isascii() and (c.isalnum() or c in "_-" or (c == "." and i > 0)):
            text += c
        else:
            text += "%%%02X" % b
    return (text or "%") + ".npy"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("tool", help="lamina-eval, or lamina to compile the model")
    p.add_argument("model")
    p.add_argument("workdir")
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--rtol", type=float, default=1e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dim", action="append", default=[], metavar="NAME=V",
                   help="bind a symbolic dim (passed on to lamina-eval)")
    p.add_argument("--target", default="host",
                   help="lamina compile --target (host or cuda)")
    p.add_argument("--compile-arg", action="append", default=[],
                   help="one more lamina compile argument (e.g. "
                        "--compile-arg=--precision=bf16)")
    args = p.parse_args()

    rng = np.random.default_rng(args.seed)
    model = onnx.load(args.model)
    initializers = {t.name for t in model.graph.initializer}
    os.makedirs(args.workdir, exist_ok=True)
    out = os.path.join(args.workdir, "out")
    compiled = os.path.basename(args.tool) == "lamina"
    program = os.path.join(args.workdir, "program")
    if compiled:
        build = [args.tool, "compile", args.model, "--target", args.target,
                 "--mode", "inference", "--quiet", "-o", program]
        build += ["--dim=" + d for d in args.dim] + args.compile_arg
        proc = subprocess.run(build, stderr=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            sys.stdout.write(proc.stderr)
            print("MISMATCH: lamina compile failed")
            return 1
        cmd = [os.path.join(program, "run"), "--output-dir", out]
    else:
        cmd = [args.tool, args.model, "--output-dir", out]
        cmd += ["--dim=" + d for d in args.dim]
    feeds = {}
    dims = dict((k, int(v)) for k, v in (d.split("=", 1) for d in args.dim))
    for inp in model.graph.input:
        if inp.name in initializers:
            continue
        tt = inp.type.tensor_type
        shape = [dims[d.dim_param] if d.dim_param else d.dim_value
                 for d in tt.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
        if np.issubdtype(dtype, np.floating):
            value = rng.standard_normal(shape).astype(dtype)
        elif "mask" in inp.name:
            value = np.ones(shape, dtype)
            if value.ndim == 2 and shape[0] > 1:
                value[1, -1] = 0
        elif "token_type" in inp.name:
            value = np.zeros(shape, dtype)
        else:
            value = rng.integers(0, args.vocab, shape).astype(dtype)
        feeds[inp.name] = value
        path = os.path.join(args.workdir, inp.name + ".npy")
        np.save(path, value)
        cmd.append("--input=%s=%s" % (inp.name, path))

    proc = subprocess.run(cmd, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.stdout.write(proc.stderr)
        print("MISMATCH: %s failed" % os.path.basename(cmd[0]))
        return 1
    session = ort.InferenceSession(args.model,
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    expected = session.run(names, feeds)
    ok = True
    for name, want in zip(names, expected):
        got = np.load(os.path.join(out, npy_name(name)))
        if got.shape != want.shape or got.dtype != want.dtype:
            print("%s: %s %s, onnxruntime %s %s" % (name, got.dtype, got.shape,
                                                   want.dtype, want.shape))
            ok = False
            continue
        scale = float(np.max(np.abs(want))) if want.size else 0.0
        err = float(np.max(np.abs(got.astype(np.float64) - want))) if want.size else 0.0
        print("%s: max rel error: %.3g" % (name, err / scale if scale else err))
        if not np.allclose(got, want, rtol=args.rtol, atol=args.rtol * scale):
            ok = False
    print("ok" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
