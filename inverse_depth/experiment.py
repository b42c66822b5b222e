"""One experiment: a grid per model kind (all its spectra, seeds and depths in one process),
trained, evaluated, fitted, reported.

Data flows one way: config -> tasks -> grid -> train -> evaluate -> results.json
-> analysis -> report.

Resume order (rerunning the same command on the same workdir): a grid whose
`grids/<name>.json` exists is loaded, not retrained; otherwise its newest
readable checkpoint under `checkpoints/<name>/` is restored and training
continues from that step (the batches come from the step number, so the
continuation replays what an uninterrupted run would have done); otherwise it
starts from initialisation. metrics.jsonl lines beyond the restored step are
dropped so the curves never hold a step twice. SIGTERM/SIGINT stop training at
the end of the current chunk after a checkpoint (`Interrupted`).

Stationary evaluation (`stationary_evals` K > 1): training also checkpoints at each of
its last K evaluations, and the evaluation reads those states back and reports time
averages over them (`evaluation.GridEvaluator.run_records`), so an interrupted run loses
none of them.

Several processes (`inverse_depth.hosts`): every process runs this same code on the same
config and computes the same results; process 0 alone writes the workdir's files, and the
checkpoints are saved and restored by all together.
"""

import contextlib
import json
import os
import signal
import threading
import time

import jax
import ml_collections
import numpy as np
from absl import logging

from inverse_depth import analysis, config as config_lib, hosts, theory, trajectory
from inverse_depth.checkpoint import GridCheckpoints
from inverse_depth.config import GridSpec
from inverse_depth.evaluation import GridEvaluator
from inverse_depth.files import write_json_atomic
from inverse_depth.train import GridTrainer
from inverse_depth.workdir import (CONFIG_FILE, RESULTS_FILE, SCHEMA_VERSION, MetricsLog,
                                   WorkdirConflict, check_workdir, move_aside, provenance)

__all__ = ["run", "Interrupted", "WorkdirConflict", "check_workdir", "move_aside"]


class Interrupted(RuntimeError):
  """Training stopped on SIGTERM/SIGINT after a checkpoint; rerun the command to resume."""

  def __init__(self, signum: int, message: str):
    super().__init__(message)
    self.exit_code = 128 + signum  # the shell's convention for death by that signal


class StopSignals:
  """While active, SIGTERM and SIGINT ask training to checkpoint and stop at the end of
  the current chunk (`received` holds the signal). A second SIGINT stops at once."""

  def __init__(self):
    self.received = None
    self._previous = {}

  def __enter__(self) -> "StopSignals":
    if threading.current_thread() is threading.main_thread():
      for signum in (signal.SIGTERM, signal.SIGINT):
        self._previous[signum] = signal.signal(signum, self._handle)
    return self

  def _handle(self, signum, frame):
    del frame
    if self.received is not None and signum == signal.SIGINT:
      raise KeyboardInterrupt
    self.received = signum
    # os.write, not logging: a handler may interrupt a write to the same stream.
    os.write(2, f"Received {signal.Signals(signum).name}: saving a checkpoint at the end of the "
             "current chunk, then stopping (Ctrl-C again stops at once).\n".encode())

  def requested(self) -> bool:
    """Whether a stop was requested here or, under several processes, on any process (a
    collective there: every process asks at the same point)."""
    return hosts.any_process(self.received is not None)

  def interrupted(self, where: str) -> Interrupted:
    """The exception that reports the stop (SIGTERM when another process received it)."""
    signum = self.received or signal.SIGTERM
    return Interrupted(signum, f"Stopped by {signal.Signals(signum).name} {where}. Rerun the "
                       "same command to resume.")

  def check(self, where: str) -> None:
    """Raises Interrupted if a stop was requested (on any process)."""
    if self.requested():
      raise self.interrupted(where)

  def __exit__(self, *exc_info):
    for signum, handler in self._previous.items():
      signal.signal(signum, handler)


def _root_keys(seed: int) -> dict[str, jax.Array]:
  init, data, val, evaluation = jax.random.split(jax.random.key(seed), 4)
  return dict(init=init, data=data, val=val, eval=evaluation)


THEORY_STREAM = 5  # fold_in index of the theory bounds' key (the four streams above are split)
BOUND_CHUNK_FLOATS = 2 ** 25  # floats (contexts x P x d) per Monte Carlo chunk of a bound


