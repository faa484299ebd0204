# lit configuration for Lamina's IR, import and diagnostic tests.
import os
import shutil

import lit.formats
from lit.llvm import llvm_config

config.name = "Lamina"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.excludes = ["Inputs", "lit.cfg.py", "CMakeLists.txt"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.lamina_obj_root, "test")

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.lamina_tools_dir, append_path=False)
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
# The model builders under python/ generate test models at test time.
llvm_config.with_environment(
    "PYTHONPATH", os.path.join(config.lamina_src_root, "python"), append_path=True)
config.substitutions.append(("%python", config.python_executable))
config.substitutions.append(("%models", os.path.join(config.lamina_src_root, "test", "Inputs", "models")))
config.substitutions.append(("%srcroot", config.lamina_src_root))
llvm_config.add_tool_substitutions(
    ["lamina", "lamina-opt", "lamina-translate"], [config.lamina_tools_dir])

# Tests that need onnx / onnxruntime from pip.
try:
    import onnx  # noqa: F401
    config.available_features.add("onnx")
except ImportError:
    pass
if os.path.isdir("/usr/share/libonnx-testdata/data/node"):
    config.available_features.add("onnx-testdata")
