#!/usr/bin/env python3
"""Import conformance: run `lamina import` on every ONNX backend node test model.

The requirement checked here: every ONNX backend node test model whose ops
are all supported by the importer imports and verifies.

Test models are taken from
  * Debian's libonnx-testdata (/usr/share/libonnx-testdata/data/node/*/model.onnx)
  * the pip `onnx` package (onnx/backend/test/data/node/*/model.onnx next to
    the installed package; recent wheels no longer ship this directory)
  * any --node-dir given on the command line.

For each model the op types it uses are collected with the `onnx` package:
the main graph, every subgraph (If/Loop/Scan bodies, also untaken branches)
and the bodies of model-local functions (a call of a local function counts
as the ops in its body, as the importer inlines it). The supported set is
parsed from the `r.add("OpType", ...)` calls in lib/Target/ONNX/Ops*.cpp,
plus `If` (which the importer handles itself, constant condition only), so
it cannot drift from the importer.

Each model ends up in one of four classes:
  pass               all ops supported and `lamina import` succeeded
  FAIL               all ops supported and `lamina import` failed
  unsupported (op)   the model uses an op type the importer does not register
  out of scope       all ops supported, and every error the importer gave is
                     one Lamina gives by design: an element type it does not
                     model (string, float8, complex), a non-tensor graph input
                     (sequence, optional), a shape/axes/condition input that
                     is not a compile-time constant, or an opset outside
                     11-23; such tests are expected errors

With --numeric, every model that imports is also run with `lamina-eval`
(the reference evaluator on the host kernels) on each
test_data_set_*/input_*.pb, and its outputs are compared with output_*.pb
as the ONNX backend does by default: np.testing.assert_allclose with
rtol=1e-3, atol=1e-7 for floats, exact equality for integers and bools,
and equal dtypes and shapes. Each imported test is then "numeric pass" or
"numeric fail" (with the largest absolute / relative error or the reason).

Exit status: 1 if any model is FAIL (or, with --numeric, numeric fail),
2 on a usage/setup error, else 0.
"""

import argparse
import collections
import concurrent.futures
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import tempfile
import time

SRC_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEBIAN_NODE_DIR = "/usr/share/libonnx-testdata/data/node"
DEFAULT_DOMAIN = "ai.onnx"
# Ops the importer handles outside the op registry (see importNode in
# lib/Target/ONNX/Importer.cpp).
BUILTIN_OPS = {"If"}
# Error messages that mean the test asks for something Lamina excludes by
# design: an element type it does not model (string, float8, complex), a
# graph input that is not a tensor, a value that must be a compile-time
# constant (shapes, axes, If conditions: Lamina compiles static shapes) but is
# a graph input, or an opset outside the supported range (kMinOpset-kMaxOpset
# in lib/Target/ONNX/Importer.cpp).
OUT_OF_SCOPE_ERROR = re.compile(
    r"unsupported type|unsupported tensor element type|is not a tensor"
    r"|known at compile time|compile-time constant"
    r"|default-domain opset \d+ is not supported")
TIMEOUT_S = 120


def supported_ops(src_root):
    """Op types registered by lib/Target/ONNX/Ops*.cpp, plus the builtins."""
    ops = set(BUILTIN_OPS)
    files = sorted(glob.glob(os.path.join(src_root, "lib", "Target", "ONNX",
                                          "Ops*.cpp")))
    pattern = re.compile(r"\br\s*\.\s*add\s*\(\s*\"([A-Za-z0-9_]+)\"")
    for path in files:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        # Commented-out registrations do not count.
        text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
        text = re.sub(r"//[^\n]*", " ", text)
        ops.update(pattern.findall(text))
    return ops, files


