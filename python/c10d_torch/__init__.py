"""c10d as a torch.distributed backend.

Importing this package registers the backend "c10d" with torch.distributed:

    import torch.distributed as dist
    import c10d_torch
    dist.init_process_group("c10d", init_method="env://")

The group is c10d's TCP backend (shared memory between the ranks of one host), meeting through
the store torch's init_method made; C10D_BACKEND=ici selects the simulated TPU torus instead.

Importing it also lets env:// work under c10d's launcher, c10drun, for every backend ("c10d",
"gloo"...): there env:// connects to the launcher's store (c10d's protocol, with the job's
token) instead of opening torch's TCPStore; elsewhere torch's env:// is unchanged.
See docs/torch.md for what maps, what is refused, and the environment variables.
"""

import atexit
import os
import sys
import warnings
from urllib.parse import urlparse

import torch  # noqa: F401  (torch's types must be registered before _C loads)
import torch.distributed as dist
from torch.distributed.constants import default_pg_timeout
from torch.distributed.rendezvous import _query_to_dict

from . import _C

__all__ = ["BACKEND_NAME", "backend_of", "abort"]

BACKEND_NAME = "c10d"


def _store_host(store):
    """The host of the TCP store under `store` (through PrefixStores), or ""."""
    while isinstance(store, dist.PrefixStore):
        store = store.underlying_store
    if isinstance(store, dist.TCPStore):
        return store.host
    return _C.store_host(store) or ""


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
    """Fails every pending and later op of a c10d process group on this rank, and the other
    ranks' ops of that group still in flight (as a lost peer does)."""
    if group is None:
        group = dist.distributed_c10d._get_default_group()
    _C.abort(group)


# mpirun gives each process its rank and size under Open MPI's names only; torch's env://
# reads RANK and WORLD_SIZE (MASTER_ADDR and MASTER_PORT must still be set).
for _ours, _ompi in (("RANK", "OMPI_COMM_WORLD_RANK"), ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE"),
                     ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK")):
    if _ours not in os.environ and _ompi in os.environ:
        os.environ[_ours] = os.environ[_ompi]

# ---- env:// under c10drun ----

# The spellings of c10d's flags (parse_flag, src/core/parse.cc).
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")


def _c10d_store_at_master():
    """Whether MASTER_ADDR:MASTER_PORT is c10d's own store server rather than a place for torch's
    TCPStore: C10D_STORE_EXTERNAL says so (c10drun sets it to 1 for its processes; c10d's C++
    env:// reads it the same way, with the same spellings)."""
    value = os.environ.get("C10D_STORE_EXTERNAL", "")
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"C10D_STORE_EXTERNAL={value!r} is not a boolean (1/0, true/false)")


def _env_or_raise(name):
    value = os.environ.get(name)
    if not value:
        raise ValueError(f"Error initializing torch.distributed using env:// rendezvous: "
                         f"environment variable {name} expected, but not set")
    return value


def _c10d_env_rendezvous(url, timeout):
    """torch's env:// contract (rank and world size from the URL's query, else RANK and
    WORLD_SIZE; MASTER_ADDR, MASTER_PORT) met with a client of c10d's store server."""
    query = _query_to_dict(urlparse(url).query)
    rank = int(query["rank"]) if "rank" in query else int(_env_or_raise("RANK"))
    world_size = (int(query["world_size"]) if "world_size" in query
                  else int(_env_or_raise("WORLD_SIZE")))
    address = f"{_env_or_raise('MASTER_ADDR')}:{_env_or_raise('MASTER_PORT')}"
    try:
        store = _C.connect_store(rank, world_size, timeout, address)
    except RuntimeError as e:
        token = "set" if os.environ.get("C10D_STORE_TOKEN") else "not set"
        raise RuntimeError(
            f"c10d_torch: env:// (rank {rank}): c10d's store server at {address} "
            f"(C10D_STORE_EXTERNAL=1, as under c10drun) refused or failed: {e} "
            f"[C10D_STORE_TOKEN is {token}; it must be the job's token, which c10drun hands to "
            f"the processes it starts]") from None
    yield (store, rank, world_size)
    raise RuntimeError("Unable to perform re-rendezvous using env:// method")


def _wrap_env_handler():
    """Makes torch's env:// handler defer to c10d's store server when there is one.

    Why this way: torch 1.13 looks a scheme's handler up in
    torch.distributed.rendezvous._rendezvous_handlers at every rendezvous (_rendezvous_helper),
    and its public door, register_rendezvous_handler, refuses a scheme that has one. Replacing
    the dict's "env" entry is seen by every caller (init_process_group, dist.rendezvous, the
    backend-options path) whatever each imported when, which patching the function
    distributed_c10d.rendezvous would not be. torch's handler is kept and called whenever
    C10D_STORE_EXTERNAL is off, so torchrun and plain env:// jobs see no change."""
    module = sys.modules.get("torch.distributed.rendezvous")
    handlers = getattr(module, "_rendezvous_handlers", None)
    if not isinstance(handlers, dict) or "env" not in handlers:
        warnings.warn("c10d_torch: torch.distributed.rendezvous._rendezvous_handlers['env'] not "
                      "found (not torch 1.13's layout): env:// under c10drun will not work; "
                      "use tcp:// or file:// there")
        return
    torch_handler = handlers["env"]
    if getattr(torch_handler, "_c10d_torch_wraps", None) is not None:
        return  # this module was imported again (importlib.reload): wrapped already

    def env_handler(url, timeout=default_pg_timeout, **kwargs):
        # A plain function returning the generator: torch's handler is one, and next() on
        # either runs the rendezvous, so errors surface where torch's would.
        if _c10d_store_at_master():
            return _c10d_env_rendezvous(url, timeout)
        return torch_handler(url, timeout=timeout, **kwargs)

    env_handler._c10d_torch_wraps = torch_handler
    handlers["env"] = env_handler


_wrap_env_handler()


def _destroy_at_exit():
    # Before the interpreter starts finalizing: a group's threads may still need the GIL (to
    # drop a tensor whose Python object torch keeps alive) while its destructor joins them, and
    # once finalizing, Python ends any thread that asks for the GIL.
    if dist.is_initialized() and dist.get_backend() == BACKEND_NAME:
        dist.destroy_process_group()


atexit.register(_destroy_at_exit)

if BACKEND_NAME.upper() not in dist.Backend._plugins:
    dist.Backend.register_backend(BACKEND_NAME, _create_process_group)
