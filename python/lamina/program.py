"""``lamina.compile`` and the compiled :class:`Program`.

A thin, typed layer over the command-line tools: ``compile`` runs ``lamina
compile``; :meth:`Program.train` runs ``OUTDIR/run`` (under ``mpirun`` for
a distributed program) and yields its log as :class:`StepRecord`;
:meth:`Program.run` runs an inference program; :meth:`Program.export`
writes the trained weights as ONNX or safetensors. Failures raise
:class:`lamina.LaminaError` with the tool's own message.
"""

from __future__ import annotations

import os
import json
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence, Union

import numpy as np

from lamina._tools import LaminaError, _message, find_tool, mpirun_command, run_tool
from lamina.torchio import TorchNames, export_module, freeze_regex

PathLike = Union[str, "os.PathLike[str]"]
TRAINED = "trained.onnx"
PROGRAM_FILE = "program.json"


def _is_torch_module(obj: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.nn.Module)


def _is_model_proto(obj: Any) -> bool:
    onnx = sys.modules.get("onnx")
    return onnx is not None and isinstance(obj, onnx.ModelProto)


def prepare_model(model: Any, folder: str, *, example_inputs: Any = None,
                  dims: Mapping[str, int] | None = None,
                  input_names: Sequence[str] | None = None,
                  output_names: Sequence[str] | None = None,
                  dynamic_axes: Mapping[str, Mapping[int, str]] | None = None,
                  opset: int = 17) -> tuple[str, TorchNames | None]:
    """The ONNX file for ``model`` (a path, an ``onnx.ModelProto`` or a
    ``torch.nn.Module``), written into ``folder`` when it is not a path; and
    the module's parameter names when it is a module."""
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.isfile(path):
            raise LaminaError(f"cannot open model '{path}': no such file")
        return os.path.abspath(path), None
    if _is_model_proto(model):
        import onnx
        path = os.path.join(folder, "source.onnx")
        onnx.save(model, path)
        return path, None
    if _is_torch_module(model):
        if example_inputs is None:
            raise TypeError("a torch.nn.Module needs example_inputs (a tensor "
                            "or a tuple of tensors) to be exported")
        # named after the class (plans name the model after the file)
        os.makedirs(os.path.join(folder, "source"), exist_ok=True)
        stem = re.sub(r"[^A-Za-z0-9_.-]", "_", type(model).__name__.lower())
        path = os.path.join(folder, "source", f"{stem}.onnx")
        names = export_module(model, example_inputs, path, dims=dims,
                              input_names=input_names,
                              output_names=output_names,
                              dynamic_axes=dynamic_axes, opset=opset)
        return path, names
    raise TypeError("model: a path, an onnx.ModelProto or a torch.nn.Module, "
                    f"not {type(model).__name__}")


def dim_args(dims: Mapping[str, int] | None) -> list[str]:
    return [f"--dim={k}={int(v)}" for k, v in (dims or {}).items()]


@dataclass
class StepRecord:
    """One logged training step (or, with ``loss`` None, an evaluation
    before the first step)."""

    step: int
    loss: float | None
    lr: float | None = None
    tokens_per_s: float | None = None
    elapsed_s: float | None = None
    eval_loss: float | None = None


_STEP = re.compile(r"^step (\d+) loss (\S+) lr (\S+) tokens/s (\S+)"
                   r"(?: elapsed (\S+?)s)?")
_EVAL = re.compile(r"^step (\d+) val loss (\S+)")


def _progress_wanted() -> bool:
    if sys.stderr is not None and hasattr(sys.stderr, "isatty") and sys.stderr.isatty():
        return True
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython and hasattr(ipython, "get_ipython") else None
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