def importer_opsets(src_root=SRC_ROOT):
    """(kMinOpset, kMaxOpset) as lib/Target/ONNX/Importer.cpp declares them."""
    path = os.path.join(src_root, "lib", "Target", "ONNX", "Importer.cpp")
    with open(path, encoding="utf-8") as f:
        m = re.search(r"kMinOpset\s*=\s*(\d+),\s*kMaxOpset\s*=\s*(\d+)", f.read())
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def node_test_dirs(extra_dirs):
    """(source label, node dir) for every node test root that exists."""
    roots = []
    if os.path.isdir(DEBIAN_NODE_DIR):
        label = "libonnx-testdata"
        try:
            version = subprocess.run(
                ["dpkg-query", "-W", "-f=${Version}", "libonnx-testdata"],
                capture_output=True, text=True, timeout=10).stdout.strip()
            if version:
                label += " " + version
        except (OSError, subprocess.SubprocessError):
            pass
        roots.append((label, DEBIAN_NODE_DIR))
    try:
        import onnx
        pip_dir = os.path.join(os.path.dirname(onnx.__file__), "backend",
                               "test", "data", "node")
        if os.path.isdir(pip_dir):
            roots.append(("onnx " + onnx.__version__, pip_dir))
    except ImportError:
        pass
    for d in extra_dirs:
        roots.append((d, d))
    # The same directory reached twice (symlinks) is listed once.
    seen, unique = set(), []
    for label, d in roots:
        real = os.path.realpath(d)
        if real not in seen:
            seen.add(real)
            unique.append((label, d))
    return unique


def qualified(domain, op_type):
    domain = domain or DEFAULT_DOMAIN
    return op_type if domain == DEFAULT_DOMAIN else domain + "::" + op_type


def model_ops(model):
    """Set of (domain, op_type) used by a model, function calls inlined."""
    functions = {(f.domain, f.name, f.overload): f for f in model.functions}
    ops = set()
    seen_functions = set()

    def walk(nodes):
        for node in nodes:
            for attr in node.attribute:
                if attr.HasField("g"):
                    walk(attr.g.node)
                for g in attr.graphs:
                    walk(g.node)
            fn = functions.get((node.domain, node.op_type, node.overload))
            if fn is not None:
                if id(fn) not in seen_functions:
                    seen_functions.add(id(fn))
                    walk(fn.node)
                continue
            ops.add((node.domain or DEFAULT_DOMAIN, node.op_type))

    walk(model.graph.node)
    return ops


def symbolic_dim_bindings(model, test_dir):
    """--dim NAME=VALUE bindings for symbolic input dims, from input_N.pb."""
    import onnx
    initializers = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in initializers]
    symbolic = any(
        d.HasField("dim_param") and d.dim_param
        for i in inputs if i.type.HasField("tensor_type")
        for d in i.type.tensor_type.shape.dim)
    if not symbolic:
        return [], None
    data_sets = sorted(glob.glob(os.path.join(test_dir, "test_data_set_*")))
    if not data_sets:
        return [], "symbolic input dims but no test_data_set_* to bind them"
    bindings = {}
    for index, inp in enumerate(inputs):
        if not inp.type.HasField("tensor_type"):
            continue
        path = os.path.join(data_sets[0], "input_%d.pb" % index)
        if not os.path.exists(path):
            continue
        tensor = onnx.TensorProto()
        with open(path, "rb") as f:
            try:
                tensor.ParseFromString(f.read())
            except Exception:  # not a TensorProto (sequence, optional)
                continue
        for d, size in zip(inp.type.tensor_type.shape.dim, tensor.dims):
            if d.HasField("dim_param") and d.dim_param:
                bindings.setdefault(d.dim_param, size)
    return ["--dim=%s=%d" % kv for kv in sorted(bindings.items())], None


class Result:
    def __init__(self, source, name, path):
        self.source, self.name, self.path = source, name, path
        self.ops = set()          # (domain, op_type)
        self.missing = set()      # unsupported (domain, op_type)
        self.status = None        # pass | fail | unsupported-op | out-of-scope
        self.errors = []          # the importer's error lines
        self.dims = []
        self.input_dims = []      # per graph input: [dim_param or None]
        self.output_names = []    # graph output names, in order
        self.input_types = []     # per graph input: onnx elem_type
        self.input_names = []     # graph inputs that are not initializers
        self.output_types = []
        self.numeric = None       # None | "pass" | "fail" | "skip"
        self.numeric_errors = []

    @property
    def first_error(self):
        return self.errors[0] if self.errors else ""


