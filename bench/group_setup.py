#!/usr/bin/env python3
"""Group set-up before and after: c10d-setup-bench from one or two builds, alternating.

Each run launches WORLD ranks of a build's c10d-setup-bench (under that build's c10drun, or
mpirun with --backend mpi) for --iters iterations; the builds take turns, A B A B ..., so that
both see the same machine. For each phase (init, first_op, new_group, sub_op: see
bench/setup_bench.cc) it prints the median over all runs and iterations of the slowest rank's
time, per build, and the ratio A/B (below 1: A is faster). For example, at 64 ranks over TCP
alone:

  bench/group_setup.py --a build --b ../base/build --world 64 --group 8 --shm 0 --runs 3

--a-env / --b-env add environment variables to one build's runs (KEY=VALUE, repeatable), so one
build can be compared with itself under another setting, e.g. --b build --b-env
C10D_TCP_CONNECT=eager. --json writes every figure.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

PHASES = ["init", "first_op", "new_group", "sub_op"]


def parse_env(items):
    env = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"bad --*-env {item!r}: want KEY=VALUE")
        env[key] = value
    return env


def run_once(build, extra_env, args):
    """One launch; returns {phase: [slowest-rank ms per iteration]}."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        env = dict(os.environ, C10D_SHM=str(args.shm), **extra_env)
        bench = [os.path.join(build, "bench", "c10d-setup-bench"), "--group", str(args.group),
                 "--iters", str(args.iters), "--backend", args.backend, "--json", out.name]
        if args.backend == "mpi":
            launch = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(args.world)]
        else:
            launch = [os.path.join(build, "tools", "c10drun"), "--nproc-per-node", str(args.world)]
        cmd = launch + bench
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
        if proc.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
        with open(out.name) as f:
            row = json.load(f)
        return {p: row[f"{p}_ms"] for p in PHASES}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--a", required=True, help="build directory A (the change)")
    p.add_argument("--b", help="build directory B (the baseline); none: A alone")
    p.add_argument("--a-env", action="append", help="KEY=VALUE for A's runs")
    p.add_argument("--b-env", action="append", help="KEY=VALUE for B's runs")
    p.add_argument("--world", type=int, default=64)
    p.add_argument("--group", type=int, default=8, help="subgroup size (its first ranks)")
    p.add_argument("--shm", type=int, default=0, choices=[0, 1],
                   help="C10D_SHM: 1 same-host ranks through shared memory, 0 TCP alone")
    p.add_argument("--backend", default="tcp", choices=["tcp", "mpi"])
    p.add_argument("--runs", type=int, default=3, help="launches per build")
    p.add_argument("--iters", type=int, default=3, help="iterations per launch")
    p.add_argument("--timeout", type=int, default=1800, help="seconds per launch")
    p.add_argument("--json")
    args = p.parse_args()
    if args.runs < 1 or args.iters < 1 or args.world < 1 or args.group < 1:
        p.error("--runs, --iters, --world and --group must be at least 1")
    builds = [("A", args.a, parse_env(args.a_env))]
    if args.b:
        builds.append(("B", args.b, parse_env(args.b_env)))

    figures = {name: {ph: [] for ph in PHASES} for name, _, _ in builds}
    for run in range(args.runs):
        for name, build, env in builds:
            got = run_once(build, env, args)
            for ph in PHASES:
                figures[name][ph] += got[ph]
            print(f"# run {run} {name}: " + " ".join(
                f"{ph} {statistics.median(got[ph]):.1f}" for ph in PHASES) + " ms", flush=True)

    path = "mpi" if args.backend == "mpi" else "shm" if args.shm else "tcp"
    print(f"# {args.world} ranks ({path}), subgroup of {args.group}; median of "
          f"{args.runs * args.iters} iterations, slowest rank, ms")
    for name, build, env in builds:
        extra = " ".join(f"{k}={v}" for k, v in env.items())
        print(f"#   {name} = {build} {extra}".rstrip())
    header = f"  {'phase':>10} {'A':>10}" + (f" {'B':>10} {'A/B':>6}" if args.b else "")
    print(header)
    for ph in PHASES + ["init+first_op"]:
        def med(name):
            if ph == "init+first_op":
                f = figures[name]
                return statistics.median([a + b for a, b in zip(f["init"], f["first_op"])])
            return statistics.median(figures[name][ph])
        line = f"  {ph:>10} {med('A'):>10.1f}"
        if args.b:
            b = med("B")
            line += f" {b:>10.1f} {med('A') / b if b > 0 else float('nan'):>6.3f}"
        print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"world": args.world, "group": args.group, "path": path,
                       "builds": {name: {"dir": build, "env": env, **figures[name]}
                                  for name, build, env in builds}}, f, indent=1)


if __name__ == "__main__":
    main()
