#!/usr/bin/env bash
# Installs what Lamina needs to build and test, idempotently: Debian packages
# (apt) and Python packages (pip, for the python3 on PATH). Packages already
# present are not touched, so a second run takes a second.
# docs/dependencies.md says why each one is here.
set -euo pipefail

apt_packages=(
  cmake ninja-build g++
  llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools   # MLIR 22, lit, FileCheck
  protobuf-compiler libprotobuf-dev                        # ONNX's protobuf schema
  libgtest-dev                                             # unit tests
  libdnnl-dev                                              # runtime f32 GEMM (oneDNN)
  libopenblas-dev                                          # runtime f64 GEMM (cblas)
  libopenmpi-dev openmpi-bin                               # distributed training runtime (MPI)
  libonnx-testdata                                         # ONNX backend node tests
)
pip_packages=(onnx onnxruntime numpy
  nvidia-cudnn-frontend   # cuDNN's header-only C++ frontend (fused attention)
  pytest safetensors      # python/tests (the Python package's tests)
  tqdm matplotlib)        # the Python package's progress bars and plots

missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: apt-get install ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

python=${PYTHON:-python3}
# find_spec, not import: a second run stays fast.
if ! "$python" -c "import importlib.util as u, sys; sys.exit(any(u.find_spec(m) is None for m in
    ('onnx', 'onnxruntime', 'numpy', 'pytest', 'safetensors', 'tqdm', 'matplotlib')))" 2>/dev/null ||
   ! "$python" -m pip show -q nvidia-cudnn-frontend >/dev/null 2>&1; then
  echo "install-deps: pip install ${pip_packages[*]}"
  # Debian's own python3 refuses pip installs (PEP 668) unless told to.
  "$python" -m pip install -q "${pip_packages[@]}" 2>/dev/null ||
    "$python" -m pip install -q --break-system-packages "${pip_packages[@]}"
fi

# The Python package (python/, docs/python.md), editable: it is used from
# this checkout, where it finds the tools in build/bin.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ "$(cd / && "$python" -c 'import importlib.util as u, os; s = u.find_spec("lamina"); print(os.path.dirname(os.path.dirname(os.path.realpath(s.origin))) if s else "")' 2>/dev/null)" != "$root/python" ]; then
  echo "install-deps: pip install -e $root/python"
  "$python" -m pip install -q --no-deps -e "$root/python" 2>/dev/null ||
    "$python" -m pip install -q --no-deps --no-build-isolation --break-system-packages -e "$root/python"
fi