def classify(result, supported):
    import onnx
    try:
        model = onnx.load(result.path, load_external_data=False)
    except Exception as e:  # noqa: BLE001 - report any load problem
        result.status = "fail"
        result.errors = ["onnx.load failed: %s" % e]
        return None
    result.ops = model_ops(model)
    result.missing = {(d, t) for d, t in result.ops
                      if d != DEFAULT_DOMAIN or t not in supported}
    if result.missing:
        result.status = "unsupported-op"
        return None
    initializers = {t.name for t in model.graph.initializer}
    result.input_dims = [
        [d.dim_param if d.HasField("dim_param") and d.dim_param else None
         for d in i.type.tensor_type.shape.dim]
        if i.type.HasField("tensor_type") else []
        for i in model.graph.input if i.name not in initializers]
    result.output_names = [o.name for o in model.graph.output]
    result.input_types = [i.type.tensor_type.elem_type for i in model.graph.input
                          if i.name not in initializers]
    result.input_names = [i.name for i in model.graph.input
                          if i.name not in initializers]
    result.output_types = [o.type.tensor_type.elem_type
                           for o in model.graph.output]
    result.dims, err = symbolic_dim_bindings(model, os.path.dirname(result.path))
    if err:
        result.status = "fail"
        result.errors = [err]
        return None
    return model


FRAME = re.compile(r"^\s*#\d+ 0x[0-9a-fA-F]+ (.+?)(?:\(|\s*$)")


def crash_summary(signum, stderr):
    """'crashed (SIGSEGV) in callee <- lamina frame' from a crash report."""
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = "signal %d" % signum
    lines = stderr.splitlines()
    for l in lines:  # assertion / fatal error text says the most
        if "Assertion" in l or l.startswith("LLVM ERROR:"):
            return "crashed (%s): %s" % (name, l.strip())
    frames = [m.group(1).strip() for m in map(FRAME.match, lines) if m]
    for i, f in enumerate(frames):
        if f.startswith("lamina::"):
            where = f if i == 0 else "%s <- %s" % (frames[i - 1], f)
            return "crashed (%s) in %s" % (name, where)
    return "crashed (%s)" % name


def cause_of(result):
    """A coarse cause for a failure, to group the report."""
    text = " ".join(result.errors)
    if "crashed (" in text:
        return "crash"
    if text.startswith("cannot run "):
        return "lamina could not be run"
    if re.search(r"default-domain opset \d+ is not supported", text):
        return "opset outside the importer's range"
    if "known at compile time" in text or "compile-time constant" in text:
        return "needs a compile-time value"
    return "other"


def run_import(result, lamina):
    cmd = [lamina, "import", result.path, "-o", os.devnull] + result.dims
    try:
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        result.status = "fail"
        result.errors = ["timed out after %d s" % TIMEOUT_S]
        return result
    except OSError as e:  # e.g. the binary is being relinked
        result.status = "fail"
        result.errors = ["cannot run %s: %s" % (lamina, e)]
        return result
    stderr = proc.stderr.decode("utf-8", "replace")
    errors = [l.split("error: ", 1)[1] for l in stderr.splitlines()
              if l.startswith("lamina: error: ")]
    if proc.returncode == 0:
        result.status = "pass"
        return result
    if proc.returncode < 0:
        # A crash: keep any diagnostics, then say where it crashed.
        errors.append(crash_summary(-proc.returncode, stderr))
    elif not errors:
        tail = [l for l in stderr.splitlines() if l.strip()]
        errors = ["exit status %d%s" % (proc.returncode,
                                        (": " + tail[-1]) if tail else "")]
    result.errors = errors
    if all(OUT_OF_SCOPE_ERROR.search(e) for e in errors):
        result.status = "out-of-scope"
    else:
        result.status = "fail"
    return result


def npy_name(name):
    """The file lamina-eval and compiled programs write an output to
    (lamina::rt::outputFileName): bytes outside [A-Za-z0-9_.-] and a leading
    '.' become %XX."""
    out = ""
    for i, b in enumerate(name.encode("utf-8")):
        c = chr(b)
        if c.isascii() and (c.isalnum() or c in "_-" or (c == "." and i > 0)):
            out += c
        else:
            out += "%%%02X" % b
    return (out or "%") + ".npy"