def bound_name(model: str, a: float, b: float) -> str:
  """Name of the theory bound of one (model, spectrum): bounds/<name>.json and the log.
  (A grid covers every spectrum of a config: its own name is `GridSpec.name`.)"""
  return f"{model}_{config_lib.spectrum_name(a, b)}"


def theory_bound(spec: GridSpec, a: float, b: float) -> dict | None:
  """The bound the (a, b) models of a grid are judged against, or None with
  bound_samples = 0 or on the copy task (the bounds are floors of the difficult task; on
  the copy task the loss keeps falling with depth, so no depth's floor bounds the others).

  linear: `theory.linear_floor` of the deepest covariance polynomial of the grid; every
  softmax-attention kind: `theory.softmax_bound` (best single cosine-attention layer and
  best mixture).
  """
  if not spec.eval.bound_samples or spec.problem.task != "topk":
    return None
  key = jax.random.fold_in(jax.random.key(spec.root_seed), THEORY_STREAM)
  problem = spec.problem
  monte_carlo = dict(d=problem.d, P=problem.P, a=a, b=b, k=problem.k, task=problem.task,
                     num_samples=spec.eval.bound_samples,
                     chunk_size=max(1, min(10_000, BOUND_CHUNK_FLOATS // (problem.P * problem.d))))
  if spec.model != "linear":
    bound = theory.softmax_bound(key, **monte_carlo)
    return dict(kind="softmax_bound", reference=bound["single"],
                reference_se=bound["single_se"], **_jsonable(bound))
  floor = theory.linear_floor(key, depth=max(spec.depths), **monte_carlo)
  return dict(kind="linear_floor", reference=floor["floor"], reference_se=floor["floor_se"],
              depth=max(spec.depths), **_jsonable(floor))


def _jsonable(values: dict) -> dict:
  return {k: (np.asarray(v).tolist() if isinstance(v, np.ndarray) else v)
          for k, v in values.items()}


def _cached_bound(spec: GridSpec, a: float, b: float, workdir: str) -> dict | None:
  """theory_bound, computed once per workdir (bounds/<model>_a<a>_b<b>.json) and shared by a
  grid and its ensemble control."""
  path = os.path.join(workdir, "bounds", bound_name(spec.model, a, b) + ".json")
  if os.path.exists(path):
    with open(path) as f:
      return json.load(f)
  start = time.time()
  bound = theory_bound(spec, a, b)
  if bound is not None:
    logging.info("[%s] theory bound %.4g (+- %.2g) from %d contexts in %.0f s",
                 bound_name(spec.model, a, b), bound["reference"], bound["reference_se"],
                 spec.eval.bound_samples, time.time() - start)
    if hosts.is_writer():
      os.makedirs(os.path.dirname(path), exist_ok=True)
      write_json_atomic(path, bound)
  return bound


def grid_trainer(spec: GridSpec) -> GridTrainer:
  """The trainer of one grid (its layout, compiled steps and initial state)."""
  keys = _root_keys(spec.root_seed)
  return GridTrainer(spec.model, spec.problem, spec.trained_depths, spec.seeds, spec.train,
                     N=spec.N, init_scales=spec.init, init_key=keys["init"],
                     data_key=keys["data"], loop_group=spec.loop_group,
                     rate_factors=spec.rate_factors)


def read_window(spec: GridSpec, trainer: GridTrainer, like, workdir: str,
                steps: tuple[int, ...]) -> list:
  """The grid's parameters at `steps`, read from the checkpoints training wrote there
  (`like`: a state giving the tree, shapes and shardings)."""
  checkpoints = GridCheckpoints(os.path.join(workdir, "checkpoints", spec.name),
                                max_to_keep=spec.checkpoints_kept,
                                config_hash=spec.config_hash,
                                layout_depths=trainer.layout.depths)
  with contextlib.closing(checkpoints):
    return [checkpoints.restore(step, like).params for step in steps]


def window_params(spec: GridSpec, workdir: str) -> list:
  """The parameters of a finished grid at each step of spec.stationary_steps (oldest first),
  for analyses after the run (inverse_depth.sgd_noise)."""
  trainer = grid_trainer(spec)
  return read_window(spec, trainer, trainer.init_state(), workdir, spec.stationary_steps)


def train_grid(spec: GridSpec, workdir: str, stop: StopSignals,
               bounds: list[dict | None]) -> dict:
  """Trains (or resumes) one grid and evaluates it, group by group (a spectrum and a
  learning rate: GridTrainer.groups).

  With `spec.ensemble`, the grid is the ensemble control of a softmax grid: per seed,
  max(depths) one-layer models (independent initialisations, the seed's training
  stream), reported at each depth L as the average of the first L of them.
  Returns {"runs": one record per (spectrum, rate, seed, depth) model, "groups" (a, b and
  learning_rate of each group), "paired_differences" and "bounds" (one entry per group),
  "train_time_s", "wall_time_s"}. The argument `bounds` has one entry per spectrum.
  """
  keys = _root_keys(spec.root_seed)
  trainer = grid_trainer(spec)
  sample = jax.jit(spec.problem.sample, static_argnums=1)
  val_sets = tuple(sample(keys["val"], spec.eval.val_size, a, b) for a, b in spec.problem.spectra)
  state, train_time_s = _train_resumably(spec, trainer, val_sets, workdir, stop)
  eval_start = time.time()
  # The states whose evaluations are averaged (spec.stationary_steps): the final one, and
  # before it those training checkpointed in the window. A grid that stopped before
  # max_steps (every model diverged) has no window.
  window = [state.params]
  if spec.eval.stationary_evals > 1 and int(state.step) == spec.train.max_steps:
    window = read_window(spec, trainer, state, workdir, spec.stationary_steps[:-1]) + window
  evaluator = GridEvaluator(trainer)
  if spec.ensemble:
    views = [(L, slice(0, L), list(range(L))) for L in spec.depths]
  else:
    views = [(L, trainer.layout.layer_slice(m), [m]) for m, L in enumerate(spec.depths)]
  runs, groups, paired = [], [], []
  for group, (spectrum, _) in enumerate(trainer.groups):
    group_runs, group_paired = evaluator.run_records(spec, state, keys["eval"], group, views,
                                                     bounds[spectrum], window)
    a, b = spec.problem.spectra[spectrum]
    runs += group_runs
    groups.append(dict(a=a, b=b, learning_rate=trainer.group_learning_rates[group]))
    paired.append(group_paired)
  return dict(runs=runs, groups=groups, paired_differences=paired,
              bounds=[bounds[spectrum] for spectrum, _ in trainer.groups],
              train_time_s=train_time_s, wall_time_s=train_time_s + time.time() - eval_start)


def _train_resumably(spec: GridSpec, trainer: GridTrainer, val_sets, workdir: str,
                     stop: StopSignals):
  """Runs trainer.fit from the newest checkpoint (or from initialisation), logging
  metrics (one line per group and evaluation) and checkpointing; returns (final state,
  training seconds over all attempts)."""
  checkpoints = GridCheckpoints(os.path.join(workdir, "checkpoints", spec.name),
                                max_to_keep=spec.checkpoints_kept,
                                config_hash=spec.config_hash,
                                layout_depths=trainer.layout.depths)
  metrics = MetricsLog(workdir)
  num_seeds = len(spec.seeds)
  with contextlib.closing(checkpoints):
    state = trainer.init_state()
    previous_time_s = 0.0
    restored = checkpoints.restore_latest(state)
    if restored is not None:
      state, meta = restored
      previous_time_s = meta["train_time_s"]
      logging.info("[%s] resuming from the checkpoint at step %d", spec.name, int(state.step))
    if hosts.is_writer():
      metrics.drop_after(spec.label, spec.problem.spectra, int(state.step))
    train_time_s = previous_time_s
    noise_sets = tuple(trajectory.noise_contexts(spec.problem, spec.root_seed))
    for state, progress in trainer.fit(state, val_sets, spec.eval.eval_chunk_size, noise_sets):
      train_time_s = previous_time_s + progress["elapsed_s"]
      per_model = {k: v for k, v in progress.items() if isinstance(v, list)}
      if hosts.is_writer():
        metrics.append([
            dict(model=spec.label, a=spec.problem.spectra[spectrum][0],
                 b=spec.problem.spectra[spectrum][1],
                 learning_rate=trainer.group_learning_rates[g],
                 train_time_s=train_time_s,
                 **{k: v for k, v in progress.items() if k not in per_model},
                 **{k: v[g * num_seeds:(g + 1) * num_seeds] for k, v in per_model.items()})
            for g, (spectrum, _) in enumerate(trainer.groups)])
      logging.info("[%s] step %d/%d  %.0fs trained, <= %.0fs left  val R: %s  converged %d/%d",
                   spec.name, progress["step"], spec.train.max_steps, train_time_s,
                   progress["eta_max_s"], _validation_text(spec, progress["val_loss"]),
                   int(np.sum(progress["converged"])), np.size(progress["converged"]))
      stopping = stop.requested()  # asked once: the checkpoint and the stop agree
      if (progress["step"] % spec.checkpoint.checkpoint_every == 0 or stopping
          or progress["step"] in spec.stationary_steps):  # the averaged evaluations' states
        checkpoints.save(state, train_time_s=train_time_s)
      if stopping:
        raise stop.interrupted(f"in grid {spec.name} at step {progress['step']} "
                               "(checkpoint saved)")
    checkpoints.save(state, train_time_s=train_time_s)  # the trained models, kept for analysis
  return state, train_time_s


def _validation_text(spec: GridSpec, val_loss_SM) -> str:
  """Mean validation loss per depth (over every replicate), for the progress line."""
  val_by_model = np.mean(val_loss_SM, axis=0)
  if spec.ensemble:
    return (f"{len(val_by_model)} one-layer models, mean {val_by_model.mean():.4g} "
            f"(min {val_by_model.min():.4g}, max {val_by_model.max():.4g})")
  num_groups = len(spec.problem.spectra) * len(spec.rate_factors)
  return (" ".join(f"L{L}={r:.4g}" for L, r in zip(spec.depths, val_by_model))
          + (f" (mean over {num_groups} spectra and rates)" if num_groups > 1 else ""))


def _earlier_provenance(workdir: str) -> dict | None:
  """The provenance of the results.json already in `workdir` (None without one)."""
  path = os.path.join(workdir, RESULTS_FILE)
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f).get("provenance")


def run(config: ml_collections.ConfigDict, workdir: str, *, start_over: bool = False) -> dict:
  """Runs (or resumes) the experiment in `workdir` and writes its results.json (the report
  layer writes report.md from it: inverse_depth.report.run_report).

  With `start_over`, an existing workdir is first moved aside (`workdir.move_aside`).
  Raises config.ConfigError or WorkdirConflict before anything is written,
  checkpoint.CheckpointMismatch when a checkpoint belongs to another config or
  grid layout, and Interrupted when SIGTERM/SIGINT stopped training (after a
  checkpoint).
  """
  config_lib.validate(config)
  started = provenance()  # the code that trains is the code at the start
  config_dict = config.to_dict()
  specs = config_lib.grid_specs(config)  # the typed settings every later step reads
  if start_over and hosts.is_writer():
    move_aside(workdir)
  hosts.barrier("workdir moved aside")
  check_workdir(config_dict, workdir)
  hosts.barrier("workdir checked")  # before process 0 writes config.json
  if hosts.is_writer():
    os.makedirs(os.path.join(workdir, "grids"), exist_ok=True)
    write_json_atomic(os.path.join(workdir, CONFIG_FILE), config_dict)
  all_runs, fits, grid_times, trained = [], [], [], []
  with StopSignals() as stop:
    for spec in specs:
      grid_path = os.path.join(workdir, "grids", spec.name + ".json")
      if os.path.exists(grid_path):
        logging.info("Grid %s already done; loading %s", spec.name, grid_path)
        with open(grid_path) as f:
          grid = json.load(f)
      else:
        stop.check(f"before grid {spec.name}")
        bounds = [_cached_bound(spec, a, b, workdir) for a, b in spec.problem.spectra]
        grid = train_grid(spec, workdir, stop, bounds)
        if hosts.is_writer():
          write_json_atomic(grid_path, grid)
        trained.append(spec.name)
      all_runs.extend(grid["runs"])
      for group, paired, bound in zip(grid["groups"], grid["paired_differences"],
                                      grid["bounds"]):
        fits.append(analysis.fit_grid(
            [r for r in grid["runs"] if all(r.get(k) == v for k, v in group.items())], paired,
            bound))
      grid_times.append(grid["wall_time_s"])
  if not trained:
    logging.info("Every grid was already finished: results regenerated without training.")
    started = _earlier_provenance(workdir) or started  # the run that trained them
  results = dict(schema_version=SCHEMA_VERSION, provenance=started,
                 runs=all_runs, fits=fits, config=config_dict,
                 config_hash=config_lib.config_hash(config_dict),
                 wall_time_s=float(sum(grid_times)),  # training + evaluation, all grids
                 backend=jax.default_backend(), num_devices=jax.device_count(),
                 num_processes=jax.process_count())
  if hosts.is_writer():
    write_json_atomic(os.path.join(workdir, RESULTS_FILE), results)
  return results
