"""``lamina.plan`` and ``lamina.search``: the planner from Python.

Both run ``lamina plan`` (docs/plan.md) and return :class:`Plan` objects
built from its JSON report (schema in docs/plan.md, loader in
:mod:`lamina.planfile`) and its HTML page.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from typing import TYPE_CHECKING, Any, Mapping

from lamina._tools import find_tool, run_tool
from lamina.program import dim_args, prepare_model

if TYPE_CHECKING:  # imported lazily: `python -m lamina.planfile` runs it
    from lamina import planfile

_SPEC = re.compile(r"^[a-z0-9_-]+:")  # a built-in shape, `gpt:layers=8,...`


class Plan:
    """One priced configuration.

    ``summary`` (dict: step time, bubble, MFU, memory, ...), ``config``
    (dict), ``ranks`` (per pipeline rank: modules, memory, traffic),
    ``modules``, ``timeline`` (the simulated actions per rank) and
    ``warnings``; :meth:`to_json`, :meth:`to_html`, :meth:`plot`; shown as
    its HTML report in a notebook.
    """

    def __init__(self, doc: dict[str, Any], html: str = "") -> None:
        from lamina import planfile
        self.doc = doc
        self._parsed = planfile.parse_plan(doc)
        self._html = html

    @property
    def summary(self) -> dict[str, Any]:
        return dict(self.doc["summary"])

    @property
    def config(self) -> dict[str, Any]:
        return dict(self.doc["config"])

    @property
    def ranks(self) -> list[planfile.Rank]:
        return self._parsed.ranks

    @property
    def modules(self) -> list[planfile.Module]:
        return self._parsed.modules

    @property
    def timeline(self) -> list[list[planfile.Action]]:
        return self._parsed.timeline

    @property
    def warnings(self) -> list[str]:
        return list(self._parsed.warnings)

    @property
    def model_name(self) -> str:
        return self._parsed.model_name

    def to_json(self, path: str | os.PathLike | None = None) -> str:
        """The report as ``lamina plan --format json`` writes it (and into
        ``path`` when given)."""
        text = json.dumps(self.doc, indent=2)
        if path is not None:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        return text

    def to_html(self, path: str | os.PathLike | None = None) -> str:
        """The self-contained HTML report (``lamina plan --html``)."""
        if path is not None:
            with open(path, "w", encoding="utf-8") as f:
                f.write(self._html)
        return self._html

    def _repr_html_(self) -> str:
        return self._html

    def __repr__(self) -> str:
        c, s = self.config, self.summary
        return (f"<Plan {self.model_name}: p{c['pp']} d{c['dp']} t{c['tp']} "
                f"m{c['micro_batches']} {c['schedule']} zero{c['zero']}, step "
                f"{s['step_time_s']:.4g} s, bubble {s['bubble_fraction']:.1%}, "
                f"MFU {s['mfu']:.1%}, peak {s['peak_memory_bytes'] / 2**30:.2f} "
                f"GiB, fits {s['fits']}>")

    def plot(self, path: str | os.PathLike | None = None) -> Any:
        """The timeline and the memory per rank as one matplotlib figure
        (saved to ``path`` when given); needs matplotlib."""
        import matplotlib
        if path is not None:
            matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from lamina import planfile
        fig, (top, bottom) = plt.subplots(
            2, 1, figsize=(12, 0.6 * len(self.timeline) + 5.5),
            gridspec_kw={"height_ratios": [max(1, len(self.timeline)), 3]})
        planfile.plot_timeline(self._parsed, ax=top)
        planfile.plot_memory(self._parsed, ax=bottom)
        fig.tight_layout()
        if path is not None:
            fig.savefig(path, bbox_inches="tight")
        return fig


def _model_arg(model: Any, folder: str, example_inputs: Any,
               dims: Mapping[str, int] | None) -> str:
    if isinstance(model, str) and not os.path.exists(model) and _SPEC.match(model):
        return model
    path, _ = prepare_model(model, folder, example_inputs=example_inputs, dims=dims)
    return path


def _options(**kw: Any) -> list[str]:
    out: list[str] = []
    for key, value in kw.items():
        if value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        out += [flag] if value is True else [f"{flag}={value}"]
    return out


def plan(model: Any, *, dims: Mapping[str, int] | None = None,
         example_inputs: Any = None, pp: int = 1, dp: int = 1, tp: int = 1,
         ep: int = 1, moe_imbalance: float | None = None,
         micro_batches: int = 1, micro_batch_size: int | None = None,
         schedule: str | None = None, zero: int | None = None,
         recompute: str | None = None, precision: str | None = None,
         hardware: str | None = None, chunks: int | None = None,
         module_regex: str | None = None,
         fuse_attention: bool = True, target: str | None = None) -> Plan:
    """Prices one configuration with ``lamina plan`` (docs/plan.md).

    ``model``: an ONNX path, an ``onnx.ModelProto``, a ``torch.nn.Module``
    with ``example_inputs``, or a built-in shape such as
    ``"gpt:layers=8,hidden=1024,heads=16,seq=1024,vocab=32000"``. The other
    arguments are ``lamina plan``'s flags of the same names.
    """
    with tempfile.TemporaryDirectory(prefix="lamina-plan-") as tmp:
        arg = _model_arg(model, tmp, example_inputs, dims)
        json_path, html_path = os.path.join(tmp, "p.json"), os.path.join(tmp, "p.html")
        run_tool([find_tool(), "plan", arg, *dim_args(dims),
                  *_options(pp=pp, dp=dp, tp=tp, ep=ep,
                            moe_imbalance=moe_imbalance,
                            micro_batches=micro_batches,
                            micro_batch_size=micro_batch_size,
                            schedule=schedule, zero=zero, recompute=recompute,
                            precision=precision, hardware=hardware,
                            chunks=chunks, module_regex=module_regex,
                            no_fuse_attention=not fuse_attention,
                            target=target),
                  "--format=json", "-o", json_path, f"--html={html_path}"])
        with open(json_path, encoding="utf-8") as f:
            doc = json.load(f)
        with open(html_path, encoding="utf-8") as f:
            html = f.read()
    return Plan(doc, html)


def search(model: Any, *, gpus: int, global_batch: int,
           dims: Mapping[str, int] | None = None, example_inputs: Any = None,
           top: int = 5, hardware: str | None = None,
           precision: str | None = None, module_regex: str | None = None,
           fuse_attention: bool = True,
           moe_imbalance: float | None = None) -> list[Plan]:
    """The fastest configurations that fit (``lamina plan --search``), best
    first, each priced in full as :func:`plan` prices it."""
    with tempfile.TemporaryDirectory(prefix="lamina-search-") as tmp:
        arg = _model_arg(model, tmp, example_inputs, dims)
        out = os.path.join(tmp, "s.json")
        common = _options(hardware=hardware, precision=precision,
                          module_regex=module_regex,
                          moe_imbalance=moe_imbalance,
                          no_fuse_attention=not fuse_attention)
        run_tool([find_tool(), "plan", arg, *dim_args(dims), "--search",
                  f"--gpus={gpus}", f"--global-batch={global_batch}",
                  f"--top={top}", *common, "--format=json", "-o", out])
        with open(out, encoding="utf-8") as f:
            best = json.load(f)["best"]
        plans = []
        for c in best:
            plans.append(plan(
                arg, dims=dims, pp=c["pp"], dp=c["dp"], tp=c["tp"],
                ep=c.get("ep", 1), moe_imbalance=moe_imbalance,
                micro_batches=c["micro_batches"],
                micro_batch_size=c["micro_batch_size"], schedule=c["schedule"],
                zero=c["zero"], recompute="full" if c["recompute"] else "none",
                precision=c.get("precision", precision), hardware=hardware,
                module_regex=module_regex, fuse_attention=fuse_attention))
    return plans