def compare_output(actual, expected):
    """'' if `actual` matches `expected` as the ONNX backend checks it, else
    why not (with the largest absolute / relative error)."""
    import numpy as np
    if actual.dtype != expected.dtype:
        return "dtype %s, expected %s" % (actual.dtype, expected.dtype)
    if actual.shape != expected.shape:
        return "shape %s, expected %s" % (actual.shape, expected.shape)
    if expected.dtype.kind in "fc":
        try:
            np.testing.assert_allclose(actual, expected, rtol=1e-3, atol=1e-7)
            return ""
        except AssertionError:
            a = actual.astype(np.float64)
            e = expected.astype(np.float64)
            with np.errstate(all="ignore"):
                diff = np.abs(a - e)
                diff[np.isnan(a) & np.isnan(e)] = 0
                diff[np.isnan(diff)] = np.inf
                rel = diff / np.abs(e)
                rel[diff == 0] = 0
            bad = int(np.sum(~np.isclose(a, e, rtol=1e-3, atol=1e-7,
                                         equal_nan=True)))
            return "max abs error %.3g, max rel error %.3g (%d of %d elements)" % (
                float(np.max(diff)) if diff.size else 0.0,
                float(np.max(rel)) if rel.size else 0.0, bad, expected.size)
    if np.array_equal(actual, expected):
        return ""
    bad = int(np.sum(actual != expected))
    return "%d of %d elements differ" % (bad, expected.size)


def first_errors(proc):
    """The 'error: ...' lines of a failed tool, or a crash summary."""
    stderr = proc.stderr.decode("utf-8", "replace")
    lines = [l.split("error: ", 1)[1] for l in stderr.splitlines()
             if "error: " in l]
    if proc.returncode < 0:
        lines.append(crash_summary(-proc.returncode, stderr))
    return "; ".join(lines) or "exit status %d" % proc.returncode


class EvalRunner:
    """Outputs from the reference evaluator (lamina-eval)."""
    name = "lamina-eval"

    def __init__(self, lamina_eval):
        self.lamina_eval = lamina_eval

    def run(self, result, inputs, dims, out):
        cmd = ([self.lamina_eval, result.path, "--output-dir", out] + dims +
               ["--input=" + p for p in inputs])
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, timeout=TIMEOUT_S)
        return "" if proc.returncode == 0 else "lamina-eval failed: " + first_errors(proc)

    def done(self, result):
        pass


class CompiledRunner:
    """Outputs from the compiled program: `lamina compile` once per model
    and dim binding, then OUTDIR/run per data set."""
    name = "compiled"

    def __init__(self, lamina):
        self.lamina = lamina
        self.builds = {}  # (model path, dims) -> (dir, error)
        self.lock = threading.Lock()

    def build(self, result, dims):
        key = (result.path, tuple(dims))
        with self.lock:
            if key in self.builds:
                return self.builds[key]
        outdir = tempfile.mkdtemp(prefix="lamina-compile-")
        cmd = ([self.lamina, "compile", result.path, "--target", "host",
                "--mode", "inference", "--quiet", "-o", outdir] + dims)
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, timeout=TIMEOUT_S * 4)
        err = "" if proc.returncode == 0 else "lamina compile failed: " + first_errors(proc)
        with self.lock:
            self.builds[key] = (outdir, err)
        return outdir, err

    def run(self, result, inputs, dims, out):
        outdir, err = self.build(result, dims)
        if err:
            return err
        names = result.input_names
        if len(inputs) != len(names):
            return "%d input files for %d model inputs" % (len(inputs), len(names))
        cmd = ([os.path.join(outdir, "run"), "--output-dir", out] +
               ["--input=%s=%s" % (n, p) for n, p in zip(names, inputs)])
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, timeout=TIMEOUT_S)
        return "" if proc.returncode == 0 else "run failed: " + first_errors(proc)

    def done(self, result):
        with self.lock:
            dirs = [d for (path, _), (d, _) in self.builds.items()
                    if path == result.path]
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)


