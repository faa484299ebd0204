#!/usr/bin/env python3
"""Hugging Face architectures trained by Lamina against PyTorch.

    python3 scripts/hf-survey.py [--task causal-lm|masked-lm|seq2seq|image-classification]
        [--loss logits|own|both] [--exporter torchscript|dynamo|both]
        [--pp P --micro-batches M] [--config KEY=VALUE ...] [--static]
        [--compile-flag=FLAG ...] [--experts auto|eager|batched_mm]
        [--steps 10] [--lr 0.1] [--markdown] [--lamina build/bin/lamina]
        [--work DIR] [ARCH ...]

Needs torch, transformers and onnxscript (`pip install transformers
onnxscript`; PyPI, not CI requirements: the survey is run by hand). ARCH is
any Transformers model type (`bert`, `t5`, `vit`, ... as
`AutoConfig.for_model` spells it; default: the task's surveyed ones, see
hf_survey/models.py DEFAULTS). For each architecture a tiny randomly
initialised model of the task's Auto class (2 layers, hidden 32, vocab 64,
eager attention, no dropout; scripts/hf_survey/models.py) is exported with
the TorchScript (opset 14) and the dynamo (opset 18) exporter, returning

  logits  `lamina compile --loss causal-lm --logits logits` (causal LM) or
          `--loss cross-entropy --logits logits --labels labels` (a
          `labels` input added to the graph);
  own     the model's own loss (`model(..., labels=labels).loss`),
          `lamina compile --loss-output loss`;

trained in PyTorch for 10 SGD steps (lr 0.1) on exactly the batches the
compiled `run --seed 1` draws (the causal-LM window, the masked-LM and
seq2seq recipes on a token file, shuffled epochs of `--data-dir` arrays for
images; scripts/hf_survey/data.py), then compiled with `lamina compile
--mode train` and trained the same way. Prints one line per export: whether
attention fused, what the compile restored, PyTorch's first and last loss
and the worst relative difference of the losses (ok: within 1e-5), or the
first line of the error of the step that failed. With --pp P
--micro-batches M the program is a P-rank 1F1B pipeline of M micro-batches
of 4/M rows run under mpirun: the same losses (a model with batch norm,
whose statistics are then each micro-batch's, is trained in PyTorch on the
same micro-batches). --loss defaults to logits for causal-lm and both
otherwise; a model with batch norm is trained and exported in train mode
(batch statistics). --static exports at the training shape, --config sets
a config attribute after the tiny sizes, --compile-flag passes a flag on
to `lamina compile` (`--compile-flag=--freeze=embed_positions`).
--markdown prints the lines as rows of docs/model-survey.md's tables.
Mixture-of-experts models (Mixtral, Qwen2-MoE, OLMoE) export with
--experts auto: the eager experts for TorchScript (its loop unrolled),
batched_mm for dynamo (which cannot export the eager loop); both import as
one graph.moe (docs/moe-design.md). The PyTorch reference trains the eager
experts either way: the weights are the same.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import traceback

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(SRC, "python"))
sys.path.insert(0, os.path.join(SRC, "scripts"))

RTOL = 1e-5


def first_error(text):
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    if "## Exception summary" in lines:  # the dynamo exporter's
        return lines[lines.index("## Exception summary") + 1][:240]
    for ln in lines:
        if "error" in ln.lower():
            return ln[:240]
    return (lines[-1] if lines else "?")[:240]


def losses_of(path):
    return [float(m.group(1)) for line in open(path, errors="replace")
            if (m := re.match(r"step \d+ loss (\S+) ", line))]


def compile_flags(task, own):
    if own:
        return ["--loss-output", "loss"]
    if task == "causal-lm":
        return ["--loss", "causal-lm", "--logits", "logits"]
    return ["--loss", "cross-entropy", "--logits", "logits", "--labels",
            "labels"]


def experts_for(model, exporter, choice):
    """Sets the experts implementation the export traces (a mixture-of-experts
    model only): eager for TorchScript, batched_mm for dynamo under "auto".
    Returns it, or None for a model without experts."""
    inner = getattr(model, "inner", None)
    can = getattr(inner, "_can_set_experts_implementation", None)
    if inner is None or can is None or not can():
        return None
    impl = choice if choice != "auto" else (
        "batched_mm" if exporter == "dynamo" else "eager")
    inner.set_experts_implementation(impl)
    return impl


def one(a, task, arch, exporter, own, ref, data_flags, out):
    """Export, compile, train one model; returns (status, details)."""
    from hf_survey import data as D
    from hf_survey import models as M

    rows = M.BATCH // a.micro_batches
    model, spec = M.build(task, arch, M.parse_overrides(a.config), own=own)
    experts = experts_for(model, exporter, a.experts)
    tag = f"{exporter}-{'own' if own else 'logits'}"
    path = os.path.join(out, f"{tag}.onnx")
    try:
        M.export(model, task, exporter, path, static=rows if a.static else None)
        if not own and task != "causal-lm":
            M.add_labels_input(path, task)
    except Exception as e:  # noqa: BLE001 - report and go on
        if a.verbose:
            traceback.print_exc()
        return "export failed", (f"{type(e).__name__}: {first_error(str(e))}"
                                 + (f" (experts {experts})" if experts else ""))
    syms = M.symbolic_dims(path)
    dims = []
    for name, size in (("batch", rows), ("seq", M.SEQ), ("tgt", M.TGT)):
        if name in syms:
            dims += ["--dim", f"{name}={size}"]
    dist = (["--pp", str(a.pp), "--micro-batches", str(a.micro_batches),
             "--schedule", "1f1b"] if a.pp > 1 else [])
    pad = M.padding_flags(model) if exporter == "torchscript" else []
    prog = os.path.join(out, f"train-{tag}")
    cmd = [a.lamina, "compile", path, "--mode", "train",
           *compile_flags(task, own), *dims, "-o", prog, *dist, *pad,
           *(a.compile_flag or [])]
    if a.verbose:
        print("  $", " ".join(cmd))
    c = subprocess.run(cmd, capture_output=True, text=True)
    if c.returncode:
        return "compile failed", first_error(c.stderr or c.stdout)
    cpp = ""
    for f in ("model.cpp", "program.cpp"):
        if os.path.exists(os.path.join(prog, f)):
            cpp = open(os.path.join(prog, f)).read()
    # In the train step (the eval step repeats the forward's).
    step = cpp[max(cpp.find("lamina_eval_program"), 0):]
    fused = len(re.findall(r"gen::attention\(", step))
    causal = len(re.findall(r"gen::attention\(.*, true, lamina", step))
    m = re.search(r"(\d+) split off .*?(\d+) tied back, (\d+) zero biases",
                  c.stdout)
    restored = (f"split {m.group(1)}, tied {m.group(2)}, biases {m.group(3)}"
                if m else "-")
    launch = (["mpirun", "--oversubscribe", "--allow-run-as-root", "-np",
               str(a.pp)] if a.pp > 1 else [])
    log = os.path.join(out, f"{tag}.log")
    run = [*launch, os.path.join(prog, "run"), *data_flags,
           *D.recipe_flags(task, spec, own), "--optimizer", "sgd", "--lr",
           str(a.lr), "--steps", str(a.steps), "--seed", str(a.seed),
           "--log-every", "1", "--threads", "1"]
    if a.verbose:
        print("  $", " ".join(run))
    with open(log, "w") as f:
        r = subprocess.run(run, stdout=f, stderr=subprocess.STDOUT)
    if r.returncode:
        return "run failed", first_error(open(log, errors="replace").read())
    got = losses_of(log)
    if len(got) != len(ref):
        return "run failed", f"{len(got)} losses logged, PyTorch has {len(ref)}"
    worst = max(abs(g - w) / abs(w) for g, w in zip(got, ref))
    return ("ok" if worst <= RTOL else "differs"), dict(
        fused=f"{fused} ({causal} causal)", restored=restored, worst=worst)


def survey(a, task, arch):
    from hf_survey import data as D
    from hf_survey import models as M

    out = os.path.join(a.work, task, arch)
    os.makedirs(out, exist_ok=True)
    data_flags = D.write(task, out)
    try:
        model, spec = M.build(task, arch, M.parse_overrides(a.config), own=True)
        # Batch norm's statistics are each micro-batch's in a pipeline.
        micro = a.micro_batches if M.has_batchnorm(model) else 1
        ref = D.train(model, task, spec, out, a.seed, a.steps, a.lr, micro)
    except Exception as e:  # noqa: BLE001
        if a.verbose:
            traceback.print_exc()
        print(f"{task} {arch}: PyTorch failed: {type(e).__name__}: "
              f"{first_error(str(e))}")
        return
    exporters = ["torchscript", "dynamo"] if a.exporter == "both" else [a.exporter]
    losses = {"logits": [False], "own": [True], "both": [False, True]}[a.loss]
    where = f"pp {a.pp} x {a.micro_batches} mb" if a.pp > 1 else "1 process"
    for exporter in exporters:
        for own in losses:
            status, info = one(a, task, arch, exporter, own, ref, data_flags, out)
            loss = "own loss" if own else "logits"
            if isinstance(info, dict):
                detail = (f"attention {info['fused']}, restored {info['restored']}, "
                          f"PyTorch {ref[0]:.4f} -> {ref[-1]:.4f}")
                worst = f"{info['worst']:.1e}"
            else:
                detail, worst = info, "-"
            if a.markdown:
                print(f"| {arch} | {task} | {exporter} | {loss} | {where} | "
                      f"{status} | {worst} | {detail.replace('|', '/')} |")
            else:
                print(f"{task:12} {arch:12} {exporter:11} {loss:8} {where}: "
                      f"{status:14} worst {worst:8} {detail}")
            sys.stdout.flush()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("arch", nargs="*")
    p.add_argument("--task", default="causal-lm",
                   choices=["causal-lm", "masked-lm", "seq2seq",
                            "image-classification"])
    p.add_argument("--loss", default=None, choices=["logits", "own", "both"],
                   help="default: logits for causal-lm, both otherwise")
    p.add_argument("--exporter", default="both",
                   choices=["torchscript", "dynamo", "both"])
    p.add_argument("--config", action="append", metavar="KEY=VALUE",
                   help="a config attribute (Python literal), after the tiny sizes")
    p.add_argument("--compile-flag", action="append", metavar="FLAG",
                   help="passed on to lamina compile (--compile-flag=--freeze=X)")
    p.add_argument("--experts", default="auto",
                   choices=["auto", "eager", "batched_mm"],
                   help="mixture-of-experts models' experts code for the export "
                        "(auto: eager for torchscript, batched_mm for dynamo)")
    p.add_argument("--static", action="store_true",
                   help="export at the training shape (no symbolic dims)")
    p.add_argument("--lamina", default=os.path.join(SRC, "build", "bin", "lamina"))
    p.add_argument("--work", default="/tmp/lamina-hf-survey")
    p.add_argument("--pp", type=int, default=1)
    p.add_argument("--micro-batches", type=int, default=1)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--markdown", action="store_true")
    p.add_argument("-v", "--verbose", action="store_true")
    a = p.parse_args()
    if a.loss is None:
        a.loss = "logits" if a.task == "causal-lm" else "both"
    try:
        import transformers  # noqa: F401
    except ImportError as e:
        print(f"needs torch, transformers and onnxscript: {e}", file=sys.stderr)
        return 2
    from hf_survey import models as M

    for arch in a.arch or M.DEFAULTS[a.task]:
        survey(a, a.task, arch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
