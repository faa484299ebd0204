#!/usr/bin/env bash
# Builds lamina-import-fuzzer (clang-22, ASan + UBSan + libFuzzer), makes the
# seed corpus and fuzzes the ONNX importer for SECONDS of fuzzing time
# (default 600). See fuzz/README.md.
#
#   scripts/fuzz.sh [SECONDS]
#
# Layout (all under FUZZ_DIR, default fuzz-corpus/, which is gitignored):
#   seeds/      seed corpus from fuzz/make-corpus.sh (rebuilt on every run)
#   corpus/     what libFuzzer keeps (grows across runs; delete to start over)
#   artifacts/  crash-*/leak-*/timeout-*/oom-* as libFuzzer writes them, and
#               min-* after -minimize_crash=1
#   logs/       one log per fuzzing segment, plus the minimization logs
#
# libFuzzer stops at the first finding. Unless FUZZ_KEEP_GOING=0, this script
# then minimizes the reproducer and restarts the fuzzer (same corpus; the
# crashing input is never added to it) until SECONDS of fuzzing are used, so
# one run can report several bugs. Exit status: 0 if no finding, 1 otherwise.
#
# Environment:
#   BUILD_DIR        build folder (default build-fuzz/)
#   FUZZ_DIR         see above (default fuzz-corpus/)
#   FUZZ_NO_BUILD=1  skip configure + build
#   FUZZ_KEEP_GOING  1 (default): restart after a finding; 0: stop
#   FUZZ_ARGS        extra libFuzzer flags
#   LAMINA_FUZZ_SKIP=A,B  ignore inputs containing byte string A or B (e.g.
#                    the op name of a known, unfixed bug; see fuzz/README.md)
#   LAMINA_FUZZ_STRICT_VERIFY=1  also stop when the importer builds IR that
#                    its own verifier rejects (default: logged, input saved
#                    to artifacts/verifier-*.onnx)
set -euo pipefail

