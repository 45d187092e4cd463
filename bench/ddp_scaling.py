#!/usr/bin/env python3
"""Runs c10d-ddp-bench under c10drun at several world sizes and modes, N times each, and prints
the medians with two ratios: DDP step time over the single-process step time at the
same per-rank batch (target <= 1.3 at world 2) and scaling efficiency (samples/s at world W over
W x samples/s at world 1).

  bench/ddp_scaling.py [--runs 3] [--worlds 1,2,4] [--steps 40] [--build build]
                       [--backend tcp|mpi]

--backend mpi starts the ranks with mpirun (shared-memory transport, Open MPI's choice) and
C10D_BACKEND=mpi; the single-process step runs as with tcp (it communicates nothing).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run(build, world, mode, steps, backend):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        bench = [os.path.join(build, "bench", "c10d-ddp-bench"), "--steps", str(steps),
                 "--mode", mode, "--json", f.name]
        if backend == "mpi" and mode != "local":
            cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(world),
                   "-x", "C10D_BACKEND=mpi"] + bench
        else:
            cmd = [os.path.join(build, "tools", "c10drun"), "--nproc-per-node", str(world)] + bench
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=600)
        return json.load(open(f.name))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--worlds", default="1,2,4")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--build", default="build")
    p.add_argument("--backend", default="tcp", choices=["tcp", "mpi"])
    a = p.parse_args()
    worlds = [int(w) for w in a.worlds.split(",")]
    cases = [(1, "local")] + [(w, m) for w in worlds if w > 1 for m in ("ddp", "optimizer_step")]
    rows = {c: [] for c in cases}
    for _ in range(a.runs):  # interleaved, so load drifts hit every case alike
        for c in cases:
            rows[c].append(run(a.build, c[0], c[1], a.steps, a.backend))
    base = statistics.median(r["step_ms"] for r in rows[(1, "local")])
    print("| world | mode | step ms | x single-process step | scaling efficiency "
          "| comm ms | not overlapped ms | overlap |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for (world, mode) in cases:
        step = statistics.median(r["step_ms"] for r in rows[(world, mode)])
        comm = statistics.median(r["comm_ms"] for r in rows[(world, mode)])
        wait = statistics.median(r["wait_ms"] for r in rows[(world, mode)])
        overlap = f"{100 * max(0.0, 1 - wait / comm):.0f}%" if comm > 0 else "-"
        print(f"| {world} | {mode} | {step:.2f} | {step / base:.2f} | {base / step:.2f} "
              f"| {comm:.2f} | {wait:.2f} | {overlap} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
