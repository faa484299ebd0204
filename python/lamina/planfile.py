"""Load a `lamina plan --format json` file into Python objects and plot it.

    from lamina.planfile import load_plan, plot_timeline, plot_memory
    plan = load_plan("plan.json")
    print(plan.summary.step_time_s, [r.memory.total for r in plan.ranks])
    plot_timeline(plan, "timeline.png")
    plot_memory(plan, "memory.png")

or `python3 -m lamina.planfile plan.json [--timeline T.png] [--memory M.png]`.
The schema (version 1) is documented in docs/plan.md. Plotting needs
matplotlib; loading does not.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field, fields
from typing import Any

SCHEMA, VERSION = "lamina-plan", 1


def _build(cls, data: dict[str, Any]):
    """A dataclass from the keys it declares (newer keys are ignored)."""
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})


@dataclass
class Module:
    name: str
    role: str
    params: int
    forward_flops: float
    stage: int
    pipeline_rank: int
    body: int = -1
    matmul_flops: float = 0
    forward_bytes: float = 0
    output_bytes: int = 0
    activation_bytes: int = 0


@dataclass
class Memory:
    weights: float
    grads: float
    optimizer: float
    activations: float
    transient: float
    total: float
    gradient_buffers: float = 0  # ZeRO 2-3 full gradients in flight


@dataclass
class Traffic:
    p2p_bytes: float
    data_parallel_bytes: float
    tensor_parallel_bytes: float
    sends: int = 0
    expert_parallel_bytes: float = 0  # --ep: the all-to-alls, even routing
    collectives: int = 0


@dataclass
class Rank:
    pipeline_rank: int
    modules: list[str]
    params: float
    memory: Memory
    traffic: Traffic
    busy_s: float
    idle_s: float
    peak_in_flight: int = 0
    shared_params: float = 0


@dataclass
class Action:
    action: str
    kind: str
    stage: int
    micro_batch: int
    start_s: float
    end_s: float


@dataclass
class Summary:
    step_time_s: float
    bubble_fraction: float
    exposed_comm_s: float
    tokens_per_s: float
    mfu: float
    peak_memory_bytes: float
    fits: bool
    compute_only_step_s: float = 0
    tensor_parallel_time_s: float = 0
    samples_per_step: float = 0
    tokens_per_step: float = 0
    model_flops_per_step: float = 0
    hardware_flops_per_step: float = 0
    matmul_flops_per_step: float = 0
    model_tflops_per_gpu: float = 0
    hardware_tflops_per_gpu: float = 0
    matmul_tflops_per_gpu: float = 0
    hfu: float = 0
    value_scale: float = 1


@dataclass
class Plan:
    model_name: str
    modules: list[Module]
    hardware: dict[str, Any]
    config: dict[str, Any]
    summary: Summary
    ranks: list[Rank]
    timeline: list[list[Action]]
    warnings: list[str] = field(default_factory=list)


def parse_plan(doc: dict[str, Any]) -> Plan:
    if doc.get("schema") != SCHEMA:
        raise ValueError(f"not a lamina plan (schema {doc.get('schema')!r})")
    if doc.get("version") != VERSION:
        raise ValueError(f"plan version {doc.get('version')}, this reader "
                         f"knows {VERSION}")
    ranks = [Rank(pipeline_rank=r["pipeline_rank"], modules=r["modules"],
                  params=r["params"], memory=_build(Memory, r["memory"]),
                  traffic=_build(Traffic, r["traffic"]), busy_s=r["busy_s"],
                  idle_s=r["idle_s"],
                  peak_in_flight=r.get("peak_in_flight", 0),
                  shared_params=r.get("shared_params", 0))
             for r in doc["ranks"]]
    return Plan(model_name=doc["model"]["name"],
                modules=[_build(Module, m) for m in doc["model"]["modules"]],
                hardware=doc["hardware"], config=doc["config"],
                summary=_build(Summary, doc["summary"]), ranks=ranks,
                timeline=[[_build(Action, a) for a in rank]
                          for rank in doc.get("timeline", [])],
                warnings=doc.get("warnings", []))


def load_plan(path: str) -> Plan:
    with open(path, encoding="utf-8") as f:
        return parse_plan(json.load(f))


_COLOURS = {"forward": "#4c8bf5", "backward": "#34a853",
            "optimizer-step": "#9c27b0", "send": "#fbbc05",
            "recv": "#fbbc05"}  # collectives: red


def plot_timeline(plan: Plan, out: str | None = None, ax=None):
    """Compute and communication bars per pipeline rank; returns the axes."""
    import matplotlib
    if out:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    if ax is None:
        _, ax = plt.subplots(figsize=(12, 0.6 * len(plan.timeline) + 1.5))
    for r, actions in enumerate(plan.timeline):
        rows: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
        colours: dict[bool, list[str]] = {True: [], False: []}
        for a in actions:
            if a.end_s <= a.start_s or a.kind == "recv":
                continue
            compute = a.kind in ("forward", "backward", "optimizer-step")
            rows[compute].append((a.start_s, a.end_s - a.start_s))
            colours[compute].append(_COLOURS.get(a.kind, "#ea4335"))
        ax.broken_barh(rows[True], (r - 0.4, 0.5), facecolors=colours[True])
        ax.broken_barh(rows[False], (r + 0.12, 0.25),
                       facecolors=colours[False])
    ax.set_yticks(range(len(plan.timeline)))
    ax.set_yticklabels([f"rank {r}" for r in range(len(plan.timeline))])
    ax.invert_yaxis()
    ax.set_xlabel("seconds")
    c = plan.config
    ax.set_title(f"{plan.model_name}: p{c['pp']} d{c['dp']} t{c['tp']} "
                 f"m{c['micro_batches']} {c['schedule']}, step "
                 f"{plan.summary.step_time_s:.4g} s, bubble "
                 f"{plan.summary.bubble_fraction:.1%}")
    if out:
        ax.figure.savefig(out, bbox_inches="tight")
    return ax


def plot_memory(plan: Plan, out: str | None = None, ax=None):
    """Stacked memory parts per pipeline rank against HBM; returns the axes."""
    import matplotlib
    if out:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    if ax is None:
        _, ax = plt.subplots(figsize=(max(6, 0.4 * len(plan.ranks) + 3), 4))
    gib = 2.0 ** 30
    xs = [r.pipeline_rank for r in plan.ranks]
    bottom = [0.0] * len(xs)
    for part in ("weights", "grads", "optimizer", "activations", "transient",
                 "gradient_buffers"):
        vals = [getattr(r.memory, part) / gib for r in plan.ranks]
        ax.bar(xs, vals, bottom=bottom, label=part)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.axhline(plan.hardware["hbm_bytes"] / gib, color="k", linestyle="--",
               label=f"{plan.hardware['name']} HBM")
    ax.set_xticks(xs)
    ax.set_xlabel("pipeline rank")
    ax.set_ylabel("GiB per GPU")
    ax.legend(fontsize="small")
    if out:
        ax.figure.savefig(out, bbox_inches="tight")
    return ax


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m lamina.planfile",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("plan", help="JSON from lamina plan --format json")
    ap.add_argument("--timeline", metavar="PNG")
    ap.add_argument("--memory", metavar="PNG")
    args = ap.parse_args(argv)
    try:
        plan = load_plan(args.plan)
    except (OSError, ValueError, KeyError) as e:
        print(f"error: {args.plan}: {e}", file=sys.stderr)
        return 1
    s = plan.summary
    print(f"{plan.model_name}: step {s.step_time_s:.4g} s, bubble "
          f"{s.bubble_fraction:.1%}, MFU {s.mfu:.1%}, peak "
          f"{s.peak_memory_bytes / 2**30:.2f} GiB, {len(plan.ranks)} ranks, "
          f"{sum(len(t) for t in plan.timeline)} actions")
    # Plotting is optional: without matplotlib the summary still prints.
    for out, plot in ((args.timeline, plot_timeline), (args.memory, plot_memory)):
        if not out:
            continue
        try:
            plot(plan, out)
        except ImportError:
            print(f"note: matplotlib is not installed; {out} not written",
                  file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
