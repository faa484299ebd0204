"""Python side of Lamina: ONNX model builders and test fixtures.

Used with ``PYTHONPATH=python``; needs only ``onnx`` and ``numpy``
(``onnxruntime`` for the self-tests).
"""

__version__ = "0.1.0"
