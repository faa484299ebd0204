"""Prints each program's step buffer bytes (per pipeline rank, from the
generated model.cpp's lamina_step_buffer_bytes table) beside the plan's
(ranks[].memory.step_buffers), for pairs of (model.cpp, plan JSON) named
host and cuda; exits 1 when a pair differs."""
import json
import re
import sys


def compiled(path):
    with open(path, encoding="utf-8") as f:
        m = re.search(r"lamina_step_buffer_bytes\[\d+\] = \{([^}]*)\}", f.read())
    return [int(v.strip().rstrip("L")) for v in m.group(1).split(",")]


def planned(path):
    with open(path, encoding="utf-8") as f:
        plan = json.load(f)
    ranks = plan["ranks"]
    return ([int(r["memory"]["step_buffers"]) for r in ranks],
            all(r["memory"]["step_buffers_exact"] for r in ranks))


ok, seen = True, []
for name, cpp, js in zip(("host", "cuda"), sys.argv[1::2], sys.argv[2::2]):
    c = compiled(cpp)
    p, exact = planned(js)
    seen.append(c)
    print(f"{name}: compiled {' '.join(map(str, c))}, planned "
          f"{' '.join(map(str, p))}" + (" (exact)" if exact else ""))
    ok &= c == p
if len(seen) == 2:
    print("the targets differ" if seen[0] != seen[1] else "the targets agree")
sys.exit(0 if ok else 1)
