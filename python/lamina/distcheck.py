"""A distributed training run measured against `lamina plan`.

Reads the runtime's statistics (`OUTDIR/run --stats STATS.json`, one entry
per global rank; docs/distributed.md "Statistics") and the plan of the same
configuration (`lamina plan ... --precision fp32 --format json`;
docs/plan.md), and prints per global rank, side by side:

* bytes sent per step point-to-point and on data-parallel (and
  shared-parameter) collectives, measured against the plan's traffic of
  that rank's pipeline rank. These must be equal (exit status 1 if not);
* at ZeRO 2-3, the peak bytes of full gradients and reduce-scatter results
  held at once, against the plan's `gradient_buffers`: equal on replica 0,
  within two elements' rounding of the shards elsewhere (the first
  replicas' parts are one element longer; exit status 1 if not);
* the step buffer (`step_buffer_bytes`: the boundary values, their
  gradients and the residuals the compiled step holds between its calls,
  at the offsets rt-plan-step-buffers placed) against the plan's
  `step_buffers`, the same computation over the same calls: equal when
  the plan says it is exact (`step_buffers_exact`: planned with
  `--recompute full`, or `--recompute none` with the compile's loss flags;
  exit status 1 if not), else the plan's estimate is shown beside it;
* the training state a rank keeps (`state_bytes`: parameters, copies,
  gradients, optimizer state) against the plan's weights + grads +
  optimizer: equal on replica 0, within the shards' rounding (16 bytes a
  module) elsewhere (exit status 1 if not);
* the idle fraction, measured `1 - compute/wall` against the plan's
  `idle / (busy + idle)`. These agree only in ordering: on a few CPU cores
  shared by several ranks, waits for descheduled peers and per-action
  copies are idle time the plan does not model (docs/results/performance.md).

  python3 -m lamina.distcheck compare STATS.json PLAN.json [--trace T.json]
      [--markdown]
  python3 -m lamina.distcheck hardware OUT.json   # a hardware file for this host

`hardware` writes the hardware description bench/dist_vs_plan.py plans
with: one small CPU core as the "GPU" (what the comparison needs is the
schedule's bubble, not absolute times). bench/dist_vs_plan.py uses the
functions below for its tables.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter

# A small CPU core as a "GPU": the plan's idle fraction is the schedule's
# bubble plus communication; absolute times do not matter here.
HOST_HARDWARE = {
    "name": "host-cpu", "peak_flops": 2e10, "gemm_efficiency": 1.0,
    "hbm_bandwidth": 1e10, "hbm_efficiency": 1.0, "hbm_bytes": 8 * 2**30,
    "reserved_bytes": 0, "intra_node_bandwidth": 5e9,
    "inter_node_bandwidth": 5e9, "intra_node_efficiency": 1.0,
    "inter_node_efficiency": 1.0, "intra_node_latency": 2e-5,
    "inter_node_latency": 2e-5, "gpus_per_node": 64,
}


def write_host_hardware(path):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(HOST_HARDWARE, f, indent=1)
        f.write("\n")


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def rows(measured, plan):
    """One dict per global rank: the runtime's figures and the plan's for
    that rank's pipeline rank (the plan prices every replica alike)."""
    out = []
    for r in measured["ranks"]:
        pr = plan["ranks"][r["pp"]]
        t, mem = pr["traffic"], pr["memory"]
        step = pr["busy_s"] + pr["idle_s"]
        out.append(dict(
            rank=r["rank"], pp=r["pp"], dp=r["dp"],
            p2p=r["p2p_bytes_per_step"], p2p_plan=t["p2p_bytes"],
            dp_bytes=r["collective_bytes_per_step"],
            dp_bytes_plan=t["data_parallel_bytes"],
            tp_bytes=r.get("tensor_parallel_bytes_per_step", 0),
            tp_bytes_plan=t.get("tensor_parallel_bytes", 0),
            ep_bytes=r.get("expert_parallel_bytes_per_step", 0),
            ep_bytes_plan=t.get("expert_parallel_bytes", 0),
            idle=r["idle_fraction"],
            idle_plan=pr["idle_s"] / step if step > 0 else 0.0,
            step=r["step_buffer_bytes"], arena=r["arena_bytes"],
            step_plan=mem.get("step_buffers", 0),
            step_exact=mem.get("step_buffers_exact", False),
            act_plan=mem["activations"], transient_plan=mem["transient"],
            weights_plan=mem["weights"], grads_plan=mem["grads"],
            optim_plan=mem["optimizer"],
            grad=r.get("peak_gradient_bytes", 0),
            grad_plan=mem.get("gradient_buffers", 0),
            state=r.get("state_bytes", 0),
            state_plan=mem["weights"] + mem["grads"] + mem["optimizer"],
            modules=len(pr.get("modules", []))))
    return out


