#!/usr/bin/env python3
"""Step time of distributed host programs built by two `lamina`s, side by side.

Issue 29 ("compile the distributed step") must not make a distributed host
run slower. This script compiles the same GPT and configurations with the
`lamina` under test (--lamina) and a baseline build (--baseline, e.g. a
build of the commit before the change), runs each program under `mpirun`
with `--stats` several times, alternating the two so that load on the
machine falls on both alike, and prints per configuration the median
seconds per step (rank 0's `wall_seconds` / steps: the training loop,
without start-up and evaluations) and the ratio test / baseline.

    python3 bench/dist_step_bench.py --lamina build/bin/lamina \\
        --baseline /work/old/build/bin/lamina --workdir /tmp/dsb

A change to the runtime alone (the compiler's output the same, as diffing
model.cpp shows) is measured with --baseline-libs DIR instead: both programs
are the test lamina's model.cpp, the baseline's linked against DIR/lib,
DIR/third_party and DIR/include (the runtime libraries and headers of the
baseline commit, copied from its build and tree).

One single-process configuration (the host program, no mpirun) and the
distributed ones; only 2 ranks each: the CI machine has 2 cores.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys

CONFIGS = [
    # name, lamina compile flags, ranks (0: one process, no mpirun)
    ("host, one process", [], 0),
    ("1f1b pp 2, m 4", ["--pp", "2", "--micro-batches", "4",
                        "--schedule", "1f1b"], 2),
    ("breadth-first pp 2, m 4", ["--pp", "2", "--micro-batches", "4",
                                 "--schedule", "breadth-first"], 2),
    ("layered dp 2, ZeRO 3, m 4", ["--dp", "2", "--micro-batches", "4",
                                   "--schedule", "layered", "--zero", "3"],
     2),
]


def run(cmd, **kw):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, **kw)
    if proc.returncode != 0:
        sys.exit("failed (%d): %s\n%s" % (proc.returncode, " ".join(cmd),
                                          proc.stderr[-2000:]))
    return proc.stdout


def relink(prog, libs):
    """Rebuilds prog's ./run against the runtime in `libs` (--baseline-libs):
    build.sh names the libraries and headers by absolute path."""
    script = os.path.join(prog, "build.sh")
    with open(script) as f:
        text = f.read()
    build = re.search(r"'([^']*)/lib/liblamina_runtime\.a'", text).group(1)
    include = re.search(r"-I'([^']*)'", text).group(1)
    text = text.replace("-I'%s'" % include,
                        "-I'%s'" % os.path.join(libs, "include"))
    text = text.replace("'%s/" % build, "'%s/" % libs)
    # A library the change added (the baseline has no such file) is not one
    # the baseline's programs link.
    for path in re.findall(r"'(%s/[^']*\.a)'" % re.escape(libs), text):
        if not os.path.exists(path):
            text = text.replace(" '%s'" % path, "")
    with open(script, "w") as f:
        f.write(text)
    run(["sh", script])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lamina", required=True, help="the lamina under test")
    which = ap.add_mutually_exclusive_group(required=True)
    which.add_argument("--baseline", help="the baseline lamina")
    which.add_argument("--baseline-libs", metavar="DIR",
                       help="the baseline runtime: DIR/lib, DIR/third_party "
                       "and DIR/include of the baseline commit")
    ap.add_argument("--workdir", default="/tmp/dist_step_bench")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--mpirun", default="mpirun")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    model = os.path.join(args.workdir, "gpt.onnx")
    data = os.path.join(args.workdir, "data.bin")
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.path.join(here, "..", "python"))
    run([sys.executable, "-m", "lamina.models", "gpt2", "--layers",
         str(args.layers), "--hidden", str(args.hidden), "--heads", "4",
         "--seq", str(args.seq), "--batch", str(args.batch), "--vocab",
         str(args.vocab), "-o", model], env=env)
    import numpy as np
    rng = np.random.default_rng(0)
    rng.integers(0, args.vocab, 200000, dtype=np.uint16).tofile(data)
    mpirun = [args.mpirun, "--allow-run-as-root", "--oversubscribe"]
    print("model: GPT %d layers, h %d, s %d, micro-batch %d, vocab %d; "
          "%d steps, %d runs each, alternating" % (
              args.layers, args.hidden, args.seq, args.batch, args.vocab,
              args.steps, args.repeats))
    print()
    print("| configuration | baseline s/step | test s/step | test / baseline |")
    print("|---|---|---|---|")
    for name, flags, ranks in CONFIGS:
        progs = {}
        tag = name.split()[0].replace(",", "")
        for which, lamina in (("baseline", args.baseline or args.lamina),
                              ("test", args.lamina)):
            out = os.path.join(args.workdir, which + "-" + tag)
            run([lamina, "compile", model, "--mode", "train", "--loss",
                 "causal-lm", "--logits", "logits", "--quiet", "-o", out] +
                flags)
            progs[which] = out
        if args.baseline_libs:
            relink(progs["baseline"], os.path.abspath(args.baseline_libs))
        times = {"baseline": [], "test": []}
        for r in range(args.repeats):
            for which in ("baseline", "test") if r % 2 == 0 else \
                    ("test", "baseline"):
                stats = os.path.join(progs[which], "stats.json")
                cmd = [os.path.join(progs[which], "run"), "--data", data,
                       "--steps", str(args.steps), "--seed", "1",
                       "--log-every", str(args.steps)]
                if not ranks:
                    # One process has no --stats: its last log line's
                    # tokens/s counts the training loop alone too.
                    out = run(cmd)
                    rate = float(re.findall(r"tokens/s (\S+)", out)[-1])
                    times[which].append(args.batch * args.seq / rate)
                    continue
                run(mpirun + ["-np", str(ranks)] + cmd + ["--stats", stats])
                with open(stats) as f:
                    rank0 = json.load(f)["ranks"][0]
                times[which].append(rank0["wall_seconds"] / args.steps)
        base = statistics.median(times["baseline"])
        test = statistics.median(times["test"])
        print("| %s | %.4f | %.4f | %.3f |" % (name, base, test, test / base))


if __name__ == "__main__":
    main()
