"""What the torch tests share: checks a rank makes, and starting a job with a deadline.

Imported from the tests' own folder (Python puts a script's folder first on sys.path).
"""

import os
import socket
import subprocess

# torch 1.13's torchrun fails on Python 3.11 with its default --redirects/--tee ("'NoneType'
# object has no attribute 'get'": Python 3.11's IntFlag no longer iterates the 0 member its
# parser looks for; pytorch/pytorch#92319, fixed in torch 2.0). Any single-stream value parses:
# the ranks' stdout goes to a file and is teed to torchrun's stdout, prefixed "[default<r>]:".
TORCHRUN_PY311_FLAGS = ("--redirects", "1", "--tee", "1")


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def expect_raises(fn, *needles):
    """The RuntimeError's message; AssertionError unless fn raises one naming every needle."""
    try:
        fn()
    except RuntimeError as e:
        msg = str(e)
        for n in needles:
            expect(n in msg, f"error {msg!r} does not name {n!r}")
        return msg
    raise AssertionError(f"no RuntimeError (wanted one naming {needles})")


def job_env(**extra):
    """This process's environment without what names a job (a launcher of ours or torch's sets
    it), with gloo's and c10d's traffic on loopback, plus `extra`."""
    env = dict(os.environ)
    for name in ("C10D_STORE_EXTERNAL", "C10D_STORE_TOKEN", "MASTER_ADDR", "MASTER_PORT", "RANK",
                 "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK"):
        env.pop(name, None)
    env["GLOO_SOCKET_IFNAME"] = "lo"
    env["C10D_HOST"] = "127.0.0.1"
    env.update(extra)
    return env


def start(cmd, env):
    """A process in a session of its own, so that stop() ends it with everything it started."""
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)


def finish(p, timeout_s):
    """(exit status, output) of a process from start(); one still running after timeout_s is
    killed with its whole session, and its output says so."""
    try:
        out, _ = p.communicate(timeout=max(timeout_s, 0.1))
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        out, _ = p.communicate()
        out += f"\n(killed after {timeout_s:.0f} s)"
    return p.returncode, out


def run(cmd, env, timeout_s):
    return finish(start(cmd, env), timeout_s)
