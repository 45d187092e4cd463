#!/usr/bin/python3
"""Runs c10d (TCP backend, one c10drun per host) and Open MPI (mpirun across the same hosts,
btl self,vader,tcp) on emulated hosts (tests/cluster/emucluster.py) and prints markdown tables of
medians: per collective and size, c10d's time and bus bandwidth, Open MPI's, their ratio, c10d
with the hierarchy turned off (C10D_ALGO=flat) or its pipeline off (`unpiped`), and each busbw
as a multiple of the link rate.

    bench/cluster_compare.py [--hosts 2] [--per-host 2] [--rates 2gbit] [--runs 3]
        [--sizes 8,64K,1M,16M,64M] [--collectives all_reduce,broadcast,all_gather,reduce_scatter]
        [--json OUT] [--build build] [--variants c10d,flat,mpi]

Needs root and what emucluster.py needs, and mpirun; where a cluster cannot be built it prints
"SKIPPED: <reason>" and exits 77.

One cluster serves the whole run. For every collective and size, each of --runs rounds runs
c10d (automatic choice: hierarchical across hosts from 256 KiB) and the other variants one
after another, so drifting load on the machine hits all three alike; each cell is the median
over the rounds. Every run is one launch at one size: the iteration count is chosen so that a
run moves about --budget seconds of link time (at least 3 calls, at most 2000), since 2000
calls of 64 MiB over 2 Gbit/s would take an hour while 20 calls of 8 bytes measure nothing.

Both programs run with -z 1 (every call waited for before the next, as a blocking MPI call
is) and -c 1 (a run with any wrong value aborts the script), and are compared on their in-place
rows (c10d's all_reduce and broadcast are in place; all_gather and reduce_scatter have both).
Open MPI runs with mpi_yield_when_idle (emucluster's default: the emulated hosts share this
machine's cores, so busy-polling ranks would starve each other).

"vs link" is busbw over the slowest link's rate in bytes per second (tc's gbit is 10^9 bit/s).
The flat ring's busbw cannot pass 1.0x of it: each host's link carries 2(n-1)/n of the vector
each way. The hierarchical all_reduce sends 2(H-1)/H of it, so its ceiling is
(n-1)/n / ((H-1)/H): 1.5x at 2 hosts x 2 ranks, 1.25x at 3 x 2.
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "cluster"))
import emucluster  # noqa: E402

# The order of each round; --variants picks among them. "unpiped": c10d with the hierarchical
# all_reduce's pipeline off (C10D_HIER_PIECES=1).
VARIANTS = ("c10d", "flat", "unpiped", "mpi")
VARIANT_ENV = {"c10d": {}, "flat": {"C10D_ALGO": "flat"}, "unpiped": {"C10D_HIER_PIECES": "1"}}
TITLES = {"flat": "c10d flat", "unpiped": "c10d unpiped", "mpi": "Open MPI"}


def parse_size(text):
    text = text.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text[:-1] if mult > 1 else text) * mult


def label(size):
    return (f"{size >> 20} MiB" if size >= 1 << 20 and size % (1 << 20) == 0 else
            f"{size >> 10} KiB" if size >= 1 << 10 and size % (1 << 10) == 0 else f"{size} B")


def iterations(size, link_bytes_per_s, budget):
    """Calls per run: about `budget` seconds of link time (each call moves at most about twice
    the vector over a link) or of a 200 us latency floor; 3 to 2000."""
    per_call = max(2 * size / link_bytes_per_s, 200e-6)
    return max(3, min(2000, int(budget / per_call)))


class Runner:
    def __init__(self, cluster, args):
        self.c = cluster
        self.args = args
        self.port = 29600
        self.tmp = tempfile.mkdtemp(prefix="cluster-compare-")

    def run(self, variant, collective, size, iters):
        out = os.path.join(self.tmp, f"{variant}-{collective}-{size}.json")
        if os.path.exists(out):
            os.unlink(out)
        warmup = 1 if iters <= 5 else min(20, max(2, iters // 10))
        flags = [collective, "-b", str(size), "-e", str(size), "-n", str(iters), "-w",
                 str(warmup), "-c", "1", "-z", "1", "--json", out]
        b = self.args.build
        before = [self.c.link_bytes(i)["sent"] for i in range(len(self.c.hosts))]
        start = time.monotonic()
        if variant == "mpi":
            proc = self.c.mpirun([f"{b}/bench/c10d-mpi-reference"] + flags,
                                 per_host=self.args.per_host)
            codes = [proc.wait(self.args.timeout)]
            texts = [proc.text()]
        else:
            env = dict(os.environ)
            for name in ("C10D_ALGO", "C10D_HIER_PIECES"):
                env.pop(name, None)
            env.update(VARIANT_ENV[variant])
            # A fresh port per job: the last job's store port may linger in TIME_WAIT.
            self.port = 29600 + (self.port - 29600 + 1) % 300
            job = self.c.c10drun([f"{b}/bench/c10d-bench"] + flags,
                                 nproc_per_node=self.args.per_host, c10drun=f"{b}/tools/c10drun",
                                 master_port=self.port, env=env)
            codes = job.wait(self.args.timeout)
            texts = [p.text() for p in job.procs]
        wall = time.monotonic() - start
        sent = [self.c.link_bytes(i)["sent"] - before[i] for i in range(len(self.c.hosts))]
        if any(codes):
            sys.exit(f"{variant} {collective} {label(size)}: exit {codes}\n" +
                     "\n".join(t[-3000:] for t in texts))
        with open(out) as f:
            rows = json.load(f)
        row = next((r for r in rows if r["in_place"]), None)
        if row is None or row["time_us"] is None:
            sys.exit(f"{variant} {collective} {label(size)}: no in-place row in {rows}")
        if row["wrong"]:
            sys.exit(f"{variant} {collective} {label(size)}: {row['wrong']} wrong values")
        calls = iters + warmup + 2  # and one untimed call and one checked (nccl_sweep.cc)
        return {"time_us": row["time_us"], "busbw": row["busbw"], "algbw": row["algbw"],
                "iters": iters, "warmup": warmup, "wall_s": round(wall, 3),
                # What each host's link carried per call, as a multiple of the vector (set-up
                # traffic included, so slightly high for small sizes).
                "link_sent_per_call": [round(s / calls / max(size, 1), 3) for s in sent]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--per-host", type=int, default=2)
    parser.add_argument("--rates", default="2gbit")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sizes", default="8,64K,1M,16M,64M")
    parser.add_argument("--collectives", default="all_reduce,broadcast,all_gather,reduce_scatter")
    parser.add_argument("--budget", type=float, default=1.5,
                        help="seconds of link time per run (sets the iteration count)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per run")
    parser.add_argument("--json", help="write every run's numbers and the medians here")
    parser.add_argument("--build", default="build")
    parser.add_argument("--variants", default="c10d,flat,mpi",
                        help="c10d and any of flat, unpiped, mpi, run in that order each round")
    args = parser.parse_args()
    args.build = os.path.abspath(args.build)

    reason = emucluster.why_unavailable()
    if reason is None and shutil.which("mpirun") is None:
        reason = "mpirun is not installed (Open MPI)"
    for prog in ("tools/c10drun", "bench/c10d-bench", "bench/c10d-mpi-reference"):
        if reason is None and not os.access(os.path.join(args.build, prog), os.X_OK):
            reason = f"{args.build}/{prog} is not built"
    if reason:
        print(f"SKIPPED: cannot build emulated hosts here: {reason}")
        sys.exit(emucluster.SKIP)

    variants = args.variants.split(",")
    if "c10d" not in variants or any(v not in VARIANTS for v in variants):
        sys.exit(f"--variants {args.variants}: a list of {', '.join(VARIANTS)} with c10d in it")
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    rates = emucluster.Cluster._parse_rates(args.rates, args.hosts)
    link = (min(emucluster._rate_bits(r) for r in rates) / 8 if all(rates) else None)
    world = args.hosts * args.per_host
    results = []
    try:
        with emucluster.Cluster(hosts=args.hosts, rates=args.rates) as c:
            runner = Runner(c, args)
            print(f"{args.hosts} hosts x {args.per_host} ranks, links {args.rates}, "
                  f"median of {args.runs} runs\n")
            for collective in args.collectives.split(","):
                print(f"### {collective}\n")
                others = [v for v in VARIANTS if v in variants and v != "c10d"]
                print("| size | c10d time (µs) | c10d busbw (GB/s) | c10d vs link |" +
                      "".join(f" {TITLES[v]} time (µs) | {TITLES[v]} busbw | {TITLES[v]} vs link "
                              f"| c10d / {TITLES[v]} |" for v in others))
                print("|---:|---:|---:|---:|" + "---:|---:|---:|---:|" * len(others))
                for size in sizes:
                    if size < world * 4 and collective in ("all_gather", "reduce_scatter"):
                        continue  # under one float per rank
                    iters = iterations(size, link or 1.25e9, args.budget)
                    runs = {v: [] for v in VARIANTS if v in variants}
                    for _ in range(args.runs):
                        for v in runs:
                            runs[v].append(runner.run(v, collective, size, iters))
                    med = {v: {k: statistics.median(r[k] for r in rs)
                               for k in ("time_us", "busbw")} for v, rs in runs.items()}
                    results.append({"collective": collective, "size": size, "runs": runs,
                                    "median": med})

                    def cells(v):
                        vs = f"{med[v]['busbw'] * 1e9 / link:.2f}x" if link else "-"
                        return f" {med[v]['time_us']:.1f} | {med[v]['busbw']:.3f} | {vs} |"
                    # The same size, so the time ratio is the busbw ratio: > 1, c10d is faster.
                    print(f"| {label(size)} |" + cells("c10d") +
                          "".join(cells(v) + f" {med[v]['time_us'] / med['c10d']['time_us']:.2f}x |"
                                  for v in others), flush=True)
                print()
    except emucluster.Unavailable as e:
        print(f"SKIPPED: cannot build emulated hosts here: {e}")
        sys.exit(emucluster.SKIP)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"hosts": args.hosts, "per_host": args.per_host, "rates": args.rates,
                       "runs": args.runs, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
