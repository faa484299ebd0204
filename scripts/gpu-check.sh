#!/usr/bin/env bash
# The GPU check of the CUDA backend, for a machine with one NVIDIA GPU and no
# internet, in under 10 minutes (docs/cuda.md "Checking on a GPU",
# docs/results/performance.md "GPU (CUDA) benchmark"):
#
#   a. configure + build with CUDA (scripts/build.sh, -j$JOBS): lamina and
#      the CUDA test binaries only, not the whole tree;
#   b. the CUDA kernel tests (lamina-cuda-tests: every test must run, none
#      skip) and `lit $BUILD/test/Runtime/Cuda $BUILD/test/Runtime/Dist/Nccl`
#      (the cuda-gpu feature on);
#   c. the tiny GPT of test/e2e/train-tiny-gpt.test trained on the GPU
#      (--target cuda) and on the host, f32 and bf16, losses compared step
#      by step, with validation losses and --grad-accum (bench/gpu_vs_host.py);
#   d. the ~1B GPT training step against PyTorch eager (bench/gpu_bench.py:
#      tokens/s, MFU, memory), within what is left of the time budget;
#   (then bench/cuda_kernels_bench.py -- GEMM TFLOP/s and reduction GB/s
#      of one 1B layer -- if 60 s are left, and test/e2e/cuda-*.test under
#      lit if 150 s are left; optional: skipping them for time is not a
#      failure)
#   e. results in $OUT (default /tmp/gpu-check): summary.json, one JSON per
#      stage, logs, and performance-snippet.md for docs/results/performance.md.
#
# Each stage is timed; a stage that would not fit in the time left is
# skipped and said so (that counts as a failure). Exit status: 0 when every
# stage passed, 1 otherwise (2 for bad usage).
#
#   scripts/gpu-check.sh [BUILD_DIR]        (default build-gpu/)
#   scripts/gpu-check.sh --bundle BUNDLE    (a folder or .tar.xz)
#
# --bundle runs what scripts/gpu-bundle.sh built on another machine, for a
# GPU node without MLIR (nothing is compiled here): stage a checks that
# the bundle's binaries find every shared library (its lib/, then the CUDA
# toolkit's and PyTorch's CUDA wheels' folders, put on LD_LIBRARY_PATH),
# stage b runs lamina-nccl-check (one rank, with and without torchrun's
# variables) instead of lit, c and d run the bundle's programs
# (gpu_vs_host.py --prebuilt, gpu_bench.py --program: the 1B model is
# generated here and read by name) and the lit e2e tests are skipped.
#
# Environment: OUT (results), GPU_CHECK_BUDGET (seconds for everything,
# default 560), JOBS (build jobs, default 16), BENCH_BATCH (default 4),
# ALSO_ATTENTION (LAMINA_CUDA_ATTENTION values the 1B program also runs
# with, e.g. tensor-core: more rows of the benchmark's table), ALSO_ENV
# (space-separated VAR=VALUE settings the 1B program also runs with, one
# row each; default LAMINA_CUDA_GRAPHS=1, the step replayed as a CUDA graph,
# and LAMINA_CUDA_NORM=rows, the norms on the one-block-a-row kernels;
# empty: none),
# BENCH_WARMUP (3), BENCH_STEPS (10), TORCH_PYTHON (a python with torch;
# default the first of python3 / python that imports it), WORK (scratch,
# default $OUT/work: the 3.7 GB model goes there).
#
# GPU_CHECK_DRY_RUN=1 tests this script on a machine without a GPU: no
# nvidia-smi needed, the existing BUILD_DIR is used as it is (no build),
# the kernel and lit stages are marked DRY, and stages c and d run with
# --target host (d on the tiny model, PyTorch on the CPU if it is there).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bundle=""
if [ "${1:-}" = --bundle ]; then
  [ $# -eq 2 ] || { echo "usage: scripts/gpu-check.sh --bundle BUNDLE" >&2; exit 2; }
  bundle=$(realpath -m "$2"); shift 2
fi
build=$(realpath -m "${1:-$root/build-gpu}")
OUT=$(realpath -m "${OUT:-/tmp/gpu-check}")
WORK=$(realpath -m "${WORK:-$OUT/work}")
budget=${GPU_CHECK_BUDGET:-560}
jobs=${JOBS:-$(nproc)}
batch=${BENCH_BATCH:-4}
warmup=${BENCH_WARMUP:-3}
steps=${BENCH_STEPS:-10}
dry=${GPU_CHECK_DRY_RUN:-0}
tgt=cuda; [ "$dry" = 1 ] && tgt=host
mkdir -p "$OUT" "$WORK" "$OUT/logs"
if [ -n "$bundle" ]; then
  if [ -f "$bundle" ]; then  # an archive: unpacked into $WORK
    rm -rf "$WORK/bundle-unpacked" && mkdir -p "$WORK/bundle-unpacked" &&
      tar -C "$WORK/bundle-unpacked" -xf "$bundle" || { echo "gpu-check: cannot unpack $bundle" >&2; exit 2; }
    bundle=$(dirname "$(ls -d "$WORK"/bundle-unpacked/*/bundle.json | head -n1)")
  fi
  [ -f "$bundle/bundle.json" ] || { echo "gpu-check: $bundle is no gpu-bundle.sh output (no bundle.json)" >&2; exit 2; }
  build=$bundle
  batch=${BENCH_BATCH:-$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["batch"])' "$bundle/bundle.json")}
  # The bundle's libraries, then the CUDA libraries the node has: its
  # toolkit, the driver's folder, PyTorch's nvidia-* wheels.
  libpath=$bundle/lib
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
           /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
    [ -d "$d" ] && libpath+=":$d"
  done
  for d in $(python3 -c 'import nvidia, os; print(" ".join(os.path.abspath(p) for p in nvidia.__path__))' 2>/dev/null); do
    for l in $(find "$d" -name 'libcublasLt.so*' -o -name 'libnccl.so*' -o -name 'libcudart.so*' -o -name 'libcudnn.so*' 2>/dev/null); do
      case ":$libpath:" in *":$(dirname "$l"):"*) ;; *) libpath+=":$(dirname "$l")" ;; esac
    done
  done
  # For the bundle's binaries alone (their wrappers read it).
  export LAMINA_BUNDLE_LIBS=$libpath
