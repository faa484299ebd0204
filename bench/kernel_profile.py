#!/usr/bin/env python3
"""Where a GPU program's time goes, kernel by kernel, from Nsight Compute.

    python3 bench/kernel_profile.py [--ncu NCU] [--json R.json] -- CMD...

Runs CMD under `ncu --metrics gpu__time_duration.sum` (one pass per
kernel; --clock-control none leaves the clocks as the GPU sets them) and
sums each kernel's measured duration by name: a table of the kernels that
take the most time, with their share of the whole. ncu runs the kernels one
at a time with its own overhead between them, so the sum is GPU busy time,
not wall time; it says what to make faster, not how fast the step is
(bench/gpu_bench.py measures that). scripts/gpu-check.sh runs it on one
step of the ~1B GPT's program.
"""

from __future__ import annotations

import argparse
import csv
import glob
import io
import json
import os
import re
import shutil
import subprocess
import sys


def find_ncu(given: str | None) -> str | None:
    if given:
        return given
    found = shutil.which("ncu")
    if found:
        return found
    cands = sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu")
                   + glob.glob("/usr/local/cuda*/bin/ncu"))
    return cands[-1] if cands else None


def short_name(name: str) -> str:
    """A kernel's name without its argument list (templates kept short)."""
    name = re.sub(r"\(.*$", "", name.strip())
    return name if len(name) <= 110 else name[:107] + "..."


def summarise(text: str) -> dict:
    """Per kernel name: launches and total ns, from ncu's --csv output."""
    start = text.find('"ID"')
    if start < 0:
        raise ValueError("no CSV table in ncu's output")
    rows = csv.DictReader(io.StringIO(text[start:]))
    kernels: dict = {}
    for r in rows:
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = r.get("Metric Unit", "")
        value = float(r["Metric Value"].replace(",", ""))
        scale = {"ns": 1, "nsecond": 1, "us": 1e3, "usecond": 1e3,
                 "ms": 1e6, "msecond": 1e6, "s": 1e9, "second": 1e9}.get(unit, 1)
        k = kernels.setdefault(short_name(r["Kernel Name"]),
                               dict(launches=0, ns=0.0))
        k["launches"] += 1
        k["ns"] += value * scale
    total = sum(k["ns"] for k in kernels.values())
    ranked = sorted(kernels.items(), key=lambda kv: -kv[1]["ns"])
    return dict(total_ms=total / 1e6,
                launches=sum(k["launches"] for k in kernels.values()),
                kernels=[dict(name=n, launches=k["launches"], ms=k["ns"] / 1e6,
                              share=k["ns"] / total if total else 0.0)
                         for n, k in ranked])


def table(s: dict, top: int) -> str:
    lines = [f"{s['launches']} kernel launches, {s['total_ms']:.1f} ms of GPU time "
             "(sum of ncu's per-kernel durations)", "",
             "| kernel | launches | ms | share |", "|---|---|---|---|"]
    for k in s["kernels"][:top]:
        lines.append(f"| `{k['name']}` | {k['launches']} | {k['ms']:.2f} | "
                     f"{100 * k['share']:.1f}% |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ncu", default=None)
    p.add_argument("--json", default=None)
    p.add_argument("--markdown", default=None)
    p.add_argument("--log", default=None, help="keep ncu's raw CSV here")
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--timeout", type=float, default=None)
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        p.error("give the command after --")
    ncu = find_ncu(args.ncu)
    if not ncu:
        print("kernel_profile: no ncu (Nsight Compute) found", file=sys.stderr)
        return 1
    log = args.log or "ncu.csv"
    full = [ncu, "--clock-control", "none", "--cache-control", "none", "--metrics",
            "gpu__time_duration.sum", "--csv", "--print-units", "base",
            "--log-file", log, *cmd]
    print("$ " + " ".join(full), flush=True)
    try:
        r = subprocess.run(full, timeout=args.timeout)
        rc = r.returncode
    except subprocess.TimeoutExpired:
        rc = None  # what ncu wrote so far is still summarised
        print("kernel_profile: timed out; summarising what was written", flush=True)
    with open(log, errors="replace") as f:
        text = f.read()
    try:
        s = summarise(text)
    except ValueError as e:
        print(f"kernel_profile: {e}; ncu exited {rc}:\n{text[-2000:]}", file=sys.stderr)
        return 1
    s["rc"] = rc
    md = table(s, args.top)
    print(md, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(s, f, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(md)
    return 0 if rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
