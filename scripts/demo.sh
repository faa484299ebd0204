#!/usr/bin/env bash
# The main job on the embedded default, from a fresh machine: install what is
# missing, build, and import the bundled example model (a GPT-2 written by
# PyTorch's TorchScript exporter, with symbolic batch and sequence dims),
# printing a summary of the verified IR. Later issues grow this into
# compiling and training the model on the host backend.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh" lamina >/dev/null
model="$root/test/Inputs/models/gpt2_torchscript_opset14.onnx"
echo "\$ lamina import $(basename "$model") --dim batch=4 --dim seq=128 --summary"
"$root/build/bin/lamina" import "$model" --dim batch=4 --dim seq=128 --summary
