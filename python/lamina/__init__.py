"""Lamina from Python: compile ONNX files, ``onnx.ModelProto``\\ s and
``torch.nn.Module``\\ s into training programs, train them, export the
weights (ONNX or safetensors) and plan distributed runs (docs/python.md)::

    import lamina
    prog = lamina.compile(model, example_inputs=(ids,), dims={"batch": 4, "seq": 64})
    for rec in prog.train(tokens, steps=100, lr=1e-3):
        print(rec.step, rec.loss)
    prog.export("model.safetensors")
    lamina.plan(model, example_inputs=(ids,), dims={"batch": 1, "seq": 64}, pp=2)

The package drives the built tools (``lamina`` and the programs it
compiles), found through ``LAMINA_HOME``, next to the package or on
``PATH``; it needs ``numpy`` and ``onnx``, and ``torch`` (imported lazily)
only for modules. ``lamina.models``, ``lamina.testing``, ``lamina.planfile``
and ``lamina.distcheck`` hold the test-model builders and tools.
"""

from lamina._tools import LaminaError, find_tool
from lamina.planning import Plan, plan, search
from lamina.program import Program, StepRecord, TrainingRun, compile, load

__version__ = "0.1.0"

__all__ = ["LaminaError", "Plan", "Program", "StepRecord", "TrainingRun",
           "compile", "find_tool", "load", "plan", "search", "__version__"]