def run_numeric(result, runner):
    """Runs each test_data_set_* of an imported model (through `runner`) and
    compares its outputs with output_*.pb."""
    import numpy as np
    import onnx
    from onnx import numpy_helper
    test_dir = os.path.dirname(result.path)
    data_sets = sorted(glob.glob(os.path.join(test_dir, "test_data_set_*")))
    if not data_sets:
        result.numeric = "fail"
        result.numeric_errors = ["no test_data_set_*"]
        return result
    # onnx 1.12's test data stores bfloat16 tensors as uint16 (numpy has no
    # bfloat16), and CastLike's `like` input with the wrong shape: the data
    # does not match the model, so such tests cannot be run by anyone.
    bf16, uint16 = onnx.TensorProto.BFLOAT16, onnx.TensorProto.UINT16
    for ds in data_sets:
        for kind, types in (("input", result.input_types),
                            ("output", result.output_types)):
            for index, elem in enumerate(types):
                path = os.path.join(ds, "%s_%d.pb" % (kind, index))
                if elem != bf16 or not os.path.exists(path):
                    continue
                t = onnx.TensorProto()
                with open(path, "rb") as f:
                    t.ParseFromString(f.read())
                if t.data_type == uint16:
                    result.numeric = "skip"
                    result.numeric_errors = [
                        "test data stores bfloat16 %s %d as uint16" % (kind, index)]
                    return result
    errors = []
    for ds in data_sets:
        label = os.path.basename(ds)
        inputs = sorted(glob.glob(os.path.join(ds, "input_*.pb")),
                        key=lambda p: int(re.findall(r"\d+", os.path.basename(p))[0]))
        bindings = {}
        for index, path in enumerate(inputs):
            t = onnx.TensorProto()
            with open(path, "rb") as f:
                t.ParseFromString(f.read())
            if index < len(result.input_dims):
                for param, size in zip(result.input_dims[index], t.dims):
                    if param:
                        bindings.setdefault(param, size)
        dims = ["--dim=%s=%d" % kv for kv in sorted(bindings.items())]
        with tempfile.TemporaryDirectory(prefix="lamina-out-") as out:
            try:
                why = runner.run(result, inputs, dims, out)
            except subprocess.TimeoutExpired:
                errors.append("%s: timed out after %d s" % (label, TIMEOUT_S))
                continue
            except OSError as e:
                errors.append("cannot run %s: %s" % (runner.name, e))
                break
            if why:
                errors.append("%s: %s" % (label, why))
                continue
            outputs = sorted(glob.glob(os.path.join(ds, "output_*.pb")),
                             key=lambda p: int(re.findall(r"\d+", os.path.basename(p))[0]))
            for index, path in enumerate(outputs):
                t = onnx.TensorProto()
                with open(path, "rb") as f:
                    t.ParseFromString(f.read())
                expected = numpy_helper.to_array(t)
                name = (result.output_names[index]
                        if index < len(result.output_names) else t.name)
                got = os.path.join(out, npy_name(name))
                if not os.path.exists(got):
                    errors.append("%s: no output '%s'" % (label, name))
                    continue
                why = compare_output(np.load(got), expected)
                if why:
                    errors.append("%s output '%s': %s" % (label, name, why))
    runner.done(result)
    result.numeric = "fail" if errors else "pass"
    result.numeric_errors = errors
    return result


STATUSES = ["pass", "fail", "unsupported-op", "out-of-scope"]


def op_table(results, supported):
    """{qualified op: Counter(status)} for every op any test contains."""
    table = collections.defaultdict(collections.Counter)
    for r in results:
        for d, t in r.ops:
            table[qualified(d, t)][r.status] += 1
    for op in supported:  # supported ops without a test still get a row
        table.setdefault(op, collections.Counter())
    return table


def is_supported(op, supported):
    return "::" not in op and op in supported


def totals_line(counts, n):
    return ("totals: %d models, %d pass, %d fail, %d unsupported (op), "
            "%d out of scope" % (n, counts["pass"], counts["fail"],
                                        counts["unsupported-op"],
                                        counts["out-of-scope"]))


def fmt_ops(ops):
    return ", ".join(sorted(qualified(d, t) for d, t in ops))


def print_text(results, supported, table, out):
    w = max([len(op) for op in table] + [7])
    out.write("%-*s  %-9s %5s %5s %5s %11s %13s\n" % (
        w, "op", "supported", "tests", "pass", "fail", "unsupp.(op)",
        "out of scope"))
    for op in sorted(table, key=str.lower):
        c = table[op]
        out.write("%-*s  %-9s %5d %5d %5d %11d %13d\n" % (
            w, op, "yes" if is_supported(op, supported) else "no",
            sum(c.values()), c["pass"], c["fail"], c["unsupported-op"],
            c["out-of-scope"]))
    out.write("\n")
    scoped = [r for r in results if r.status == "out-of-scope"]
    if scoped:
        out.write("out of scope: %d models, expected errors\n" % len(scoped))
        for r in scoped:
            out.write("  %s: %s\n" % (r.name, r.first_error))
        out.write("\n")


def grouped_failures(results):
    groups = collections.OrderedDict()
    for r in results:
        if r.status == "fail":
            groups.setdefault(cause_of(r), []).append(r)
    return sorted(groups.items(), key=lambda kv: -len(kv[1]))


