#!/usr/bin/python3
"""torch_ddp_fmnist: a small CNN trained with torch.nn.parallel.DistributedDataParallel on
Fashion-MNIST (Debian's dataset-fashion-mnist; no download), over torch.distributed with the
backend "c10d" (c10d_torch) or "gloo". The program is the same under either launcher:

  PYTHONPATH=build/python build/tools/c10drun --nproc-per-node 2 \\
      /usr/bin/python3 examples/torch_ddp_fmnist.py --backend c10d
  PYTHONPATH=build/python /usr/bin/python3 -m torch.distributed.run --nproc_per_node 2 \\
      --redirects 1 --tee 1 examples/torch_ddp_fmnist.py --backend gloo

(torch 1.13's torchrun needs --redirects/--tee on Python 3.11: docs/torch.md, "Launchers".)

It meets through env:// (importing c10d_torch makes env:// work under c10drun too). Each rank
trains on its shard of every epoch's permutation (DistributedSampler: shuffled by --seed and
the epoch, the same on every rank), so the run is deterministic: with one seed, both backends
log the same losses (docs/torch.md says to what tolerance, and why).

Flags (defaults in brackets; every value is checked, exit 2 naming the flag):
  --backend c10d|gloo  [c10d]          --epochs N      [2]
  --seed N             [0]             --log-every N   [100 steps; 0: no step lines]
  --batch-size N       [64, per rank]  --lr X          [0.05, SGD with momentum 0.9]
  --limit N            [0: all; else the first N training and N/6 test samples]
  --data DIR           [C10D_FASHION_MNIST or /usr/share/datasets/fashion-mnist]
  --threads N          [1: torch's intra-op threads per rank]
  --min-accuracy X     exit 1 when the final test accuracy is below X (0 to 1)
  --checkpoint-dir DIR rank 0 writes checkpoints there (made when missing) at each epoch's end
                       and every --checkpoint-every steps; a run started on it resumes from the
                       newest good one by itself (under c10drun --max-restarts, after a failure)
  --checkpoint-every K [0: at each epoch's end only]
  --kill-at R:S        fault tests: rank R SIGKILLs itself before step S (0-based, over all
                       epochs), in attempt 0 only (C10D_RESTART_COUNT 0 or unset)

A checkpoint is train_fmnist's in spirit (fmnist_checkpoint.h): the model, the optimizer, the
epoch and step, what fixes the data order (seed, world size, batch size, limit) and each
rank's loss window, so a resumed run logs the same losses as one that never stopped. It is
torch.save's bytes behind a header (magic "C10DTCKP", their length and CRC-32), written to
<name>.tmp, fsynced, renamed into place and the directory fsynced; a file whose length or CRC
is wrong is refused, named, and the one before it is used. Only rank 0 writes (DDP keeps the
ranks identical), rank 0 picks the file, and every rank reads it: the directory must be one
every rank sees.

Output (rank 0): "step S epoch E loss L" every --log-every steps, L the mean training loss of
those steps over every rank (L printed with 9 significant digits); "epoch E test_accuracy A
wall_s W"; and a final line "done backend B world W epochs E test_accuracy A wall_s W".
"""

import argparse
import datetime
import gzip
import io
import math
import os
import signal
import struct
import sys
import time
import zlib

DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"


# ---- arguments ----


def _int_in(lo, hi=None):
    def parse(text):
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
        if hi is None and value < lo:
            raise argparse.ArgumentTypeError(f"{value} must be at least {lo}")
        if hi is not None and not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{value} is out of range [{lo}, {hi}]")
        return value

    return parse


