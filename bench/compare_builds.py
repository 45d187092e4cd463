#!/usr/bin/env python3
"""Before and after in one run: c10d-bench from two build directories, alternating.

For each row (collective, size, world size, transport) the two builds' c10d-bench run in turn,
A B A B ..., under each build's own c10drun, and the median of each build's per-run times is
printed with the ratio A/B (below 1: A is faster). Used to show that a change costs nothing per
op, e.g.

  bench/compare_builds.py --a build --b ../base/build --rows all_reduce:8,all_reduce:16M \
      --worlds 2 --shm 1,0 --runs 7

prints one line per row and can write the rows as JSON (--json). Every run of c10d-bench checks
its results; a wrong value fails this script. --cpus 0 runs every rank on CPU 0 (taskset): how
the waiters behave when ranks must share a core they each believe is theirs, as when another
process (a compiler, a data loader) takes the other cores. --backend mpi runs c10d-bench's MPI
backend under mpirun instead (--shm does not apply), and --blocking passes c10d-bench's -z (1:
each call waited for before the next, the path where a waiter runs its own collective).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text):
    text = text.strip().upper()
    unit = text[-1] if text and text[-1] in "KMG" else ""
    number = text[: len(text) - len(unit)]
    if not number.isdigit():
        raise argparse.ArgumentTypeError(f"bad size {text!r}: digits and an optional K, M or G")
    return int(number) * SUFFIX[unit]


def parse_rows(text):
    rows = []
    for item in text.split(","):
        op, _, size = item.partition(":")
        if not op or not size:
            raise argparse.ArgumentTypeError(f"bad row {item!r}: want collective:size")
        rows.append((op, parse_size(size)))
    return rows


def run_once(build, op, size, world, shm, iters, timeout, cpus=None, backend="tcp",
             blocking=None):
    """One c10d-bench run; returns its in-place time in microseconds."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        env = dict(os.environ, C10D_SHM=str(shm))
        pin = ["taskset", "-c", cpus] if cpus else []
        bench = [os.path.join(build, "bench", "c10d-bench"), op, "-b", str(size), "-e", str(size),
                 "-n", str(iters), "-w", str(max(2, iters // 10)), "--json", out.name]
        if blocking is not None:
            bench += ["-z", str(blocking)]
        if backend == "mpi":
            launch = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(world)]
            bench += ["--backend", "mpi"]
        else:
            launch = [os.path.join(build, "tools", "c10drun"), "--nproc-per-node", str(world)]
        cmd = pin + launch + bench
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
        rows = [r for r in json.load(open(out.name)) if r["in_place"] or op == "all_to_all"]
        if not rows:
            sys.exit(f"{' '.join(cmd)} wrote no row")
        if any(r["wrong"] for r in rows):
            sys.exit(f"{' '.join(cmd)} reported wrong values")
        return rows[0]["time_us"]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--a", required=True, help="build directory A (the change)")
    p.add_argument("--b", required=True, help="build directory B (the baseline)")
    p.add_argument("--rows", type=parse_rows, default=parse_rows("all_reduce:8,all_reduce:16M"))
    p.add_argument("--worlds", default="2")
    p.add_argument("--shm", default="1,0", help="C10D_SHM values: 1 shared memory, 0 TCP alone")
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--iters", type=int, default=0, help="per run; 0: by size")
    p.add_argument("--timeout", type=int, default=300)
    p.add_argument("--cpus", help="taskset CPU list every rank runs on (e.g. 0)")
    p.add_argument("--backend", default="tcp", choices=["tcp", "mpi"])
    p.add_argument("--blocking", type=int, choices=[0, 1], help="c10d-bench -z; default: its own")
    p.add_argument("--json")
    args = p.parse_args()
    if args.runs < 1:
        p.error("--runs must be at least 1")

    results = []
    print(f"# A = {args.a}, B = {args.b}; median of {args.runs} alternating runs each"
          + (f"; every rank on CPUs {args.cpus}" if args.cpus else ""))
    print(f"# {'collective':>12} {'size':>10} {'ranks':>5} {'path':>5} {'A (us)':>10} "
          f"{'B (us)':>10} {'A/B':>6}")
    shms = [int(s) for s in args.shm.split(",")] if args.backend == "tcp" else [0]
    for world in [int(w) for w in args.worlds.split(",")]:
        for shm in shms:
            for op, size in args.rows:
                iters = args.iters or (2000 if size <= 65536 else 200 if size <= 1 << 20 else 20)
                a, b = [], []
                for _ in range(args.runs):
                    a.append(run_once(args.a, op, size, world, shm, iters, args.timeout,
                                      args.cpus, args.backend, args.blocking))
                    b.append(run_once(args.b, op, size, world, shm, iters, args.timeout,
                                      args.cpus, args.backend, args.blocking))
                ma, mb = statistics.median(a), statistics.median(b)
                path = "mpi" if args.backend == "mpi" else "shm" if shm else "tcp"
                print(f"  {op:>12} {size:>10} {world:>5} {path:>5} {ma:>10.2f} {mb:>10.2f} "
                      f"{ma / mb:>6.3f}", flush=True)
                results.append({"collective": op, "size": size, "world_size": world, "path": path,
                                "a_us": a, "b_us": b, "a_median_us": ma, "b_median_us": mb,
                                "ratio": ma / mb})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
