"""The pieces of scripts/hf-survey.py: tiny Transformers models and their
exports (models.py), the batches a Lamina training program draws and
PyTorch's training on them (data.py). Needs torch, transformers and, for
the dynamo exporter, onnxscript (PyPI; not CI requirements)."""