fi
rm -f "$OUT"/attention-* "$OUT/epilogue-off"  # markers of this run only (stage b)
t0=$(date +%s)
left() { echo $(( budget - ($(date +%s) - t0) )); }

names=() states=() secs=() notes=()
record() {  # NAME STATE SECONDS NOTE
  names+=("$1"); states+=("$2"); secs+=("$3"); notes+=("$4")
  echo "== $1: $2 (${3} s)${4:+ -- $4}"
}
# run_stage NAME MIN_SECONDS_NEEDED COMMAND...: runs it with a timeout of
# the time left, logging to $OUT/logs/NAME.log (and the terminal).
run_stage() {
  local name=$1 need=$2; shift 2
  local l; l=$(left)
  if [ "$l" -lt "$need" ]; then
    record "$name" "${skip_state:-SKIPPED}" 0 "time budget: ${l} s left, needs ~${need} s"
    return 1
  fi
  echo "== $name (${l} s of the budget left)"
  local s=$(date +%s) rc
  # bash -c: the stage may be a function of this script (exported below).
  timeout --kill-after=10 "$l" bash -c '"$@"' stage "$@" 2>&1 | tee "$OUT/logs/$name.log"
  rc=${PIPESTATUS[0]}
  local d=$(( $(date +%s) - s ))
  if [ "$rc" -eq 0 ]; then record "$name" PASS "$d" ""
  elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then record "$name" FAIL "$d" "timed out (budget)"
  else record "$name" FAIL "$d" "exit $rc, log $OUT/logs/$name.log"; fi
  return "$rc"
}

