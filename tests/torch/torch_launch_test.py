"""torch.distributed programs started by launchers, unchanged: env:// under c10d's c10drun (for
the backends "c10d" and "gloo"), and under torch's own launcher (torch.distributed.run).

Under c10drun, env:// must reach the launcher's store (c10d's protocol, the job's token)
through c10d_torch's store client; under torchrun it must stay torch's TCPStore. Each test
starts a job of 2 ranks on 127.0.0.1 as processes of this file (`--scenario`); a rank checks
its results and exits non-zero with the failure. The environment gives PYTHONPATH
(build/python) and C10D_C10DRUN (the launcher's path).
"""

import argparse
import datetime
import os
import sys
import time
import traceback
import unittest

from launch_util import (TORCHRUN_PY311_FLAGS, expect, expect_raises, free_port, job_env,
                         run)

JOB_TIMEOUT_S = 120


# ---------------------------------------------------------------------------------------------
# The ranks' side.
# ---------------------------------------------------------------------------------------------


def base_store(dist):
    """The store under the default group's PrefixStores."""
    store = dist.distributed_c10d._get_default_store()
    while isinstance(store, dist.PrefixStore):
        store = store.underlying_store
    return store


def exercise_store(dist, store, rank, world):
    """torch's Store API on c10d's store client: every call, and every wait bounded."""
    td = datetime.timedelta
    if rank == 0:
        store.set("t/a", "alpha")
        expect(store.compare_set("t/cs", "", "one") == b"one", "compare_set of a missing key")
        expect(store.compare_set("t/cs", "wrong", "two") == b"one", "compare_set, wrong expected")
        expect(store.compare_set("t/cs", "one", "three") == b"three", "compare_set, right one")
        store.set("t/mine", b"x")
        expect(store.delete_key("t/mine") is True, "delete_key of a key")
        expect(store.delete_key("t/mine") is False, "delete_key of a missing key")
    expect(store.get("t/a") == b"alpha", "get waits for the key rank 0 sets")
    store.add("t/sum", rank + 1)
    store.set(f"t/done{rank}", "1")
    store.wait([f"t/done{q}" for q in range(world)], td(seconds=30))
    expect(store.add("t/sum", 0) == world * (world + 1) // 2, "add")
    expect(store.get("t/cs") == b"three", "compare_set's result, seen by every rank")
    expect(store.num_keys() >= 3, f"num_keys {store.num_keys()}")

    # Waits for a key nobody sets: each ends at its deadline with an error naming the key.
    start = time.monotonic()
    expect_raises(lambda: store.wait(["t/never"], td(milliseconds=300)), "t/never")
    took = time.monotonic() - start
    expect(0.25 < took < 5, f"a 300 ms wait took {took:.2f} s")
    old = store.timeout
    store.set_timeout(td(milliseconds=400))
    try:
        start = time.monotonic()
        expect_raises(lambda: store.get("t/never"), "t/never")  # get waits the store's timeout
        # torch's "no timeout" (0) waits the store's timeout too: no wait is unbounded.
        expect_raises(lambda: store.wait(["t/never"], td(0)), "t/never")
        expect_raises(lambda: store.wait(["t/never"]), "t/never")
        took = time.monotonic() - start
        expect(1.0 < took < 10, f"three 400 ms waits took {took:.2f} s")
    finally:
        store.set_timeout(old)
    store.set(f"t/checked{rank}", "1")
    store.wait([f"t/checked{q}" for q in range(world)], td(seconds=30))


def check_collectives_and_ddp(torch, dist, rank, world):
    x = torch.full((1000,), float(rank + 1))
    dist.all_reduce(x)
    expect(torch.equal(x, torch.full((1000,), float(world * (world + 1) // 2))), "all_reduce")
    y = torch.full((7,), float(rank))
    dist.broadcast(y, src=world - 1)
    expect(torch.equal(y, torch.full((7,), float(world - 1))), "broadcast")
    outs = [torch.zeros(3) for _ in range(world)]
    dist.all_gather(outs, torch.full((3,), float(rank)))
    expect(all(torch.equal(outs[q], torch.full((3,), float(q))) for q in range(world)),
           "all_gather")
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    inputs = [torch.full((3, 4), float(q + 1)) for q in range(world)]
    grads = []
    for q in range(world):
        m = torch.nn.Linear(4, 2)
        m.load_state_dict(model.state_dict())
        m(inputs[q]).sum().backward()
        grads.append(m.weight.grad)
    ddp(inputs[rank]).sum().backward()
    expect(torch.allclose(model.weight.grad, sum(grads) / world), "DDP's gradient")
    dist.barrier()


def scenario_c10drun(backend):
    import torch
    import torch.distributed as dist

    import c10d_torch

    expect(os.environ.get("C10D_STORE_EXTERNAL") == "1", "not under c10drun")
    dist.init_process_group(backend, init_method="env://", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    expect((rank, world) == (int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])),
           f"rank {rank} of {world}")
    expect(dist.get_backend() == backend, f"backend {dist.get_backend()}")
    store = base_store(dist)
    expect(not isinstance(store, dist.TCPStore), "env:// made torch's TCPStore under c10drun")
    expect(c10d_torch._C.store_host(store) == "127.0.0.1",
           f"not c10d's store client: {type(store)}")
    exercise_store(dist, store, rank, world)
    check_collectives_and_ddp(torch, dist, rank, world)
    if backend == "c10d":
        expect(c10d_torch.backend_of() == "tcp", "c10d's group")
    sub = dist.new_group(list(range(world)))  # a subgroup meets through the same store
    x = torch.ones(5)
    dist.all_reduce(x, group=sub)
    expect(torch.equal(x, torch.full((5,), float(world))), "new_group all_reduce")
    dist.destroy_process_group()
    if rank == 0:
        print(f"{backend} under c10drun: env:// on c10d's store, ok")


def scenario_c10drun_c10d():
    scenario_c10drun("c10d")


def scenario_c10drun_gloo():
    scenario_c10drun("gloo")


def scenario_bad_token():
    """A wrong token, then none: a clear error at once, not a wait for the timeout."""
    import torch.distributed as dist

    import c10d_torch  # noqa: F401

    for token, label in (("not-the-jobs-token", "wrong"), (None, "missing")):
        if token is None:
            os.environ.pop("C10D_STORE_TOKEN", None)
        else:
            os.environ["C10D_STORE_TOKEN"] = token
        start = time.monotonic()
        msg = expect_raises(
            lambda: dist.init_process_group("gloo", init_method="env://",
                                            timeout=datetime.timedelta(seconds=60)),
            "c10d_torch: env://", "C10D_STORE_TOKEN", os.environ["MASTER_PORT"])
        took = time.monotonic() - start
        expect(took < 20, f"the {label} token's error took {took:.1f} s")
        expect(not dist.is_initialized(), "a group despite the error")
        if int(os.environ["RANK"]) == 0:
            print(f"{label} token: {msg}")


def scenario_torchrun_c10d():
    import torch
    import torch.distributed as dist

    import c10d_torch

    expect("TORCHELASTIC_RUN_ID" in os.environ, "not under torch.distributed.run")
    dist.init_process_group("c10d", init_method="env://", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    expect(isinstance(base_store(dist), dist.TCPStore), "env:// under torchrun is not torch's")
    expect(c10d_torch.backend_of() == "tcp", "c10d's group")
    check_collectives_and_ddp(torch, dist, rank, world)
    dist.destroy_process_group()
    if rank == 0:
        print("c10d under torch.distributed.run: ok")


SCENARIOS = {
    "c10drun_c10d": scenario_c10drun_c10d,
    "c10drun_gloo": scenario_c10drun_gloo,
    "bad_token": scenario_bad_token,
    "torchrun_c10d": scenario_torchrun_c10d,
}


def rank_main(name):
    try:
        SCENARIOS[name]()
    except BaseException:  # noqa: B902 (the exit status carries it)
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    sys.stdout.flush()


# ---------------------------------------------------------------------------------------------
# The test's side.
# ---------------------------------------------------------------------------------------------


class LaunchTest(unittest.TestCase):
    def c10drun(self, scenario):
        launcher = os.environ.get("C10D_C10DRUN")
        if not launcher:
            self.skipTest("C10D_C10DRUN (the launcher's path) not set")
        code, out = run([launcher, "--nproc-per-node", "2", sys.executable,
                         os.path.abspath(__file__), "--scenario", scenario], job_env(),
                        JOB_TIMEOUT_S)
        self.assertEqual(code, 0, out)
        return out

    def test_c10d_under_c10drun_env(self):
        print(self.c10drun("c10drun_c10d").strip().splitlines()[-1])

    def test_gloo_under_c10drun_env(self):
        print(self.c10drun("c10drun_gloo").strip().splitlines()[-1])

    def test_wrong_or_missing_token_is_named(self):
        out = self.c10drun("bad_token")
        self.assertIn("authentication failed", out)
        print(out.strip())

    def test_c10d_under_torch_distributed_run(self):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
               "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
               "--max_restarts", "0", *TORCHRUN_PY311_FLAGS, os.path.abspath(__file__),
               "--scenario", "torchrun_c10d"]
        code, out = run(cmd, job_env(), JOB_TIMEOUT_S)
        self.assertEqual(code, 0, out)
        self.assertIn("c10d under torch.distributed.run: ok", out)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--scenario")
    args, rest = parser.parse_known_args()
    if args.scenario:
        rank_main(args.scenario)
    else:
        unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