def same(a, b):
    return abs(a - b) <= 0.5  # the runtime prints whole bytes per step


def within(row, key, tolerance):
    """row[key] against row[key + "_plan"]: exact on replica 0; other
    replicas' shards may be one element shorter (`tolerance` bytes)."""
    return abs(row[key] - row[key + "_plan"]) <= (
        0.5 if row["dp"] == 0 else tolerance)


def grads_equal(row):
    # At most two parts are held at once.
    return within(row, "grad", 8.5)


def step_equal(row):
    # Without recompute and the loss flags the plan estimates the residuals.
    return not row["step_exact"] or same(row["step"], row["step_plan"])


def state_equal(row):
    # Per module at most the parameter, gradient and two optimizer slots.
    return within(row, "state", 16.0 * (row["modules"] + 1))


# The figures that must agree: (row key, its check). The plan's figure is
# row[key + "_plan"].
CHECKS = (
    ("p2p", lambda r: same(r["p2p"], r["p2p_plan"])),
    ("dp_bytes", lambda r: same(r["dp_bytes"], r["dp_bytes_plan"])),
    ("tp_bytes", lambda r: same(r["tp_bytes"], r["tp_bytes_plan"])),
    ("grad", grads_equal),
    ("step", step_equal),
    ("state", state_equal),
)


# The expert-parallel all-to-alls move the rows the run's router sends
# elsewhere; the plan prices an even routing (each rank's share of every
# rank's rows). They agree within this fraction on the test models; a
# missing exchange, a wrong row size or count would be a third or more off.
EP_ROUTING_TOLERANCE = 0.1


def ep_equal(row):
    plan = row["ep_bytes_plan"]
    return abs(row["ep_bytes"] - plan) <= max(0.5, EP_ROUTING_TOLERANCE * plan)


def ep_lines(rs):
    if not any(r["ep_bytes"] or r["ep_bytes_plan"] for r in rs):
        return []
    out = ["expert-parallel B/step, run vs plan (even routing; within "
           f"{EP_ROUTING_TOLERANCE:.0%}):"]
    for r in rs:
        plan = r["ep_bytes_plan"]
        off = (r["ep_bytes"] - plan) / plan if plan else 0.0
        out.append(f"  rank {r['rank']} ({r['pp']}, {r['dp']}): "
                   f"{r['ep_bytes']:.0f} vs {plan:.0f} ({off:+.1%})"
                   + ("" if ep_equal(r) else " DIFFERS"))
    return out


def relation(row, key, ok):
    if key == "step" and not row["step_exact"]:
        return "~"  # the plan's estimate
    return "=" if ok(row) else "!="


def bytes_equal(row):
    return all(ok(row) for _, ok in CHECKS) and ep_equal(row)


