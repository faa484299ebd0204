"""Writing models: inline, with one external data file, or with declared
but never-written weights (sparse data file) for huge benchmark shapes."""

from __future__ import annotations

import math
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ALIGN = 4096  # page-aligned offsets so importers can mmap each tensor
FLOAT_TYPES = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16,
               TensorProto.DOUBLE}
PROTO_LIMIT = 2**31 - 1  # protobuf's hard cap on a serialized message


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def tensor_nbytes(t: onnx.TensorProto) -> int:
    itemsize = np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
    return math.prod(t.dims) * itemsize


def is_declared_only(t: onnx.TensorProto) -> bool:
    """A parameter built with materialize=False: external, no location yet."""
    return t.data_location == TensorProto.EXTERNAL and not t.external_data


def _clear_data(t: onnx.TensorProto) -> None:
    for field in ("raw_data", "float_data", "double_data", "int32_data",
                  "int64_data", "uint64_data", "string_data"):
        t.ClearField(field)


def _point_at(t: onnx.TensorProto, location: str, offset: int, length: int) -> None:
    del t.external_data[:]
    t.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        t.external_data.add(key=key, value=str(value))


def save(model: onnx.ModelProto, path: str, *, external_data: bool = False,
         no_weights_data: bool | None = None) -> None:
    """Write ``model`` to ``path``; ``model`` itself is not modified.

    external_data: all initializers go to ``<name>.data`` next to the model
    (location relative, 4096-aligned offsets, explicit lengths).
    no_weights_data: every float initializer is declared in ``<name>.data``
    at 4096-aligned offsets but nothing is written: the file is created
    sparse with truncate(). Defaults to True for models built with
    ``no_weights_data=True`` (whose weights were never allocated).
    """
    m = onnx.ModelProto()
    m.CopyFrom(model)
    inits = m.graph.initializer
    declared = any(is_declared_only(t) for t in inits)
    if no_weights_data is None:
        no_weights_data = declared
    if declared and not no_weights_data:
        raise ValueError("model was built without weight data; "
                         "save it with no_weights_data=True")
    data_name = os.path.basename(path) + ".data"
    data_path = os.path.join(os.path.dirname(os.path.abspath(path)), data_name)

    if no_weights_data:
        end = 0
        for t in inits:
            if t.data_type in FLOAT_TYPES:
                offset, length = _align(end), tensor_nbytes(t)
                _clear_data(t)
                _point_at(t, data_name, offset, length)
                end = offset + length
        with open(data_path, "wb") as f:
            f.truncate(end)  # a hole: no block is allocated or written
    elif external_data:
        with open(data_path, "wb") as f:
            for t in inits:
                raw = numpy_helper.to_array(t).tobytes()
                offset = _align(f.tell())
                f.seek(offset)
                f.write(raw)
                _clear_data(t)
                _point_at(t, data_name, offset, len(raw))

    if m.ByteSize() > PROTO_LIMIT:
        raise ValueError("model exceeds protobuf's 2 GiB limit; "
                         "use external_data=True")
    with open(path, "wb") as f:
        f.write(m.SerializeToString())
