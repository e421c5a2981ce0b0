"""Data parallelism over devices and hosts with jax.sharding (no home-made distribution layer).

One mesh axis, "data", over every device of every process. Batch-leading arrays (the PPO envs, the
CounterPlay records and failures) are split along it; parameters, optimiser state and the scenario
bank are replicated (or the bank split in groups of scenes, below). The jitted programs are the
single-device ones: placing their inputs (and constraining a few intermediates) is all it takes,
and XLA's SPMD partitioner inserts the collectives (the mean of the loss over the global batch
becomes an all-reduce of the gradients).
A mesh of one device runs the same code path.

    parallel.initialize(flags)                       # multi-host: jax.distributed, before anything else
    mesh = parallel.make_mesh(devices=0)             # every device of every process
    runner = ppo.shard_runner(runner, mesh)          # envs split, the rest replicated
    bank = parallel.replicate(bank, mesh)
    update = ppo.make_update(net, cfg, sim, params, mesh=mesh)

Scenes per device (and per host): with PPOConfig.bank_groups = G, a multiple of the device count,
each process reads only the groups `local_groups(G, mesh)` of its devices and `shard_groups` makes
the global [G, S / G, ...] bank; `ppo.init(..., mesh=mesh)` starts the runner from it.

Random numbers do not depend on the sharding (threefry is partitionable by default since jax 0.5),
so a sharded run equals the single-device run of the same global batch up to float reduction order.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

AXIS = "data"


def processes(coordinator: str = "", num_processes: int = 0, process_id: int = -1) -> tuple[str, int, int]:
    """(coordinator, num_processes, process_id) of the run: the explicit arguments (0 / -1: not given), else
    the JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES / JAX_PROCESS_ID environment variables. Raises ValueError
    naming the flag (and variable) when they do not describe one run: a process count below 1, a process
    index outside [0, num_processes), or several processes without a coordinator (which would silently run
    alone)."""
    coordinator = coordinator or os.environ.get("JAX_COORDINATOR_ADDRESS", "")
    try:
        num_processes = num_processes or int(os.environ.get("JAX_NUM_PROCESSES", "0"))
        if process_id < 0:
            process_id = int(os.environ.get("JAX_PROCESS_ID", "-1"))
    except ValueError as e:
        raise ValueError(f"multi-host: JAX_NUM_PROCESSES / JAX_PROCESS_ID must be integers ({e})") from None
    if num_processes < 0 or (coordinator and num_processes < 1):
        raise ValueError(f"--num_processes={num_processes} (or JAX_NUM_PROCESSES): must be >= 1, the number of "
                         f"processes of the run{f' coordinated by {coordinator!r}' if coordinator else ''}")
    if process_id >= 0 and not num_processes:
        raise ValueError(f"--process_id={process_id} (or JAX_PROCESS_ID) needs --num_processes (the processes of "
                         "the run) and --coordinator")
    if num_processes == 1 and process_id < 0:
        process_id = 0  # the only process
    if num_processes and not 0 <= process_id < num_processes:
        given = f"={process_id} (or JAX_PROCESS_ID):" if process_id >= 0 else " (or JAX_PROCESS_ID): required;"
        raise ValueError(f"--process_id{given} this process's index must be in [0, {num_processes}) with "
                         f"--num_processes={num_processes}")
    if num_processes > 1 and not coordinator and os.environ.get("CP_JAX_DISTRIBUTED") != "auto":
        raise ValueError(f"--num_processes={num_processes} needs --coordinator=HOST:PORT (or "
                         "JAX_COORDINATOR_ADDRESS): process 0's address; without it every process would run alone")
    return coordinator, num_processes, process_id


def initialize(coordinator: str = "", num_processes: int = 0, process_id: int = -1) -> bool:
    """Join a multi-process run through jax.distributed. Returns True if one was joined.

    Explicit arguments win; otherwise the JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES / JAX_PROCESS_ID
    environment variables (checked by `processes`); otherwise, on a TPU pod or under SLURM / Open MPI,
    jax.distributed's own detection (CP_JAX_DISTRIBUTED=auto). With none of these it is a single-process
    run (False).
    """
    coordinator, num_processes, process_id = processes(coordinator, num_processes, process_id)
    if coordinator:
        jax.distributed.initialize(coordinator, num_processes, process_id)
        return True
    if os.environ.get("CP_JAX_DISTRIBUTED") == "auto":
        jax.distributed.initialize()
        return True
    return False


def make_mesh(devices: int = 0) -> Mesh:
    """A 1-D mesh over the first `devices` devices of the run (0: all of them, every host's)."""
    available = jax.devices()
    if devices < 0 or devices > len(available):
        raise ValueError(f"devices={devices}: this run has {len(available)} device(s) ({available[0].platform}); "
                         "use 0 for all of them")
    chosen = available[: devices or len(available)]
    return Mesh(np.asarray(chosen), (AXIS,))


def config_mesh(devices, field: str = "config.train.devices") -> Mesh:
    """make_mesh for a config value, with the error naming the config field."""
    if not isinstance(devices, int) or isinstance(devices, bool) or not 0 <= devices <= len(jax.devices()):
        raise ValueError(f"{field} must be an int in [0, {len(jax.devices())}] (0: every device), got {devices!r}")
    return make_mesh(devices)


def size(mesh: Mesh | None) -> int:
    """Devices along the data axis (1 without a mesh)."""
    return 1 if mesh is None else mesh.shape[AXIS]


def check_divisible(batch: int, mesh: Mesh | None, what: str) -> None:
    """Raise ValueError naming `what` unless the batch splits evenly over the mesh."""
    if batch % size(mesh):
        raise ValueError(f"{what} ({batch}) must be a multiple of the number of devices ({size(mesh)})")


def batch_spec(mesh: Mesh) -> NamedSharding:
    """Leading axis split over the devices, the rest of each array whole."""
    return NamedSharding(mesh, PartitionSpec(AXIS))


def replicated_spec(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def _put(x, sharding: NamedSharding):
    """One leaf onto a (possibly multi-host) sharding: every process holds the same global value and
    hands over the pieces its own devices need."""
    if x is None:
        return None
    x = np.asarray(jax.device_get(x))
    return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])


