"""Writes a copy of an ONNX model with every initializer and node renamed
to a meaningless name (w0, w1, ..., n0, n1, ...), so module discovery must
fall back to the model's structure.

Usage: strip_names.py IN.onnx OUT.onnx
"""
import sys

import onnx

model = onnx.load(sys.argv[1], load_external_data=False)
renamed = {t.name: f"w{i}" for i, t in enumerate(model.graph.initializer)}
for t in model.graph.initializer:
    t.name = renamed[t.name]
for i, node in enumerate(model.graph.node):
    node.name = f"n{i}"
    for j, name in enumerate(node.input):
        if name in renamed:
            node.input[j] = renamed[name]
onnx.save(model, sys.argv[2])
