"""Builds every test model variant (architecture x opset x static/dynamic,
plus shuffled node order and grouped-query attention) and imports each with
`lamina import --summary`. Prints one line per model; exits non-zero when
any import fails. Driven by generated-models.test."""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "python"))
from lamina.models import build, save  # noqa: E402

SMALL = dict(layers=2, hidden=32, heads=4, seq=8, vocab=64, batch=2)


def variants():
    for arch in ("gpt2", "bert", "llama"):
        for opset in (13, 17, 18, 23, 28):
            for dynamic in (False, True):
                yield f"{arch} opset{opset} {'dynamic' if dynamic else 'static'}", \
                    arch, dict(SMALL, opset=opset, dynamic=dynamic)
    yield "gpt2 opset17 shuffled", "gpt2", dict(SMALL, opset=17, shuffle_nodes=True)
    yield "llama opset18 gqa", "llama", dict(SMALL, opset=18, kv_heads=2)
    yield "bert opset11 dynamic", "bert", dict(SMALL, opset=11, dynamic=True)


def main():
    lamina = sys.argv[1] if len(sys.argv) > 1 else "lamina"
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for label, arch, kwargs in variants():
            path = os.path.join(tmp, label.replace(" ", "_") + ".onnx")
            save(build(arch, **kwargs), path)
            cmd = [lamina, "import", path, "--summary", "--dim", "batch=2", "--dim", "seq=8"]
            run = subprocess.run(cmd, capture_output=True, text=True)
            if run.returncode != 0:
                failed += 1
                print(f"{label}: FAILED\n{run.stderr}")
                continue
            # The summary's first output line names the output and its type.
            lines = run.stdout.splitlines()
            out = lines[lines.index("  outputs:") + 1].strip()
            print(f"{label}: ok {out}")
    print(f"failures: {failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
