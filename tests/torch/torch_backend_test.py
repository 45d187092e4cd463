"""c10d_torch: c10d as a torch.distributed backend, run by /usr/bin/python3.

Each test starts a job of 2 or 3 ranks as processes of this file (`--rank`), on 127.0.0.1, and
checks every rank's exit status; a rank checks its results against closed forms and exits
non-zero with the failure. The environment gives PYTHONPATH (build/python).
"""

import argparse
import datetime
import os
import subprocess
import sys
import tempfile
import time
import traceback
import unittest

from launch_util import expect, expect_raises, finish, free_port, job_env, start

JOB_TIMEOUT_S = 120


# ---------------------------------------------------------------------------------------------
# The ranks' side.
# ---------------------------------------------------------------------------------------------


def expect_equal(got, want, what):
    import torch

    if not torch.equal(got, want):
        raise AssertionError(f"{what}: got {got.tolist()}, want {want.tolist()}")


DTYPES = [
    "float32", "float64", "float16", "bfloat16", "int8", "uint8", "int16", "int32", "int64",
    "bool", "complex64", "complex128",
]


def reduce_cases(dist, dtype, r, world):
    """(op, name, rank r's tensor, the result) for every reduce op the dtype takes."""
    import torch

    n = 5
    full = lambda v: torch.full((n,), v, dtype=dtype)  # noqa: E731
    total = world * (world + 1) // 2
    if dtype == torch.bool:
        return [
            (dist.ReduceOp.SUM, "sum", full(r == 0), full(True)),
            (dist.ReduceOp.PRODUCT, "product", full(r != 0), full(False)),
            (dist.ReduceOp.MIN, "min", full(r != 1), full(False)),
            (dist.ReduceOp.MAX, "max", full(r == 1), full(True)),
        ]
    if dtype.is_complex:
        x = torch.full((n,), complex(r + 1, r), dtype=dtype)
        return [
            (dist.ReduceOp.SUM, "sum", x, torch.full((n,), complex(total, total - world),
                                                     dtype=dtype)),
            (dist.ReduceOp.AVG, "avg", x.clone(),
             torch.full((n,), complex(total / world, (total - world) / world), dtype=dtype)),
        ]
    cases = [
        (dist.ReduceOp.SUM, "sum", full(r + 1), full(total)),
        (dist.ReduceOp.PRODUCT, "product", full(r + 1), full(6 if world == 3 else 2)),
        (dist.ReduceOp.MIN, "min", full(r + 1), full(1)),
        (dist.ReduceOp.MAX, "max", full(r + 1), full(world)),
    ]
    if dtype.is_floating_point:
        cases.append((dist.ReduceOp.AVG, "avg", full(r + 1), full(total / world)))
        cases.append((dist._make_nccl_premul_sum(2.0), "premul_sum(2.0)", full(r + 1),
                      full(2 * total)))
    else:
        bits = lambda v: torch.full((n,), v, dtype=dtype)  # noqa: E731
        every = (1 << world) - 1
        cases += [
            (dist.ReduceOp.BAND, "band", bits(every & ~(1 << r)), bits(0)),
            (dist.ReduceOp.BOR, "bor", bits(1 << r), bits(every)),
            (dist.ReduceOp.BXOR, "bxor", bits(3 << r), bits(1 | (1 << world))),
        ]
    return cases


