"""Checks the kernel emulator's overlap report (LAMINA_CUDA_EMULATOR_OVERLAP,
docs/cuda.md "The kernel emulator"): every rank's line for KIND has at most N
operations with no device work issued between the operation and the first
compute-stream wait for it.

  overlap_check.py LOG KIND<=N ...

Prints "ok" or what exceeds its bound (or is missing)."""
import re
import sys


def main():
    lines = open(sys.argv[1]).read().splitlines()
    pat = re.compile(r"overlap: (\S+): (\d+) issued, (\d+) waited for by "
                     r"compute, (\d+) with no device work")
    seen = {}
    for line in lines:
        m = pat.search(line)
        if m:
            seen.setdefault(m.group(1), []).append(int(m.group(4)))
    for arg in sys.argv[2:]:
        kind, bound = arg.split("<=")
        if kind not in seen:
            print(f"no overlap line for {kind}")
            return
        worst = max(seen[kind])
        if worst > int(bound):
            print(f"{kind}: {worst} operations with nothing to overlap, more "
                  f"than {bound}")
            return
    print("ok")


main()
