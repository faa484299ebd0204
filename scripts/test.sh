#!/usr/bin/env bash
# Every test, from a fresh machine: install what is missing, build, then the
# unit tests (GoogleTest), the IR and import tests (lit + FileCheck, which
# include the ONNX backend node-test conformance run) and the Python model
# builders' self-test (onnx checker + onnxruntime) and the Python package's
# tests (pytest).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh" all mlir-doc
build=${BUILD_DIR:-$root/build}

echo "== unit tests"
"$build/bin/lamina-unittests" --gtest_brief=1
"$build/bin/lamina-plan-unittests" --gtest_brief=1
echo "== lit tests"
/usr/lib/llvm-22/bin/lit -sv "$build/test"
echo "== python model builders"
PYTHONPATH="$root/python" python3 "$root/python/tests/test_models.py"
echo "== python package (pytest)"
LAMINA_HOME="$build" PYTHONPATH="$root/python" python3 -m pytest -q -p no:cacheprovider "$root/python/tests/test_package.py"
echo "all tests passed"
