"""c10d as a torch.distributed backend.

Importing this package registers the backend "c10d" with torch.distributed:

    import torch.distributed as dist
    import c10d_torch
    dist.init_process_group("c10d", init_method="env://")

The group is c10d's TCP backend (shared memory between the ranks of one host), meeting through
the store torch's init_method made; C10D_BACKEND=ici selects the simulated TPU torus instead.
See docs/torch.md for what maps, what is refused, and the environment variables.
"""

import atexit
import os

import torch  # noqa: F401  (torch's types must be registered before _C loads)
import torch.distributed as dist

from . import _C

__all__ = ["BACKEND_NAME", "backend_of", "abort"]

BACKEND_NAME = "c10d"


def _store_host(store):
    """The host of the TCPStore under `store` (through PrefixStores), or ""."""
    while isinstance(store, dist.PrefixStore):
        store = store.underlying_store
    if isinstance(store, dist.TCPStore):
        return store.host
    return ""


def _create_process_group(store, rank, world_size, timeout):
    return _C.create_process_group(
        store,
        rank,
        world_size,
        timeout,
        backend=os.environ.get("C10D_BACKEND", ""),
        store_host=_store_host(store),
    )


def backend_of(group=None):
    """The c10d backend under a c10d process group ("tcp" or "ici"); None for another backend."""
    if group is None:
        group = dist.distributed_c10d._get_default_group()
    return _C.group_backend(group)


def abort(group=None):
    """Fails every pending and later op of a c10d process group, on this rank."""
    if group is None:
        group = dist.distributed_c10d._get_default_group()
    _C.abort(group)


# mpirun gives each process its rank and size under Open MPI's names only; torch's env://
# reads RANK and WORLD_SIZE (MASTER_ADDR and MASTER_PORT must still be set).
for _ours, _ompi in (("RANK", "OMPI_COMM_WORLD_RANK"), ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE"),
                     ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK")):
    if _ours not in os.environ and _ompi in os.environ:
        os.environ[_ours] = os.environ[_ompi]

def _destroy_at_exit():
    # Before the interpreter starts finalizing: a group's threads may still need the GIL (to
    # drop a tensor whose Python object torch keeps alive) while its destructor joins them, and
    # once finalizing, Python ends any thread that asks for the GIL.
    if dist.is_initialized() and dist.get_backend() == BACKEND_NAME:
        dist.destroy_process_group()


atexit.register(_destroy_at_exit)

if BACKEND_NAME.upper() not in dist.Backend._plugins:
    dist.Backend.register_backend(BACKEND_NAME, _create_process_group)
