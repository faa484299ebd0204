"""Prints each program's step buffer bytes per pipeline rank (the
lamina_step_buffer_bytes table of its generated model.cpp) beside the
plan's (ranks[].memory.step_buffers of `lamina plan --format json`).
Arguments: NAME MODEL_CPP PLAN_JSON, repeated. Exits 1 when a program's
bytes differ from its plan's; with two programs, also says whether their
bytes differ from each other."""
import json
import re
import sys


def compiled(path):
    with open(path, encoding="utf-8") as f:
        m = re.search(r"lamina_step_buffer_bytes\[\d+\] = \{([^}]*)\}", f.read())
    return [int(v.strip().rstrip("L")) for v in m.group(1).split(",")]


def planned(path):
    with open(path, encoding="utf-8") as f:
        ranks = json.load(f)["ranks"]
    return ([int(r["memory"]["step_buffers"]) for r in ranks],
            all(r["memory"]["step_buffers_exact"] for r in ranks))


args = sys.argv[1:]
ok, seen = True, []
for name, cpp, js in zip(args[0::3], args[1::3], args[2::3]):
    c = compiled(cpp)
    p, exact = planned(js)
    seen.append(c)
    print(f"{name}: compiled {' '.join(map(str, c))}, planned "
          f"{' '.join(map(str, p))}" + (" (exact)" if exact else " (estimate)"))
    ok &= c == p
if len(seen) == 2:
    print("the programs differ" if seen[0] != seen[1] else "the programs agree")
sys.exit(0 if ok else 1)
