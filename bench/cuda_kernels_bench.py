#!/usr/bin/env python3
"""Times lamina's cuda::matmul and cuda::reduce on one GPU.

Builds bench/cuda_kernels_bench.cpp against a build directory's
lamina_cuda_runtime (same link line as lamina-cuda-tests, without GoogleTest)
and runs it: the GEMMs of one layer of the ~1B GPT training step (bf16;
first-call host time, which includes the cuBLASLt heuristic, and steady-state
TFLOP/s), the bias-gradient reductions (sum over 8192 rows; GB/s), the
GELU backward unfused and fused, the layer norm forward and backward
on the packed and the one-block-a-row kernels (LAMINA_CUDA_NORM=rows),
the cross-entropy on f32 and on bf16 logits, and the 1B GPT's AdamW update
one launch a parameter against optimizerSteps.

    scripts/build.sh lamina_cuda_runtime lamina-cuda-tests
    python3 bench/cuda_kernels_bench.py [--build-dir build] [--reps 20] \
        [--output results.json]

`--build-only EXE` only builds (scripts/gpu-bundle.sh, on a machine
without a GPU); `--exe EXE` runs such a build without building.

Exits 1 when there is no GPU (after building, so the build is checked).
"""
import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def link_libraries(build):
    """lamina-cuda-tests' LINK_LIBRARIES from build.ninja, minus GoogleTest,
    with LaminaSupport."""
    text = open(os.path.join(build, "build.ninja")).read()
    m = re.search(r"^build bin/lamina-cuda-tests:.*?\n((?:  .*\n)*)", text,
                  re.M)
    if not m:
        sys.exit(f"{build}: no lamina-cuda-tests target (CUDA not enabled?)")
    libs = re.search(r"LINK_LIBRARIES = (.*)", m.group(1))
    out = []
    for a in shlex.split(libs.group(1)):
        if "gtest" in a:
            continue
        if a.startswith("lib/"):
            a = os.path.join(build, a)
        out.append(a)
    # The results' JSON writer (lamina/Support/Json.h).
    return out + [os.path.join(build, "lib", "libLaminaSupport.a")]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--output", help="write the results as a JSON list here")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--build-only", metavar="EXE", help="build EXE, run nothing")
    g.add_argument("--exe", help="run this build instead of building")
    args = p.parse_args()
    exe = args.exe or build_exe(os.path.abspath(args.build_dir), args.build_only)
    if args.build_only:
        return 0
    run = subprocess.run([exe, str(args.reps)], stdout=subprocess.PIPE,
                         text=True)
    report(run.stdout, args.output)
    return run.returncode


def build_exe(build, exe=None):
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    cuda_include = os.path.join(os.path.dirname(os.path.dirname(
        os.path.realpath(nvcc))), "include")
    exe = exe or os.path.join(tempfile.mkdtemp(prefix="lamina-kbench-"), "bench")
    cmd = [os.environ.get("CXX", "c++"), "-std=c++17", "-O2",
           "-I", os.path.join(ROOT, "include"),
           "-I", os.path.join(build, "include"), "-I", cuda_include,
           os.path.join(ROOT, "bench", "cuda_kernels_bench.cpp"), "-o", exe]
    cmd += link_libraries(build)
    subprocess.run(cmd, check=True)
    return exe


def report(stdout, output):
    results = [json.loads(line) for line in stdout.splitlines() if line]
    for r in results:
        if r["kind"] == "matmul":
            print(f"matmul {r['name']:10} {r['dtype']:5} b={r['batch']:<3} "
                  f"m={r['m']:<5} n={r['n']:<5} k={r['k']:<5} "
                  f"{r['ms']:8.3f} ms {r['tflops']:7.1f} TFLOP/s  first call "
                  f"{r['first_call_host_ms']:.2f} ms host, then "
                  f"{r['host_us_per_call']:.1f} us/call host")
        elif r["kind"] == "fused_sum":
            print(f"gelu backward + bias grad {str(r['shape']):14} unfused "
                  f"{r['unfused_ms'] * 1000:8.1f} us, fused "
                  f"{r['fused_ms'] * 1000:8.1f} us ({r['gbps']:.0f} GB/s), "
                  f"{r['unfused_ms'] / r['fused_ms']:.2f}x")
        elif r["kind"] == "cross_entropy":
            print(f"cross-entropy {r['logits']:4} logits {str(r['shape']):14} "
                  f"forward {r['fwd_ms'] * 1000:8.1f} us "
                  f"({r['fwd_gbps']:.0f} GB/s), backward "
                  f"{r['bwd_ms'] * 1000:8.1f} us ({r['bwd_gbps']:.0f} GB/s)")
        elif r["kind"] == "adamw":
            print(f"adamw {r['tensors']} tensors {r['params'] / 1e9:.2f} G "
                  f"params: a launch each {r['per_tensor_ms']:8.3f} ms "
                  f"({r['per_tensor_gbps']:.0f} GB/s), optimizerSteps "
                  f"{r['multi_ms']:8.3f} ms ({r['multi_gbps']:.0f} GB/s)")
        elif r["kind"] == "norm":
            print(f"layer norm {r['path']:6} {str(r['shape']):14} forward "
                  f"{r['fwd_ms'] * 1000:8.1f} us ({r['fwd_gbps']:.0f} GB/s), "
                  f"backward {r['bwd_ms'] * 1000:8.1f} us "
                  f"({r['bwd_gbps']:.0f} GB/s)")
        else:
            print(f"reduce {str(r['shape']):14} {r['dtype']:5} "
                  f"{r['ms'] * 1000:8.1f} us {r['gbps']:7.1f} GB/s")
    if output:
        with open(output, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
