"""PyTorch's training of a tiny Hugging Face model (test/Inputs/reference/
hf-*-training.json, written by python/lamina/export_real_models.py) against
a compiled program's log. Standard library only.

  data JSON OUT.bin                 writes the reference corpus as uint16
  args JSON RUN                     the `run` flags of reference run RUN
  check JSON RUN LOG RTOL           every step's loss in LOG is PyTorch's
                                    within RTOL (relative); prints "ok"
"""
import json
import re
import struct
import sys


def main():
    what, ref = sys.argv[1], json.load(open(sys.argv[2]))
    if what == "data":
        with open(sys.argv[3], "wb") as f:
            f.write(struct.pack(f"<{len(ref['tokens'])}H", *ref["tokens"]))
        return
    run = ref["runs"][sys.argv[3]]
    if what == "args":
        print(f"--optimizer {run.get('optimizer', sys.argv[3])} --lr {run['lr']} "
              f"--steps {run['steps']} --seed {ref['seed']} --log-every 1")
        return
    got = [float(m.group(1)) for m in
           (re.match(r"step \d+ loss (\S+) ", line) for line in open(sys.argv[4]))
           if m]
    want, rtol = run["losses"], float(sys.argv[5])
    if len(got) != len(want):
        print(f"{len(got)} logged losses, PyTorch has {len(want)}")
        return
    worst = max(abs(g - w) / abs(w) for g, w in zip(got, want))
    print(f"{sys.argv[3]}: {len(want)} steps, PyTorch {want[0]:.6f} -> {want[-1]:.6f}, "
          f"worst rel difference {worst:.2e}", file=sys.stderr)
    bad = [(i + 1, g, w) for i, (g, w) in enumerate(zip(got, want))
           if abs(g - w) > rtol * abs(w)]
    print("ok" if not bad else
          f"step {bad[0][0]}: loss {bad[0][1]:.6f}, PyTorch {bad[0][2]:.6f}")


if __name__ == "__main__":
    main()
