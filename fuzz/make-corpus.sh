#!/usr/bin/env bash
# Builds the seed corpus for lamina-import-fuzzer (see README.md):
#   fuzz/make-corpus.sh [OUTDIR]          (default: fuzz-corpus/seeds)
# Seeds are
#   * the .onnx files under test/Inputs/models/;
#   * small gpt2/bert/llama models from `python3 -m lamina.models` at opsets
#     11, 13, 17, 18, 23, static and --dynamic (plus a few --shuffle-nodes and
#     --external-data variants: only the .onnx is kept, so they exercise the
#     "external data refused" path);
#   * the cases of `python3 -m lamina.testing.bad_models` (regular .onnx
#     files only: no .bin, no symlinks);
#   * tiny one-op models from fuzz/make_op_seeds.py, one per op the importer
#     registers, fed from graph inputs and from Constant nodes (folding).
# Files are named seed-<what>.onnx; OUTDIR is emptied first.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$root/fuzz-corpus/seeds}
mkdir -p "$out"
find "$out" -maxdepth 1 -type f -name 'seed-*' -delete

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# 1. Checked-in models.
n=0
for f in "$root"/test/Inputs/models/*.onnx; do
  [ -f "$f" ] || continue
  cp "$f" "$out/seed-test-$(basename "$f")"
  n=$((n + 1))
done
echo "make-corpus: $n test models"

# 2. Generated models, small sizes. One python process runs the
#    `python3 -m lamina.models` entry point for every variant (same code as
#    the CLI, without 40 interpreter start-ups). A variant the builder rejects
#    (e.g. an opset it can't express) is skipped with a note.
PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}" python3 - "$tmp/gen" <<'PY'
import contextlib, io, os, sys
from lamina.models.__main__ import main

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
small = ["--layers", "1", "--hidden", "16", "--heads", "2", "--seq", "8",
         "--vocab", "32", "--batch", "2"]
variants = []
for arch in ("gpt2", "bert", "llama"):
    for opset in (11, 13, 17, 18, 23):
        for dynamic in (False, True):
            name = f"{arch}_opset{opset}{'_dynamic' if dynamic else ''}"
            args = [arch, "--opset", str(opset)] + small
            if dynamic:
                args.append("--dynamic")
            variants.append((name, args))
variants += [
    ("llama_gqa_opset18", ["llama", "--opset", "18", "--heads", "4",
                           "--kv-heads", "2", "--layers", "1", "--hidden", "16",
                           "--seq", "8", "--vocab", "32"]),
    ("gpt2_shuffled_opset17", ["gpt2", "--opset", "17", "--shuffle-nodes"] + small),
    ("llama_shuffled_dynamic_opset18",
     ["llama", "--opset", "18", "--shuffle-nodes", "--dynamic"] + small),
    ("bert_external_opset17", ["bert", "--opset", "17", "--external-data"] + small),
    ("gpt2_noweights_opset18", ["gpt2", "--opset", "18", "--no-weights-data"] + small),
]
ok = 0
for name, args in variants:
    path = os.path.join(out, name + ".onnx")
    log = io.StringIO()
    try:
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            rc = main(args + ["-o", path])
    except Exception as e:  # a builder bug must not stop the corpus
        rc, _ = 1, log.write(f"{type(e).__name__}: {e}")
    if rc == 0 and os.path.isfile(path):
        ok += 1
    else:
        msg = log.getvalue().strip().splitlines()
        print(f"make-corpus: skipped {name}: {msg[-1] if msg else rc}",
              file=sys.stderr)
print(f"make-corpus: {ok}/{len(variants)} generated models")
PY
for f in "$tmp"/gen/*.onnx; do
  [ -f "$f" ] && cp "$f" "$out/seed-gen-$(basename "$f")"
done

# 3. The importer's error-test fixtures.
PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}" \
  python3 -m lamina.testing.bad_models "$tmp/bad" >/dev/null
n=0
for f in "$tmp"/bad/*.onnx; do
  if [ -f "$f" ] && [ ! -L "$f" ]; then
    cp "$f" "$out/seed-bad-$(basename "$f")"
    n=$((n + 1))
  fi
done
echo "make-corpus: $n bad_models cases"

# 4. One-op models: every importer op, and the folders.
python3 "$root/fuzz/make_op_seeds.py" "$tmp/ops"
for f in "$tmp"/ops/*.onnx; do
  cp "$f" "$out/seed-$(basename "$f")"
done

count=$(find "$out" -maxdepth 1 -type f -name 'seed-*' | wc -l)
size=$(du -sh "$out" | cut -f1)
echo "make-corpus: $count seeds ($size) in $out"