class TrainingRun:
    """A running (or finished) ``OUTDIR/run``: iterate it for the
    :class:`StepRecord` of each logged step, as they are logged.

    The process starts at the first ``next()`` (or :meth:`wait`). A failed
    run raises :class:`LaminaError` with the program's message; leaving
    the loop early (or :meth:`close`) stops the program.
    """

    def __init__(self, command: list[str], steps: int, progress: bool | None,
                 on_success: Any = None, cwd: str | None = None) -> None:
        self.command = command
        self.steps = steps
        self.records: list[StepRecord] = []
        self.log: list[str] = []  # every line the program printed on stdout
        self._progress = _progress_wanted() if progress is None else progress
        self._on_success = on_success
        self._cwd = cwd
        self._proc: subprocess.Popen | None = None
        self._stderr: Any = None
        self._pending: StepRecord | None = None
        self._bar: Any = None
        self._done = False

    def __iter__(self) -> "TrainingRun":
        return self

    def _start(self) -> None:
        self._stderr = tempfile.TemporaryFile(mode="w+t")
        self._proc = subprocess.Popen(self.command, stdout=subprocess.PIPE,
                                      stderr=self._stderr, text=True,
                                      bufsize=1, cwd=self._cwd)
        if self._progress:
            try:
                from tqdm.auto import tqdm
                self._bar = tqdm(total=self.steps, unit="step")
            except ImportError:
                self._bar = None

    def _emit(self, rec: StepRecord) -> StepRecord:
        self.records.append(rec)
        if self._bar is not None and rec.loss is not None:
            self._bar.update(rec.step - self._bar.n)
            self._bar.set_postfix(loss=f"{rec.loss:.4f}", refresh=False)
        return rec

    def __next__(self) -> StepRecord:
        if self._done:
            raise StopIteration
        if self._proc is None:
            self._start()
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            line = line.rstrip("\n")
            self.log.append(line)
            m = _EVAL.match(line)
            if m:
                step, val = int(m.group(1)), float(m.group(2))
                if self._pending is not None and self._pending.step == step:
                    rec, self._pending = self._pending, None
                    rec.eval_loss = val
                    return self._emit(rec)
                held, self._pending = self._pending, None
                if held is not None:  # an evaluation of another step
                    self._pending = StepRecord(step, None, eval_loss=val)
                    return self._emit(held)
                return self._emit(StepRecord(step, None, eval_loss=val))
            m = _STEP.match(line)
            if m:
                rec = StepRecord(int(m.group(1)), float(m.group(2)),
                                 float(m.group(3)), float(m.group(4)),
                                 float(m.group(5)) if m.group(5) else None)
                held, self._pending = self._pending, rec
                if held is not None:
                    return self._emit(held)
        if self._pending is not None:
            held, self._pending = self._pending, None
            return self._emit(held)
        self._finish()
        raise StopIteration

    def _finish(self) -> None:
        assert self._proc is not None
        rc = self._proc.wait()
        self._done = True
        if self._bar is not None:
            self._bar.close()
        self._stderr.seek(0)
        err = self._stderr.read()
        self._stderr.close()
        if rc != 0:
            text = err or "\n".join(self.log)
            raise LaminaError(_message(text, rc), self.command, rc,
                              "\n".join(self.log) + "\n" + err)
        if self._on_success is not None:
            self._on_success()

    def wait(self) -> list[StepRecord]:
        """Runs to the end; returns every record."""
        for _ in self:
            pass
        return self.records

    def close(self) -> None:
        """Stops the program if it still runs."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._bar is not None:
            self._bar.close()
        self._done = True

    def __enter__(self) -> "TrainingRun":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    @property
    def losses(self) -> list[float]:
        """The training losses logged so far, in step order."""
        return [r.loss for r in self.records if r.loss is not None]


def _token_file(data: Any, folder: str, name: str) -> tuple[str, str]:
    """A ``--data`` file and its dtype for a path or an array of token ids."""
    if isinstance(data, (str, os.PathLike)):
        return os.fspath(data), ""
    ids = np.asarray(data)
    if ids.dtype.kind not in "iu" or ids.ndim != 1:
        raise TypeError(f"{name}: a path or a 1-D array of integer token ids")
    if ids.size and (ids.min() < 0 or ids.max() >= 2**32):
        raise ValueError(f"{name}: token ids must lie in [0, 2^32)")
    dtype = "uint16" if ids.size == 0 or ids.max() < 2**16 else "uint32"
    path = os.path.join(folder, f"{name}.bin")
    ids.astype(dtype).tofile(path)
    return path, dtype


def _npy_name(name: str) -> str:
    """The file ``run --data-dir`` reads input ``name`` from (as the driver's
    outputFileName escapes it)."""
    out = ""
    for i, b in enumerate(name.encode()):
        c = chr(b)
        keep = c.isascii() and (c.isalnum() or c in "_.-") and not (i == 0 and c == ".")
        out += c if keep else f"%{b:02X}"
    return out + ".npy"


def _data_source(data: Any, folder: str, name: str) -> tuple[str, str, str]:
    """(flag, path, --data-dtype) for a token file or ids (``--data``), or a
    folder of arrays or a mapping input name -> array (``--data-dir``,
    written next to the program)."""
    if isinstance(data, Mapping):
        path = os.path.join(folder, name)
        os.makedirs(path, exist_ok=True)
        for f in os.listdir(path):
            if f.endswith(".npy"):
                os.remove(os.path.join(path, f))
        for key, value in data.items():
            np.save(os.path.join(path, _npy_name(key)), np.asarray(value))
        return "--data-dir", path, ""
    if isinstance(data, (str, os.PathLike)) and os.path.isdir(data):
        return "--data-dir", os.fspath(data), ""
    path, dtype = _token_file(data, folder, name)
    return "--data", path, dtype


class Program:
    """A compiled Lamina program in ``out_dir`` (see :func:`compile`)."""

    def __init__(self, out_dir: str, *, mode: str, source: str,
                 ranks: int = 1, dims: Mapping[str, int] | None = None,
                 torch_names: TorchNames | None = None, log: str = "",
                 target: str = "host", temporary: Any = None) -> None:
        self.out_dir = out_dir
        self.mode = mode
        self.source = source
        self.ranks = ranks
        self.dims = dict(dims or {})
        self.torch_names = torch_names
        self.compile_log = log
        self.target = target
        self._temporary = temporary  # a TemporaryDirectory owned by us
        self._inference: str | None = None

    def __repr__(self) -> str:
        return (f"Program(mode={self.mode!r}, target={self.target!r}, "
                f"ranks={self.ranks}, out_dir={self.out_dir!r})")

    @property
    def executable(self) -> str:
        return os.path.join(self.out_dir, "run")

    @property
    def model_path(self) -> str:
        """The ONNX file the program reads its initial weights from."""
        restored = os.path.join(self.out_dir, "model.onnx")
        return restored if os.path.exists(restored) else self.source

    @property
    def weights_path(self) -> str:
        """The newest weights: the last training's export, else the initial."""
        trained = os.path.join(self.out_dir, TRAINED)
        return trained if os.path.exists(trained) else self.model_path

    # -- training ------------------------------------------------------

    def train(self, data: Any, steps: int, *, lr: float | None = None,
              lr_schedule: str | None = None, warmup: int | None = None,
              min_lr: float | None = None, cooldown: int | None = None,
              optimizer: str | None = None, weight_decay: float | None = None,
              no_decay_vectors: bool = False, momentum: float | None = None,
              clip: float | None = None, seed: int | None = None,
              log_every: int = 1, checkpoint_dir: PathLike | None = None,
              checkpoint_every: int | None = None, resume: bool = False,
              eval_data: Any = None, eval_every: int | None = None,
              eval_batches: int | None = None, grad_accum: int | None = None,
              threads: int | None = None, stats: PathLike | None = None,
              trace: PathLike | None = None,
              launcher: str | Sequence[str] | None = None,
              progress: bool | None = None, recipe: str | None = None,
              mask_rate: float | None = None, mask_token: int | None = None,
              decoder_start_token: int | None = None,
              vocab: int | None = None) -> TrainingRun:
        """Trains for ``steps`` steps (until step ``steps`` when resuming).

        ``data``/``eval_data`` (docs/training.md, "Training data"): a token
        file or a 1-D integer array, cut into examples by ``recipe``
        (``causal-lm``, ``masked-lm``, ``seq2seq``); or a folder of
        ``<input>.npy`` arrays, or a mapping from every model input's name
        to an ``[N, ...]`` array (both ``run --data-dir``; the mapping is
        written next to the program). The other arguments are ``run``'s
        flags of the same names. ``launcher``:
        ``"mpirun"`` (the default for a distributed program; ``mpirun -np
        P*D``), or a command prefix such as ``["srun", "-n", "4"]``.
        ``progress``: a ``tqdm`` bar (default: when stderr is a terminal or
        in a notebook). The weights after the last step are exported to
        ``OUTDIR/trained.onnx`` and used by :meth:`run` and :meth:`export`.
        """
        if self.mode != "train":
            raise LaminaError("train(): this program was compiled with "
                              f"mode={self.mode!r}")
        data_flag, data_path, dtype = _data_source(data, self.out_dir, "data")
        cmd = [self.executable, data_flag, data_path, "--steps",
               str(int(steps)), "--log-every", str(int(log_every))]
        if dtype:
            cmd += ["--data-dtype", dtype]
        flags = {"--lr": lr, "--lr-schedule": lr_schedule, "--warmup": warmup,
                 "--min-lr": min_lr, "--cooldown": cooldown,
                 "--optimizer": optimizer, "--weight-decay": weight_decay,
                 "--momentum": momentum, "--clip": clip, "--seed": seed,
                 "--checkpoint-dir": checkpoint_dir,
                 "--checkpoint-every": checkpoint_every,
                 "--eval-every": eval_every, "--eval-batches": eval_batches,
                 "--grad-accum": grad_accum, "--threads": threads,
                 "--stats": stats, "--trace": trace, "--recipe": recipe,
                 "--mask-rate": mask_rate, "--mask-token": mask_token,
                 "--decoder-start-token": decoder_start_token,
                 "--vocab": vocab}
        for flag, value in flags.items():
            if value is not None:
                cmd += [flag, os.fspath(value) if isinstance(value, os.PathLike)
                        else str(value)]
        if no_decay_vectors:
            cmd.append("--no-decay-vectors")
        if resume:
            cmd.append("--resume")
        if eval_data is not None:
            eval_flag, eval_path, eval_dtype = _data_source(
                eval_data, self.out_dir, "eval")
            if eval_flag != data_flag:
                raise ValueError("eval_data must have data's form (token ids, "
                                 "or arrays by input name)")
            if eval_dtype and eval_dtype != (dtype or "uint16"):
                raise ValueError("eval_data needs another id width than data")
            cmd += ["--eval-data", eval_path]
        export = os.path.join(self.out_dir, TRAINED)
        partial = export + ".part.onnx"
        cmd += ["--export", partial]
        if launcher is None and self.ranks > 1:
            launcher = "mpirun"
        if launcher == "mpirun":
            cmd = mpirun_command(self.ranks) + cmd
        elif isinstance(launcher, str):
            raise ValueError(f"launcher: None, 'mpirun' or a command list, not {launcher!r}")
        elif launcher is not None:
            cmd = list(launcher) + cmd

        def done() -> None:
            os.replace(partial, export)
            if os.path.exists(partial + ".data"):
                os.replace(partial + ".data", export + ".data")
        return TrainingRun(cmd, int(steps), progress, on_success=done)

    # -- inference -----------------------------------------------------

    def _inference_program(self) -> str:
        if self.mode == "inference":
            return self.executable
        if self._inference is None:
            folder = os.path.join(self.out_dir, "inference")
            run_tool([find_tool(), "compile", self.model_path, "--mode",
                      "inference", "--target", self.target, "--quiet",
                      *dim_args(self.dims), "-o", folder])
            self._inference = os.path.join(folder, "run")
        return self._inference

    def run(self, inputs: Mapping[str, np.ndarray], *,
            threads: int | None = None) -> dict[str, np.ndarray]:
        """Runs the model once on ``inputs`` (name -> array, the compiled
        shapes); returns every output by name. A training program runs its
        newest weights through an inference program compiled on first use
        (``OUTDIR/inference``)."""
        exe = self._inference_program()
        with tempfile.TemporaryDirectory(dir=self.out_dir) as tmp:
            cmd = [exe]
            for name, value in inputs.items():
                path = os.path.join(tmp, f"in{len(cmd)}.npy")
                np.save(path, np.asarray(value))
                cmd += ["--input", f"{name}={path}"]
            outdir = os.path.join(tmp, "out")
            cmd += ["--output-dir", outdir, "--model", self.weights_path]
            if threads is not None:
                cmd += ["--threads", str(threads)]
            run_tool(cmd)
            return {p.stem: np.load(p) for p in sorted(Path(outdir).glob("*.npy"))}

    # -- weights -------------------------------------------------------

    def initializers(self) -> dict[str, np.ndarray]:
        """The newest weights (every initializer) by ONNX name."""
        import onnx
        from onnx import numpy_helper
        model = onnx.load(self.weights_path)
        return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}

    def state_dict(self) -> dict[str, np.ndarray]:
        """The newest weights under the torch module's ``state_dict`` keys
        (for a program compiled from a module), else by ONNX name."""
        inits = self.initializers()
        if self.torch_names is None:
            return inits
        return self.torch_names.state_dict(inits, self.out_dir)

    def export(self, path: PathLike, format: str | None = None) -> str:
        """Writes the newest weights to ``path``.

        ``format``: ``"onnx"`` (the model with its trained initializers) or
        ``"safetensors"`` (the torch module's ``state_dict`` keys, ready for
        ``module.load_state_dict(safetensors.torch.load_file(path))``; ONNX
        initializer names for a program not compiled from a module); by
        default from the suffix. Returns the path.
        """
        path = os.fspath(path)
        if format is None:
            format = "safetensors" if path.endswith(".safetensors") else "onnx"
        if format == "safetensors":
            from lamina.safetensors_io import save_file
            save_file(self.state_dict(), path, metadata={"format": "pt"})
        elif format == "onnx":
            import onnx
            model = onnx.load(self.weights_path)
            big = sum(len(t.raw_data) for t in model.graph.initializer) > (1 << 30)
            onnx.save_model(model, path, save_as_external_data=big,
                            location=os.path.basename(path) + ".data")
        else:
            raise ValueError(f"format: 'onnx' or 'safetensors', not {format!r}")
        return path