# The whole script is one function, read before it runs: editing this file
# while a run is in progress can't derail that run.
main() {

  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  seconds=${1:-600}
  build=${BUILD_DIR:-$root/build-fuzz}
  fuzzdir=${FUZZ_DIR:-$root/fuzz-corpus}
  keep_going=${FUZZ_KEEP_GOING:-1}
  llvm_bin=/usr/lib/llvm-22/bin

  if ! [[ $seconds =~ ^[0-9]+$ ]] || [ "$seconds" -lt 1 ]; then
    echo "usage: scripts/fuzz.sh [SECONDS]" >&2
    exit 2
  fi

  # --- configure + build -------------------------------------------------------
  # Lamina's own code gets coverage instrumentation (fuzzer-no-link) and the
  # sanitizers through the project-wide flags; fuzz/CMakeLists.txt adds
  # -fsanitize=fuzzer to the fuzz target. libMLIR.so stays uninstrumented.
  if [ "${FUZZ_NO_BUILD:-0}" != 1 ]; then
    # clang-22 and its sanitizer/libFuzzer runtimes are not among the
    # project's set-up packages (scripts/install-deps.sh): installed here,
    # once, from Debian's packages.
    if ! command -v clang++-22 >/dev/null ||
       ! ls /usr/lib/llvm-22/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a \
         >/dev/null 2>&1; then
      sudo=$([ "$(id -u)" = 0 ] || echo sudo)
      echo "fuzz.sh: apt-get install clang-22 libclang-rt-22-dev"
      $sudo apt-get update -qq
      DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq \
        clang-22 libclang-rt-22-dev >/dev/null
    fi
    sanitize="-fsanitize=address,undefined -fsanitize=fuzzer-no-link -fno-sanitize-recover=undefined"
    CC=clang-22 CXX=clang++-22 cmake -G Ninja -S "$root" -B "$build" \
      -DLAMINA_ENABLE_FUZZER=ON -DLAMINA_BUILD_TESTS=OFF \
      -DLAMINA_ENABLE_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_FLAGS="$sanitize" >/dev/null
    ninja -C "$build" lamina-import-fuzzer
  fi
  fuzzer=$build/bin/lamina-import-fuzzer
  [ -x "$fuzzer" ] || { echo "fuzz.sh: no $fuzzer" >&2; exit 2; }

  # --- corpus ------------------------------------------------------------------
  mkdir -p "$fuzzdir"/{seeds,corpus,artifacts,logs}
  "$root/fuzz/make-corpus.sh" "$fuzzdir/seeds"

  # --- fuzz --------------------------------------------------------------------
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:symbolize=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  export ASAN_SYMBOLIZER_PATH=${ASAN_SYMBOLIZER_PATH:-$llvm_bin/llvm-symbolizer}
  export LAMINA_FUZZ_VERIFIER_DIR=${LAMINA_FUZZ_VERIFIER_DIR:-$fuzzdir/artifacts}

  flags=(-rss_limit_mb=2048 -timeout=10 -max_len=1048576 -detect_leaks=1
         -print_final_stats=1 -dict="$root/fuzz/onnx.dict"
         -artifact_prefix="$fuzzdir/artifacts/")
  # shellcheck disable=SC2206
  extra=(${FUZZ_ARGS:-})

  list_findings() {
    find "$fuzzdir/artifacts" -maxdepth 1 -type f \
      \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \
         -o -name 'slow-unit-*' \) -printf '%f\n' | sort
  }

  used=0
  segment=0
  findings=()
  before=$(list_findings)
  while [ "$used" -lt "$seconds" ]; do
    left=$((seconds - used))
    segment=$((segment + 1))
    log=$fuzzdir/logs/segment-$(date +%Y%m%d-%H%M%S)-$segment.log
    echo "fuzz.sh: segment $segment, $left s left (log: $log)"
    start=$(date +%s)
    # -jobs=1 runs the fuzzer in a child whose output goes to fuzz-0.log in the
    # current directory; run it from logs/ and keep that file per segment.
    (cd "$fuzzdir/logs" && rm -f fuzz-0.log &&
     "$fuzzer" "${flags[@]}" "${extra[@]}" -max_total_time="$left" -jobs=1 \
       "$fuzzdir/corpus" "$fuzzdir/seeds" >/dev/null 2>&1 || true
     mv -f fuzz-0.log "$log" 2>/dev/null || true)
    used=$((used + $(date +%s) - start))
    grep -E '^#[0-9]+[[:space:]]+(DONE|INITED)|stat::|^(==[0-9]+==)?(ERROR|SUMMARY)|Test unit written|\[lamina-fuzz\]' \
      "$log" | tail -n 20 || true

    after=$(list_findings)
    new=$(comm -13 <(echo "$before") <(echo "$after") | sed '/^$/d')
    before=$after
    [ -n "$new" ] || break   # ran to the end of its time without a finding
    for f in $new; do
      findings+=("$f")
      min=$fuzzdir/artifacts/min-$f
      echo "fuzz.sh: FINDING $f; minimizing into $min"
      "$fuzzer" -minimize_crash=1 -max_total_time=60 -timeout=10 \
        -rss_limit_mb=2048 -detect_leaks=1 -exact_artifact_path="$min" \
        "$fuzzdir/artifacts/$f" >"$fuzzdir/logs/minimize-$f.log" 2>&1 || true
      [ -f "$min" ] || cp "$fuzzdir/artifacts/$f" "$min"
      echo "fuzz.sh:   $(wc -c <"$min") bytes; reproduce with: $fuzzer $min"
    done
    [ "$keep_going" = 1 ] || break
    [ $((seconds - used)) -ge 30 ] || break
  done

  echo "fuzz.sh: fuzzed ${used}s in $segment segment(s); corpus: $(find "$fuzzdir/corpus" -type f | wc -l) files"
  if [ ${#findings[@]} -gt 0 ]; then
    echo "fuzz.sh: ${#findings[@]} finding(s) in $fuzzdir/artifacts:"
    printf '  %s\n' "${findings[@]}"
    echo "Copy minimized reproducers (< 10 KB) to test/Import/Inputs/fuzz-regressions/<short-name>.onnx"
    exit 1
  fi
  echo "fuzz.sh: no findings"
}

main "$@"
exit