def replicate(tree: Any, mesh: Mesh) -> Any:
    """Every leaf whole on every device of the mesh."""
    spec = replicated_spec(mesh)
    return jax.tree.map(lambda x: _put(x, spec), tree)


def shard_batch(tree: Any, mesh: Mesh) -> Any:
    """Every leaf split along its leading (batch) axis over the mesh."""
    spec = batch_spec(mesh)
    return jax.tree.map(lambda x: _put(x, spec), tree)


def local_groups(groups: int, mesh: Mesh) -> list[int]:
    """Which of `groups` groups (split evenly along the mesh's devices, in order: a scenario bank of
    PPOConfig.bank_groups or CounterPlayConfig.bank_groups) this process's devices hold, i.e. which it must read."""
    devices = mesh.devices.reshape(-1)
    if groups % len(devices):
        raise ValueError(f"bank_groups ({groups}) must be a multiple of the number of devices "
                         f"({len(devices)})")
    per = groups // len(devices)
    return [g for g in range(groups) if devices[g // per].process_index == jax.process_index()]


def shard_groups(tree: Any, mesh: Mesh, groups: int) -> Any:
    """Leaves [len(local_groups(groups, mesh)), ...] holding this process's groups, in order -> global
    arrays [groups, ...] split along the mesh; no process needs the others' groups."""
    spec = batch_spec(mesh)
    return jax.tree.map(lambda x: jax.make_array_from_process_local_data(spec, np.asarray(x), (groups, *x.shape[1:])),
                        tree)


def local(tree: Any) -> Any:
    """Host (numpy) copies of replicated leaves, also in a multi-host run where jax.device_get cannot
    fetch arrays that span other processes' devices (each process reads its own first copy)."""

    def one(x):
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            if not x.is_fully_replicated:
                raise ValueError(f"parallel.local: a {x.shape} array split over hosts is not replicated")
            return np.asarray(x.addressable_data(0))
        return np.asarray(jax.device_get(x)) if x is not None else None

    return jax.tree.map(one, tree)


def constrain(tree: Any, mesh: Mesh | None, axis: int = 0) -> Any:
    """Inside a jitted function: ask XLA to keep every leaf's `axis` (default: the leading one)
    split over the mesh (leaves with fewer axes whole; identity without a mesh)."""
    if mesh is None:
        return tree
    split = NamedSharding(mesh, PartitionSpec(*([None] * axis), AXIS))
    whole = replicated_spec(mesh)
    return jax.tree.map(lambda x: jax.lax.with_sharding_constraint(x, split if x.ndim > axis else whole), tree)


def constrain_replicated(tree: Any, mesh: Mesh | None) -> Any:
    """Inside a jitted function: keep every leaf whole on every device (identity without a mesh)."""
    if mesh is None:
        return tree
    spec = replicated_spec(mesh)
    return jax.tree.map(lambda x: jax.lax.with_sharding_constraint(x, spec), tree)
