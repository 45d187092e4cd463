"""examples/torch_ddp_fmnist.py, short: the same seed under both backends gives the same losses.

Three 2-rank runs of 150 steps on the first 9600 training samples: "c10d" and "gloo" under
c10drun, and "c10d" under torch.distributed.run. Every logged loss (the mean over both ranks of
10 steps' losses) must be identical in all three: with 2 ranks each gradient element DDP
all-reduces is the sum of two addends, which IEEE addition gives the same whichever rank adds
first, and everything else a rank computes is the same program on the same data (one intra-op
thread). With 3 or more ranks the backends add in different orders and the losses drift apart
by rounding (docs/torch.md). The loss must also fall. The environment gives PYTHONPATH
(build/python) and C10D_C10DRUN.

Then --checkpoint-dir under c10drun --max-restarts 1: rank 1 SIGKILLs itself before step 95,
the job restarts from the checkpoint of step 80, and logs the losses and test accuracy of the
run that never stopped; a damaged newest checkpoint is refused and the one before it used.
"""

import os
import re
import sys
import tempfile
import unittest

from launch_util import TORCHRUN_PY311_FLAGS, free_port, job_env, run

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "torch_ddp_fmnist.py")
DATA = os.environ.get("C10D_FASHION_MNIST") or "/usr/share/datasets/fashion-mnist"
ARGS = ["--epochs", "1", "--limit", "9600", "--batch-size", "32", "--log-every", "10",
        "--seed", "7"]
JOB_TIMEOUT_S = 90


class DdpExampleTest(unittest.TestCase):
    def setUp(self):
        if not os.path.exists(os.path.join(DATA, "train-labels-idx1-ubyte.gz")):
            self.skipTest(f"Fashion-MNIST not installed in {DATA} (dataset-fashion-mnist)")

    def run_example(self, launcher, backend, extra=(), restarts=0):
        if launcher == "c10drun":
            c10drun = os.environ.get("C10D_C10DRUN")
            if not c10drun:
                self.skipTest("C10D_C10DRUN (the launcher's path) not set")
            cmd = [c10drun, "--nproc-per-node", "2", "--max-restarts", str(restarts),
                   sys.executable, EXAMPLE]
        else:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                   "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
                   "--max_restarts", "0", *TORCHRUN_PY311_FLAGS, EXAMPLE]
        code, out = run(cmd + ["--backend", backend] + ARGS + list(extra), job_env(),
                        JOB_TIMEOUT_S)
        self.last_out = out
        self.assertEqual(code, 0, out)
        # A restarted run logs again the steps it re-runs after its checkpoint: the same values.
        losses = sorted({(int(m.group(1)), m.group(2))
                         for m in re.finditer(r"step (\d+) epoch \d+ loss (\S+)", out)})
        self.assertEqual([s for s, _ in losses], list(range(10, 151, 10)), out)
        done = re.search(r"done backend (\w+) world 2 .* test_accuracy ([\d.]+)", out)
        self.assertIsNotNone(done, out)
        self.assertEqual(done.group(1), backend)
        return [float(v) for _, v in losses], float(done.group(2))

    def test_backends_log_the_same_falling_losses(self):
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

    def test_killed_run_resumes_from_its_checkpoint(self):
        straight, acc_straight = self.run_example("c10drun", "c10d")
        with tempfile.TemporaryDirectory() as ckpt:
            resumed, acc_resumed, out = self.run_killed(ckpt)
            self.assertIn("c10drun: attempt 0 failed: rank 1 (pid ", out)
            self.assertIn(f"resumed from {ckpt}/step-0000000080.pt: epoch 1 step 80, step 80 "
                          "(attempt 1)", out)
            self.assertEqual(resumed, straight, "the resumed run logged other losses")
            self.assertEqual(acc_resumed, acc_straight)
            # 150 steps: checkpoints at 40, 80, 120 and the epoch's end; the newest three stay.
            newest = os.path.join(ckpt, "step-0000000150.pt")
            self.assertEqual(sorted(os.listdir(ckpt)),
                             ["step-0000000080.pt", "step-0000000120.pt", "step-0000000150.pt"])
            with open(newest, "r+b") as f:
                f.seek(os.path.getsize(newest) // 2)
                byte = f.read(1)
                f.seek(-1, os.SEEK_CUR)
                f.write(bytes([byte[0] ^ 0x10]))
            code, out = run([os.environ["C10D_C10DRUN"], "--nproc-per-node", "2", sys.executable,
                             EXAMPLE, "--backend", "c10d", *ARGS, "--checkpoint-dir", ckpt],
                            job_env(), JOB_TIMEOUT_S)
            self.assertEqual(code, 0, out)
            self.assertIn(f"checkpoint '{newest}' is refused: checksum mismatch", out)
            self.assertIn(f"resumed from {ckpt}/step-0000000120.pt", out)

    def run_killed(self, ckpt):
        """(losses, accuracy, output) of a run that loses rank 1 before step 95 and restarts."""
        losses, accuracy = self.run_example(
            "c10drun", "c10d", ["--checkpoint-dir", ckpt, "--checkpoint-every", "40",
                                "--kill-at", "1:95"], restarts=1)
        return losses, accuracy, self.last_out


if __name__ == "__main__":
    unittest.main(verbosity=2)
