#!/usr/bin/env bash
# Runs `lamina import` (the normal build, default build/bin/lamina) on every
# reproducer in test/Import/Inputs/fuzz-regressions/, without and with the
# fuzzer's --dim bindings. Each must either import (exit 0) or fail cleanly
# (exit 1); a signal (exit >= 128: crash, abort, sanitizer) fails the script.
#
#   fuzz/run-regressions.sh [LAMINA] [DIR]
#
# If build-fuzz/bin/lamina-import-fuzzer exists (scripts/fuzz.sh), the files
# are also replayed through it (ASan/UBSan/LSan); set NO_FUZZER=1 to skip.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
lamina=${1:-$root/build/bin/lamina}
dir=${2:-$root/test/Import/Inputs/fuzz-regressions}
fuzzer=${FUZZER:-$root/build-fuzz/bin/lamina-import-fuzzer}
dims=(--dim batch=2 --dim seq=8 --dim sequence=8 --dim batch_size=2
      --dim seq_len=8 --dim sequence_length=8 --dim past_seq_len=4
      --dim past_sequence_length=4 --dim total_seq_len=12 --dim past=4)

# A bare name (lit passes `lamina`) is looked up on PATH.
case $lamina in
  */*) ;;
  *) lamina=$(command -v "$lamina" || echo "$lamina") ;;
esac
[ -x "$lamina" ] || { echo "run-regressions: no $lamina (build first)" >&2; exit 2; }
shopt -s nullglob
files=("$dir"/*.onnx)
if [ ${#files[@]} -eq 0 ]; then
  echo "run-regressions: no .onnx files in $dir"
  exit 0
fi

fail=0
for f in "${files[@]}"; do
  for mode in plain dims; do
    args=(import "$f" -o -)
    [ $mode = dims ] && args+=("${dims[@]}")
    # A wall-clock limit: a hang is a finding too (timeout exits 124).
    timeout 60 "$lamina" "${args[@]}" >/dev/null 2>"${TMPDIR:-/tmp}/run-regressions.err"
    rc=$?
    name=$(basename "$f")
    if [ $rc -ge 124 ]; then
      echo "FAIL $name ($mode): exit $rc$([ $rc -gt 128 ] && echo " (signal $((rc - 128)))")$([ $rc = 124 ] && echo " (timeout)")"
      tail -n 5 "${TMPDIR:-/tmp}/run-regressions.err" | sed 's/^/    /'
      fail=1
    elif [ $rc -gt 1 ]; then
      echo "FAIL $name ($mode): exit $rc, expected 0 or 1"
      tail -n 3 "${TMPDIR:-/tmp}/run-regressions.err" | sed 's/^/    /'
      fail=1
    else
      echo "ok   $name ($mode): exit $rc"
    fi
  done
done

if [ "${NO_FUZZER:-0}" != 1 ] && [ -x "$fuzzer" ]; then
  echo "run-regressions: replaying through $(basename "$fuzzer")"
  if ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
     UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
     "$fuzzer" -timeout=10 -rss_limit_mb=2048 "${files[@]}" \
       >"${TMPDIR:-/tmp}/run-regressions.fuzzer.log" 2>&1; then
    echo "ok   fuzzer replay (${#files[@]} files)"
  else
    echo "FAIL fuzzer replay; log: ${TMPDIR:-/tmp}/run-regressions.fuzzer.log"
    grep -E 'ERROR|SUMMARY|Running:' "${TMPDIR:-/tmp}/run-regressions.fuzzer.log" | tail -n 5 | sed 's/^/    /'
    fail=1
  fi
fi
exit $fail
