"""Runs a command with the TCP control plane forced on a free port.

  tcp_control.py [--world N --torchrun] -- COMMAND...

Sets LAMINA_CONTROL=tcp, MASTER_ADDR=127.0.0.1 and LAMINA_CONTROL_PORT /
MASTER_PORT to a port the kernel just handed out (bind to port 0), so tests
that lit runs in parallel do not collide, then runs COMMAND (e.g. `mpirun -np
4 run ...`: mpirun passes its environment to local ranks). With --torchrun it
instead starts N copies of COMMAND itself with RANK, WORLD_SIZE and
LOCAL_RANK set, as a torchrun-style launcher would (no MPI; for programs
whose data plane needs none, and for the launch errors), prints their
output rank by rank and exits with the highest exit code.
"""
import argparse
import os
import socket
import subprocess
import sys


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=1)
    ap.add_argument("--torchrun", action="store_true")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    port = free_port()
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               LAMINA_CONTROL_PORT=str(port))
    if not args.torchrun:
        env["LAMINA_CONTROL"] = "tcp"
        sys.exit(subprocess.run(cmd, env=env).returncode)
    procs = []
    for r in range(args.world):
        e = dict(env, RANK=str(r), WORLD_SIZE=str(args.world),
                 LOCAL_RANK=str(r))
        procs.append(subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    code = 0
    for r, p in enumerate(procs):
        out, _ = p.communicate()
        sys.stdout.write(out)
        code = max(code, p.returncode)
    sys.exit(code)


if __name__ == "__main__":
    main()