def print_failures(results, out):
    groups = grouped_failures(results)
    if not groups:
        return
    out.write("FAILED: %d models whose ops are all supported\n"
              % sum(len(g) for _, g in groups))
    for cause, group in groups:
        out.write("  %s (%d):\n" % (cause, len(group)))
        for r in group:
            out.write("    %s [%s] (%s): %s\n" % (
                r.name, r.source, fmt_ops(r.ops), "; ".join(r.errors)))
    out.write("\n")


def md_escape(s):
    return s.replace("|", "\\|").replace("\n", " ")


def write_markdown(path, results, supported, table, roots, counts, op_files):
    import onnx
    lines = []
    add = lines.append
    add("# ONNX import coverage")
    add("")
    add("Generated by `scripts/import-conformance.py`; do not edit by hand. "
        "Regenerate after building with:")
    add("")
    add("```sh")
    add("python3 scripts/import-conformance.py --lamina build/bin/lamina "
        "--markdown docs/import-coverage.md")
    add("```")
    add("")
    add("Every ONNX backend node test model is classified as:")
    add("")
    add("- **pass**: all its ops are supported and `lamina import` imports "
        "and verifies it;")
    add("- **fail**: all its ops are supported but the import fails (the "
        "conformance requirement is that there are none);")
    add("- **unsupported (op)**: it uses an op type the importer does not "
        "register;")
    add("- **out of scope**: all ops are supported, but the importer "
        "rejects it only for what Lamina excludes by design: an element type "
        "it does not model (string, float8, complex), a non-tensor graph "
        "input (sequence, optional), a shape, axes, k or If-condition input "
        "that is a graph input rather than a compile-time constant (Lamina "
        "compiles static shapes), or an opset outside %d-%d. These are "
        "expected errors." % importer_opsets())
    add("")
    add("Op types are collected from the main graph, all subgraphs and the "
        "bodies of model-local functions; the supported set is parsed from "
        "the `r.add(\"...\")` calls in %s, plus `If` (constant condition "
        "only). A test counts once for every op type it contains."
        % ", ".join("`%s`" % os.path.relpath(f, SRC_ROOT) for f in op_files))
    add("")
    add("Test data: %s (onnx python package %s)." % (
        "; ".join("%s, %d models" % (label, sum(1 for r in results
                                                 if r.source == label))
                  for label, _ in roots), onnx.__version__))
    add("")
    add("## Totals")
    add("")
    add("| models | pass | fail | unsupported (op) | out of scope |")
    add("|---:|---:|---:|---:|---:|")
    add("| %d | %d | %d | %d | %d |" % (len(results), counts["pass"],
                                      counts["fail"], counts["unsupported-op"],
                                      counts["out-of-scope"]))
    add("")
    add("## Per op type")
    add("")
    add("| op | supported | tests | pass | fail | unsupported (op) | "
        "out of scope |")
    add("|---|:-:|---:|---:|---:|---:|---:|")
    for op in sorted(table, key=str.lower):
        c = table[op]
        add("| %s | %s | %d | %d | %d | %d | %d |" % (
            md_escape(op), "yes" if is_supported(op, supported) else "no",
            sum(c.values()), c["pass"], c["fail"], c["unsupported-op"],
            c["out-of-scope"]))
    add("")
    blocking, only = collections.Counter(), collections.Counter()
    for r in results:
        if r.status == "unsupported-op":
            for d, t in r.missing:
                blocking[qualified(d, t)] += 1
                if len(r.missing) == 1:
                    only[qualified(d, t)] += 1
    if blocking:
        add("## Missing op types by number of tests they block")
        add("")
        add("*tests*: tests that use the op; *alone*: tests in which it is "
            "the only missing op (supporting it alone lets them run).")
        add("")
        add("| op | tests | alone |")
        add("|---|---:|---:|")
        for op, n in sorted(blocking.items(),
                            key=lambda kv: (-kv[1], -only[kv[0]], kv[0])):
            add("| %s | %d | %d |" % (md_escape(op), n, only[op]))
        add("")
    add("## Failures")
    add("")
    groups = grouped_failures(results)
    for cause, group in groups:
        add("### %s (%d)" % (cause[0].upper() + cause[1:], len(group)))
        add("")
        add("| test | source | ops | error |")
        add("|---|---|---|---|")
        for r in group:
            add("| %s | %s | %s | %s |" % (r.name, r.source,
                                          md_escape(fmt_ops(r.ops)),
                                          md_escape("; ".join(r.errors))))
        add("")
    if not groups:
        add("None.")
        add("")
    scoped = [r for r in results if r.status == "out-of-scope"]
    add("## Out of scope: expected errors")
    add("")
    if scoped:
        add("| test | source | reason |")
        add("|---|---|---|")
        for r in scoped:
            add("| %s | %s | %s |" % (r.name, r.source,
                                     md_escape("; ".join(r.errors))))
    else:
        add("None.")
    add("")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


