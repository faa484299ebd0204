#!/usr/bin/env bash
# Builds, on a machine with Lamina's build dependencies and the CUDA toolkit
# (no GPU needed), everything scripts/gpu-check.sh runs, for a GPU node
# that has a driver, the CUDA libraries and PyTorch but no MLIR, protobuf,
# oneDNN, OpenBLAS or OpenMPI (a cluster's compute node, a container):
#
#   scripts/gpu-bundle.sh [-o BUNDLE] [--archive FILE.tar.xz] [BUILD_DIR]
#   # copy BUNDLE (or the archive) and the source tree to the GPU node, then
#   scripts/gpu-check.sh --bundle BUNDLE      (or --bundle FILE.tar.xz)
#
# BUNDLE (default build-gpu-bundle/) holds
#   bin/    lamina-cuda-tests, lamina-nccl-check, cuda-kernels-bench
#   tiny/   the tiny GPT's model, data and train programs, host and cuda,
#           f32 and bf16 (bench/gpu_vs_host.py --build-only)
#   gpt1b/  the ~1B GPT's bf16 train program at batch $BENCH_BATCH
#           (bench/gpu_bench.py --build-only); its weights are generated on
#           the GPU node (bench/gpt1b.py, seed 0) and passed with --model
#   lib/    the shared libraries those programs load that a GPU node need
#           not have (protobuf, oneDNN, OpenBLAS, OpenMPI, ...): not glibc,
#           libstdc++ or the CUDA libraries (cudart, cuBLAS(Lt), NCCL), which
#           the node's toolkit or PyTorch's wheels provide (gpu-check.sh
#           finds them)
#   bundle.json  the commit, the CUDA architectures, nvcc, the batch
#
# The programs are built for the CUDA architectures BUILD_DIR was
# configured with (CMAKE_CUDA_ARCHITECTURES; -DCMAKE_CUDA_ARCHITECTURES=90
# for Hopper alone keeps the bundle small) and, if it was, without
# -march=native (-DLAMINA_NATIVE_KERNELS=OFF: the GPU node's CPU may lack
# this one's instructions). Environment: BENCH_BATCH (default 4), WORK
# (scratch for the 3.7 GB model; default a temporary folder, removed).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bundle=$root/build-gpu-bundle archive="" build=""
while [ $# -gt 0 ]; do
  case $1 in
    -o) bundle=$2; shift 2 ;;
    --archive) archive=$2; shift 2 ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    -*) echo "gpu-bundle: unknown flag $1" >&2; exit 2 ;;
    *) build=$1; shift ;;
  esac
done
build=$(realpath -m "${build:-$root/build}")
bundle=$(realpath -m "$bundle")
batch=${BENCH_BATCH:-4}
work=${WORK:-}
if [ -z "$work" ]; then work=$(mktemp -d); trap 'rm -rf "$work"' EXIT; fi

echo "== build ($build)"
BUILD_DIR="$build" "$root/scripts/build.sh" lamina lamina-cuda-tests lamina-nccl-check
grep -q '^LAMINA_ENABLE_CUDA:BOOL=ON' "$build/CMakeCache.txt" || {
  echo "gpu-bundle: CUDA is not enabled in $build (docs/cuda.md, Building)" >&2; exit 1; }
grep -q '^LAMINA_NATIVE_KERNELS:BOOL=OFF' "$build/CMakeCache.txt" ||
  echo "gpu-bundle: warning: $build compiles the host kernels with -march=native;" \
       "the GPU node's CPU must have this one's instructions" >&2

rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/lib"
cp "$build/bin/lamina-cuda-tests" "$build/bin/lamina-nccl-check" "$bundle/bin/"
python3 "$root/bench/cuda_kernels_bench.py" --build-dir "$build" \
  --build-only "$bundle/bin/cuda-kernels-bench"

echo "== the tiny GPT's programs"
python3 "$root/bench/gpu_vs_host.py" --lamina "$build/bin/lamina" \
  --build-only "$bundle/tiny" --precision f32,bf16 --steps 20

echo "== the 1B GPT's program (batch $batch)"
PYTHONPATH="$root/python" python3 "$root/bench/gpt1b.py" -o "$work/gpt1b.onnx"
python3 "$root/bench/gpu_bench.py" --lamina "$build/bin/lamina" \
  --model "$work/gpt1b.onnx" --build-only "$bundle/gpt1b" --target cuda \
  --precision bf16 --batch "$batch" --compile-mem-gib 0
# The program must read the generated model by name (--model): a copy the
# compile rewrote (restored parameters) would not be the node's model.
if [ -e "$bundle/gpt1b/model.onnx" ]; then
  echo "gpu-bundle: the 1B compile rewrote its model (gpt1b/model.onnx);" \
       "the node's regenerated model would not match it" >&2
  exit 1
fi
# Sources and objects stay behind: only the programs travel.
find "$bundle/tiny" "$bundle/gpt1b" \( -name '*.cpp' -o -name '*.o' \) -delete

echo "== shared libraries"
# Every library the binaries resolve here, but for those the node has
# (glibc, the C++ runtime, the driver, the CUDA toolkit's libraries).
system='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libresolv|libutil|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libnccl|libnvidia-)\.'
elfs=("$bundle"/bin/* "$bundle"/tiny/*/run "$bundle/gpt1b/run")
for f in "${elfs[@]}"; do
  ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  [[ $name =~ $system ]] && continue
  cp -L "$path" "$bundle/lib/$name"
done
strip --strip-unneeded "${elfs[@]}" "$bundle"/lib/* 2>/dev/null || true
# Each binary X becomes X.bin behind a wrapper that puts the bundle's and
# the node's CUDA library folders ($LAMINA_BUNDLE_LIBS, set by
# gpu-check.sh --bundle) on LD_LIBRARY_PATH for it alone: exported to every
# process, the older Debian copies would shadow PyTorch's.
for f in "${elfs[@]}"; do
  mv "$f" "$f.bin"
  cat > "$f" <<'WRAP'
#!/bin/sh
# scripts/gpu-bundle.sh: the bundle's libraries for this program alone.
if [ -z "${LAMINA_BUNDLE_LIBS:-}" ]; then
  echo "$0: set LAMINA_BUNDLE_LIBS (scripts/gpu-check.sh --bundle does)" >&2
  exit 127
fi
LD_LIBRARY_PATH=$LAMINA_BUNDLE_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec "$0.bin" "$@"
WRAP
  chmod +x "$f"
done

nvcc_bin=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
python3 - "$bundle/bundle.json" <<EOF
import json, sys
json.dump(dict(
    commit="$(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet HEAD || echo '+changes')",
    date="$(date -u +%Y-%m-%dT%H:%MZ)",
    cuda_architectures="$(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' "$build/CMakeCache.txt")",
    native_kernels="$(sed -n 's/^LAMINA_NATIVE_KERNELS:BOOL=//p' "$build/CMakeCache.txt")",
    nvcc="$("$nvcc_bin" --version | tail -n1)",
    batch=$batch,
    libraries=sorted("$(ls "$bundle/lib" | tr '\n' ' ')".split())),
    open(sys.argv[1], "w"), indent=2)
EOF
du -sh "$bundle"
if [ -n "$archive" ]; then
  archive=$(realpath -m "$archive")
  tar -C "$(dirname "$bundle")" -cJf "$archive" "$(basename "$bundle")"
  ls -l "$archive"
fi
echo "gpu-bundle: $bundle ready: scripts/gpu-check.sh --bundle $bundle"
