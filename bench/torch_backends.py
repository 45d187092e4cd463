#!/usr/bin/python3
"""torch_backends: torch.distributed's collectives with the backends "c10d" (c10d_torch) and
"gloo", side by side, nccl-tests style.

  PYTHONPATH=build/python /usr/bin/python3 bench/torch_backends.py [--json FILE]
  (smoke: --ranks 2 --max-bytes 64K --rounds 1 --iters 20 --ddp-steps 20)

For each world size (--ranks, default 2,4) it runs jobs under build/tools/c10drun (env://), each
job one backend over the whole sweep, ALTERNATING backends job by job (c10d, gloo, c10d, gloo...,
--rounds jobs each), so that a machine's drift hits both alike; a row's time is the median over
a backend's jobs of that job's mean time per op (the slowest rank's). The sweep: all_reduce,
broadcast, all_gather_into_tensor, reduce_scatter_tensor, all_to_all_single, float32, sizes
from --min-bytes to --max-bytes (8 B to 64 MiB) by --factor; size is the larger buffer's bytes
(nccl-tests' convention), counts rounded down to a multiple of the world size. algbw = size /
time; busbw = algbw * nccl-tests' factor (all_reduce 2(n-1)/n; all_gather, reduce_scatter,
all_to_all (n-1)/n; broadcast 1). torch 1.13's gloo has neither all_gather_into_tensor nor
reduce_scatter_tensor: its rows run what a gloo program runs instead (all_gather into views of
the output; all_reduce of a copy of the input, then the rank's chunk copied out), marked "*".

Every result is verified against closed forms (before timing, and the timed loop's last
result); a wrong answer fails the job and the bench (exit 1).

Also measured:
  - ddp: examples/torch_ddp_fmnist.py's model and data, DistributedDataParallel, batch 64 per
    rank, --ddp-steps steps after warm-up: the step time (forward, backward, optimizer) and the
    time the steps spent in communication, from DDP's own runtime statistics
    (model._get_ddp_logging_data(), every step recorded via
    _set_ddp_runtime_logging_sample_rate(1)): "comm" is backward_comm_time, from the first
    bucket's all_reduce launch to the last bucket's completion; "exposed comm" is that minus
    backward_compute_comm_overlap_time, the part backward did not hide. Where ranks share
    cores, "comm" is mostly the wait for the slowest rank's backward; "bucket comm" is the
    backend's own part: after the timed steps, DDP's buckets (their sizes from its logging
    data) all_reduced as DDP launches them, after a barrier that lines the ranks up.
  - floor: what one torch.distributed call costs with no communication at all, in world-size-1
    jobs: dist.all_reduce of 8 B on c10d and on gloo, the same through the ProcessGroup's
    method (no Python wrapper), and dist.all_reduce on a backend written in Python whose ops
    complete at once ("null": torch.distributed's own cost, plus one call into Python). No
    backend's small message costs less than the floor, so gloo's time / the floor bounds the
    gloo/c10d ratio; the table ends with that bound for all_reduce up to 64 KiB.

gloo/c10d > 1 means c10d is faster. Run it on a quiet machine (it takes tens of minutes with the
defaults); label results by date, commit and machine.
"""

import argparse
import datetime
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
OPS = ("all_reduce", "broadcast", "all_gather_into_tensor", "reduce_scatter_tensor",
       "all_to_all_single")
BACKENDS = ("c10d", "gloo")
ELEMENT = 4  # float32


def bus_factor(op, n):
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op == "broadcast":
        return 1.0
    return (n - 1) / n