def scenario_ops(rank, world):
    """Every op, several dtypes and every reduce op, against closed forms; zero copy; errors."""
    import torch
    import torch.distributed as dist

    import c10d_torch

    dist.init_process_group("c10d", init_method="env://")
    expect(dist.get_backend() == "c10d", f"backend {dist.get_backend()}")
    expect(c10d_torch.backend_of() == "tcp", f"c10d backend {c10d_torch.backend_of()}")
    r = rank
    verified = []

    # all_reduce: every dtype with every reduce op it takes; the tensor is written in place.
    for name in DTYPES:
        dtype = getattr(torch, name)
        for op, op_name, x, want in reduce_cases(dist, dtype, r, world):
            ptr = x.data_ptr()
            work = dist.all_reduce(x, op=op, async_op=True)
            work.wait()
            expect_equal(x, want, f"all_reduce {op_name} {name}")
            expect(x.data_ptr() == ptr, "all_reduce moved the tensor")
            expect(work.result()[0].data_ptr() == ptr, "Work.result() is not the input")
            verified.append(f"all_reduce/{op_name}/{name}")

    # reduce, broadcast: a few dtypes, two roots.
    for name in ("float32", "bfloat16", "int16", "int64", "complex64", "bool"):
        dtype = getattr(torch, name)
        for root in (0, world - 1):
            x = torch.full((7,), r + 1, dtype=dtype)
            dist.reduce(x, dst=root)
            if r == root:
                want = torch.full((7,), world * (world + 1) // 2, dtype=dtype)
                if dtype == torch.bool:
                    want = torch.full((7,), True)
                expect_equal(x, want, f"reduce {name} root {root}")
            y = torch.full((3, 2), r * 10 + 5, dtype=dtype)
            dist.broadcast(y, src=root)
            expect_equal(y, torch.full((3, 2), root * 10 + 5, dtype=dtype),
                         f"broadcast {name} root {root}")
        verified += [f"reduce/{name}", f"broadcast/{name}"]

    # all_gather, all_gather_into_tensor, all_gather_coalesced, gather, scatter.
    for name in ("float32", "float16", "uint8", "int32", "complex128"):
        dtype = getattr(torch, name)
        outs = [torch.zeros(4, dtype=dtype) for _ in range(world)]
        dist.all_gather(outs, torch.full((4,), r + 1, dtype=dtype))
        for q in range(world):
            expect_equal(outs[q], torch.full((4,), q + 1, dtype=dtype), f"all_gather {name}")
        flat = torch.zeros(world * 4, dtype=dtype)
        gather_into = getattr(dist, "all_gather_into_tensor", None) or dist._all_gather_base
        gather_into(flat, torch.full((4,), r + 1, dtype=dtype))
        expect_equal(flat, torch.arange(1, world + 1).repeat_interleave(4).to(dtype),
                     f"all_gather_into_tensor {name}")
        lists = [[torch.zeros(2, dtype=dtype), torch.zeros(3, dtype=dtype)]
                 for _ in range(world)]
        dist.all_gather_coalesced(lists, [torch.full((2,), r, dtype=dtype),
                                          torch.full((3,), 10 + r, dtype=dtype)])
        for q in range(world):
            expect_equal(lists[q][0], torch.full((2,), q, dtype=dtype), "all_gather_coalesced")
            expect_equal(lists[q][1], torch.full((3,), 10 + q, dtype=dtype),
                         "all_gather_coalesced")
        root = 1
        gathered = [torch.zeros(3, dtype=dtype) for _ in range(world)] if r == root else None
        dist.gather(torch.full((3,), r * 2, dtype=dtype), gathered, dst=root)
        if r == root:
            for q in range(world):
                expect_equal(gathered[q], torch.full((3,), q * 2, dtype=dtype), f"gather {name}")
        got = torch.zeros(3, dtype=dtype)
        pieces = [torch.full((3,), 7 * q, dtype=dtype) for q in range(world)] if r == 0 else None
        dist.scatter(got, pieces, src=0)
        expect_equal(got, torch.full((3,), 7 * r, dtype=dtype), f"scatter {name}")
        verified += [f"{op}/{name}" for op in ("all_gather", "all_gather_into_tensor",
                                                "all_gather_coalesced", "gather", "scatter")]

    # reduce_scatter (list and tensor forms), with SUM and MAX.
    for name in ("float32", "float64", "int16", "int64"):
        dtype = getattr(torch, name)
        out = torch.zeros(4, dtype=dtype)
        dist.reduce_scatter(out, [torch.full((4,), 10 * r + j, dtype=dtype)
                                  for j in range(world)])
        expect_equal(out, torch.full((4,), 10 * (world * (world - 1) // 2) + world * r,
                                     dtype=dtype), f"reduce_scatter sum {name}")
        out = torch.zeros(4, dtype=dtype)
        dist.reduce_scatter(out, [torch.full((4,), 10 * r + j, dtype=dtype)
                                  for j in range(world)], op=dist.ReduceOp.MAX)
        expect_equal(out, torch.full((4,), 10 * (world - 1) + r, dtype=dtype),
                     f"reduce_scatter max {name}")
        flat_in = torch.cat([torch.full((2,), 10 * r + j, dtype=dtype) for j in range(world)])
        out = torch.zeros(2, dtype=dtype)
        scatter_tensor = getattr(dist, "reduce_scatter_tensor", None) or dist._reduce_scatter_base
        scatter_tensor(out, flat_in)
        expect_equal(out, torch.full((2,), 10 * (world * (world - 1) // 2) + world * r,
                                     dtype=dtype), f"reduce_scatter_tensor {name}")
        verified += [f"reduce_scatter/{name}", f"reduce_scatter_tensor/{name}"]

    # all_to_all_single (alltoall_base) with equal and with uneven splits; all_to_all (lists).
    for name in ("float32", "int8", "int64", "complex64"):
        dtype = getattr(torch, name)
        inp = torch.cat([torch.full((2, 3), 10 * r + j, dtype=dtype) for j in range(world)])
        out = torch.zeros_like(inp)
        dist.all_to_all_single(out, inp)
        want = torch.cat([torch.full((2, 3), 10 * j + r, dtype=dtype) for j in range(world)])
        expect_equal(out, want, f"all_to_all_single {name}")
        # rank q sends j + 1 rows to rank j and receives r + 1 rows from each.
        inp = torch.cat([torch.full((j + 1, 2), 10 * r + j, dtype=dtype) for j in range(world)])
        out = torch.zeros((world * (r + 1), 2), dtype=dtype)
        dist.all_to_all_single(out, inp, output_split_sizes=[r + 1] * world,
                               input_split_sizes=[j + 1 for j in range(world)])
        want = torch.cat([torch.full((r + 1, 2), 10 * j + r, dtype=dtype)
                          for j in range(world)])
        expect_equal(out, want, f"all_to_all_single with splits {name}")
        ins = [torch.full((r + j + 1,), 10 * r + j, dtype=dtype) for j in range(world)]
        outs = [torch.zeros(j + r + 1, dtype=dtype) for j in range(world)]
        dist.all_to_all(outs, ins)
        for j in range(world):
            expect_equal(outs[j], torch.full((j + r + 1,), 10 * j + r, dtype=dtype),
                         f"all_to_all {name}")
        verified += [f"alltoall_base/{name}", f"alltoall_base_splits/{name}",
                     f"alltoall/{name}"]

    # send/recv around the ring, blocking and not; barrier.
    for name in ("float32", "int16", "bool"):
        dtype = getattr(torch, name)
        nxt, prev = (r + 1) % world, (r - 1) % world
        got = torch.zeros(6, dtype=dtype)
        reqs = [dist.isend(torch.full((6,), (r % 2) == 0 if dtype == torch.bool else r,
                                      dtype=dtype), nxt, tag=3),
                dist.irecv(got, prev, tag=3)]
        for q in reqs:
            q.wait()
        expect_equal(got, torch.full((6,), (prev % 2) == 0 if dtype == torch.bool else prev,
                                     dtype=dtype), f"send/recv {name}")
        verified.append(f"send_recv/{name}")
    # recv without src (recvAnysource): rank 0 receives twice from any source while ranks 1 and
    # 2 send distinct values; recv returns the sender. irecv without src: its Work names the
    # sender once it is done.
    if r == 0:
        senders = []
        for _ in range(world - 1):
            got = torch.zeros(5, dtype=torch.int32)
            src = dist.recv(got, tag=11)
            expect(src in range(1, world), f"recv without src returned {src!r}")
            expect_equal(got, torch.full((5,), 100 + src, dtype=torch.int32),
                         f"recv without src, from rank {src}")
            senders.append(src)
        expect(sorted(senders) == list(range(1, world)),
               f"recv without src took each sender once: got {senders}")
        got = torch.zeros(2)
        work = dist.irecv(got, tag=12)
        work.wait()
        expect(work._source_rank() == world - 1,
               f"irecv without src: the Work names rank {work._source_rank()}")
        expect_equal(got, torch.full((2,), 0.5), "irecv without src")
    else:
        dist.send(torch.full((5,), 100 + r, dtype=torch.int32), 0, tag=11)
        if r == world - 1:
            dist.send(torch.full((2,), 0.5), 0, tag=12)
    verified.append("recv_anysource")
    dist.barrier()
    verified.append("barrier")

    # getFuture: completed with the output tensors; then() runs after.
    x = torch.full((4,), float(r + 1))
    fut = dist.all_reduce(x, async_op=True).get_future()
    doubled = fut.then(lambda f: f.value()[0] * 2).wait()
    expect(fut.value()[0].data_ptr() == x.data_ptr(), "the future's tensor is not the input")
    expect_equal(doubled, torch.full((4,), 2.0 * world * (world + 1) / 2), "future.then")
    verified.append("get_future_then")

    # allreduce_coalesced (tensors of different sizes; torch wants one dtype).
    xs = [torch.full((3,), r + 1.0), torch.full((5,), r + 1.0), torch.full((2,), r + 1.0)]
    dist.all_reduce_coalesced(xs)
    for x, n in zip(xs, (3, 5, 2)):
        expect_equal(x, torch.full((n,), world * (world + 1) // 2, dtype=x.dtype),
                     "all_reduce_coalesced")
    verified.append("allreduce_coalesced")

    # new_group: ranks 0 and world-1 only; rank 1 is not a member.
    sub = dist.new_group([0, world - 1])
    if r in (0, world - 1):
        x = torch.full((3,), float(r))
        dist.all_reduce(x, group=sub)
        expect_equal(x, torch.full((3,), float(world - 1)), "new_group all_reduce")
        expect(c10d_torch.backend_of(sub) == "tcp", "subgroup backend")
    else:
        expect(sub == dist.GroupMember.NON_GROUP_MEMBER, "rank 1 got a subgroup")
    # An abort fails the peers' ops in flight too: let both members finish theirs first.
    dist.barrier()
    if r in (0, world - 1):
        c10d_torch.abort(sub)  # fails the subgroup's later ops, not the default group's
        expect_raises(lambda: dist.all_reduce(torch.ones(1), group=sub))
    verified += ["new_group", "abort"]

    # Refused, with the reason: a non-contiguous, a sparse, an unsupported dtype.
    expect_raises(lambda: dist.all_reduce(torch.ones(4, 4).t()), "c10d", "not contiguous")
    sparse = torch.sparse_coo_tensor(torch.tensor([[0]]), torch.tensor([1.0]), (3,))
    expect_raises(lambda: dist.all_reduce(sparse), "c10d", "Sparse")
    half_complex = torch.zeros(4, dtype=torch.complex32)
    expect_raises(lambda: dist.send(half_complex, (r + 1) % world), "c10d", "ComplexHalf")
    default_pg = dist.distributed_c10d._get_default_group()
    expect_raises(lambda: default_pg.monitored_barrier(datetime.timedelta(seconds=5), False),
                  "c10d", "monitoredBarrier")
    verified.append("errors")

    # The group still works after the refusals (they are caught before anything is sent).
    x = torch.ones(2)
    dist.all_reduce(x)
    expect_equal(x, torch.full((2,), float(world)), "all_reduce after refusals")
    dist.destroy_process_group()
    if r == 0:
        print("verified: " + " ".join(verified))


def scenario_tcp_ddp(rank, world, init_method):
    """tcp:// rendezvous; DistributedDataParallel with the default and a Python comm hook."""
    import torch
    import torch.distributed as dist

    import c10d_torch  # noqa: F401

    dist.init_process_group("c10d", init_method=init_method, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    # Each rank's input differs; DDP's gradient is the average of the ranks' gradients.
    inputs = [torch.full((3, 4), float(q + 1)) for q in range(world)]

    def local_grad(q):
        m = torch.nn.Linear(4, 2)
        m.load_state_dict(model.state_dict())
        m(inputs[q]).sum().backward()
        return m.weight.grad.clone()

    want = sum(local_grad(q) for q in range(world)) / world
    ddp(inputs[rank]).sum().backward()
    expect(torch.allclose(model.weight.grad, want), "DDP gradient is not the average")

    def hook(state, bucket):
        t = bucket.buffer()
        fut = dist.all_reduce(t, async_op=True).get_future()
        return fut.then(lambda f: f.value()[0] / world)

    model.zero_grad()
    ddp2 = torch.nn.parallel.DistributedDataParallel(model)
    ddp2.register_comm_hook(None, hook)
    ddp2(inputs[rank]).sum().backward()
    expect(torch.allclose(model.weight.grad, want), "DDP gradient with a Python comm hook")
    dist.destroy_process_group()


def scenario_file_ici(rank, world, init_method):
    """file:// rendezvous, on the simulated torus (C10D_BACKEND=ici)."""
    import torch
    import torch.distributed as dist

    import c10d_torch

    dist.init_process_group("c10d", init_method=init_method, rank=rank, world_size=world)
    expect(c10d_torch.backend_of() == "ici", f"c10d backend {c10d_torch.backend_of()}")
    x = torch.full((1000,), float(rank + 1))
    dist.all_reduce(x)
    expect_equal(x, torch.full((1000,), float(world * (world + 1) // 2)), "ici all_reduce")
    y = torch.full((5,), rank, dtype=torch.int16)
    dist.broadcast(y, src=1)
    expect_equal(y, torch.full((5,), 1, dtype=torch.int16), "ici broadcast")
    dist.destroy_process_group()


def scenario_peer_killed(rank, world):
    """The last rank dies; the others' next collective fails naming it."""
    import torch
    import torch.distributed as dist

    import c10d_torch  # noqa: F401

    dist.init_process_group("c10d", init_method="env://",
                            timeout=datetime.timedelta(seconds=30))
    x = torch.ones(8)
    dist.all_reduce(x)
    if rank == world - 1:
        os._exit(0)  # no goodbye: as if killed
    start = time.monotonic()
    msg = expect_raises(lambda: [dist.all_reduce(x) for _ in range(100)],
                        f"rank {world - 1}")
    expect(time.monotonic() - start < 25, f"the failure took {time.monotonic() - start:.1f} s")
    print(f"rank {rank}: {msg.splitlines()[0]}")
    os._exit(0)  # the group is broken: skip the exit-time teardown


def scenario_timeouts(rank, world):
    """A wait's timeout, an op's timeout (torch's options), and the group's default timeout."""
    import torch
    import torch.distributed as dist

    import c10d_torch  # noqa: F401

    dist.init_process_group("c10d", init_method="env://",
                            timeout=datetime.timedelta(seconds=30))
    pg = dist.distributed_c10d._get_default_group()
    if rank == 1:
        time.sleep(3)  # rank 0's ops below wait for this rank
        x = torch.ones(4)
        dist.all_reduce(x)  # the op rank 0 waited for with a short wait
        expect_equal(x, torch.full((4,), 2.0), "late all_reduce")
        time.sleep(8)  # past rank 0's op timeout: rank 0 aborts its group
        os._exit(0)
    x = torch.ones(4)
    work = dist.all_reduce(x, async_op=True)
    start = time.monotonic()
    expect_raises(lambda: work.wait(datetime.timedelta(milliseconds=300)), "did not complete",
                  "300 ms")
    expect(time.monotonic() - start < 2.5, "the wait's timeout was not kept")
    work.wait()  # the op itself goes on and completes when rank 1 comes
    expect_equal(x, torch.full((4,), 2.0), "all_reduce after a timed-out wait")
    opts = dist.AllreduceOptions()
    opts.timeout = datetime.timedelta(seconds=1)
    start = time.monotonic()
    expect_raises(lambda: pg.allreduce([torch.ones(4)], opts).wait(), "rank 0")
    took = time.monotonic() - start
    expect(0.8 < took < 6, f"an op with a 1 s timeout failed after {took:.1f} s")
    os._exit(0)


SCENARIOS = {
    "ops": scenario_ops,
    "tcp_ddp": scenario_tcp_ddp,
    "file_ici": scenario_file_ici,
    "peer_killed": scenario_peer_killed,
    "timeouts": scenario_timeouts,
}


def rank_main(args):
    try:
        fn = SCENARIOS[args.scenario]
        if args.init_method:
            fn(args.rank, args.world, args.init_method)
        else:
            fn(args.rank, args.world)
    except BaseException:  # noqa: B902 (the exit status carries it)
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    sys.stdout.flush()


# ---------------------------------------------------------------------------------------------
# The test's side.
# ---------------------------------------------------------------------------------------------


class TorchBackendTest(unittest.TestCase):
    def run_job(self, scenario, world, init_method="", env=None):
        base = job_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
                       WORLD_SIZE=str(world), **(env or {}))
        procs = [start([sys.executable, os.path.abspath(__file__), "--scenario", scenario,
                        "--rank", str(rank), "--world", str(world), "--init-method",
                        init_method], dict(base, RANK=str(rank)))
                 for rank in range(world)]
        deadline = time.monotonic() + JOB_TIMEOUT_S
        results = [finish(p, deadline - time.monotonic()) for p in procs]
        report = "\n".join(f"--- rank {r} (exit {code}) ---\n{out}"
                           for r, (code, out) in enumerate(results))
        for code, _ in results:
            self.assertEqual(code, 0, report)
        return [out for _, out in results]

    def test_every_op_dtype_and_reduce_op(self):
        outputs = self.run_job("ops", 3)
        print(outputs[0].strip())

    def test_tcp_init_and_ddp(self):
        self.run_job("tcp_ddp", 2, init_method=f"tcp://127.0.0.1:{free_port()}")

    def test_file_init_on_ici(self):
        with tempfile.TemporaryDirectory() as d:
            self.run_job("file_ici", 2, init_method=f"file://{d}/store",
                         env={"C10D_BACKEND": "ici"})

    def test_killed_peer_is_named(self):
        outputs = self.run_job("peer_killed", 3)
        for out in outputs[:2]:
            self.assertIn("rank 2", out)

    def test_timeouts(self):
        self.run_job("timeouts", 2)

    def test_libraries_bind_their_own_names(self):
        """No c10d name binds across the two libraries, in either direction and whichever loads
        first: ours are c10d::v1's (tests/symbols/exported_symbols_test.sh checks the exports),
        torch's are c10d's."""

        def traced(preload):
            with tempfile.TemporaryDirectory() as d:
                env = dict(os.environ, LD_DEBUG="bindings",
                           LD_DEBUG_OUTPUT=os.path.join(d, "ld"))
                if preload:
                    env["LD_PRELOAD"] = preload
                subprocess.run([sys.executable, "-c", "import c10d_torch"], env=env, check=True,
                               timeout=60)
                lines = []
                for name in os.listdir(d):
                    with open(os.path.join(d, name)) as f:
                        lines += f.read().splitlines()
            return lines

        def check(lines, order):
            wrong = []
            libc10d = None
            for line in lines:
                if "binding file " not in line or "4c10d" not in line:
                    continue
                source = line.split("binding file ", 1)[1].split(" ", 1)[0]
                target = line.split(" to ", 1)[1].split(" ", 1)[0]
                if "libc10d.so" in target:
                    libc10d = target
                if "libc10d.so" in source and "libtorch" in target:
                    wrong.append(line.strip())
                if "libtorch" in source and "libc10d.so" in target:
                    wrong.append(line.strip())
                if "c10d_torch/_C" in source and "libc10d.so" in target and "4c10d4Work" in line:
                    wrong.append(line.strip())
            self.assertIsNotNone(libc10d, f"{order}: no binding to libc10d.so traced")
            self.assertEqual(wrong, [], f"{order}: a library bound a c10d name to the other")
            return libc10d

        libc10d = check(traced(None), "torch first")
        # libc10d.so first in the global scope, before libtorch: the order in which the same
        # mangled names would have bound torch's own references to ours.
        check(traced(libc10d), "libc10d.so preloaded")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--scenario")
    parser.add_argument("--rank", type=int)
    parser.add_argument("--world", type=int)
    parser.add_argument("--init-method", default="")
    args, rest = parser.parse_known_args()
    if args.scenario:
        rank_main(args)
    else:
        unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
