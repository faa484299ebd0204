#!/usr/bin/env python3
"""Lines of code per folder at two revisions, for a clean-up's report.

  scripts/lines-per-folder.py BASE [REV]     (REV defaults to the working tree)

Counts C++, CUDA, TableGen, CMake and Python lines (blank lines too, as
`wc -l` does) under lib/, include/, tools/, test/lib/, unittests/, python/
and bench/, grouped by folder: three levels deep under lib/, include/ and
test/ (lib/Runtime/Dist, include/lamina/Runtime), two elsewhere. Prose,
tests' inputs and generated docs are not code and are left out. Only the
folders whose count changed are listed, then the total.
"""
import collections
import os
import subprocess
import sys

ROOTS = ("lib/", "include/", "tools/", "test/lib/", "unittests/", "python/",
         "bench/")
EXTS = (".cpp", ".h", ".cu", ".cuh", ".td", ".py", ".txt", ".inc")


def folder(path):
    parts = path.split("/")[:-1]
    depth = 3 if parts[0] in ("lib", "include", "test") else 2
    return "/".join(parts[:depth]) or "."


def wanted(path):
    return path.startswith(ROOTS) and path.endswith(EXTS) and (
        not path.endswith(".txt") or path.endswith("CMakeLists.txt"))


def count(rev):
    lines = collections.Counter()
    if rev is None:
        files = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
            capture_output=True, text=True, check=True).stdout.split("\n")
        for path in filter(wanted, files):
            if os.path.isfile(path):
                with open(path, "rb") as f:
                    lines[folder(path)] += f.read().count(b"\n")
        return lines
    files = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev],
                           capture_output=True, text=True,
                           check=True).stdout.split("\n")
    for path in filter(wanted, files):
        blob = subprocess.run(["git", "show", f"{rev}:{path}"],
                              capture_output=True, check=True).stdout
        lines[folder(path)] += blob.count(b"\n")
    return lines


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    base = sys.argv[1]
    rev = sys.argv[2] if len(sys.argv) == 3 else None
    before, after = count(base), count(rev)
    print(f"| folder | {base} | {rev or 'working tree'} | change |")
    print("| --- | ---: | ---: | ---: |")
    for name in sorted(set(before) | set(after)):
        b, a = before[name], after[name]
        if a != b:
            print(f"| {name} | {b} | {a} | {a - b:+d} |")
    tb, ta = sum(before.values()), sum(after.values())
    print(f"| all | {tb} | {ta} | {ta - tb:+d} |")


if __name__ == "__main__":
    main()
