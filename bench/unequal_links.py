#!/usr/bin/python3
"""A 64 MiB all_reduce on emulated hosts with shaped links: equal host shares against the
group's own choice (docs/design.md, Across hosts), runs alternating, medians.

  unequal_links.py EMUCLUSTER_DIR BUILD_DIR [--rates 2gbit,2gbit,500mbit] [--per-host 2]
                   [--rounds 3] [--iters 5]

EMUCLUSTER_DIR holds emucluster.py (the emulated cluster: network namespaces, tbf both ways).
Each round runs c10d-bench under c10drun per host once per setting (equal: C10D_HOST_RATES
all 1; given: C10D_HOST_RATES=--rates; probe: C10D_HOST_RATES=probe, the group measures), in alternating
order; the figure is rank 0's in-place time of the 64 MiB row.
"""
import argparse
import statistics
import sys

SETTINGS = ["equal", "given", "probe"]  # C10D_HOST_RATES: all 1; --rates; probe


def run(c, build, env, per_host, iters):
    job = c.c10drun([f"{build}/bench/c10d-bench", "all_reduce", "-b", "64M", "-e", "64M",
                     "-n", str(iters), "-w", "1", "-c", "1"],
                    nproc_per_node=per_host, c10drun=f"{build}/tools/c10drun", env=env)
    codes = job.wait(timeout=600)
    text = job.procs[0].text()
    if any(codes):
        sys.exit(f"exit codes {codes}:\n{text}")
    for line in text.splitlines():
        if "host shares" in line and "rank 0" in line:
            print(line, flush=True)
        fields = line.split()
        if "67108864" in fields and "float" in fields:
            print(line, flush=True)
            i = fields.index("67108864")
            cells = [f for f in fields[i + 5:] if f != "N/A"]
            return float(cells[0]) / 1e3, line  # the in-place time, us -> ms
    sys.exit(f"no 64 MiB row:\n{text}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("emucluster_dir")
    ap.add_argument("build")
    ap.add_argument("--rates", default="2gbit,2gbit,500mbit")
    ap.add_argument("--per-host", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=5)
    a = ap.parse_args()
    sys.path.insert(0, a.emucluster_dir)
    import emucluster
    import os
    times = {k: [] for k in SETTINGS}
    hosts = len(a.rates.split(","))
    with emucluster.Cluster(hosts=hosts, rates=a.rates) as c:
        for r in range(a.rounds):
            order = SETTINGS if r % 2 == 0 else list(reversed(SETTINGS))
            for name in order:
                env = dict(os.environ)
                env.pop("C10D_HOST_RATES", None)
                if name == "equal":
                    env["C10D_HOST_RATES"] = ",".join(["1"] * hosts)
                elif name == "given":
                    env["C10D_HOST_RATES"] = a.rates
                else:
                    env["C10D_HOST_RATES"] = "probe"
                env["C10D_LOG_LEVEL"] = "info"
                ms, line = run(c, a.build, env, a.per_host, a.iters)
                times[name].append(ms)
                print(f"round {r} {name}: {ms:.1f} ms   [{line.strip()}]", flush=True)
    for name, t in times.items():
        print(f"{name}: median {statistics.median(t):.1f} ms of {[round(x, 1) for x in t]}")


if __name__ == "__main__":
    main()
