#!/usr/bin/env python3
"""What newer default-domain opsets change in the ops Lamina imports.

  scripts/opset-changes.py [--since N] [--to M] [--all] [--doc]

For every op the importer registers (`r.add("Op", ...)` in
lib/Target/ONNX/Ops*.cpp, plus If), asks the installed `onnx` package's
schemas (onnx.defs.get_schema(op, max_inclusive_version=V)) which versions
were introduced after opset N (default: the importer's kMaxOpset, read from
lib/Target/ONNX/Importer.cpp) up to M (default: the package's newest), and
prints for each new version what differs from the previous one: attributes
added or removed (with defaults), inputs and outputs, and element types
added or removed per type constraint. --doc also prints the lines of the
schema's documentation that changed. --all lists unchanged ops too.

Bumping kMaxOpset: run this, check every row against the importer (types it
refuses by name need nothing; new attributes or semantics need a handler
change, or a refusal naming node, op and opset), then raise kMaxOpset and
the ranges in docs/import-coverage.md and README.md.
"""

from __future__ import annotations

import argparse
import difflib
import glob
import os
import re
import sys

SRC_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILTIN_OPS = {"If"}  # imported outside the registry (Importer.cpp)


def supported_ops(src_root: str) -> list[str]:
    ops = set(BUILTIN_OPS)
    pattern = re.compile(r"\br\s*\.\s*add\s*\(\s*\"([A-Za-z0-9_]+)\"")
    for path in glob.glob(os.path.join(src_root, "lib", "Target", "ONNX",
                                       "Ops*.cpp")):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
        text = re.sub(r"//[^\n]*", " ", text)
        ops.update(pattern.findall(text))
    return sorted(ops)


def importer_max_opset(src_root: str) -> int:
    path = os.path.join(src_root, "lib", "Target", "ONNX", "Importer.cpp")
    with open(path, encoding="utf-8") as f:
        m = re.search(r"kMaxOpset\s*=\s*(\d+)", f.read())
    if not m:
        sys.exit(f"no kMaxOpset in {path}")
    return int(m.group(1))


def schema(defs, op: str, version: int):
    try:
        return defs.get_schema(op, max_inclusive_version=version)
    except Exception:  # noqa: BLE001 - the op does not exist at `version`
        return None


def attr_default(a) -> str:
    from onnx import helper
    if a.required:
        return "required"
    d = a.default_value
    if not d.name:
        return "no default"
    v = helper.get_attribute_value(d)
    return repr(v.decode() if isinstance(v, bytes) else v)


def short_type(t: str) -> str:
    return t[len("tensor("):-1] if t.startswith("tensor(") else t


def differences(old, new, with_doc: bool) -> list[str]:
    out = []
    for name in sorted(set(new.attributes) - set(old.attributes)):
        out.append(f"new attribute {name} ({attr_default(new.attributes[name])})")
    for name in sorted(set(old.attributes) - set(new.attributes)):
        out.append(f"attribute {name} removed")
    for name in sorted(set(old.attributes) & set(new.attributes)):
        a, b = old.attributes[name], new.attributes[name]
        if attr_default(a) != attr_default(b):
            out.append(f"attribute {name}: default {attr_default(a)} -> "
                       f"{attr_default(b)}")

    def params(s, kind):
        return [(p.name, str(p.option).split(".")[-1], p.type_str)
                for p in getattr(s, kind)]
    for kind in ("inputs", "outputs"):
        a, b = params(old, kind), params(new, kind)
        if a != b:
            out.append(f"{kind}: {a} -> {b}")
    if (old.min_input, old.max_input) != (new.min_input, new.max_input):
        out.append(f"input count {old.min_input}..{old.max_input} -> "
                   f"{new.min_input}..{new.max_input}")
    old_t = {t.type_param_str: set(t.allowed_type_strs)
             for t in old.type_constraints}
    for t in new.type_constraints:
        before = old_t.pop(t.type_param_str, set())
        added = sorted(short_type(x) for x in set(t.allowed_type_strs) - before)
        removed = sorted(short_type(x) for x in before - set(t.allowed_type_strs))
        if added:
            out.append(f"{t.type_param_str} adds {', '.join(added)}")
        if removed:
            out.append(f"{t.type_param_str} drops {', '.join(removed)}")
    for name in old_t:
        out.append(f"type constraint {name} removed")
    if old.has_function != new.has_function:
        out.append("function body " + ("added" if new.has_function else "removed"))
    doc_changed = (old.doc or "").strip() != (new.doc or "").strip()
    if not out and doc_changed:
        out.append("documentation only")
    elif doc_changed:
        out.append("documentation changed")
    if with_doc and doc_changed:
        for line in difflib.unified_diff((old.doc or "").splitlines(),
                                         (new.doc or "").splitlines(),
                                         lineterm="", n=0):
            if not line.startswith(("---", "+++", "@@")):
                out.append("    doc " + line)
    if not out:
        out.append("no visible schema change (version bump only)")
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--since", type=int, default=None,
                   help="the opset already handled (default: kMaxOpset)")
    p.add_argument("--to", type=int, default=None,
                   help="the newest opset to check (default: onnx's newest)")
    p.add_argument("--all", action="store_true", help="list unchanged ops too")
    p.add_argument("--doc", action="store_true",
                   help="print the changed documentation lines")
    p.add_argument("--src-root", default=SRC_ROOT)
    args = p.parse_args()

    import onnx
    from onnx import defs
    since = args.since if args.since is not None else importer_max_opset(args.src_root)
    newest = defs.onnx_opset_version()
    to = args.to if args.to is not None else newest
    ops = supported_ops(args.src_root)
    if since >= to:
        print(f"onnx {onnx.__version__}: newest default-domain opset {newest}; "
              f"the importer accepts opsets up to {since}: nothing newer to "
              f"check (pass --since N to list the changes after N)")
        return 0
    print(f"onnx {onnx.__version__}: newest default-domain opset {newest}; "
          f"{len(ops)} ops the importer supports; versions introduced in "
          f"opsets {since + 1}-{to}")
    changed = 0
    for op in ops:
        base = schema(defs, op, since)
        versions = []
        prev = base
        for v in range(since + 1, to + 1):
            s = schema(defs, op, v)
            if s is not None and (prev is None or s.since_version != prev.since_version):
                versions.append((prev, s))
            prev = s
        if not versions:
            if args.all:
                since_v = base.since_version if base else "-"
                print(f"{op:<28} unchanged (version {since_v})")
            continue
        changed += 1
        for old, new in versions:
            head = f"{op:<28} {old.since_version if old else '-'} -> {new.since_version}"
            if old is None:
                print(f"{head}: new op")
                continue
            lines = differences(old, new, args.doc)
            print(f"{head}: {lines[0]}")
            for line in lines[1:]:
                print(f"{'':<28} {'':>8}  {line}")
    print(f"{changed} of {len(ops)} ops have a new version in opsets "
          f"{since + 1}-{to}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