def compile(model: Any, *, example_inputs: Any = None, mode: str = "train",
            target: str = "host", dims: Mapping[str, int] | None = None,
            loss: str | None = "causal-lm", logits: str | None = None,
            labels: str | None = None, loss_output: str | None = None,
            ignore_index: int | None = None, pp: int = 1, dp: int = 1,
            tp: int = 1, ep: int = 1, micro_batches: int | None = None,
            schedule: str | None = None, zero: int | None = None,
            precision: str | None = None, recompute: str | None = None,
            freeze: str | None = None, padding_idx: Mapping[str, int] | None = None,
            as_exported: bool = False, fuse_attention: bool = True,
            cuda_emulator: bool = False, out_dir: PathLike | None = None,
            input_names: Sequence[str] | None = None,
            output_names: Sequence[str] | None = None,
            dynamic_axes: Mapping[str, Mapping[int, str]] | None = None,
            opset: int = 17) -> Program:
    """Compiles ``model`` with ``lamina compile`` into a :class:`Program`.

    ``model``: an ONNX path, an ``onnx.ModelProto``, or a ``torch.nn.Module``
    with ``example_inputs`` (exported with ``torch.onnx.export``; the input
    axes whose sizes equal a value of ``dims`` become that dynamic dim, see
    :func:`lamina.torchio.dynamic_axes_from_dims`). ``dims`` binds the
    symbolic dims (``--dim``; with ``pp``/``dp`` the batch dim is the
    micro-batch size). ``loss`` is ``"causal-lm"``, ``"cross-entropy"``
    (with ``labels``) or None with ``loss_output``; ``logits`` names the
    logits output (default: the module's single output, ``logits``). The
    rest are ``lamina compile``'s flags of the same names (docs/training.md,
    docs/distributed.md). ``out_dir=None`` compiles into a temporary folder
    removed with the Program.
    """
    if mode not in ("train", "inference"):
        raise ValueError(f"mode: 'train' or 'inference', not {mode!r}")
    temporary = None
    if out_dir is None:
        temporary = tempfile.TemporaryDirectory(prefix="lamina-")
        folder = temporary.name
    else:
        folder = os.path.abspath(os.fspath(out_dir))
        os.makedirs(folder, exist_ok=True)
    source, names = prepare_model(model, folder, example_inputs=example_inputs,
                                  dims=dims, input_names=input_names,
                                  output_names=output_names,
                                  dynamic_axes=dynamic_axes, opset=opset)
    cmd = [find_tool(), "compile", source, "--mode", mode, "--target", target,
           *dim_args(dims)]
    if mode == "train":
        if loss_output:
            cmd += ["--loss-output", loss_output]
        elif loss:
            cmd += ["--loss", loss]
            if logits is None and names is not None and not output_names:
                logits = "logits"
            if logits:
                cmd += ["--logits", logits]
            if labels:
                cmd += ["--labels", labels]
        if ignore_index is not None:
            cmd += [f"--ignore-index={ignore_index}"]
        if pp != 1 or dp != 1:
            cmd += ["--pp", str(pp), "--dp", str(dp)]
        if tp != 1:
            cmd += ["--tp", str(tp)]
        if ep != 1:
            cmd += ["--ep", str(ep)]
        for flag, value in (("--micro-batches", micro_batches),
                            ("--schedule", schedule), ("--zero", zero),
                            ("--recompute", recompute)):
            if value is not None:
                cmd += [flag, str(value)]
        freezes = [freeze] if freeze else []
        pads = dict(padding_idx or {})
        if names is not None:
            as_exported = True  # the export is exact (lamina.torchio)
            if names.frozen:
                freezes.append(freeze_regex(names.frozen))
            pads = {**names.padding_idx, **pads}
        if freezes:
            cmd += ["--freeze", "|".join(f"({f})" for f in freezes)
                    if len(freezes) > 1 else freezes[0]]
        for table, index in pads.items():
            cmd += [f"--padding-idx={table}={int(index)}"]
        if as_exported:
            cmd.append("--as-exported")
    if precision is not None:
        cmd += ["--precision", precision]
    if not fuse_attention:
        cmd.append("--no-fuse-attention")
    if cuda_emulator:
        cmd.append("--cuda-emulator")
    cmd += ["-o", folder]
    log = run_tool(cmd)
    if names is not None:
        names.save(folder)
    # One rank per (stage, replica, tensor-parallel member); --ep alone
    # makes its groups the replicas (lamina compile's --dp default).
    ranks = pp * (ep if dp == 1 else dp) * tp
    program = Program(folder, mode=mode, source=source, ranks=ranks,
                      dims=dims, torch_names=names, log=log, target=target,
                      temporary=temporary)
    with open(os.path.join(folder, PROGRAM_FILE), "w", encoding="utf-8") as f:
        json.dump({"mode": mode, "source": source, "ranks": ranks,
                   "dims": dict(dims or {}), "target": target}, f, indent=1)
    return program


def load(out_dir: PathLike) -> Program:
    """The :class:`Program` that :func:`compile` wrote into ``out_dir``
    earlier (``OUTDIR/program.json``), with its trained weights."""
    folder = os.path.abspath(os.fspath(out_dir))
    path = os.path.join(folder, PROGRAM_FILE)
    if not os.path.exists(path):
        raise LaminaError(f"{folder}: no {PROGRAM_FILE} (not compiled by "
                          "lamina.compile)")
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    return Program(folder, mode=doc["mode"], source=doc["source"],
                   ranks=doc["ranks"], dims=doc["dims"], target=doc["target"],
                   torch_names=TorchNames.load(folder))