summary() {
  [ -z "${gen_pid:-}" ] || kill "$gen_pid" 2>/dev/null
  local total=$(( $(date +%s) - t0 )) ok=1 i
  echo
  echo "==== gpu-check summary ($total s of a $budget s budget; results in $OUT)"
  {
    echo "{"
    echo "  \"seconds\": $total, \"budget_s\": $budget, \"build_dir\": \"$build\", \"bundle\": $([ -n "$bundle" ] && cat "$bundle/bundle.json" | tr -d '\n' || echo null),"
    echo "  \"gpu\": \"$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n1 | tr -d '"')\","
    echo "  \"commit\": \"$(git -C "$root" rev-parse --short HEAD 2>/dev/null)$(git -C "$root" diff --quiet HEAD 2>/dev/null || echo '+changes')\","
    echo "  \"stages\": ["
    for i in "${!names[@]}"; do
      printf '    {"name": "%s", "state": "%s", "seconds": %s, "note": "%s"}%s\n' \
        "${names[$i]}" "${states[$i]}" "${secs[$i]}" "${notes[$i]//\"/\'}" \
        "$([ "$i" -lt $(( ${#names[@]} - 1 )) ] && echo ,)"
    done
    echo "  ]"
    echo "}"
  } > "$OUT/summary.json"
  for i in "${!names[@]}"; do
    printf '  %-22s %-8s %5s s  %s\n' "${names[$i]}" "${states[$i]}" "${secs[$i]}" "${notes[$i]}"
    case "${states[$i]}" in
      PASS|OPTIONAL-SKIPPED) ;;
      DRY) [ "$dry" = 1 ] || ok=0 ;;
      *) ok=0 ;;
    esac
  done
  # The markdown snippet for docs/results/performance.md.
  {
    echo "### Measured $(date -u +%Y-%m-%d) on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1) (scripts/gpu-check.sh)"
    echo
    if [ -f "$OUT/gpu_vs_host.md" ]; then cat "$OUT/gpu_vs_host.md"; echo; fi
    if [ -f "$OUT/gpu_bench.md" ]; then cat "$OUT/gpu_bench.md"; echo; fi
    if [ -f "$OUT/kernel_profile.md" ]; then cat "$OUT/kernel_profile.md"; echo; fi
    echo "Stages: $(for i in "${!names[@]}"; do printf '%s %s (%s s); ' "${names[$i]}" "${states[$i]}" "${secs[$i]}"; done)"
  } > "$OUT/performance-snippet.md"
  echo "  markdown for docs/results/performance.md: $OUT/performance-snippet.md"
  if [ "$ok" = 1 ]; then echo "gpu-check: all stages passed"; exit 0; fi
  echo "gpu-check: FAILED (see above)"; exit 1
}

# Say why cuDNN's attention is not used, if it is not (CudnnAttention.cpp).
export LAMINA_CUDNN_VERBOSE=1
export root build OUT WORK budget jobs batch warmup steps t0 dry tgt bundle
export -f left

# ---------------------------------------------------------------- the GPU
if [ "$dry" = 1 ]; then
  echo "gpu-check: DRY RUN (GPU_CHECK_DRY_RUN=1): --target host, no build, no GPU stages"
elif ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-check: no GPU (nvidia-smi -L lists none); nothing to check" >&2
  exit 1
else
  nvidia-smi -L
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv
fi

# ------------------------------------------------- dependencies (no internet)
# scripts/install-deps.sh installs with apt and pip, which this machine
# cannot reach: it is only run when something is missing, under a timeout.
lit_bin=$(command -v lit || command -v llvm-lit || ls /usr/lib/llvm-22/bin/lit 2>/dev/null || true)
missing=""
if [ -z "$bundle" ]; then  # a bundle needs none of the build's tools
  for t in cmake ninja g++; do command -v "$t" >/dev/null || missing+=" $t"; done
  [ -n "$lit_bin" ] || missing+=" lit"
  [ -d /usr/lib/llvm-22/lib/cmake/mlir ] || missing+=" libmlir-22-dev"
