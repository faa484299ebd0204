"""Writing (and reading) the safetensors format with numpy alone.

The format (https://github.com/huggingface/safetensors): an 8-byte
little-endian header length ``N``, ``N`` bytes of JSON (``{name: {"dtype",
"shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}``,
padded with spaces to a multiple of 8), then the tensors' little-endian
bytes back to back. ``safetensors.torch.load_file`` reads what
:func:`save_file` writes; the package itself is not needed to write.
"""

from __future__ import annotations

import json
import os
import struct
from typing import Mapping

import numpy as np

_DTYPES: dict[str, str] = {
    "float64": "F64", "float32": "F32", "float16": "F16", "int64": "I64",
    "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8",
    "uint16": "U16", "uint32": "U32", "uint64": "U64", "bool": "BOOL",
}
_NUMPY = {v: k for k, v in _DTYPES.items()}


def save_file(tensors: Mapping[str, np.ndarray], path: str | os.PathLike,
              metadata: Mapping[str, str] | None = None) -> None:
    """Writes ``tensors`` (name -> array) to ``path`` atomically.

    Tensors are stored in name order, C-contiguous and little-endian. Raises
    ``ValueError`` for an element type safetensors has no code for.
    """
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blobs: list[bytes] = []
    offset = 0
    for name in sorted(tensors):
        a = np.asarray(tensors[name])
        code = _DTYPES.get(a.dtype.name)
        if code is None:
            raise ValueError(f"safetensors: tensor '{name}' has element type "
                             f"{a.dtype}, which the format cannot hold")
        data = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": code, "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    tmp = f"{os.fspath(path)}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for data in blobs:
            f.write(data)
    os.replace(tmp, path)


def load_file(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Reads a safetensors file into numpy arrays (no ``safetensors`` needed)."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{os.fspath(path)}: not a safetensors file (too short)")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ValueError(f"{os.fspath(path)}: header length {n} beyond the file")
    header = json.loads(raw[8:8 + n])
    body = memoryview(raw)[8 + n:]
    out: dict[str, np.ndarray] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = np.dtype(_NUMPY[info["dtype"]]).newbyteorder("<")
        begin, end = info["data_offsets"]
        out[name] = np.frombuffer(body[begin:end], dtype=dtype).reshape(
            info["shape"]).copy()
    return out
