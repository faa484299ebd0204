"""Compares a safetensors export with the ONNX export of the same run."""
import sys

import numpy as np
import onnx
from onnx import numpy_helper
from safetensors.numpy import load_file

st = load_file(sys.argv[1])
onnx_export = {t.name: numpy_helper.to_array(t)
               for t in onnx.load(sys.argv[2]).graph.initializer}
source = {t.name: numpy_helper.to_array(t)
          for t in onnx.load(sys.argv[3]).graph.initializer}
equal = st.keys() == onnx_export.keys() and all(
    st[k].dtype == onnx_export[k].dtype and np.array_equal(st[k], onnx_export[k])
    for k in st)
trained = any(not np.array_equal(st[k], source[k]) for k in source)
print(f"{len(st)} tensors, equal to the ONNX export: {equal}, trained: {trained}")