def parse_bytes(text):
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = t[-1] if t and t[-1] in "KMG" else ""
    number = t[:-1] if unit else t
    try:
        value = int(number) * units[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a size (e.g. 8, 64K, 64M)") from None
    if value < ELEMENT or value > (1 << 30):
        raise argparse.ArgumentTypeError(f"{text} is out of range [4 B, 1 GiB]")
    return value


def positive_int(text):
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def rank_list(text):
    try:
        values = [int(x, 10) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a list of world sizes") from None
    if not values or any(v < 2 or v > 64 for v in values):
        raise argparse.ArgumentTypeError(f"{text}: world sizes must be in [2, 64]")
    return values


def op_list(text):
    values = text.split(",")
    bad = [v for v in values if v not in OPS]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown op(s) {bad}; known: {','.join(OPS)}")
    return values


def sizes(args):
    out, s = [], args.min_bytes
    while s <= args.max_bytes:
        out.append(s)
        s *= args.factor
    return out


def iterations(args, size):
    """(warm-up, timed) iterations for a size: --iters for small messages, fewer for large ones,
    at least --min-iters; the same on every rank."""
    iters = max(args.min_iters, min(args.iters, args.budget_bytes // size))
    return max(1, min(args.warmup, iters)), iters


# ---------------------------------------------------------------------------------------------
# The ranks' side (run by c10drun, one process per rank).
# ---------------------------------------------------------------------------------------------


class WrongAnswer(Exception):
    pass


def check(torch, got, want, what):
    if not torch.equal(got, want):
        bad = (got != want).nonzero()
        i = int(bad[0][0]) if bad.numel() else -1
        raise WrongAnswer(f"{what}: element {i} is {got.view(-1)[i].item()}, want "
                          f"{want.view(-1)[i].item()} ({bad.shape[0]} elements differ)")


class Case:
    """One op at one size on this rank: its buffers, what one call does, and its checks."""

    def __init__(self, torch, dist, op, size, rank, world, backend):
        self.torch, self.dist, self.op = torch, dist, op
        self.rank, self.world = rank, world
        f32 = torch.float32
        count = size // ELEMENT
        if op != "all_reduce" and op != "broadcast":
            count -= count % world
        self.count = count
        self.bytes = count * ELEMENT
        self.impl = op
        if count == 0:
            return
        r, w = rank, world
        idx = torch.arange(count, dtype=torch.int64)
        pattern = (idx % 251 + 1).to(f32)
        if op == "all_reduce":
            self.buf = torch.empty(count, dtype=f32)
            self.first = pattern * (r + 1)
            self.first_want = pattern * (w * (w + 1) // 2)
            # Timed on values that cancel: the first call gives exact zeros, and so does every
            # later one; a call that left the buffer alone, or summed some ranks only, would not.
            self.timed = (idx % 7 + 1).to(f32) * (r - (w - 1) / 2)
            self.timed_want = torch.zeros(count, dtype=f32)
            self.call = lambda: dist.all_reduce(self.buf)
        elif op == "broadcast":
            self.buf = torch.empty(count, dtype=f32)
            self.first = pattern + 1000 if r == 0 else torch.full((count,), -1.0)
            self.first_want = pattern + 1000
            self.timed, self.timed_want = self.first, self.first_want
            self.call = lambda: dist.broadcast(self.buf, src=0)
        elif op == "all_gather_into_tensor":
            m = count // w
            self.inp = (torch.arange(m) % 997).to(f32) + 1000 * r
            self.out = torch.empty(count, dtype=f32)
            self.want = torch.cat([(torch.arange(m) % 997).to(f32) + 1000 * q for q in range(w)])
            if backend == "gloo":  # torch 1.13's gloo has no _allgather_base
                self.impl = "all_gather (views)"
                views = list(self.out.chunk(w))
                self.call = lambda: dist.all_gather(views, self.inp)
            else:
                self.call = lambda: dist.all_gather_into_tensor(self.out, self.inp)
        elif op == "reduce_scatter_tensor":
            m = count // w
            self.inp = pattern * (r + 1)
            self.out = torch.empty(m, dtype=f32)
            self.want = pattern[r * m:(r + 1) * m] * (w * (w + 1) // 2)
            if backend == "gloo":  # torch 1.13's gloo has no reduce_scatter at all
                self.impl = "all_reduce + copy"
                scratch = torch.empty(count, dtype=f32)

                def fallback():
                    scratch.copy_(self.inp)
                    dist.all_reduce(scratch)
                    self.out.copy_(scratch[r * m:(r + 1) * m])

                self.call = fallback
            else:
                self.call = lambda: dist.reduce_scatter_tensor(self.out, self.inp)
        elif op == "all_to_all_single":
            m = count // w
            k = (torch.arange(m) % 97).to(f32)
            self.inp = torch.cat([k + 1000 * r + 100 * b for b in range(w)])
            self.out = torch.empty(count, dtype=f32)
            self.want = torch.cat([k + 1000 * q + 100 * r for q in range(w)])
            self.call = lambda: dist.all_to_all_single(self.out, self.inp)
        else:
            raise ValueError(op)

    def what(self):
        return f"{self.op} ({self.impl}) of {self.bytes} B, rank {self.rank} of {self.world}"

    def verify_once(self):
        """One call on the closed-form inputs, checked."""
        if self.op in ("all_reduce", "broadcast"):
            self.buf.copy_(self.first)
            self.call()
            check(self.torch, self.buf, self.first_want, self.what())
        else:
            self.out.fill_(-7.0)
            self.call()
            check(self.torch, self.out, self.want, self.what())

    def prepare_timed(self):
        if self.op in ("all_reduce", "broadcast"):
            self.buf.copy_(self.timed)

    def verify_timed(self):
        if self.op in ("all_reduce", "broadcast"):
            check(self.torch, self.buf, self.timed_want, self.what() + ", timed loop")
        else:
            check(self.torch, self.out, self.want, self.what() + ", timed loop")


def slowest(torch, dist, seconds):
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t[0])


def worker_sweep(args, torch, dist, rank, world):
    results = []
    for op in args.ops:
        for size in sizes(args):
            case = Case(torch, dist, op, size, rank, world, args.backend)
            if case.count == 0:
                continue
            warmup, iters = iterations(args, size)
            case.verify_once()
            case.prepare_timed()
            for _ in range(warmup):
                case.call()
            dist.barrier()
            start = time.perf_counter()
            for _ in range(iters):
                case.call()
            elapsed = time.perf_counter() - start
            case.verify_timed()
            per_op = slowest(torch, dist, elapsed) / iters
            results.append({"op": op, "bytes": case.bytes, "count": case.count,
                            "impl": case.impl, "iters": iters, "time_us": per_op * 1e6})
            if rank == 0 and args.verbose:
                print(f"{op} {case.bytes} B: {per_op * 1e6:.1f} us", flush=True)
    return results


def load_example():
    import importlib.util

    path = os.path.join(REPO, "examples", "torch_ddp_fmnist.py")
    spec = importlib.util.spec_from_file_location("torch_ddp_fmnist", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def worker_ddp(args, torch, dist, rank, world):
    """examples/torch_ddp_fmnist.py's training step, timed; communication from DDP's own
    runtime statistics."""
    import torch.nn.functional as F

    example = load_example()
    torch.manual_seed(0)
    images, labels = example.load_split(args.data, "train")
    batch = 64
    steps, warm = args.ddp_steps, max(5, args.ddp_steps // 5)
    need = (steps + warm) * batch
    gen = torch.Generator().manual_seed(rank)
    order = torch.randint(0, images.shape[0], (need,), generator=gen)
    model = torch.nn.parallel.DistributedDataParallel(example.make_model())
    model._set_ddp_runtime_logging_sample_rate(1)  # every step, not every 100th
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    params = sum(p.numel() for p in model.parameters())

    def run(first, count):
        for s in range(first, first + count):
            idx = order[s * batch:(s + 1) * batch]
            loss = F.cross_entropy(model(images[idx]), labels[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

    def stats():
        # DDP records a step's statistics at the next forward, as running averages over the
        # steps recorded so far ("iteration" of them, every step at sample rate 1).
        data = model._get_ddp_logging_data()
        for key in ("avg_backward_comm_time", "avg_backward_compute_comm_overlap_time"):
            if key not in data:
                raise RuntimeError(f"DDP's logging data has no {key} (keys: {sorted(data)})")
        return (data["iteration"], data["avg_backward_comm_time"],
                data["avg_backward_compute_comm_overlap_time"])

    run(0, warm)
    n0, comm0, overlap0 = stats()
    dist.barrier()
    start = time.perf_counter()
    run(warm, steps)
    elapsed = time.perf_counter() - start
    n1, comm1, overlap1 = stats()
    if n1 <= n0:
        raise RuntimeError(f"DDP recorded no statistics over {steps} steps")
    # The means over the steps recorded between the two readings (each step is recorded at
    # the next one's forward, so the window is the timed steps shifted back by one).
    comm_ns = (comm1 * n1 - comm0 * n0) / (n1 - n0)
    overlap_ns = (overlap1 * n1 - overlap0 * n0) / (n1 - n0)
    step_s = slowest(torch, dist, elapsed) / steps
    comm_s = slowest(torch, dist, comm_ns * 1e-9)
    exposed_s = slowest(torch, dist, max(0.0, comm_ns - overlap_ns) * 1e-9)
    bucket_s = replay_buckets(torch, dist, model, steps)
    return {"steps": steps, "batch_per_rank": batch, "params": params,
            "step_us": step_s * 1e6, "comm_us": comm_s * 1e6, "exposed_comm_us": exposed_s * 1e6,
            "comm_share": comm_s / step_s if step_s > 0 else 0.0,
            "bucket_comm_us": bucket_s * 1e6}


def replay_buckets(torch, dist, model, steps):
    """The communication of one step without the wait for other ranks' compute: DDP's own
    buckets (their sizes from its logging data), all_reduced as DDP launches them (async, then
    all waited for), after a barrier that lines the ranks up; seconds per step, the slowest
    rank's mean. DDP's comm time runs from the first bucket's launch to the last one's end on
    each rank, so where ranks share cores it mostly measures how far behind the slowest
    rank's backward is; this measures what the backend itself takes for the same buckets."""
    data = model._get_ddp_logging_data()
    sizes = [int(b) for b in str(data.get("rebuilt_bucket_sizes")
                                 or data["bucket_sizes"]).replace(",", " ").split()]
    buckets = [torch.ones(n // 4) for n in sizes]  # float32 gradients: bytes / 4 elements
    world = dist.get_world_size()
    total = 0.0
    for _ in range(steps):
        for b in buckets:
            b.fill_(1.0)
        dist.barrier()
        start = time.perf_counter()
        works = [dist.all_reduce(b, async_op=True) for b in buckets]
        for w in works:
            w.wait()
        total += time.perf_counter() - start
    for b in buckets:
        check(torch, b, torch.full_like(b, float(world)), "DDP bucket all_reduce")
    return slowest(torch, dist, total / steps)


def timed(fn, n):
    """Mean µs of n calls of fn, after up to 1000 untimed ones."""
    for _ in range(min(1000, n)):
        fn()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def worker_floor(args, torch, dist):
    """World size 1: the cost of one torch.distributed call with nothing to communicate."""
    t = torch.zeros(2)
    pg = dist.distributed_c10d._get_default_group()
    opts = dist.AllreduceOptions()
    t.fill_(3.0)
    dist.all_reduce(t)
    check(torch, t, torch.full((2,), 3.0), "world-1 all_reduce")
    n = args.floor_calls
    return {"dist_all_reduce_us": timed(lambda: dist.all_reduce(t), n),
            "pg_allreduce_wait_us": timed(lambda: pg.allreduce([t], opts).wait(), n)}


def register_null_backend(torch, dist):
    """A backend written in Python whose all_reduce completes at once: torch.distributed's own
    cost per call (plus one call into Python)."""
    from torch._C._distributed_c10d import _create_work_from_future

    class NullProcessGroup(dist.ProcessGroup):
        def allreduce(self, tensors, opts):
            fut = torch.futures.Future()
            fut.set_result(tensors)
            return _create_work_from_future(fut)

        def getBackendName(self):
            return "null"

    dist.Backend.register_backend("null", lambda store, rank, world, timeout:
                                  NullProcessGroup(rank, world))


def worker_main(args):
    import torch
    import torch.distributed as dist

    import c10d_torch  # noqa: F401  (the "c10d" backend; env:// under c10drun)

    torch.set_num_threads(1)
    if args.backend == "null":
        register_null_backend(torch, dist)
    dist.init_process_group(args.backend, init_method="env://",
                            timeout=datetime.timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    out = {"backend": args.backend, "world": world}
    if args.phase == "floor":
        if args.backend == "null":
            t = torch.zeros(2)
            out["floor"] = {"dist_all_reduce_us": timed(lambda: dist.all_reduce(t),
                                                        args.floor_calls)}
        else:
            out["floor"] = worker_floor(args, torch, dist)
    else:
        out["sweep"] = worker_sweep(args, torch, dist, rank, world)
        if args.ddp_steps:
            out["ddp"] = worker_ddp(args, torch, dist, rank, world)
    if world > 1:
        dist.barrier()
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump(out, f)
    dist.destroy_process_group()


# ---------------------------------------------------------------------------------------------
# The driver.
# ---------------------------------------------------------------------------------------------


def run_job(args, backend, world, phase, log):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "result.json")
        cmd = [args.c10drun, "--nproc-per-node", str(world), sys.executable,
               os.path.abspath(__file__), "--_worker", "--backend", backend, "--phase", phase,
               "--out", out] + args.worker_args
        env = dict(os.environ)
        python_dir = os.path.join(args.build_dir, "python")
        env["PYTHONPATH"] = python_dir + (os.pathsep + env["PYTHONPATH"]
                                          if env.get("PYTHONPATH") else "")
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # gloo on loopback, as c10d's ranks here
        env.setdefault("OMP_NUM_THREADS", "1")
        start = time.monotonic()
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
        try:
            output, _ = p.communicate(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGTERM)  # c10drun forwards it, then kills after its grace
            try:
                output, _ = p.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                output, _ = p.communicate()
            sys.exit(f"torch_backends: {backend} job of {world} ranks ({phase}) did not finish "
                     f"within {args.timeout} s:\n{output}")
        if p.returncode != 0 or not os.path.exists(out):
            sys.exit(f"torch_backends: {backend} job of {world} ranks ({phase}) failed (exit "
                     f"{p.returncode}):\n{output}")
        log(f"  {backend:5s} x{world} {phase}: {time.monotonic() - start:.1f} s")
        with open(out) as f:
            return json.load(f)


def median_or_none(values):
    return statistics.median(values) if values else None


def summarize(args, runs):
    rows = []
    for world in args.ranks:
        keyed = {}
        for run in runs:
            if run["world"] != world:
                continue
            for r in run["sweep"]:
                entry = keyed.setdefault((r["op"], r["bytes"]), {"count": r["count"]})
                entry.setdefault(run["backend"], []).append(r["time_us"])
                entry[run["backend"] + "_impl"] = r["impl"]
        for op in args.ops:
            for (o, size), e in sorted(keyed.items(), key=lambda kv: kv[0][1]):
                if o != op:
                    continue
                row = {"ranks": world, "op": op, "bytes": size, "count": e["count"]}
                for b in BACKENDS:
                    t = median_or_none(e.get(b, []))
                    row[b + "_us"] = t
                    row[b + "_runs"] = len(e.get(b, []))
                    row[b + "_impl"] = e.get(b + "_impl")
                    algbw = size / (t * 1e-6) / 1e9 if t else None
                    row[b + "_algbw"] = algbw
                    row[b + "_busbw"] = algbw * bus_factor(op, world) if algbw else None
                c, g = row["c10d_us"], row["gloo_us"]
                row["gloo_over_c10d"] = g / c if c and g else None
                rows.append(row)
    ddp = []
    for world in args.ranks:
        per = {b: [r["ddp"] for r in runs if r["world"] == world and r["backend"] == b
                   and "ddp" in r] for b in BACKENDS}
        if not per["c10d"] and not per["gloo"]:
            continue
        row = {"ranks": world}
        for b in BACKENDS:
            for k in ("step_us", "comm_us", "exposed_comm_us", "comm_share", "bucket_comm_us"):
                row[f"{b}_{k}"] = median_or_none([d[k] for d in per[b]])
        if per["c10d"]:
            row["params"] = per["c10d"][0]["params"]
            row["steps"] = per["c10d"][0]["steps"]
        ddp.append(row)
    return rows, ddp


def fmt(v, spec):
    return format(v, spec) if v is not None else "n/a"


def print_table(args, rows, ddp, floor):
    print(f"# torch.distributed: c10d vs gloo; medians of {args.rounds} alternating job(s) per "
          f"backend; time per op of the slowest rank; float32")
    print(f"# {'ranks':>5s} {'op':>22s} {'size':>10s} {'count':>9s}   "
          f"{'c10d time':>10s} {'algbw':>7s} {'busbw':>7s}   "
          f"{'gloo time':>10s} {'algbw':>7s} {'busbw':>7s}   {'gloo/c10d':>9s}")
    print(f"# {'':>5s} {'':>22s} {'(B)':>10s} {'(elems)':>9s}   "
          f"{'(us)':>10s} {'(GB/s)':>7s} {'(GB/s)':>7s}   "
          f"{'(us)':>10s} {'(GB/s)':>7s} {'(GB/s)':>7s}   {'':>9s}")
    for r in rows:
        mark = "*" if r["gloo_impl"] and r["gloo_impl"] != r["op"] else " "
        print(f"  {r['ranks']:>5d} {r['op']:>22s} {r['bytes']:>10d} {r['count']:>9d}   "
              f"{fmt(r['c10d_us'], '10.1f')} {fmt(r['c10d_algbw'], '7.3f')} "
              f"{fmt(r['c10d_busbw'], '7.3f')}   {fmt(r['gloo_us'], '10.1f')}{mark}"
              f"{fmt(r['gloo_algbw'], '7.3f')} {fmt(r['gloo_busbw'], '7.3f')}   "
              f"{fmt(r['gloo_over_c10d'], '9.2f')}")
    if any(r["gloo_impl"] and r["gloo_impl"] != r["op"] for r in rows):
        print("# * gloo (torch 1.13) lacks the op: all_gather_into_tensor runs as all_gather "
              "into views of the output, reduce_scatter_tensor as all_reduce + copy")

    def ratio(g, c):
        return g / c if g and c else None

    for d in ddp:
        for label, key in (("ddp_fmnist step", "step_us"), ("ddp_fmnist comm", "comm_us"),
                           ("ddp_fmnist exposed comm", "exposed_comm_us"),
                           ("ddp_fmnist bucket comm", "bucket_comm_us")):
            size = d.get("params", 0) * ELEMENT if key != "step_us" else 0
            count = d.get("params", 0) if key != "step_us" else 0
            print(f"  {d['ranks']:>5d} {label:>23s}{size:>10d} {count:>9d}   "
                  f"{fmt(d['c10d_' + key], '10.1f')} {'':>7s} {'':>7s}   "
                  f"{fmt(d['gloo_' + key], '10.1f')} {'':>7s} {'':>7s}   "
                  f"{fmt(ratio(d['gloo_' + key], d['c10d_' + key]), '9.2f')}")
    if ddp:
        print("# ddp_fmnist: examples/torch_ddp_fmnist.py's CNN, batch 64 per rank, per step: "
              "step = forward + backward + SGD step; comm = DDP's backward_comm_time (first "
              "bucket's all_reduce launched to the last one done); exposed comm = comm minus "
              "its overlap with backward compute (backward_compute_comm_overlap_time); bucket "
              "comm = DDP's buckets all_reduced as DDP launches them, after a barrier (the "
              "backend's own time, without waiting for other ranks' backward); size = the "
              "gradients")
    if floor:
        print("# floor (world size 1, 8 B, nothing to communicate; median us per call):")
        for name, value in floor.items():
            print(f"#   {name:<36s} {value:8.2f}")
        for line in ceilings(rows, floor):
            print("# " + line["text"])


def ceilings(rows, floor):
    """Whether "c10d >= 10x faster than gloo for messages <= 64 KiB" is reachable: a call
    cannot cost less than the floor, so gloo's time / the floor bounds gloo/c10d."""
    torch_floor = floor.get("null dist.all_reduce")
    c10d_floor = floor.get("c10d dist.all_reduce")
    out = []
    for world in sorted({r["ranks"] for r in rows}):
        ar = [r for r in rows if r["ranks"] == world and r["op"] == "all_reduce"
              and r["bytes"] <= 64 * 1024 and r["gloo_us"]]
        for r in sorted({id(x): x for x in (ar[:1] + ar[-1:])}.values(),
                        key=lambda x: x["bytes"]):
            g = r["gloo_us"]
            text = (f"{world} ranks, all_reduce {r['bytes']} B: gloo {g:.1f} us, so 10x needs "
                    f"c10d <= {g / 10:.1f} us")
            entry = {"ranks": world, "bytes": r["bytes"], "gloo_us": g, "needed_us": g / 10}
            if torch_floor:
                entry["ceiling_torch"] = g / torch_floor
                text += (f"; torch.distributed alone: {torch_floor:.1f} us (ceiling "
                         f"{g / torch_floor:.1f}x)")
            if c10d_floor:
                entry["ceiling_c10d_world1"] = g / c10d_floor
                text += f"; c10d at world 1: {c10d_floor:.1f} us (ceiling {g / c10d_floor:.1f}x)"
            entry["text"] = text
            out.append(entry)
    return out


def driver_main(args):
    args.c10drun = os.path.join(args.build_dir, "tools", "c10drun")
    if not os.access(args.c10drun, os.X_OK):
        sys.exit(f"torch_backends: {args.c10drun} not found (build c10drun; --build-dir)")
    args.worker_args = ["--min-bytes", str(args.min_bytes), "--max-bytes", str(args.max_bytes),
                        "--factor", str(args.factor), "--ops", ",".join(args.ops),
                        "--iters", str(args.iters), "--min-iters", str(args.min_iters),
                        "--warmup", str(args.warmup), "--budget-bytes", str(args.budget_bytes),
                        "--ddp-steps", str(args.ddp_steps), "--data", args.data,
                        "--floor-calls", str(args.floor_calls), "--timeout", str(args.timeout)]
    if args.verbose:
        args.worker_args.append("--verbose")

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    runs = []
    for world in args.ranks:
        for round_ in range(args.rounds):
            for backend in BACKENDS:  # alternating: c10d, gloo, c10d, gloo...
                result = run_job(args, backend, world, "sweep", log)
                result["round"] = round_
                runs.append(result)
    names = {"dist_all_reduce_us": "dist.all_reduce",
             "pg_allreduce_wait_us": "ProcessGroup.allreduce().wait()"}
    floor_runs = {}
    if args.floor_calls:
        for _ in range(args.rounds):
            for backend in BACKENDS + ("null",):  # alternating too
                r = run_job(args, backend, 1, "floor", log)
                for k, v in r["floor"].items():
                    floor_runs.setdefault(f"{backend} {names[k]}", []).append(v)
    floor = {name: statistics.median(values) for name, values in floor_runs.items()}
    rows, ddp = summarize(args, runs)
    print_table(args, rows, ddp, floor)
    if args.json:
        commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip()
        doc = {"date": datetime.date.today().isoformat(), "commit": commit,
               "machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
               "config": {k: v for k, v in vars(args).items()
                          if k not in ("worker_args", "json")},
               "rows": rows, "ddp": ddp, "floor": floor, "ceilings": ceilings(rows, floor),
               "runs": runs}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
        log(f"torch_backends: wrote {args.json}")


def main():
    p = argparse.ArgumentParser(prog="torch_backends", allow_abbrev=False,
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=rank_list, default=[2, 4], help="world sizes [2,4]")
    p.add_argument("--ops", type=op_list, default=list(OPS))
    p.add_argument("--min-bytes", type=parse_bytes, default=8)
    p.add_argument("--max-bytes", type=parse_bytes, default=64 << 20)
    p.add_argument("--factor", type=positive_int, default=2)
    p.add_argument("--rounds", type=positive_int, default=3,
                   help="jobs per backend and world size, alternating [3]")
    p.add_argument("--iters", type=positive_int, default=200, help="timed calls, at most [200]")
    p.add_argument("--min-iters", type=positive_int, default=5, help="timed calls, at least [5]")
    p.add_argument("--warmup", type=positive_int, default=10, help="untimed calls first [10]")
    p.add_argument("--budget-bytes", type=parse_bytes, default=256 << 20,
                   help="a size gets budget/size timed calls, within the bounds above [256M]")
    p.add_argument("--ddp-steps", type=int, default=100, help="timed DDP steps; 0: none [100]")
    p.add_argument("--floor-calls", type=int, default=20000,
                   help="calls per floor measurement; 0: no floor [20000]")
    p.add_argument("--data", default=os.environ.get("C10D_FASHION_MNIST")
                   or "/usr/share/datasets/fashion-mnist")
    p.add_argument("--build-dir", default=os.path.join(REPO, "build"))
    p.add_argument("--timeout", type=positive_int, default=1800, help="seconds per job [1800]")
    p.add_argument("--json", metavar="FILE")
    p.add_argument("--verbose", action="store_true")
    # The ranks' side.
    p.add_argument("--_worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--backend", choices=BACKENDS + ("null",), help=argparse.SUPPRESS)
    p.add_argument("--phase", choices=("sweep", "floor"), help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.min_bytes > args.max_bytes:
        p.error(f"--min-bytes {args.min_bytes} is above --max-bytes {args.max_bytes}")
    if args.factor < 2:
        p.error("--factor must be at least 2")
    if args.ddp_steps < 0 or args.floor_calls < 0:
        p.error("--ddp-steps and --floor-calls must be >= 0")
    if args.min_iters > args.iters:
        p.error(f"--min-iters {args.min_iters} is above --iters {args.iters}")
    if args._worker:
        worker_main(args)
    else:
        driver_main(args)


if __name__ == "__main__":
    main()
