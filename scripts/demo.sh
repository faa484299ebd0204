#!/usr/bin/env bash
# The main job on the embedded default, from a fresh machine: install what is
# missing, build, then take the bundled example (a GPT-2 written by PyTorch's
# TorchScript exporter, with symbolic batch and sequence dims) through the
# host backend: compile it to a standalone program, run it on a batch of
# token ids and check its logits against onnxruntime; compile it for
# training and train it for 100 steps on a small corpus (falling loss,
# checkpoints, the trained model exported as ONNX); train it again as a
# distributed program on 4 MPI ranks (breadth-first pipeline of 2 ranks x 2
# data-parallel replicas, ZeRO-3), check that its losses are those of the
# single-process program with the same global batch, and put its measured
# per-rank traffic and idle time next to `lamina plan`'s prediction; then
# show what a 4-GPU breadth-first training plan of a GPT-2-small-shaped
# model would cost (a structure-only file: shapes, no weights).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh" lamina >/dev/null
lamina="$root/build/bin/lamina"
model="$root/test/Inputs/models/gpt2_torchscript_opset14.onnx"
work="$root/build/demo"
rm -rf "$work" && mkdir -p "$work"

echo "\$ lamina import $(basename "$model") --dim batch=4 --dim seq=64 --summary"
"$lamina" import "$model" --dim batch=4 --dim seq=64 --summary
echo
echo "\$ lamina compile $(basename "$model") --target host --mode inference --dim batch=4 --dim seq=64 -o build/demo/gpt2"
"$lamina" compile "$model" --target host --mode inference \
  --dim batch=4 --dim seq=64 -o "$work/gpt2"
python3 -c "import numpy as np; np.save('$work/input_ids.npy', np.random.default_rng(0).integers(0, 64, (4, 64)))"
echo
echo "\$ build/demo/gpt2/run --input input_ids=build/demo/input_ids.npy --output-dir build/demo/out --time"
"$work/gpt2/run" --input input_ids="$work/input_ids.npy" --output-dir "$work/out" --time
python3 - "$model" "$work" <<'PY'
import sys, numpy as np, onnxruntime as ort
model, work = sys.argv[1], sys.argv[2]
ids = np.load(work + "/input_ids.npy")
want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(
    ["logits"], {"input_ids": ids})[0]
got = np.load(work + "/out/logits.npy")
err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
print("logits %s: max relative difference from onnxruntime %.1e -> %s"
      % ("x".join(map(str, got.shape)), err, "ok" if err < 1e-4 else "MISMATCH"))
sys.exit(0 if err < 1e-4 else 1)
PY
echo
echo "\$ lamina compile $(basename "$model") --target host --mode train --loss causal-lm --logits logits --dim batch=4 --dim seq=64 -o build/demo/train"
"$lamina" compile "$model" --target host --mode train --loss causal-lm \
  --logits logits --dim batch=4 --dim seq=64 -o "$work/train"
# A repetitive corpus of uint16 token ids (nanoGPT's train.bin format).
python3 -c "import numpy as np; np.tile(np.array([3, 14, 15, 9, 26, 5, 35, 8, 9, 7, 9, 32, 38, 4, 6, 26], np.uint16), 2000).tofile('$work/corpus.bin')"
echo "\$ build/demo/train/run --data build/demo/corpus.bin --data-dtype uint16 --steps 100 --lr 1e-2 --log-every 20 --checkpoint-dir build/demo/ckpt --export build/demo/trained.onnx"
"$work/train/run" --data "$work/corpus.bin" --data-dtype uint16 --steps 100 \
  --lr 1e-2 --log-every 20 --seed 1 --checkpoint-dir "$work/ckpt" \
  --export "$work/trained.onnx"

# Distributed: the same export as one SPMD program for 4 MPI ranks. The
# compiled batch dim is the micro-batch size b = 2; a step takes
# b x micro-batches x dp = 2 x 4 x 2 = 16 sequences (docs/distributed.md).
export OMPI_MCA_mpi_yield_when_idle=1  # more ranks than cores is fine
mpirun=(mpirun --oversubscribe)
if [ "$(id -u)" = 0 ]; then mpirun+=(--allow-run-as-root); fi
threads=$(( $(nproc) / 4 )); [ "$threads" -ge 1 ] || threads=1
dist=(--pp 2 --dp 2 --micro-batches 4 --schedule breadth-first --zero 3)
echo
echo "\$ lamina compile $(basename "$model") --target host --mode train --loss causal-lm --logits logits --dim batch=2 --dim seq=64 ${dist[*]} -o build/demo/dist"
"$lamina" compile "$model" --target host --mode train --loss causal-lm \
  --logits logits --dim batch=2 --dim seq=64 "${dist[@]}" -o "$work/dist"
