"""A ``torch.nn.Module`` to ONNX for Lamina, and its trained weights back.

The export is made so that the ONNX initializers *are* the module's
parameters, under their ``state_dict`` names:

* TorchScript exporter (``dynamo=False``; needs no ``onnxscript``) with
  ``do_constant_folding=False``: no Linear weight folded into a transposed
  ``onnx::MatMul_N`` copy, no position table folded into a slice;
* ``keep_initializers_as_inputs=True`` during the export, which turns off the
  exporter's merging of equal-valued initializers (all LayerNorm scales
  would otherwise share one tensor); the initializers are then removed from
  the graph inputs again;
* tied parameters (``lm_head.weight is wte.weight``) are one initializer,
  as in the module.

The file is therefore trained ``--as-exported`` (no restoring of merged
parameters is needed), with every initializer that is not a trainable
parameter frozen (buffers such as causal masks, constants the tracer made
initializers, ``requires_grad=False`` parameters) and each
``nn.Embedding(padding_idx=...)`` passed as ``--padding-idx``: PyTorch's
training semantics. :class:`TorchNames` records which ``state_dict`` key
comes from which initializer, so the trained weights go back under the
module's names (ties written under every key); keys the graph does not read
(unused parameters, buffers folded into constants) keep their values.

torch is imported only by :func:`export_module`.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import warnings
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

NAMES_FILE = "torch-names.json"
UNCHANGED_FILE = "torch-unchanged.safetensors"


@dataclass
class TorchNames:
    """``state_dict`` key -> the ONNX initializer holding it."""

    sources: dict[str, str] = field(default_factory=dict)
    unchanged: list[str] = field(default_factory=list)  # not in the graph
    frozen: list[str] = field(default_factory=list)  # initializers not trained
    padding_idx: dict[str, int] = field(default_factory=dict)
    # the values of `unchanged`, kept until save()
    unchanged_values: dict[str, np.ndarray] = field(default_factory=dict,
                                                     repr=False)

    def save(self, folder: str) -> None:
        """Writes ``torch-names.json`` and the unchanged tensors into ``folder``."""
        from lamina.safetensors_io import save_file
        with open(os.path.join(folder, NAMES_FILE), "w", encoding="utf-8") as f:
            json.dump({"version": 1, "sources": self.sources,
                       "unchanged": self.unchanged, "frozen": self.frozen,
                       "padding_idx": self.padding_idx}, f, indent=1)
        save_file(self.unchanged_values, os.path.join(folder, UNCHANGED_FILE))

    @staticmethod
    def load(folder: str) -> "TorchNames | None":
        """The names saved in ``folder``, or None when it has none."""
        path = os.path.join(folder, NAMES_FILE)
        if not os.path.exists(path):
            return None
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        return TorchNames(sources=doc["sources"], unchanged=doc["unchanged"],
                          frozen=doc["frozen"],
                          padding_idx=doc.get("padding_idx", {}))

    def state_dict(self, initializers: Mapping[str, np.ndarray],
                   folder: str) -> dict[str, np.ndarray]:
        """The module's ``state_dict`` as numpy arrays: trained values from
        ``initializers`` (ONNX name -> array), the rest as exported."""
        from lamina.safetensors_io import load_file
        out: dict[str, np.ndarray] = {}
        for key, init in self.sources.items():
            if init not in initializers:
                raise KeyError(f"the trained model has no initializer '{init}' "
                               f"(state_dict key '{key}')")
            out[key] = initializers[init]
        if self.unchanged:
            kept = load_file(os.path.join(folder, UNCHANGED_FILE))
            for key in self.unchanged:
                out[key] = kept[key]
        return out


def _as_tuple(example_inputs: Any) -> tuple:
    import torch
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,)
    if isinstance(example_inputs, (list, tuple)):
        return tuple(example_inputs)
    raise TypeError("example_inputs: a tensor or a tuple of tensors, not "
                    f"{type(example_inputs).__name__}")


def input_names_of(module: Any, count: int) -> list[str]:
    """The names of ``module.forward``'s first ``count`` positional arguments."""
    try:
        params = [p.name for p in inspect.signature(module.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    names = params[:count]
    return names + [f"input{i}" for i in range(len(names), count)]


def dynamic_axes_from_dims(inputs: Sequence[Any], names: Sequence[str],
                           dims: Mapping[str, int]) -> dict[str, dict[int, str]]:
    """Names the example inputs' axes after ``dims`` by size.

    For each input, axes are taken in order and each gets the first name of
    ``dims`` (in the mapping's order) whose value equals the axis' size and
    that this input has not used yet: ``dims={"batch": 4, "seq": 16}`` names
    a ``[4, 16]`` token input ``[batch, seq]``, and ``[16, 16]`` too.
    """
    axes: dict[str, dict[int, str]] = {}
    for name, x in zip(names, inputs):
        used: set[str] = set()
        for axis, size in enumerate(getattr(x, "shape", ())):
            for dim, value in dims.items():
                if dim not in used and int(value) == int(size):
                    axes.setdefault(name, {})[axis] = dim
                    used.add(dim)
                    break
    return axes


def export_module(module: Any, example_inputs: Any, path: str, *,
                  dims: Mapping[str, int] | None = None,
                  input_names: Sequence[str] | None = None,
                  output_names: Sequence[str] | None = None,
                  dynamic_axes: Mapping[str, Mapping[int, str]] | None = None,
                  opset: int = 17) -> TorchNames:
    """Exports ``module`` to ``path`` (see the module docstring).

    ``dims`` names the dynamic dims (see :func:`dynamic_axes_from_dims`)
    unless ``dynamic_axes`` gives them explicitly. Returns the name map.
    """
    import onnx
    import torch

    inputs = _as_tuple(example_inputs)
    in_names = list(input_names) if input_names else input_names_of(module, len(inputs))
    if dynamic_axes is None:
        dynamic_axes = dynamic_axes_from_dims(inputs, in_names, dims or {})
    if output_names is None:
        with torch.no_grad():
            out = module(*inputs)
        n = len(out) if isinstance(out, (tuple, list)) else 1
        output_names = ["logits"] if n == 1 else [f"output{i}" for i in range(n)]
    dropouts = [name for name, m in module.named_modules()
                if isinstance(m, torch.nn.Dropout) and m.p > 0]
    if dropouts:
        warnings.warn("the module is exported in eval mode: its dropout "
                      f"({', '.join(dropouts[:3])}{', ...' if len(dropouts) > 3 else ''}) "
                      "does not train in Lamina", stacklevel=3)
    was_training = module.training
    module.eval()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            torch.onnx.export(
                module, inputs, path, dynamo=False, export_params=True,
                do_constant_folding=False, keep_initializers_as_inputs=True,
                input_names=in_names, output_names=list(output_names),
                dynamic_axes={k: dict(v) for k, v in dynamic_axes.items()},
                opset_version=opset)
    finally:
        module.train(was_training)

    model = onnx.load(path)
    inits = {t.name: t for t in model.graph.initializer}
    real_inputs = [i for i in model.graph.input if i.name not in inits]
    del model.graph.input[:]
    model.graph.input.extend(real_inputs)
    onnx.save(model, path)

    state = module.state_dict(keep_vars=True)
    trainable = {name for name, p in module.named_parameters(remove_duplicate=False)
                 if p.requires_grad}
    by_storage: dict[tuple, list[str]] = {}
    for key, t in state.items():
        by_storage.setdefault((t.data_ptr(), tuple(t.shape), tuple(t.stride())),
                              []).append(key)
    names = TorchNames()
    from onnx import numpy_helper
    for key, t in state.items():
        src = next((k for k in by_storage[(t.data_ptr(), tuple(t.shape),
                                           tuple(t.stride()))] if k in inits), None)
        if src is None:
            names.unchanged.append(key)
            continue
        value = numpy_helper.to_array(inits[src])
        if value.shape != tuple(t.shape) or not np.array_equal(
                value, t.detach().cpu().numpy()):
            raise RuntimeError(f"torch.onnx.export wrote initializer '{src}' "
                               f"with another value than state_dict['{key}']")
        names.sources[key] = src
    float_types = {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE,
                   onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}
    names.frozen = sorted(n for n, t in inits.items()
                          if t.data_type in float_types and n not in trainable)
    for mname, m in module.named_modules():
        if isinstance(m, torch.nn.Embedding) and m.padding_idx is not None:
            key = f"{mname}.weight" if mname else "weight"
            if key in names.sources:
                names.padding_idx[names.sources[key]] = int(m.padding_idx)
    names.unchanged_values = {k: state[k].detach().cpu().numpy()
                              for k in names.unchanged}
    return names


def freeze_regex(names: Sequence[str]) -> str:
    """A ``--freeze`` regex (POSIX ERE) matching exactly ``names``."""
    def esc(s: str) -> str:
        return re.sub(r"([][.^$*+?(){}|\\])", r"\\\1", s)
    return "^(" + "|".join(esc(n) for n in names) + ")$"
