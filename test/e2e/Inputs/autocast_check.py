"""Checks for mixed-precision.test; prints "ok" or the reason it is not, and
the measured figures on stderr.

  losses F32LOG LOWLOG RTOL [NAMES]  the losses of steps 1-4 of the bf16 run
                                    are the f32 run's within RTOL (relative;
                                    steps 2-4 check the bf16 gradients), and
                                    the bf16 run's loss falls (last < first);
                                    NAMES: the two runs' names in the
                                    figures (default f32 bf16)
  ort MODEL F32DIR LOWDIR WORK RTOL V [DIM=N ...]
                                    F32DIR/run and LOWDIR/run (lamina compile
                                    --mode inference, f32 and --precision
                                    bf16) on the same random token ids in
                                    [0, V) (masks: ones; DIM=N binds the
                                    model's symbolic dims): every
                                    output of the bf16 program is
                                    onnxruntime's f32 one within
                                    max|lamina - ort| <= RTOL * max|ort|, and
                                    its error is above the f32 program's (the
                                    matmuls did run in bf16)
"""
import os
import re
import subprocess
import sys

import numpy as np


def losses(path):
    out = []
    for line in open(path):
        m = re.match(r"step (\d+) loss (\S+) ", line)
        if m:
            out.append((int(m.group(1)), float(m.group(2))))
    if not out:
        sys.exit(f"no loss lines in {path}")
    return out


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
    what = sys.argv[1]
    if what == "losses":
        full, low, rtol = sys.argv[2], sys.argv[3], float(sys.argv[4])
        na, nb = (sys.argv[5:7] + ["f32", "bf16"][len(sys.argv[5:7]):])
        f, l = dict(losses(full)), dict(losses(low))
        # Steps 2-4 follow one to three updates: a wrong gradient in the
        # bf16 backward shows there (AdamW's first steps move every weight
        # by about lr in its gradient's sign).
        early = [s for s in sorted(f) if s <= 4 and s in l]
        worst = 0.0
        for s in early:
            rel = abs(l[s] - f[s]) / abs(f[s])
            worst = max(worst, rel)
            print(f"step {s} loss: {na} {f[s]:.6f}, {nb} {l[s]:.6f} "
                  f"(relative difference {rel:.2e})", file=sys.stderr)
        first, last = min(l), max(l)
        print(f"step {last} loss: {na} {f[last]:.6f}, {nb} {l[last]:.6f}",
              file=sys.stderr)
        if len(early) < 4:
            print(f"steps 1-4 not all logged in both runs: {early}")
        elif worst > rtol:
            print(f"losses of steps 1-4 differ by up to {worst:.3g} > {rtol}")
        elif not l[last] < l[first]:
            print(f"{nb} loss does not fall: {l[first]} -> {l[last]}")
        else:
            print("ok")
    elif what == "ort":
        import onnx
        import onnxruntime as ort
        from onnx import helper

        model, f32dir, lowdir, work = sys.argv[2:6]
        rtol, vocab = float(sys.argv[6]), int(sys.argv[7])
        dims = dict((k, int(v)) for k, v in
                    (d.split("=", 1) for d in sys.argv[8:]))
        os.makedirs(work, exist_ok=True)
        rng = np.random.default_rng(0)
        m = onnx.load(model)
        initializers = {t.name for t in m.graph.initializer}
        feeds, args = {}, []
        for inp in m.graph.input:
            if inp.name in initializers:
                continue
            tt = inp.type.tensor_type
            shape = [dims[d.dim_param] if d.dim_param else d.dim_value
                     for d in tt.shape.dim]
            dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
            if "mask" in inp.name:
                feeds[inp.name] = np.ones(shape, dtype)
            else:
                feeds[inp.name] = rng.integers(0, vocab, shape).astype(dtype)
            path = os.path.join(work, inp.name + ".npy")
            np.save(path, feeds[inp.name])
            args.append("--input=%s=%s" % (inp.name, path))
        sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        want = dict(zip(names, sess.run(names, feeds)))
        errors = {}
        for label, program in (("f32", f32dir), ("low", lowdir)):
            out = os.path.join(work, label)
            subprocess.run([os.path.join(program, "run"), "--output-dir", out]
                           + args, check=True)
            for name in names:
                got = np.load(os.path.join(out, npy_name(name)))
                w = want[name]
                if got.shape != w.shape or got.dtype != w.dtype:
                    print(f"{name} ({label}): {got.dtype} {got.shape}, "
                          f"onnxruntime {w.dtype} {w.shape}")
                    return 1
                scale = float(np.max(np.abs(w)))
                err = float(np.max(np.abs(got.astype(np.float64) - w)))
                errors[(label, name)] = err / scale
        ok = True
        for name in names:
            f32, low = errors[("f32", name)], errors[("low", name)]
            print(f"{name}: max rel error vs onnxruntime f32: f32 program "
                  f"{f32:.3g}, low-precision program {low:.3g}", file=sys.stderr)
            if not low <= rtol:
                print(f"{name}: low-precision error {low:.3g} > {rtol}")
                ok = False
            elif not low > f32:
                print(f"{name}: low-precision error {low:.3g} not above f32's {f32:.3g}")
                ok = False
        print("ok" if ok else "MISMATCH")
    else:
        sys.exit("unknown check " + what)
    return 0


if __name__ == "__main__":
    sys.exit(main())