def write_numeric_markdown(path, results, runner_name, elapsed):
    """Per op type: how the imported node tests fared when run."""
    title = {"compiled": "Host backend conformance: compiled programs",
             "lamina-eval": "Numeric conformance: reference evaluator"}
    flag = "--compiled" if runner_name == "compiled" else "--numeric"
    per_op = collections.defaultdict(collections.Counter)
    for r in results:
        if r.numeric:
            for d, t in r.ops:
                per_op[qualified(d, t)][r.numeric] += 1
    totals = collections.Counter(r.numeric for r in results if r.numeric)
    lines = ["# %s" % title.get(runner_name, runner_name), "",
             "Generated by `scripts/import-conformance.py`; do not edit by "
             "hand. Regenerate after building with:", "", "```sh",
             "python3 scripts/import-conformance.py %s --numeric-markdown %s"
             % (flag, os.path.relpath(path, SRC_ROOT)), "```", ""]
    if runner_name == "compiled":
        lines += ["Every ONNX backend node test that imports is compiled with "
                  "`lamina compile --target host --mode inference` (its "
                  "symbolic dims bound from its test data), the program "
                  "`OUTDIR/run` is run on each `test_data_set_*` "
                  "(`input_*.pb`), and every output is compared with "
                  "`output_*.pb` at the ONNX backend's tolerances "
                  "(rtol 1e-3, atol 1e-7; integers and bools exact)."]
    else:
        lines += ["Every ONNX backend node test that imports is run with "
                  "`lamina-eval` on each `test_data_set_*` and compared with "
                  "its outputs at the ONNX backend's tolerances."]
    lines += ["*skipped*: the test data does not match the model (bfloat16 "
              "tensors stored as uint16 in onnx 1.12's test data).", "",
              "## Totals", "", "| tests run | pass | fail | skipped | time |",
              "|---:|---:|---:|---:|---:|",
              "| %d | %d | %d | %d | %.0f s |" % (
                  sum(totals.values()), totals["pass"], totals["fail"],
                  totals["skip"], elapsed), "",
              "## Per op type", "",
              "| op | tests | pass | fail | skipped |", "|---|---:|---:|---:|---:|"]
    for op in sorted(per_op, key=str.lower):
        c = per_op[op]
        lines.append("| %s | %d | %d | %d | %d |" % (
            md_escape(op), sum(c.values()), c["pass"], c["fail"], c["skip"]))
    failed = [r for r in results if r.numeric == "fail"]
    if failed:
        lines += ["", "## Failures", ""]
        for r in failed:
            lines.append("- `%s`: %s" % (r.name, md_escape(
                "; ".join(r.numeric_errors))))
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lamina", default=None,
                        help="the lamina binary (default: build/bin/lamina "
                             "under the source root, else PATH)")
    parser.add_argument("--jobs", "-j", type=int, default=2,
                        help="parallel imports (default 2)")
    parser.add_argument("--markdown", metavar="FILE",
                        help="also write the report as markdown")
    parser.add_argument("--quiet", "-q", action="store_true",
                        help="print only failures and the totals")
    parser.add_argument("--numeric", action="store_true",
                        help="also run every imported model with lamina-eval "
                             "and compare its outputs with the test data")
    parser.add_argument("--compiled", action="store_true",
                        help="like --numeric, but compile every imported "
                             "model with `lamina compile` and run the program")
    parser.add_argument("--numeric-markdown", metavar="FILE",
                        help="with --numeric or --compiled, write the run "
                             "results per op type as markdown")
    parser.add_argument("--lamina-eval", default=None,
                        help="the lamina-eval binary (default: next to "
                             "lamina, else PATH)")
    parser.add_argument("--node-dir", action="append", default=[],
                        metavar="DIR",
                        help="an extra directory of node tests "
                             "(DIR/*/model.onnx); may be repeated")
    args = parser.parse_args()

    try:
        import onnx  # noqa: F401
    except ImportError:
        sys.exit("import-conformance: error: the onnx python package is "
                 "required")
    lamina = args.lamina
    if lamina is None:
        built = os.path.join(SRC_ROOT, "build", "bin", "lamina")
        lamina = built if os.path.exists(built) else "lamina"
    resolved = shutil.which(lamina)
    if resolved is None:
        sys.exit("import-conformance: error: cannot find lamina binary '%s'"
                 % lamina)

    runner = None
    if args.compiled:
        args.numeric = True
        runner = CompiledRunner(resolved)
    elif args.numeric:
        lamina_eval = args.lamina_eval or os.path.join(
            os.path.dirname(resolved), "lamina-eval")
        lamina_eval = shutil.which(lamina_eval) or shutil.which("lamina-eval")
        if lamina_eval is None:
            sys.exit("import-conformance: error: cannot find lamina-eval")
        runner = EvalRunner(lamina_eval)

    supported, op_files = supported_ops(SRC_ROOT)
    if len(supported) <= len(BUILTIN_OPS):
        sys.exit("import-conformance: error: found no r.add(\"...\") calls "
                 "in lib/Target/ONNX/Ops*.cpp")
    roots = node_test_dirs(args.node_dir)
    results = []
    for label, d in roots:
        for path in sorted(glob.glob(os.path.join(d, "*", "model.onnx"))):
            results.append(Result(label, os.path.basename(os.path.dirname(path)),
                                  path))
    if not results:
        sys.exit("import-conformance: error: no ONNX backend node test "
                 "models found (install libonnx-testdata or pass --node-dir)")

    start = time.monotonic()
    to_run = [r for r in results if classify(r, supported) is not None]
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        list(pool.map(lambda r: run_import(r, resolved), to_run))
    elapsed = time.monotonic() - start
    numeric_elapsed = 0.0
    if args.numeric:
        start = time.monotonic()
        imported = [r for r in results if r.status == "pass"]
        with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
            list(pool.map(lambda r: run_numeric(r, runner), imported))
        numeric_elapsed = time.monotonic() - start

    counts = collections.Counter(r.status for r in results)
    table = op_table(results, supported)
    out = sys.stdout
    if not args.quiet:
        out.write("test data: %s\n" % "; ".join(
            "%s (%s)" % (label, d) for label, d in roots))
        out.write("supported op types: %d; models: %d, imported: %d, "
                  "%.1f s with %d jobs\n\n" % (len(supported), len(results),
                                              len(to_run), elapsed, args.jobs))
        print_text(results, supported, table, out)
    print_failures(results, out)
    out.write(totals_line(counts, len(results)) + "\n")
    out.write("failures: %d\n" % counts["fail"])
    numeric_failures = 0
    if args.numeric:
        numeric = collections.Counter(r.numeric for r in results if r.numeric)
        numeric_failures = numeric["fail"]
        failed = [r for r in results if r.numeric == "fail"]
        if failed:
            out.write("NUMERIC FAILURES: %d\n" % len(failed))
            for r in failed:
                out.write("  %s [%s] (%s): %s\n" % (
                    r.name, r.source, fmt_ops(r.ops),
                    "; ".join(r.numeric_errors)))
        skipped = [r for r in results if r.numeric == "skip"]
        if skipped and not args.quiet:
            out.write("numeric skipped (test data does not match the model):\n")
            for r in skipped:
                out.write("  %s: %s\n" % (r.name, "; ".join(r.numeric_errors)))
        out.write("numeric (%s): %d imported models, %d numeric pass, %d numeric "
                  "fail, %d skipped (%.1f s)\n" % (
                      runner.name, sum(numeric.values()), numeric["pass"], numeric["fail"],
                      numeric["skip"], numeric_elapsed))
    if args.numeric_markdown and args.numeric:
        write_numeric_markdown(args.numeric_markdown, results, runner.name,
                               numeric_elapsed)
    if args.markdown:
        write_markdown(args.markdown, results, supported, table, roots, counts,
                       op_files)
    return 1 if counts["fail"] or numeric_failures else 0


if __name__ == "__main__":
    sys.exit(main())
