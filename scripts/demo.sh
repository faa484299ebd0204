#!/usr/bin/env bash
# The main job on the embedded default, from a fresh machine: install what is
# missing, build, then take the bundled example (a GPT-2 written by PyTorch's
# TorchScript exporter, with symbolic batch and sequence dims) through the
# host backend: compile it to a standalone program, run it on a batch of
# token ids and check its logits against onnxruntime; compile it for
# training and train it for 100 steps on a small corpus (falling loss,
# checkpoints, the trained model exported as ONNX); then show what a 4-GPU
# breadth-first training plan of a GPT-2-small-shaped model would cost (a
# structure-only file: shapes, no weights). MPI ranks come with the
# distributed issue.
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
echo
echo "\$ python3 -m lamina.models gpt2 --layers 12 --hidden 768 --heads 12 --seq 1024 --vocab 50257 --batch 1 --no-weights-data -o build/demo/gpt2-124m.onnx"
PYTHONPATH="$root/python" python3 -m lamina.models gpt2 --layers 12 --hidden 768 \
  --heads 12 --seq 1024 --vocab 50257 --batch 1 --no-weights-data \
  -o "$work/gpt2-124m.onnx"
echo "\$ lamina plan gpt2-124m.onnx --pp 2 --dp 2 --micro-batches 8 --micro-batch-size 1 --schedule breadth-first --zero 3 --recompute full --hardware a100-80g"
"$lamina" plan "$work/gpt2-124m.onnx" --pp 2 --dp 2 --micro-batches 8 \
  --micro-batch-size 1 --schedule breadth-first --zero 3 --recompute full \
  --hardware a100-80g
