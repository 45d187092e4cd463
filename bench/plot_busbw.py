#!/usr/bin/python3
"""plot_busbw: bus bandwidth against message size, c10d beside Open MPI (and gloo), as PNGs.

    bench/plot_busbw.py --data DIR [--run] [--worlds 2,4] [--collectives all_reduce]
                        [--min-bytes 8] [--max-bytes 64M] [--out docs/img]

With --run it first measures, writing one JSON file per series into DIR (the benchmarks' own
--json output, unchanged); without it, it plots what DIR holds. The series, for each collective
and world size, each a sweep from --min-bytes to --max-bytes by a factor of 4, run one after
another in this order:

  c10d shm      build/bench/c10d-bench under c10drun, same-host shared memory (the default)
  c10d tcp      the same with C10D_SHM=0: loopback TCP
  Open MPI shm  build/bench/c10d-mpi-reference under mpirun, Open MPI's own choice (vader)
  Open MPI tcp  the same with --mca btl self,tcp
  gloo          torch.distributed's gloo through bench/torch_backends.py (only where
                /usr/bin/python3 imports torch and build/python holds c10d_torch)

Both c10d-bench and the reference run with -z 1 (each call waited for, as a blocking MPI call
is) and check every value. Each PNG is one collective at one world size: busbw (GB/s, nccl-tests'
bus factors) and time per call against size, both axes logarithmic. The figure's title carries
the date, commit and CPU of the run, taken from DIR/meta.json.
"""

import argparse
import datetime
import glob
import json
import os
import platform
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from torch_backends import parse_bytes, rank_list  # noqa: E402 (a sibling script; imports no torch)
# series name -> (label, matplotlib style); the order is the legend's.
SERIES = {
    "c10d-shm": ("c10d, shared memory", dict(color="tab:blue", marker="o")),
    "c10d-tcp": ("c10d, loopback TCP", dict(color="tab:blue", marker="s", linestyle="--")),
    "ompi-shm": ("Open MPI, shared memory (vader)", dict(color="tab:red", marker="o")),
    "ompi-tcp": ("Open MPI, TCP btl", dict(color="tab:red", marker="s", linestyle="--")),
    "gloo": ("gloo (torch.distributed)", dict(color="tab:green", marker="^", linestyle=":")),
}
# torch_backends.py names the collectives as torch does.
TORCH_OP = {"all_reduce": "all_reduce", "broadcast": "broadcast",
            "all_gather": "all_gather_into_tensor", "reduce_scatter": "reduce_scatter_tensor",
            "all_to_all": "all_to_all_single"}
# nccl-tests' in-place column for the collectives c10d's API runs in place.
IN_PLACE = {"all_reduce": True, "broadcast": True, "all_gather": False,
            "reduce_scatter": False, "all_to_all": False}


def collective_list(text):
    values = text.split(",")
    unknown = [v for v in values if v not in IN_PLACE]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown collective {unknown[0]!r}; one of {', '.join(IN_PLACE)}")
    return values


def run(cmd, env, timeout):
    result = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, timeout=timeout)
    if result.returncode != 0:
        sys.exit(f"plot_busbw: failed ({result.returncode}): {' '.join(cmd)}\n"
                 f"{result.stdout[-3000:]}")


def torch_ready(build):
    if not os.path.isdir(os.path.join(build, "python")):
        return False
    probe = subprocess.run(["/usr/bin/python3", "-c", "import torch"], capture_output=True)
    return probe.returncode == 0