echo "\$ mpirun --oversubscribe -np 4 build/demo/dist/run --data build/demo/corpus.bin --data-dtype uint16 --steps 50 --lr 1e-2 --log-every 10 --seed 1 --threads $threads --stats build/demo/dist/stats.json --trace build/demo/dist/trace.json"
"${mpirun[@]}" -np 4 "$work/dist/run" --data "$work/corpus.bin" \
  --data-dtype uint16 --steps 50 --lr 1e-2 --log-every 10 --seed 1 \
  --threads "$threads" --stats "$work/dist/stats.json" \
  --trace "$work/dist/trace.json" | tee "$work/dist/train.log"
# The guarantee: the single-process program compiled with the global batch
# (16) logs the same losses, up to float summation order.
echo "\$ lamina compile $(basename "$model") --target host --mode train --loss causal-lm --logits logits --dim batch=16 --dim seq=64 -o build/demo/train16 --quiet"
"$lamina" compile "$model" --target host --mode train --loss causal-lm \
  --logits logits --dim batch=16 --dim seq=64 -o "$work/train16" --quiet
echo "\$ build/demo/train16/run --data build/demo/corpus.bin --data-dtype uint16 --steps 50 --lr 1e-2 --log-every 10 --seed 1 > build/demo/train16/train.log"
"$work/train16/run" --data "$work/corpus.bin" --data-dtype uint16 --steps 50 \
  --lr 1e-2 --log-every 10 --seed 1 > "$work/train16/train.log"
python3 - "$work/dist/train.log" "$work/train16/train.log" <<'PY'
import re, sys
def losses(path):
    return {int(m[1]): float(m[2]) for m in
            re.finditer(r"^step (\d+) loss (\S+)", open(path).read(), re.M)}
dist, single = losses(sys.argv[1]), losses(sys.argv[2])
err = max(abs(dist[k] - single[k]) / abs(single[k]) for k in single)
print("losses at steps %s: 4 ranks vs 1 process with batch 16, max relative "
      "difference %.1e -> %s" % (",".join(map(str, sorted(single))), err,
                                 "ok" if err < 1e-3 else "MISMATCH"))
sys.exit(0 if sorted(dist) == sorted(single) and err < 1e-3 else 1)
PY
# What the planner predicted for this configuration, on a hardware file that
# describes a small CPU core, and the run's statistics against it.
echo "\$ python3 -m lamina.distcheck hardware build/demo/host-cpu.json"
PYTHONPATH="$root/python" python3 -m lamina.distcheck hardware "$work/host-cpu.json"
plan=(--dim batch=2 --dim seq=64 "${dist[@]}" --micro-batch-size 2
      --recompute full --precision fp32 --hardware "$work/host-cpu.json")
echo "\$ lamina plan $(basename "$model") ${plan[*]/#$work\//build/demo/}"
"$lamina" plan "$model" "${plan[@]}"
echo "\$ lamina plan ... --format json > build/demo/dist/plan.json   # the same, as JSON"
"$lamina" plan "$model" "${plan[@]}" --format json > "$work/dist/plan.json"
echo "\$ python3 -m lamina.distcheck compare build/demo/dist/stats.json build/demo/dist/plan.json --trace build/demo/dist/trace.json"
PYTHONPATH="$root/python" python3 -m lamina.distcheck compare \
  "$work/dist/stats.json" "$work/dist/plan.json" --trace "$work/dist/trace.json"
echo
echo "\$ python3 -m lamina.models gpt2 --layers 12 --hidden 768 --heads 12 --seq 1024 --vocab 50257 --batch 1 --no-weights-data -o build/demo/gpt2-124m.onnx"
PYTHONPATH="$root/python" python3 -m lamina.models gpt2 --layers 12 --hidden 768 \
  --heads 12 --seq 1024 --vocab 50257 --batch 1 --no-weights-data \
  -o "$work/gpt2-124m.onnx"
echo "\$ lamina plan gpt2-124m.onnx --pp 2 --dp 2 --micro-batches 8 --micro-batch-size 1 --schedule breadth-first --zero 3 --recompute full --hardware a100-80g"
"$lamina" plan "$work/gpt2-124m.onnx" --pp 2 --dp 2 --micro-batches 8 \
  --micro-batch-size 1 --schedule breadth-first --zero 3 --recompute full \
  --hardware a100-80g
