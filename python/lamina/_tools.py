"""Finding and running the built Lamina tools (``lamina``, compiled programs).

The tools are looked up, in order:

1. ``$LAMINA_HOME/bin/NAME`` or ``$LAMINA_HOME/NAME`` (``LAMINA_HOME`` is a
   build folder, e.g. ``build``, or its ``bin``);
2. next to the package: ``lamina/bin/NAME`` (a bundled install), then the
   checkout's ``build/bin/NAME`` when the package is used from a source tree
   (``PYTHONPATH=python`` or ``pip install -e ./python``);
3. ``PATH``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Sequence

_PACKAGE_DIR = Path(__file__).resolve().parent


class LaminaError(RuntimeError):
    """A Lamina tool failed; ``str(e)`` is the tool's own message.

    Attributes: ``command`` (the argument list), ``returncode``, ``output``
    (everything the tool printed, stdout and stderr).
    """

    def __init__(self, message: str, command: Sequence[str] = (),
                 returncode: int | None = None, output: str = "") -> None:
        super().__init__(message)
        self.command = list(command)
        self.returncode = returncode
        self.output = output


def tool_dirs() -> list[Path]:
    """The folders searched for tools before ``PATH``, in order."""
    dirs: list[Path] = []
    home = os.environ.get("LAMINA_HOME")
    if home:
        dirs += [Path(home) / "bin", Path(home)]
    dirs += [_PACKAGE_DIR / "bin", _PACKAGE_DIR.parent.parent / "build" / "bin"]
    return dirs


def find_tool(name: str = "lamina") -> str:
    """The path of tool ``name``; raises :class:`LaminaError` if none is found."""
    for d in tool_dirs():
        p = d / name
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    found = shutil.which(name)
    if found:
        return found
    raise LaminaError(
        f"cannot find the '{name}' tool: set LAMINA_HOME to the build folder "
        f"(the one holding bin/{name}), or put it on PATH (searched "
        + ", ".join(str(d) for d in tool_dirs()) + ", PATH)")


def _message(output: str, returncode: int) -> str:
    """The tool's error lines (``error: ...``), or its last lines."""
    lines = [ln for ln in output.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error:" in ln]
    if errors:
        return "\n".join(errors)
    tail = "\n".join(lines[-8:])
    return tail or f"exited with status {returncode}"


def run_tool(args: Sequence[str], cwd: str | None = None,
             env: dict[str, str] | None = None) -> str:
    """Runs a command to completion and returns its stdout.

    A non-zero exit raises :class:`LaminaError` carrying the tool's message.
    """
    proc = subprocess.run(list(args), cwd=cwd, env=env, capture_output=True,
                          text=True)
    if proc.returncode != 0:
        output = proc.stdout + proc.stderr
        raise LaminaError(_message(proc.stderr or output, proc.returncode),
                          args, proc.returncode, output)
    return proc.stdout


def mpirun_command(ranks: int) -> list[str]:
    """``mpirun -np N`` with the flags a root account and a small machine need."""
    mpirun = shutil.which("mpirun")
    if not mpirun:
        raise LaminaError("launcher='mpirun': mpirun is not on PATH "
                          "(install openmpi-bin)")
    cmd = [mpirun, "-np", str(ranks)]
    out = subprocess.run([mpirun, "--version"], capture_output=True, text=True)
    if "Open MPI" in out.stdout + out.stderr or "OpenRTE" in out.stdout:
        cmd.append("--oversubscribe")
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
    return cmd