def markdown(rs):
    """The table of bench/dist_vs_plan.py and docs/results/performance.md."""
    lines = ["| rank (pp, dp) | p2p B/step run / plan | DP B/step run / plan "
             "| TP B/step run / plan "
             "| gradient buffers run / plan | step buffer run / plan "
             "| state run / plan "
             "| idle run / plan | step buffer + arena (run) "
             "| activ + transient (plan) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rs:
        checked = " | ".join(
            f"{r[k]:.0f} / {r[k + '_plan']:.0f}"
            + ("" if ok(r) else " **DIFFERS**")
            + (" (plan estimate)" if relation(r, k, ok) == "~" else "")
            for k, ok in CHECKS)
        lines.append(
            f"| {r['rank']} ({r['pp']}, {r['dp']}) | {checked} | "
            f"{r['idle']:.1%} / {r['idle_plan']:.1%} | "
            f"{r['step']} + {r['arena']} = {r['step'] + r['arena']} | "
            f"{r['act_plan']:.0f} + {r['transient_plan']:.0f} = "
            f"{r['act_plan'] + r['transient_plan']:.0f} |")
    return lines


def text(rs):
    """A compact plain-text table: the checked figures and idle fraction."""
    head = ("rank (pp, dp)", "p2p B/step run vs plan",
            "DP B/step run vs plan", "TP B/step run vs plan",
            "grad buffers B run vs plan",
            "step buffer B run vs plan", "state B run vs plan",
            "idle run / plan")
    body = [(f"{r['rank']} ({r['pp']}, {r['dp']})",)
            + tuple(f"{r[k]:.0f} {relation(r, k, ok)} "
                    f"{r[k + '_plan']:.0f}" for k, ok in CHECKS)
            + (f"{r['idle']:.0%} / {r['idle_plan']:.0%}",) for r in rs]
    widths = [max(len(row[i]) for row in [head] + body)
              for i in range(len(head))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()
            for row in [head] + body]


def trace_summary(path):
    events = load(path)
    events = events.get("traceEvents", []) if isinstance(events, dict) \
        else events
    spans = [e for e in events if e.get("ph") == "X"]
    ranks = {e["pid"] for e in events if "pid" in e}
    cats = Counter(e.get("cat", "?") for e in spans)
    return (f"{len(ranks)} ranks, {len(spans)} events ("
            + ", ".join(f"{c} {n}" for c, n in sorted(cats.items()))
            + "); open it in https://ui.perfetto.dev or chrome://tracing")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m lamina.distcheck",
                                 description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compare", help="statistics against the plan")
    c.add_argument("stats", help="OUTDIR/run --stats FILE")
    c.add_argument("plan", help="lamina plan ... --format json")
    c.add_argument("--trace", help="also summarise this --trace FILE")
    c.add_argument("--markdown", action="store_true",
                   help="the longer table with memory (docs/results/performance.md)")
    h = sub.add_parser("hardware", help="write a hardware JSON for this host")
    h.add_argument("out")
    args = ap.parse_args(argv)
    if args.cmd == "hardware":
        write_host_hardware(args.out)
        return 0
    measured, plan = load(args.stats), load(args.plan)
    rs = rows(measured, plan)
    print(f"{measured.get('config', '')}, {measured.get('steps', '?')} steps: "
          "measured (run) against lamina plan")
    print("\n".join((markdown(rs) if args.markdown else text(rs))
                    + ep_lines(rs)))
    if args.trace:
        print(f"trace: {trace_summary(args.trace)}")
    bad = [str(r["rank"]) for r in rs if not bytes_equal(r)]
    if bad:
        print("bytes differ from the plan on rank " + ", ".join(bad),
              file=sys.stderr)
        return 1
    routed = (f"; the expert-parallel all-to-alls' within "
              f"{EP_ROUTING_TOLERANCE:.0%} of even routing's"
              if ep_lines(rs) else "")
    print("every bytes figure equals the plan's (traffic, gradient buffers, "
          f"step buffer, state){routed}. Idle: the plan's is the "
          "schedule's bubble and exposed communication; the run's also "
          "counts copies, MPI progress and, with more ranks than cores, "
          "waits for descheduled peers (docs/results/performance.md)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