def _float_in(lo, hi, lo_open=False):
    def parse(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
        if not math.isfinite(value) or value > hi or value < lo or (lo_open and value == lo):
            left = "(" if lo_open else "["
            raise argparse.ArgumentTypeError(f"{value} is out of range {left}{lo}, {hi}]")
        return value

    return parse


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="torch_ddp_fmnist", allow_abbrev=False,
        description="DistributedDataParallel training of a small CNN on Fashion-MNIST.")
    p.add_argument("--backend", choices=("c10d", "gloo"), default="c10d")
    p.add_argument("--epochs", type=_int_in(1, 1000), default=2)
    p.add_argument("--seed", type=_int_in(0, 2**63 - 1), default=0)
    p.add_argument("--log-every", type=_int_in(0), default=100)
    p.add_argument("--batch-size", type=_int_in(1, 60000), default=64)
    p.add_argument("--lr", type=_float_in(0.0, 10.0, lo_open=True), default=0.05)
    p.add_argument("--limit", type=_int_in(0, 60000), default=0)
    p.add_argument("--data", default=os.environ.get("C10D_FASHION_MNIST") or DEFAULT_DATA)
    p.add_argument("--threads", type=_int_in(1, 1024), default=1)
    p.add_argument("--min-accuracy", type=_float_in(0.0, 1.0), default=0.0)
    p.add_argument("--checkpoint-dir", default="")
    p.add_argument("--checkpoint-every", type=_int_in(0), default=0)
    p.add_argument("--kill-at", type=_rank_step, default=None)
    args = p.parse_args(argv)
    if args.checkpoint_every and not args.checkpoint_dir:
        p.error("--checkpoint-every needs --checkpoint-dir")
    return args


def _rank_step(text):
    rank, sep, step = text.partition(":")
    if not sep:
        raise argparse.ArgumentTypeError(f"'{text}' is not RANK:STEP")
    return _int_in(0)(rank), _int_in(0)(step)


# ---- checkpoints ----

CKPT_MAGIC = b"C10DTCKP"
CKPT_HEADER = struct.Struct("<8sQI")  # magic, payload bytes, CRC-32 of the payload
CKPT_KEEP = 3


def ckpt_path(directory, step):
    return os.path.join(directory, f"step-{step:010d}.pt")


def ckpt_steps(directory):
    """The global steps of the checkpoints in `directory`, newest first."""
    steps = []
    for name in os.listdir(directory):
        digits = name[len("step-"):-len(".pt")]
        if name.startswith("step-") and name.endswith(".pt") and digits.isdigit():
            steps.append(int(digits))
    return sorted(steps, reverse=True)


def save_checkpoint(path, state):
    """torch.save's bytes behind the header, written whole or not at all."""
    import torch

    buf = io.BytesIO()
    torch.save(state, buf)
    payload = buf.getvalue()
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(CKPT_HEADER.pack(CKPT_MAGIC, len(payload), zlib.crc32(payload)))
        f.write(payload)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    directory = os.path.dirname(path) or "."
    for step in ckpt_steps(directory)[CKPT_KEEP:]:
        os.remove(ckpt_path(directory, step))
    for name in os.listdir(directory):  # what a writer killed mid-write left
        if name.startswith("step-") and name.endswith(".pt.tmp"):
            os.remove(os.path.join(directory, name))


def read_checkpoint(path):
    """The state in a checkpoint file; ValueError naming the file when it is damaged."""
    import torch

    with open(path, "rb") as f:
        data = f.read()
    if len(data) < CKPT_HEADER.size:
        raise ValueError(f"checkpoint {path!r} is refused: {len(data)} bytes, shorter than "
                         f"its header")
    magic, size, crc = CKPT_HEADER.unpack_from(data)
    payload = data[CKPT_HEADER.size:]
    if magic != CKPT_MAGIC:
        raise ValueError(f"checkpoint {path!r} is refused: bad magic {magic!r}")
    if len(payload) != size:
        raise ValueError(f"checkpoint {path!r} is refused: truncated ({len(payload)} bytes of "
                         f"{size})")
    if zlib.crc32(payload) != crc:
        raise ValueError(f"checkpoint {path!r} is refused: checksum mismatch: it is damaged")
    return torch.load(io.BytesIO(payload), map_location="cpu")


# ---- data ----


def read_idx(path):
    """An IDX file (gzip'd or not) as a uint8 torch tensor of its shape."""
    import torch

    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise ValueError(f"{path}: not an IDX file of unsigned bytes")
    ndim = data[3]
    dims = struct.unpack(f">{ndim}I", data[4:4 + 4 * ndim])
    body = data[4 + 4 * ndim:]
    if len(body) != math.prod(dims):
        raise ValueError(f"{path}: {len(body)} bytes of data for shape {dims}")
    return torch.frombuffer(bytearray(body), dtype=torch.uint8).reshape(dims)


