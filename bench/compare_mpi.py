#!/usr/bin/env python3
"""Runs c10d-bench (TCP backend, under c10drun) and c10d-mpi-reference (Open MPI, TCP btl) side
by side and prints one markdown table of medians with their ratios.

    bench/compare_mpi.py [--build build] [--runs 5] [--worlds 2,4] [--iters 20]
                         [--backend tcp|mpi] [--btl self,tcp|default]

With --backend mpi, c10d-bench runs under the same mpirun as the reference (the MPI backend's
overhead over raw MPI); --btl default lets Open MPI pick its transports (shared memory here).
With --backend tcp the TCP backend runs on the reference's wire: loopback TCP alone
(C10D_SHM=0) against --btl self,tcp, its same-host shared memory against --btl default.

Every configuration is run --runs times, alternating c10d and Open MPI so that drifting load on
the machine hits both alike; each cell is the median over the runs. Open MPI runs twice per
round: as shipped, and with glibc's mmap threshold pinned (MALLOC_MMAP_MAX_=0), since for
buffers of 32 MiB and more Open MPI's all_reduce allocates and page-faults a fresh buffer on
every call. Both are printed. With --backend mpi the second reference run is instead initialized
with MPI_THREAD_MULTIPLE (C10D_REF_THREAD_MULTIPLE=1), the thread level the MPI backend asks for.
A run with any wrong value aborts the script.

Both programs run with -z 1: every call is waited for before the next is issued, as a program
calling MPI_Allreduce (or all_reduce(...)->wait()) does.

The comparison uses the in-place columns for all_reduce and broadcast (the c10d API is in
place) and the out-of-place columns for all_to_all (its API is out of place).

The last column is a floor for the large rows: the time this machine takes to copy the row's
bytes once with memcpy (between two buffers of that size, touched before, the best of 5), which
no transfer of those bytes between processes beats by much (a single-copy transfer is one such
copy; a ring in shared memory is two, pipelined over two cores).
"""

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

CASES = {  # backend: (collective, sizes in bytes, in_place)
    "tcp": [
        ("all_reduce", [8, 16 << 20, 64 << 20], True),
        ("broadcast", [64 << 20], True),
        ("all_to_all", [64 << 20], False),
    ],
    # The MPI backend's overhead over the same MPI calls: the latency floor and 64 KiB and up.
    "mpi": [
        ("all_reduce", [8, 64 << 10, 16 << 20], True),
        ("broadcast", [64 << 10, 16 << 20], True),
        ("all_to_all", [64 << 10, 16 << 20], False),
    ],
}


def memcpy_us(size, reps=5):
    """The best time of `reps` memcpys of `size` bytes between two touched buffers, in µs."""
    src = (ctypes.c_char * size)()
    dst = (ctypes.c_char * size)()
    ctypes.memset(src, 1, size)
    ctypes.memset(dst, 2, size)
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        ctypes.memmove(dst, src, size)
        best = min(best, time.perf_counter() - start)
    return best * 1e6


def run(cmd, env=None):
    result = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, timeout=900)
    if result.returncode != 0:
        sys.exit(f"failed ({result.returncode}): {' '.join(cmd)}\n{result.stdout[-3000:]}")


