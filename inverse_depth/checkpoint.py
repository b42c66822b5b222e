"""Orbax checkpoints of one grid's training state, with corruption fallback.

Each checkpoint holds the whole `TrainState` (parameters, optimiser state,
step and the convergence bookkeeping of every model) and a small JSON record:
the config hash, the step, the training wall time so far and a SHA-256 of
the state's bytes. Orbax finalises a checkpoint by an atomic rename, so a
process killed while saving leaves no half-written step behind; the checksum
catches what a rename cannot (a file truncated or overwritten later).

Restore order: the newest step first. A step that fails to load or whose
checksum does not match is reported, moved out of the way to
`<directory>.corrupt/` (nothing is deleted) and the next older one is tried.
A readable step written by another config or for another grid layout (the
packed layer axis depends on the device count through the padding model) is
not corrupt: restoring stops with `CheckpointMismatch` and nothing is moved.
"""

import hashlib
import os
import shutil
import time
from typing import Optional

import jax
import numpy as np
import orbax.checkpoint as ocp
from absl import logging

from inverse_depth import hosts
from inverse_depth.train import TrainState


class CheckpointMismatch(RuntimeError):
  """A readable checkpoint that belongs to another config or grid layout."""


def state_checksum(state: TrainState) -> str:
  """SHA-256 over the shape, dtype and bytes of every (whole, gathered) leaf, in tree
  order; under several processes every process computes the same digest."""
  digest = hashlib.sha256()
  for leaf in jax.tree.leaves(state):
    array = hosts.to_host(leaf)
    digest.update(f"{array.shape}{array.dtype}".encode())
    digest.update(np.ascontiguousarray(array).tobytes())
  return digest.hexdigest()


class GridCheckpoints:
  """The checkpoints of one grid in `directory`, keeping the newest `max_to_keep`."""

  def __init__(self, directory: str, *, max_to_keep: int, config_hash: str,
               layout_depths: tuple[int, ...]):
    self.directory = os.path.abspath(directory)
    self.config_hash = config_hash
    self.layout_depths = list(layout_depths)  # as JSON holds them
    self._options = ocp.CheckpointManagerOptions(
        max_to_keep=max_to_keep, create=True,
        # Synchronous: the next train chunk donates the state's buffers.
        enable_async_checkpointing=False)
    self._manager = ocp.CheckpointManager(self.directory, options=self._options)

  def steps(self) -> list[int]:
    return sorted(self._manager.all_steps())

  def save(self, state: TrainState, *, train_time_s: float) -> None:
    """Saves `state` under its step (a step already saved is left as it is)."""
    step = int(state.step)
    if step in self._manager.all_steps():
      return
    meta = dict(step=step, config_hash=self.config_hash, layout_depths=self.layout_depths,
                train_time_s=train_time_s, checksum=state_checksum(state),
                saved_at=time.time())
    self._manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                     meta=ocp.args.JsonSave(meta)), force=True)
    self._manager.wait_until_finished()

  def restore_latest(self, like: TrainState) -> Optional[tuple[TrainState, dict]]:
    """The newest readable checkpoint as (state, meta), or None when there is none.

    `like` gives the tree structure, shapes, dtypes and shardings to restore into.
    """
    for step in reversed(self.steps()):
      try:
        state, meta = self._read(step, like)
      except CheckpointMismatch:
        raise
      except Exception as error:  # noqa: BLE001 -- any failure to read means unusable
        self._quarantine(step, f"unreadable ({type(error).__name__}: {str(error)[:300]})")
        continue
      problem = self._problem(state, meta, step)
      if problem:
        self._quarantine(step, problem)
      else:
        logging.info("Restored checkpoint %s/%d", self.directory, step)
        return state, meta
    return None

  def restore(self, step: int, like: TrainState) -> TrainState:
    """The state saved at `step`; raises CheckpointMismatch for another config's or layout's
    checkpoint and RuntimeError for a missing, unreadable or changed one (nothing is moved:
    the caller asked for this step, there is nothing to fall back to)."""
    if step not in self._manager.all_steps():
      raise RuntimeError(f"{self.directory} holds no checkpoint of step {step} (it has "
                         f"{self.steps()})")
    state, meta = self._read(step, like)
    problem = self._problem(state, meta, step)
    if problem:
      raise RuntimeError(f"checkpoint {self.directory}/{step} is {problem}")
    return state

  def _read(self, step: int, like: TrainState) -> tuple[TrainState, dict]:
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, like)
    meta = self._manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())).meta
    self._check_belongs_here(meta, step)  # raises: not a corruption
    state = self._manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract))).state
    return state, meta

  @staticmethod
  def _problem(state: TrainState, meta: dict, step: int) -> str | None:
    """What is wrong with a readable checkpoint of `step`, or None."""
    if int(state.step) != step or meta.get("step") != step:
      return f"holding step {int(state.step)} under step {step}"
    if meta.get("checksum") != state_checksum(state):
      return "changed after the save (checksum mismatch)"
    return None

  def _check_belongs_here(self, meta: dict, step: int) -> None:
    if meta.get("config_hash") != self.config_hash:
      raise CheckpointMismatch(
          f"{self.directory}/{step} was written by another config (hash "
          f"{meta.get('config_hash')}, now {self.config_hash}); use a new --workdir or "
          "--start_over.")
    if meta.get("layout_depths") != self.layout_depths:
      raise CheckpointMismatch(
          f"{self.directory}/{step} holds a grid laid out as depths {meta.get('layout_depths')}"
          f" but this run lays it out as {self.layout_depths} (a padding model is appended "
          "when the layer count is not a multiple of the number of devices): resume on the "
          "same number of devices, or use a new --workdir / --start_over.")

  def _quarantine(self, step: int, problem: str) -> None:
    """Moves a bad step to <directory>.corrupt/ and reopens the manager without it (every
    process finds the same problem; process 0 moves the files)."""
    destination = os.path.join(f"{self.directory}.corrupt", f"{step}-{int(time.time())}")
    logging.warning("Checkpoint %s/%d is %s; moved to %s and falling back to the previous "
                    "one.", self.directory, step, problem, destination)
    if hosts.is_writer():
      os.makedirs(os.path.dirname(destination), exist_ok=True)
      shutil.move(os.path.join(self.directory, str(step)), destination)
    hosts.barrier(f"quarantine {self.directory}/{step}")
    self._manager.close()
    self._manager = ocp.CheckpointManager(self.directory, options=self._options)

  def close(self) -> None:
    self._manager.close()
