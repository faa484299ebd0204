#!/usr/bin/env bash
# The GPU check of the CUDA backend issue, for a machine with one NVIDIA GPU
# and nothing from the internet: builds everything and runs what exists of
# the CUDA backend on the GPU. Today that is the CUDA kernel library against
# the host kernels (lamina-cuda-tests, every test must run, none skip). The
# rest of the check the issue asks for is not built yet and is reported as
# such (exit status 2), never faked: a single-GPU training run of the tiny
# GPT against the host run, and the ~1B-parameter GPT training-step
# benchmark against PyTorch eager (tokens/s, MFU). docs/cuda.md.
#
#   scripts/gpu-check.sh [BUILD_DIR]      (default build-gpu/)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build-gpu}
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-check: no GPU (nvidia-smi -L lists none); nothing to check" >&2
  exit 1
fi
nvidia-smi -L
start=$(date +%s)
BUILD_DIR="$build" "$root/scripts/build.sh" lamina lamina-unittests lamina-cuda-tests
echo "== build: $(( $(date +%s) - start )) s"

echo "== CUDA kernels against the host kernels"
"$build/bin/lamina-cuda-tests" --gtest_brief=1 | tee "$build/gpu-kernels.log"
if grep -q SKIPPED "$build/gpu-kernels.log"; then
  echo "gpu-check: kernel tests were skipped on a machine with a GPU" >&2
  exit 1
fi

echo "== not built yet (docs/cuda.md, 'Not yet'):"
echo "   lamina compile --target cuda (the rt -> CUDA lowering), NCCL, the"
echo "   single-GPU tiny-GPT training run against the host, the 1B GPT benchmark"
echo "   against PyTorch eager"
echo "gpu-check: kernels ok in $(( $(date +%s) - start )) s; the training and benchmark parts do not exist yet"
exit 2
