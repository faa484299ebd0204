"""The bytes two distributed runs' --stats files report per rank and step
are the same (test/e2e/cuda-dist-gpu.test: the NCCL data plane moves what
the MPI one moves), and so are the ZeRO 2-3 gradient buffers' peaks
(unpadded: with two ranks a group NCCL's padded cut and MPI's even one
give a rank parts of the same length).

  dist_bytes.py A.json B.json

Prints "ok" or the first rank that differs."""
import json
import sys


def main():
    a, b = (json.load(open(p))["ranks"] for p in sys.argv[1:3])
    if len(a) != len(b):
        print(f"{len(a)} ranks vs {len(b)}")
        return
    for ra, rb in zip(a, b):
        for key in ("p2p_bytes_per_step", "collective_bytes_per_step",
                    "peak_gradient_bytes"):
            if ra[key] != rb[key]:
                print(f"rank {ra['rank']}: {key} {ra[key]} vs {rb[key]}")
                return
    print("ok")


if __name__ == "__main__":
    main()