fi
python3 -c "import onnx, numpy" 2>/dev/null || missing+=" onnx/numpy"
if [ -n "$missing" ]; then
  echo "gpu-check: missing:$missing; trying scripts/install-deps.sh (needs apt/pip: this machine has no internet)"
  # Not fatal: the stages that need what is missing fail on their own.
  run_stage deps 30 timeout 60 "$root/scripts/install-deps.sh" || true
  lit_bin=$(command -v lit || command -v llvm-lit || ls /usr/lib/llvm-22/bin/lit 2>/dev/null || true)
else
  record deps PASS 0 "all present, install-deps skipped"
fi

# What this machine has, for the record.
{ echo "python3: $(python3 --version 2>&1) $(python3 -c 'import onnx, numpy; print("onnx", onnx.__version__, "numpy", numpy.__version__)' 2>&1 | tail -n1)"
  echo "cmake: $(cmake --version 2>/dev/null | head -n1)"
  echo "nvcc: $( (command -v nvcc >/dev/null && nvcc --version || /usr/local/cuda/bin/nvcc --version) 2>/dev/null | tail -n1)"
  echo "lit: ${lit_bin:-none}"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) ($(nproc) cores)"
  [ -z "$bundle" ] || { echo "bundle: $bundle"; cat "$bundle/bundle.json"; echo; echo "LAMINA_BUNDLE_LIBS=$LAMINA_BUNDLE_LIBS"; }
} > "$OUT/logs/env.txt" 2>&1
cat "$OUT/logs/env.txt"

# The 1B model is written in the background while the build runs (one
# core, ~20 s, 3.7 GB in $WORK).
gen_log="$OUT/logs/gpt1b-generate.log"
gen_args=(); [ "$dry" = 1 ] && gen_args=(--tiny)
( PYTHONPATH="$root/python" python3 "$root/bench/gpt1b.py" "${gen_args[@]}" -o "$WORK/gpt1b.onnx" > "$gen_log" 2>&1 ) &
gen_pid=$!

