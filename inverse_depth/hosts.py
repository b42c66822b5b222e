"""Several processes (hosts) under `jax.distributed`: start-up, the writer, host copies.

Every process runs the same command on the same config. The mesh of a grid spans every
process's devices (`jax.devices()` is global), each process holds the shards of the packed
layer axis on its own devices, and every process computes the same replicated values
(per-model bookkeeping, evaluation predictions, fits). Process 0 alone writes the
workdir's files; orbax checkpoints are saved and restored by all processes together, as
orbax expects. The workdir must be on a filesystem every process sees.

A stop signal may reach one process only (`experiment.StopSignals`): after every chunk
the processes agree on it (`any_process`), so they checkpoint the same step together and
stop together.

One process (the default) is the special case: `initialize` is not called, `is_writer()`
is True, `to_host` is `np.asarray`, `any_process` returns the flag and `barrier` does
nothing.
"""

import jax
import numpy as np
from jax.experimental import multihost_utils


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None) -> None:
  """`jax.distributed.initialize`: with no arguments on SLURM, TPU pods and other
  environments JAX detects; otherwise the coordinator's host:port, the number of processes
  and this one's index. On the CPU backend, collectives across processes go through gloo."""
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(coordinator_address=coordinator_address,
                             num_processes=num_processes, process_id=process_id)


def is_writer() -> bool:
  """Whether this process writes the workdir's files (process 0)."""
  return jax.process_index() == 0


def to_host(array) -> np.ndarray:
  """A numpy copy of the whole (global) array on every process: a gather across processes
  when some shards live on another process's devices. Every process must call it (it is a
  collective there)."""
  if isinstance(array, jax.Array) and not (array.is_fully_addressable
                                           or array.is_fully_replicated):
    return np.asarray(multihost_utils.process_allgather(array, tiled=True))
  return np.asarray(array)


def any_process(flag: bool) -> bool:
  """Whether `flag` is true on any process (a collective there: every process calls it at
  the same point)."""
  if jax.process_count() == 1:
    return bool(flag)
  return bool(np.any(multihost_utils.process_allgather(np.asarray(flag))))


def barrier(name: str) -> None:
  """Waits until every process reaches the barrier `name` (nothing under one process)."""
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices(name)