def sweep(build, world, collective, size, iters, backend, variant=None, c10d_backend="tcp",
          btl="self,tcp"):
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        # -z 1: c10d waits for each call before the next, as the reference's blocking MPI calls
        # do (the reference accepts the flag and is blocking anyway).
        flags = [collective, "-b", str(size), "-e", str(size), "-n", str(iters), "-w", "3",
                 "-c", "1", "-z", "1", "--json", out.name]
        env = dict(os.environ)
        mpirun = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(world)]
        if btl != "default":
            mpirun += ["--mca", "btl", btl]
        if variant == "pinned":
            mpirun += ["-x", "MALLOC_MMAP_MAX_=0", "-x", "MALLOC_TRIM_THRESHOLD_=4000000000"]
        elif variant == "multiple":
            mpirun += ["-x", "C10D_REF_THREAD_MULTIPLE=1"]
        if backend == "c10d" and c10d_backend == "tcp":
            # The same wire as the reference: loopback TCP against Open MPI's TCP btl; with
            # --btl default, the TCP backend's shared memory against Open MPI's (vader).
            env["C10D_SHM"] = "1" if btl == "default" else "0"
            cmd = [f"{build}/tools/c10drun", "--nproc-per-node", str(world),
                   f"{build}/bench/c10d-bench"] + flags
        elif backend == "c10d":
            cmd = mpirun + [f"{build}/bench/c10d-bench"] + flags + ["--backend", "mpi"]
        else:
            cmd = mpirun + [f"{build}/bench/c10d-mpi-reference"] + flags
        run(cmd, env)
        with open(out.name) as f:
            rows = json.load(f)
    for row in rows:
        if row["wrong"]:
            sys.exit(f"{backend} {collective} world {world} size {size}: {row['wrong']} wrong")
    return {row["in_place"]: row for row in rows}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--worlds", default="2,4")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--backend", default="tcp", choices=["tcp", "mpi"])
    parser.add_argument("--btl", default="self,tcp")
    args = parser.parse_args()

    # The second reference run: for the TCP backend, Open MPI with glibc's mmap threshold pinned
    # (see the module docstring); for the MPI backend, the reference initialized with
    # MPI_THREAD_MULTIPLE, the level the backend asks for (Open MPI then locks in every call).
    variant = "pinned" if args.backend == "tcp" else "multiple"
    variant_label = "mmap pinned" if variant == "pinned" else "THREAD_MULTIPLE"
    # The MPI backend's target is an overhead (time over the same MPI calls): print it too.
    overhead = args.backend == "mpi"
    print("| collective | ranks | size | c10d time (µs) | c10d busbw (GB/s) | Open MPI time (µs) "
          f"| Open MPI busbw | Open MPI, {variant_label}: time (µs) | busbw | c10d / Open MPI "
          f"| c10d / {variant_label} |"
          + (f" overhead over Open MPI | over {variant_label} |" if overhead else "")
          + " one memcpy (µs) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if overhead else "")
          + "---:|")
    for world in [int(w) for w in args.worlds.split(",")]:
        for collective, sizes, in_place in CASES[args.backend]:
            for size in sizes:
                # Rows run long enough for a steady state: 1000 calls of 2 us are 2 ms, which
                # start-up effects (first touches, the worker's first choices) dominate. The MPI
                # backend's 8-byte calls take under a microsecond.
                if size <= 8:
                    iters = max(args.iters, 100000 if args.backend == "mpi" else 10000)
                elif size <= 1 << 20:
                    iters = max(args.iters, 2000)
                else:
                    iters = args.iters
                cells = {"c10d": [], "mpi": [], "variant": []}
                for _ in range(args.runs):
                    for name, backend, v in (("c10d", "c10d", None), ("mpi", "mpi", None),
                                             ("variant", "mpi", variant)):
                        rows = sweep(args.build, world, collective, size, iters, backend, v,
                                     args.backend, args.btl)
                        cells[name].append(rows[in_place])
                med = {k: (statistics.median(r["time_us"] for r in v),
                           statistics.median(r["busbw"] for r in v)) for k, v in cells.items()}
                # Small sizes compare times (lower is better), large ones bus bandwidth.
                if size <= 8:
                    ratio = med["mpi"][0] / med["c10d"][0]
                    ratio_variant = med["variant"][0] / med["c10d"][0]
                else:
                    ratio = med["c10d"][1] / med["mpi"][1]
                    ratio_variant = med["c10d"][1] / med["variant"][1]
                label = (f"{size >> 20} MiB" if size >= 1 << 20 else
                         f"{size >> 10} KiB" if size >= 1 << 10 else f"{size} B")
                print(f"| {collective} | {world} | {label} | {med['c10d'][0]:.1f} | "
                      f"{med['c10d'][1]:.2f} | {med['mpi'][0]:.1f} | {med['mpi'][1]:.2f} | "
                      f"{med['variant'][0]:.1f} | {med['variant'][1]:.2f} | {ratio:.2f}x | "
                      f"{ratio_variant:.2f}x |" + (
                          f" {over(med['c10d'][0], med['mpi'][0])} |"
                          f" {over(med['c10d'][0], med['variant'][0])} |" if overhead else "")
                      # Small rows: a call from Python costs more than the copy; no floor.
                      + (f" {memcpy_us(size):.1f} |" if size >= 1 << 20 else " - |"),
                      flush=True)


def over(mine, theirs):
    """c10d's time over the reference's: "+0.42 µs (+4.1%)"."""
    return f"{mine - theirs:+.2f} µs ({100 * (mine - theirs) / theirs:+.1f}%)"


if __name__ == "__main__":
    main()