# ------------------------------------------------------------ a. build
build_targets() {
  BUILD_DIR="$build" "$root/scripts/build.sh" -j"$jobs" lamina || return 1
  grep -q '^LAMINA_ENABLE_CUDA:BOOL=ON' "$build/CMakeCache.txt" || {
    echo "gpu-check: CUDA is not enabled in $build (CMake found no nvcc / CUDA toolkit; docs/cuda.md, Building)"; return 1; }
  ninja -C "$build" -j"$jobs" lamina-cuda-tests || return 1
  # Whatever else the CUDA lit tests run (lamina-opt, ...), if it is a target.
  local extra=() t
  for t in $(grep -ho 'lamina-[a-z0-9-]*' "$root"/test/Runtime/Cuda/*.test "$root"/test/Runtime/Dist/Nccl/*.test "$root"/test/e2e/cuda-*.test 2>/dev/null | sort -u); do
    ninja -C "$build" -t query "$t" >/dev/null 2>&1 && extra+=("$t")
  done
  if [ ${#extra[@]} -gt 0 ]; then ninja -C "$build" -j"$jobs" "${extra[@]}" || return 1; fi
}
export -f build_targets
# --bundle: nothing to build; every binary must find its libraries.
bundle_libs() {
  local f bad=0
  export LD_LIBRARY_PATH=$LAMINA_BUNDLE_LIBS  # as the wrappers set it
  for f in "$build"/bin/*.bin "$build"/tiny/*/run.bin "$build/gpt1b/run.bin"; do
    if ldd "$f" | grep -q 'not found'; then
      echo "$f:"; ldd "$f" | grep 'not found'; bad=1
    fi
  done
  ldd "$build/gpt1b/run.bin" | grep -E 'cublas|cudart|nccl|protobuf|openblas|mpi|stdc'
  return $bad
}
export -f bundle_libs
if [ -n "$bundle" ]; then
  run_stage bundle-libraries 5 bundle_libs || summary
elif [ "$dry" = 1 ]; then
  [ -x "$build/bin/lamina" ] || { echo "gpu-check: dry run needs $build/bin/lamina"; exit 2; }
  record build DRY 0 "dry run: using $build as it is"
else
  run_stage build 60 build_targets || summary
fi

# ------------------------------------------------------ b. kernel tests
# fallback NAME VAR VALUE MARKER: when tests named *NAME* failed, reruns them
# with VAR=VALUE; if they pass so, touches $OUT/MARKER (the later stages
# then run with VAR=VALUE).
fallback() {
  grep -q "FAILED.*$1" "$OUT/logs/cuda-tests.out" || return 0
  echo "== $1 tests failed: again with $2=$3"
  local log="$OUT/logs/cuda-tests-$4.out"
  if env "$2=$3" "$build/bin/lamina-cuda-tests" --gtest_brief=1 \
       --gtest_filter="*$1*" > "$log" 2>&1; then
    echo "gpu-check: the $1 tests pass with $2=$3: later stages use it"
    touch "$OUT/$4"
  fi
  tail -n 10 "$log"
}
kernel_tests() {
  "$build/bin/lamina-cuda-tests" --gtest_brief=1 > "$OUT/logs/cuda-tests.out" 2>&1
  local rc=$?
  tail -n 30 "$OUT/logs/cuda-tests.out"
  # The fused attention's tensor-core path and cuBLASLt's bias epilogue
  # first ran here: if only they are wrong, the later stages still measure
  # with the generic kernels / GEMM + add, and this stage still fails.
  if [ "$rc" -ne 0 ]; then
    # cuDNN's path first, then the WMMA kernels' (docs/cuda.md, "Attention").
    fallback Attention LAMINA_CUDA_ATTENTION tensor-core attention-tensor-core
    [ -f "$OUT/attention-tensor-core" ] ||
      fallback Attention LAMINA_CUDA_ATTENTION generic attention-generic
    fallback Epilogue LAMINA_CUDA_EPILOGUE off epilogue-off
  fi
  # Attention goes through cuDNN where cuDNN takes the call: once more with
  # cuDNN required for every call it is eligible for, and on the WMMA
  # kernels alone (test/Runtime/Cuda/kernels-gpu.test does the same).
  local mode
  for mode in cudnn tensor-core; do
    echo "== attention tests, LAMINA_CUDA_ATTENTION=$mode"
    LAMINA_CUDA_ATTENTION=$mode "$build/bin/lamina-cuda-tests" --gtest_brief=1 \
      --gtest_filter='*Attention*' > "$OUT/logs/cuda-tests-$mode.out" 2>&1 || rc=1
    tail -n 5 "$OUT/logs/cuda-tests-$mode.out"
  done
  [ "$rc" -eq 0 ] || return 1
  if grep -q SKIPPED "$OUT/logs/cuda-tests.out"; then
    echo "gpu-check: kernel tests were skipped on a machine with a GPU"; return 1
  fi
}
lit_tests() {
  [ -n "$lit_bin" ] || { echo "no lit"; return 1; }
  "$lit_bin" -sv --show-unsupported "$build/test/Runtime/Cuda" \
    "$build/test/Runtime/Dist/Nccl" > "$OUT/logs/lit-cuda.out" 2>&1
  local rc=$?
  tail -n 30 "$OUT/logs/lit-cuda.out"
  [ "$rc" -eq 0 ] || return 1
  if ! grep -Eq 'Passed *: *[1-9]' "$OUT/logs/lit-cuda.out"; then
    echo "gpu-check: lit ran no test"; return 1
  fi
  # kernels-gpu.test needs the cuda-gpu feature: it must not be unsupported.
  if grep -q 'UNSUPPORTED: .*kernels-gpu.test' "$OUT/logs/lit-cuda.out"; then
    echo "gpu-check: kernels-gpu.test is UNSUPPORTED: lit did not see the GPU (cuda-gpu feature)"; return 1
  fi
}
# --bundle (no lit there): lamina-nccl-check on one rank, as
# test/Runtime/Dist/Nccl/nccl-gpu.test runs it, with and without torchrun's
# variables.
nccl_check() {
  local rc=0
  "$build/bin/lamina-nccl-check" 2>&1 | tee "$OUT/logs/nccl-check.out"
  grep -q 'nccl-check: all ok on 1 rank' "$OUT/logs/nccl-check.out" || rc=1
  env RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29531 \
    "$build/bin/lamina-nccl-check" --no-overlap 2>&1 | tee "$OUT/logs/nccl-check-torchrun.out"
  grep -q 'launcher torchrun' "$OUT/logs/nccl-check-torchrun.out" &&
    grep -q 'nccl-check: all ok on 1 rank' "$OUT/logs/nccl-check-torchrun.out" || rc=1
  return $rc
}
export lit_bin
export -f fallback kernel_tests lit_tests nccl_check
if [ "$dry" = 1 ]; then
  record cuda-kernel-tests DRY 0 "dry run"
  record lit-cuda DRY 0 "dry run"
else
  run_stage cuda-kernel-tests 20 kernel_tests
  if [ -n "$bundle" ]; then run_stage nccl-check 20 nccl_check
  else run_stage lit-cuda 20 lit_tests; fi
fi

for fb in LAMINA_CUDA_ATTENTION=tensor-core:attention-tensor-core \
          LAMINA_CUDA_ATTENTION=generic:attention-generic \
          LAMINA_CUDA_EPILOGUE=off:epilogue-off; do
  if [ -f "$OUT/${fb#*:}" ]; then
    export "${fb%%:*}"
    echo "gpu-check: ${fb%%:*} for the remaining stages" | tee -a "$OUT/logs/env.txt"
  fi
done

# ------------------------------------------- c. tiny GPT, GPU against host
if [ -n "$bundle" ]; then tiny_args=(--prebuilt "$build/tiny")
else tiny_args=(--lamina "$build/bin/lamina" --target "$tgt" --precision f32,bf16); fi
run_stage tiny-gpt-gpu-vs-host 60 python3 "$root/bench/gpu_vs_host.py" \
  "${tiny_args[@]}" --steps 20 \
  --workdir "$WORK/gpu-vs-host" --json "$OUT/gpu_vs_host.json" \
  --markdown "$OUT/gpu_vs_host.md" --timeout 240

# ------------------------------------------ d. the 1B GPT against PyTorch
# torch_gpt.py needs torch, numpy and onnx (it reads the model's
# initializers) in one interpreter.
torch_py=${TORCH_PYTHON:-}
if [ -z "$torch_py" ]; then
  for mods in "torch, onnx, numpy" "torch"; do
    for p in python3 python; do
      if command -v "$p" >/dev/null && "$p" -c "import $mods" 2>/dev/null; then torch_py=$(command -v "$p"); break 2; fi
    done
  done
fi
if [ -n "$torch_py" ]; then
  "$torch_py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())" 2>&1 | tee -a "$OUT/logs/env.txt"
  "$torch_py" -c "import onnx" 2>/dev/null || echo "gpu-check: $torch_py has torch but no onnx: the PyTorch side will fail"
fi
echo "== waiting for the 1B model ($gen_log)"
wait "$gen_pid"; gen_rc=$?
cat "$gen_log"
bench_stage() {
  [ "$gen_rc" -eq 0 ] || { echo "gpu-check: generating the 1B model failed"; return 1; }
  local torch_args=()
  if [ -z "$torch_py" ]; then
    echo "gpu-check: no python with torch found (set TORCH_PYTHON): the PyTorch side is skipped"
    torch_args=(--no-torch)
  else
    torch_args=(--python "$torch_py")
    [ "$dry" = 1 ] && torch_args+=(--torch-device cpu)
  fi
  local program=()
  [ -z "$bundle" ] || program=(--program "$build/gpt1b")
  local also_env=()
  for setting in ${ALSO_ENV-LAMINA_CUDA_GRAPHS=1 LAMINA_CUDA_NORM=rows}; do
    also_env+=(--also-env "$setting")
  done
  # Leave 15 s for the summary.
  python3 "$root/bench/gpu_bench.py" --lamina "$build/bin/lamina" "${program[@]}" \
    --model "$WORK/gpt1b.onnx" --workdir "$WORK/bench" --target "$tgt" \
    --precision bf16 --batch "$batch" --warmup "$warmup" --steps "$steps" \
    --budget $(( $(left) - 15 )) "${torch_args[@]}" ${ALSO_ATTENTION:+--also-attention "$ALSO_ATTENTION"} \
    "${also_env[@]}" --json "$OUT/gpu_bench.json" --markdown "$OUT/gpu_bench.md" || return 1
  [ -n "$torch_py" ] || return 1
}
export torch_py gen_rc
export -f bench_stage
run_stage gpt1b-bench 120 bench_stage
# Where one step of the 1B program spends its GPU time, kernel by kernel
# (bench/kernel_profile.py under ncu), when ncu exists and time is left.
profile_stage() {
  local prog=$WORK/bench/lamina-$tgt
  [ -z "$bundle" ] || prog=$build/gpt1b
  [ -x "$prog/run" ] && [ -f "$WORK/gpt1b.onnx" ] && [ -f "$WORK/bench/tokens.bin" ] || {
    echo "no 1B program, model or data to profile"; return 1; }
  python3 "$root/bench/kernel_profile.py" --json "$OUT/kernel_profile.json" \
    --markdown "$OUT/kernel_profile.md" --log "$OUT/logs/ncu.csv" \
    --timeout $(( $(left) - 20 )) -- "$prog/run" --data "$WORK/bench/tokens.bin" \
    --steps 1 --log-every 1 --optimizer adamw --lr 1e-4 --seed 0 \
    --model "$WORK/gpt1b.onnx"
}
export -f profile_stage
if [ "$dry" != 1 ]; then
  if command -v ncu >/dev/null || ls /opt/nvidia/nsight-compute/*/ncu >/dev/null 2>&1; then
    skip_state=OPTIONAL-SKIPPED run_stage kernel-profile 90 profile_stage
  else
    record kernel-profile OPTIONAL-SKIPPED 0 "no ncu (Nsight Compute)"
  fi
fi
# Per-kernel figures for the GEMMs and reductions of one 1B layer
# (bench/cuda_kernels_bench.py: TFLOP/s, GB/s), when time is left.
kernels_bench() {
  local exe=()
  [ -z "$bundle" ] || exe=(--exe "$build/bin/cuda-kernels-bench")
  python3 "$root/bench/cuda_kernels_bench.py" --build-dir "$build" "${exe[@]}" \
    --output "$OUT/cuda_kernels.json"
}
export -f kernels_bench
if [ "$dry" != 1 ]; then
  skip_state=OPTIONAL-SKIPPED run_stage cuda-kernels-bench 60 kernels_bench
fi
# The end-to-end CUDA lit tests (test/e2e/cuda-*.test: compare_ort and
# training on the GPU against the host), when time is left: optional, a skip
# for time is not a failure.
lit_e2e() {
  local tests=() f
  for f in "$root"/test/e2e/cuda-*.test; do tests+=("$build/test/e2e/$(basename "$f")"); done
  "$lit_bin" -sv --show-unsupported "${tests[@]}"
}
export -f lit_e2e
if [ -n "$bundle" ]; then
  record lit-e2e-cuda OPTIONAL-SKIPPED 0 "--bundle: the e2e tests need lamina"
elif [ "$dry" != 1 ] && ls "$root"/test/e2e/cuda-*.test >/dev/null 2>&1; then
  skip_state=OPTIONAL-SKIPPED run_stage lit-e2e-cuda 150 lit_e2e
fi
rm -rf "$WORK/gpt1b.onnx" "$WORK/gpt1b.onnx.data" "$WORK/bench/tokens.bin" "$WORK/bench/lamina-$tgt"
summary