def load_split(data_dir, prefix):
    """(images as float32 [N, 1, 28, 28] scaled to [0, 1], labels as int64 [N])."""
    import torch

    def find(name):
        for candidate in (name + ".gz", name):
            path = os.path.join(data_dir, candidate)
            if os.path.exists(path):
                return path
        raise FileNotFoundError(
            f"Fashion-MNIST file {name}[.gz] not found in {data_dir} (install Debian's "
            f"dataset-fashion-mnist, or pass --data / set C10D_FASHION_MNIST)")

    images = read_idx(find(f"{prefix}-images-idx3-ubyte"))
    labels = read_idx(find(f"{prefix}-labels-idx1-ubyte"))
    if images.shape[0] != labels.shape[0] or tuple(images.shape[1:]) != (28, 28):
        raise ValueError(f"{data_dir}: {prefix} images {tuple(images.shape)} and labels "
                         f"{tuple(labels.shape)} do not match")
    return images.to(torch.float32).div_(255.0).unsqueeze(1), labels.to(torch.int64)


def make_model():
    import torch.nn as nn

    return nn.Sequential(
        nn.Conv2d(1, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),   # 16 x 14 x 14
        nn.Conv2d(16, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),  # 32 x 7 x 7
        nn.Flatten(), nn.Linear(32 * 7 * 7, 10))


# ---- training ----


