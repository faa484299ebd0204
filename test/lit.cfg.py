# lit configuration for Lamina's IR, import and diagnostic tests.
import os
import shutil

import lit.formats
from lit.llvm import llvm_config

config.name = "Lamina"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test", ".onnxtxt"]
config.excludes = ["Inputs", "lit.cfg.py", "CMakeLists.txt"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.lamina_obj_root, "test")

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.lamina_tools_dir, append_path=True)
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
# The model builders under python/ generate test models at test time.
llvm_config.with_environment(
    "PYTHONPATH", os.path.join(config.lamina_src_root, "python"), append_path=True)
# The python3 on PATH is the one scripts/install-deps.sh gave onnx to; resolve
# it to a real interpreter (pyenv shims need more environment than lit keeps).
def _resolve_python():
    import subprocess
    exe = shutil.which("python3") or config.python_executable
    try:
        return subprocess.check_output(
            [exe, "-c", "import sys; print(sys.executable)"], text=True).strip()
    except (OSError, subprocess.CalledProcessError):
        return config.python_executable

python = _resolve_python()
config.substitutions.insert(0, ("%python", python))
config.substitutions.append(("%models", os.path.join(config.lamina_src_root, "test", "Inputs", "models")))
config.substitutions.append(("%srcroot", config.lamina_src_root))
config.substitutions.append(("%lamina_obj_root", config.lamina_obj_root))
llvm_config.add_tool_substitutions(
    ["lamina", "lamina-opt", "lamina-translate", "lamina-eval"], [config.lamina_tools_dir])

# Tests that need onnx / onnxruntime from pip.
import subprocess
if subprocess.call([python, "-c", "import onnx, onnxruntime"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) == 0:
    config.available_features.add("onnx")
if os.path.isdir("/usr/share/libonnx-testdata/data/node"):
    config.available_features.add("onnx-testdata")

# MPI programs (distributed training, test/Runtime/Dist/dist-*.test): mpirun may
# run as root, start more ranks than cores, and yields when idle.
_mpirun = shutil.which("mpirun")
if _mpirun:
    config.available_features.add("mpi")
    config.substitutions.append(
        ("%mpirun", _mpirun + " --allow-run-as-root --oversubscribe"))
    config.environment["OMPI_MCA_mpi_yield_when_idle"] = "1"

# The CUDA runtime (docs/cuda.md): `cuda` when lamina-cuda-tests was built
# (LAMINA_ENABLE_CUDA), `cuda-gpu` when nvidia-smi also lists a GPU.
if getattr(config, "lamina_enable_cuda", "OFF").upper() in ("ON", "1", "TRUE", "YES") \
        and os.path.exists(os.path.join(config.lamina_tools_dir, "lamina-cuda-tests")):
    config.available_features.add("cuda")
    # Lists the architectures a --target cuda program carries.
    config.substitutions.append(
        ("%cuobjdump", os.path.join(os.path.dirname(config.lamina_cuda_compiler),
                                    "cuobjdump")))
    _smi = shutil.which("nvidia-smi")
    if _smi:
        try:
            _gpus = subprocess.run([_smi, "-L"], stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, timeout=30,
                                   text=True).stdout
            if _gpus.startswith("GPU "):
                config.available_features.add("cuda-gpu")
                # NCCL tests run one rank per GPU (%ngpus, multi-gpu).
                _ngpus = sum(1 for l in _gpus.splitlines() if l.startswith("GPU "))
                config.substitutions.append(("%ngpus", str(_ngpus)))
                if _ngpus >= 2:
                    config.available_features.add("multi-gpu")
        except (OSError, subprocess.SubprocessError):
            pass
# lamina_nccl (docs/cuda.md "NCCL and streams"): `nccl` when lamina-nccl-check
# was built (CUDA on and NCCL found).
if getattr(config, "lamina_enable_cuda", "OFF").upper() in ("ON", "1", "TRUE", "YES") \
        and os.path.exists(os.path.join(config.lamina_tools_dir, "lamina-nccl-check")):
    config.available_features.add("nccl")
