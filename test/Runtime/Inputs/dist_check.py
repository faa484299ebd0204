"""Checks for the distributed runtime's tests (test/Runtime/Dist/dist-*.test).

  losses A.log B.log [rtol]   the losses B logs agree with A's (B may be
                              a resumed run: a part of A's steps)
  val-losses A.log B.log [rtol]
                              the same for the validation losses
                              (run --eval-data)
  weights A.onnx B.onnx [rtol] every initializer agrees
  toy MODEL DATA              writes the hand-written test model's weights
                              and a token file (lamina-dist-exec-test)
  stats FILE.json RANKS       the --stats file has RANKS ranks
  trace FILE.json RANKS       the --trace file has events of RANKS ranks
Prints "ok" or what differs."""
import json
import re
import sys

import numpy as np


def losses(path, kind="loss"):
    out = {}
    for line in open(path):
        m = re.match(rf"step (\d+) {kind} (\S+)", line)
        if m:
            out[int(m.group(1))] = float(m.group(2))
    return out


def main():
    cmd = sys.argv[1]
    if cmd in ("losses", "val-losses"):
        kind = "loss" if cmd == "losses" else "val loss"
        a, b = losses(sys.argv[2], kind), losses(sys.argv[3], kind)
        rtol = float(sys.argv[4]) if len(sys.argv) > 4 else 1e-5
        # B may be a resumed run: its steps must be a part of A's.
        if not b or not set(b) <= set(a):
            print(f"different steps: {sorted(a)} vs {sorted(b)}")
            return
        for k in sorted(b):
            if abs(a[k] - b[k]) > rtol * max(1.0, abs(a[k])):
                print(f"step {k}: {a[k]} vs {b[k]}")
                return
        print("ok")
    elif cmd == "weights":
        import onnx
        from onnx import numpy_helper
        rtol = float(sys.argv[4]) if len(sys.argv) > 4 else 1e-5
        ga = {t.name: numpy_helper.to_array(t) for t in onnx.load(sys.argv[2]).graph.initializer}
        gb = {t.name: numpy_helper.to_array(t) for t in onnx.load(sys.argv[3]).graph.initializer}
        if ga.keys() != gb.keys():
            print(f"different initializers: {sorted(ga)} vs {sorted(gb)}")
            return
        for k in sorted(ga):
            if not np.allclose(ga[k], gb[k], rtol=rtol, atol=rtol):
                print(f"{k}: max difference {np.abs(ga[k] - gb[k]).max()}")
                return
        print("ok")
    elif cmd == "toy":
        import onnx
        from onnx import helper, numpy_helper, TensorProto
        rng = np.random.default_rng(0)
        inits = [numpy_helper.from_array(
            (rng.standard_normal((16, 8)) * 0.5).astype(np.float32), "emb")]
        for k in range(4):
            inits.append(numpy_helper.from_array(
                (1 + 0.3 * rng.standard_normal(8)).astype(np.float32), f"w{k}"))
        g = helper.make_graph(
            [helper.make_node("Identity", ["w0"], ["out"])], "toy", [],
            [helper.make_tensor_value_info("out", TensorProto.FLOAT, [8])], inits)
        onnx.save(helper.make_model(g), sys.argv[2])
        np.random.default_rng(1).integers(0, 16, 4000).astype(np.uint16).tofile(sys.argv[3])
    elif cmd == "stats":
        s = json.load(open(sys.argv[2]))
        ranks = s["ranks"]
        ok = len(ranks) == int(sys.argv[3]) and all(
            r["arena_bytes"] > 0 and 0 <= r["idle_fraction"] <= 1 for r in ranks)
        print("ok" if ok else f"bad stats: {s}")
    elif cmd == "trace":
        t = json.load(open(sys.argv[2]))["traceEvents"]
        pids = {e["pid"] for e in t if e.get("ph") == "X"}
        cats = {e["cat"] for e in t if e.get("ph") == "X"}
        ok = pids == set(range(int(sys.argv[3]))) and {"forward", "backward", "optimizer"} <= cats
        print("ok" if ok else f"bad trace: pids {pids} cats {cats}")


main()