def measure(args):
    os.makedirs(args.data, exist_ok=True)
    build = args.build
    sweep = ["-b", str(args.min_bytes), "-e", str(args.max_bytes), "-f", "4", "-n",
             str(args.iters), "-w", "10", "-c", "1", "-z", "1"]
    for world in args.worlds:
        mpirun = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(world)]
        for coll in args.collectives:
            jobs = {
                "c10d-shm": ([f"{build}/tools/c10drun", "--nproc-per-node", str(world),
                              f"{build}/bench/c10d-bench"], {"C10D_SHM": "1"}),
                "c10d-tcp": ([f"{build}/tools/c10drun", "--nproc-per-node", str(world),
                              f"{build}/bench/c10d-bench"], {"C10D_SHM": "0"}),
                "ompi-shm": (mpirun + [f"{build}/bench/c10d-mpi-reference"], {}),
                "ompi-tcp": (mpirun + ["--mca", "btl", "self,tcp",
                                       f"{build}/bench/c10d-mpi-reference"], {}),
            }
            for name, (cmd, extra) in jobs.items():
                out = os.path.join(args.data, f"{name}-{coll}-w{world}.json")
                print(f"plot_busbw: {name} {coll} world {world}", file=sys.stderr, flush=True)
                run(cmd + [coll] + sweep + ["--json", out], dict(os.environ, **extra),
                    args.timeout)
    if torch_ready(build):
        out = os.path.join(args.data, "gloo.json")
        print("plot_busbw: gloo through torch.distributed", file=sys.stderr, flush=True)
        env = dict(os.environ, PYTHONPATH=os.path.join(build, "python"))
        run(["/usr/bin/python3", os.path.join(REPO, "bench", "torch_backends.py"),
             "--ranks", ",".join(map(str, args.worlds)),
             "--ops", ",".join(TORCH_OP[c] for c in args.collectives),
             "--min-bytes", str(args.min_bytes), "--max-bytes", str(args.max_bytes),
             "--factor", "4", "--rounds", "1", "--ddp-steps", "0", "--floor-calls", "0",
             "--build-dir", build, "--json", out], env, args.timeout * 4)
    else:
        print("plot_busbw: no gloo series (/usr/bin/python3 cannot import torch, or "
              f"{build}/python is missing)", file=sys.stderr)
    commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    with open(os.path.join(args.data, "meta.json"), "w") as f:
        json.dump({"date": datetime.date.today().isoformat(), "commit": commit,
                   "cpu": cpu_name(), "cpus": os.cpu_count()}, f, indent=1)


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def load(data):
    """{(series, collective, world): [(bytes, time_us, busbw)]}, sizes ascending."""
    curves = {}
    for path in glob.glob(os.path.join(data, "*-w*.json")):
        name = os.path.basename(path)[:-len(".json")]
        series = next((s for s in SERIES if name.startswith(s + "-")), None)
        if series is None:
            continue
        coll, world = name[len(series) + 1:].rsplit("-w", 1)
        with open(path) as f:
            rows = json.load(f)
        points = [(r["size"], r["time_us"], r["busbw"]) for r in rows
                  if r["in_place"] == IN_PLACE[coll]]
        if any(r["wrong"] for r in rows):
            sys.exit(f"plot_busbw: {path} has wrong values; not plotting it")
        curves[(series, coll, int(world))] = sorted(points)
    gloo = os.path.join(data, "gloo.json")
    if os.path.exists(gloo):
        with open(gloo) as f:
            doc = json.load(f)
        from_torch = {v: k for k, v in TORCH_OP.items()}
        for r in doc["rows"]:
            if r.get("gloo_us") and r["op"] in from_torch:
                key = ("gloo", from_torch[r["op"]], r["ranks"])
                curves.setdefault(key, []).append((r["bytes"], r["gloo_us"], r["gloo_busbw"]))
        for key in curves:
            curves[key].sort()
    return curves


def size_label(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def plot(args):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = load(args.data)
    if not curves:
        sys.exit(f"plot_busbw: no series in {args.data} (run with --run first)")
    meta_path = os.path.join(args.data, "meta.json")
    meta = json.load(open(meta_path)) if os.path.exists(meta_path) else {}
    if "cpus" in meta:
        meta["cpus"] = f"{meta['cpus']} vCPUs"
    stamp = ", ".join(str(meta[k]) for k in ("date", "commit", "cpus", "cpu") if k in meta)
    os.makedirs(args.out, exist_ok=True)
    written = []
    for coll, world in sorted({(c, w) for _, c, w in curves}):
        fig, (bw, t) = plt.subplots(1, 2, figsize=(11, 4.2))
        for series, (label, style) in SERIES.items():
            points = curves.get((series, coll, world))
            if not points:
                continue
            shown = [p for p in points if p[2] > 0]  # a log axis has no zero
            bw.plot([p[0] for p in shown], [p[2] for p in shown], label=label, **style)
            t.plot([p[0] for p in points], [p[1] for p in points], label=label, **style)
        ticks = [s for s in sorted({p[0] for k, v in curves.items() if k[1:] == (coll, world)
                                     for p in v})][::2]
        for ax, ylabel in ((bw, "busbw (GB/s)"), (t, "time per call (µs)")):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xticks(ticks, [size_label(s) for s in ticks], rotation=45, fontsize=8)
            ax.set_xlabel("message size")
            ax.set_ylabel(ylabel)
            ax.grid(True, which="major", alpha=0.3)
        bw.legend(fontsize=8)
        fig.suptitle(f"{coll}, {world} ranks, one host" + (f" ({stamp})" if stamp else ""),
                     fontsize=10)
        fig.tight_layout()
        path = os.path.join(args.out, f"busbw-{coll}-{world}ranks.png")
        fig.savefig(path, dpi=90)
        plt.close(fig)
        written.append(path)
    for path in written:
        print(path)


def main():
    p = argparse.ArgumentParser(prog="plot_busbw", allow_abbrev=False,
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="directory of the JSON series")
    p.add_argument("--run", action="store_true", help="measure first (minutes)")
    p.add_argument("--build", default=os.path.join(REPO, "build"))
    p.add_argument("--worlds", type=rank_list, default=[2, 4])
    p.add_argument("--collectives", type=collective_list, default=["all_reduce"])
    p.add_argument("--min-bytes", type=parse_bytes, default=8)
    p.add_argument("--max-bytes", type=parse_bytes, default=64 << 20)
    p.add_argument("--iters", type=int, default=50, help="timed calls per size [50]")
    p.add_argument("--timeout", type=int, default=900, help="seconds per sweep [900]")
    p.add_argument("--out", default=os.path.join(REPO, "docs", "img"))
    args = p.parse_args()
    if args.min_bytes > args.max_bytes:
        p.error(f"--min-bytes {args.min_bytes} is above --max-bytes {args.max_bytes}")
    if args.iters < 1:
        p.error("--iters must be at least 1")
    if args.run:
        measure(args)
    plot(args)


if __name__ == "__main__":
    main()
