#!/usr/bin/env bash
# Regenerates docs/generated/ from the ODS and pass definitions (the build's
# mlir-doc target) so the dialect reference in the repository matches the
# code; test/docs-current.test fails when they drift.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}
ninja -C "$build" mlir-doc >/dev/null
cp "$build/docs/Dialects/GraphDialect.md" "$root/docs/generated/GraphDialect.md"
cp "$build/docs/GraphPasses.md" "$root/docs/generated/GraphPasses.md"
cp "$build/docs/Dialects/DistDialect.md" "$root/docs/generated/DistDialect.md"
cp "$build/docs/DistPasses.md" "$root/docs/generated/DistPasses.md"
cp "$build/docs/Dialects/RtDialect.md" "$root/docs/generated/RtDialect.md"
cp "$build/docs/RtPasses.md" "$root/docs/generated/RtPasses.md"
cp "$build/docs/ConversionPasses.md" "$root/docs/generated/ConversionPasses.md"
