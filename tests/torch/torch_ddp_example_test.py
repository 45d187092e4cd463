"""examples/torch_ddp_fmnist.py, short: the same seed under both backends gives the same losses.

Three 2-rank runs of 150 steps on the first 9600 training samples: "c10d" and "gloo" under
c10drun, and "c10d" under torch.distributed.run. Every logged loss (the mean over both ranks of
10 steps' losses) must be identical in all three: with 2 ranks each gradient element DDP
all-reduces is the sum of two addends, which IEEE addition gives the same whichever rank adds
first, and everything else a rank computes is the same program on the same data (one intra-op
thread). With 3 or more ranks the backends add in different orders and the losses drift apart
by rounding (docs/torch.md). The loss must also fall. The environment gives PYTHONPATH
(build/python) and C10D_C10DRUN.
"""

import os
import re
import sys
import unittest

from launch_util import TORCHRUN_PY311_FLAGS, free_port, job_env, run

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "torch_ddp_fmnist.py")
DATA = os.environ.get("C10D_FASHION_MNIST") or "/usr/share/datasets/fashion-mnist"
ARGS = ["--epochs", "1", "--limit", "9600", "--batch-size", "32", "--log-every", "10",
        "--seed", "7"]
JOB_TIMEOUT_S = 90


class DdpExampleTest(unittest.TestCase):
    def run_example(self, launcher, backend):
        if launcher == "c10drun":
            c10drun = os.environ.get("C10D_C10DRUN")
            if not c10drun:
                self.skipTest("C10D_C10DRUN (the launcher's path) not set")
            cmd = [c10drun, "--nproc-per-node", "2", sys.executable, EXAMPLE]
        else:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                   "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
                   "--max_restarts", "0", *TORCHRUN_PY311_FLAGS, EXAMPLE]
        code, out = run(cmd + ["--backend", backend] + ARGS, job_env(), JOB_TIMEOUT_S)
        self.assertEqual(code, 0, out)
        losses = [(int(m.group(1)), m.group(2))
                  for m in re.finditer(r"step (\d+) epoch \d+ loss (\S+)", out)]
        self.assertEqual([s for s, _ in losses], list(range(10, 151, 10)), out)
        done = re.search(r"done backend (\w+) world 2 .* test_accuracy ([\d.]+)", out)
        self.assertIsNotNone(done, out)
        self.assertEqual(done.group(1), backend)
        return [float(v) for _, v in losses], float(done.group(2))

    def test_backends_log_the_same_falling_losses(self):
        if not os.path.exists(os.path.join(DATA, "train-labels-idx1-ubyte.gz")):
            self.skipTest(f"Fashion-MNIST not installed in {DATA} (dataset-fashion-mnist)")
        c10d, acc_c10d = self.run_example("c10drun", "c10d")
        gloo, acc_gloo = self.run_example("c10drun", "gloo")
        torchrun, acc_torchrun = self.run_example("torchrun", "c10d")
        print(f"losses (c10d, every 10 steps): {c10d}")
        print(f"test accuracy after 150 steps: {acc_c10d}")
        self.assertEqual(c10d, gloo, "c10d and gloo logged different losses")
        self.assertEqual(c10d, torchrun, "c10d under c10drun and under torchrun differ")
        self.assertEqual(acc_c10d, acc_gloo)
        self.assertEqual(acc_c10d, acc_torchrun)
        first, last = sum(c10d[:3]) / 3, sum(c10d[-3:]) / 3
        self.assertLess(last, 0.7 * first, f"the loss did not fall: {c10d}")


if __name__ == "__main__":
    unittest.main(verbosity=2)