def resume(directory, rank, settings):
    """(path, state) of the newest good checkpoint in `directory`, which every rank loads;
    (None, None) when there is none. Rank 0 picks it, naming and skipping damaged ones, and
    refuses (exit 1, every rank) one written with other settings. Collective."""
    import torch
    import torch.distributed as dist

    chosen, refusal = -1, ""
    if rank == 0:
        os.makedirs(directory, exist_ok=True)
        for step in ckpt_steps(directory):
            try:
                have = read_checkpoint(ckpt_path(directory, step))["settings"]
            except (ValueError, RuntimeError, KeyError, OSError) as e:
                print(f"torch_ddp_fmnist: {e}; trying the one before it", file=sys.stderr,
                      flush=True)
                continue
            if have != settings:
                refusal = (f"cannot resume from {ckpt_path(directory, step)}: it was written "
                           f"with {have}, this run has {settings}")
            chosen = step
            break
    verdict = torch.tensor([chosen, 1 if refusal else 0], dtype=torch.int64)
    dist.broadcast(verdict, 0)
    if verdict[1]:
        sys.exit(f"torch_ddp_fmnist: {refusal}" if rank == 0 else 1)
    if verdict[0] < 0:
        return None, None
    path = ckpt_path(directory, int(verdict[0]))
    return path, read_checkpoint(path)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    try:
        import c10d_torch  # noqa: F401  (the "c10d" backend; env:// under c10drun)
    except ImportError as e:
        sys.exit(f"torch_ddp_fmnist: cannot import c10d_torch ({e}); set PYTHONPATH=build/python")

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)  # the same initial weights on every rank and backend
    dist.init_process_group(args.backend, init_method="env://",
                            timeout=datetime.timedelta(minutes=5))
    rank, world = dist.get_rank(), dist.get_world_size()

    train_x, train_y = load_split(args.data, "train")
    test_x, test_y = load_split(args.data, "t10k")
    if args.limit:
        train_x, train_y = train_x[:args.limit], train_y[:args.limit]
        test_n = max(args.limit // 6, world)
        test_x, test_y = test_x[:test_n], test_y[:test_n]
    train = TensorDataset(train_x, train_y)
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True,
                                 seed=args.seed, drop_last=True)
    loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    if len(loader) == 0:
        sys.exit(f"torch_ddp_fmnist: --batch-size {args.batch_size} leaves rank {rank} no full "
                 f"batch of its {len(sampler)} samples")

    model = torch.nn.parallel.DistributedDataParallel(make_model())
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    def test_accuracy():
        model.eval()
        mine = range(rank, test_x.shape[0], world)  # every rank scores a share
        correct = torch.zeros(2, dtype=torch.int64)
        with torch.no_grad():
            for i in range(0, len(mine), 1000):
                idx = torch.tensor(mine[i:i + 1000])
                pred = model.module(test_x[idx]).argmax(dim=1)
                correct[0] += int((pred == test_y[idx]).sum())
                correct[1] += len(idx)
        dist.all_reduce(correct)
        model.train()
        return int(correct[0]) / int(correct[1])

    attempt = int(os.environ.get("C10D_RESTART_COUNT") or 0)
    settings = {"world": world, "batch_size": args.batch_size, "limit": args.limit,
                "seed": args.seed}
    step = 0  # steps done, over all epochs
    first_epoch, skip = 1, 0  # where this run starts: the epoch, and the steps of it done
    window = torch.zeros(2, dtype=torch.float64)  # the loss sum and step count since the last log
    if args.checkpoint_dir:
        path, state = resume(args.checkpoint_dir, rank, settings)
        if state is not None:
            model.module.load_state_dict(state["model"])
            opt.load_state_dict(state["optim"])
            first_epoch, skip, step = state["epoch"], state["epoch_step"], state["step"]
            window = state["windows"][rank].clone()
            if rank == 0:
                print(f"resumed from {path}: epoch {first_epoch} step {skip}, step {step} "
                      f"(attempt {attempt})", flush=True)

    def checkpoint(epoch, epoch_step):
        """Rank 0 writes where training stands, with every rank's loss window (collective)."""
        windows = [torch.zeros(2, dtype=torch.float64) for _ in range(world)]
        dist.all_gather(windows, window)
        if rank == 0:
            path = ckpt_path(args.checkpoint_dir, step)
            save_checkpoint(path, {"model": model.module.state_dict(), "optim": opt.state_dict(),
                                   "epoch": epoch, "epoch_step": epoch_step, "step": step,
                                   "windows": windows, "settings": settings})
            print(f"checkpoint {path} at step {step} (attempt {attempt})", flush=True)

    start = time.perf_counter()
    accuracy = None
    for epoch in range(first_epoch, args.epochs + 1):
        sampler.set_epoch(epoch)
        for i, (x, y) in enumerate(loader):
            if epoch == first_epoch and i < skip:
                continue  # done before the checkpoint this run resumed from
            if args.kill_at == (rank, step) and attempt == 0:
                os.kill(os.getpid(), signal.SIGKILL)
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            value = loss.item()
            if not math.isfinite(value):
                sys.exit(f"torch_ddp_fmnist: rank {rank}: loss {value} at epoch {epoch} step "
                         f"{step}")
            window += torch.tensor([value, 1.0], dtype=torch.float64)
            if args.log_every and step % args.log_every == 0:
                dist.all_reduce(window)
                if rank == 0:
                    print(f"step {step} epoch {epoch} loss {window[0] / window[1]:.9g}",
                          flush=True)
                window.zero_()
            if (args.checkpoint_every and step % args.checkpoint_every == 0
                    and i + 1 < len(loader)):  # the epoch's end has its own, below
                checkpoint(epoch, i + 1)
        accuracy = test_accuracy()
        if rank == 0:
            print(f"epoch {epoch} test_accuracy {accuracy:.4f} "
                  f"wall_s {time.perf_counter() - start:.1f}", flush=True)
        if args.checkpoint_dir:
            checkpoint(epoch + 1, 0)
    if accuracy is None:  # resumed after the last epoch: nothing trained, the verdict counts
        accuracy = test_accuracy()
    wall = time.perf_counter() - start
    if rank == 0:
        print(f"done backend {args.backend} world {world} epochs {args.epochs} steps {step} "
              f"test_accuracy {accuracy:.4f} wall_s {wall:.1f}", flush=True)
    dist.destroy_process_group()
    if accuracy < args.min_accuracy:
        sys.exit(f"torch_ddp_fmnist: test accuracy {accuracy:.4f} is below --min-accuracy "
                 f"{args.min_accuracy}")


if __name__ == "__main__":
    main()
