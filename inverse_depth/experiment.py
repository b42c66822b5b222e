"""One experiment: a grid per (model kind, spectrum), trained, evaluated, fitted, reported.

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
"""

import contextlib
import datetime
import json
import os
import signal
import threading
import time

import jax
import ml_collections
import numpy as np
from absl import logging

from inverse_depth import analysis, config as config_lib, report, theory
from inverse_depth.checkpoint import GridCheckpoints
from inverse_depth.files import write_json_atomic, write_text_atomic
from inverse_depth.train import GridTrainer

RESULTS_FILE = "results.json"
METRICS_FILE = "metrics.jsonl"


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

  def check(self, where: str) -> None:
    """Raises Interrupted if a stop was requested."""
    if self.received is not None:
      raise Interrupted(self.received, f"Stopped by {signal.Signals(self.received).name} "
                        f"{where}. Rerun the same command to resume.")

  def __exit__(self, *exc_info):
    for signum, handler in self._previous.items():
      signal.signal(signum, handler)


def _root_keys(seed: int) -> dict[str, jax.Array]:
  init, data, val, evaluation = jax.random.split(jax.random.key(seed), 4)
  return dict(init=init, data=data, val=val, eval=evaluation)


ENSEMBLE_SUFFIX = "-ensemble"
THEORY_STREAM = 5  # fold_in index of the theory bounds' key (the four streams above are split)
BOUND_CHUNK_FLOATS = 2 ** 25  # context inputs per Monte Carlo chunk of a bound (memory)


def grid_name(model: str, a: float, b: float) -> str:
  return f"{model}_a{float(a):g}_b{float(b):g}"


def grid_label(model: str, ensemble: bool) -> str:
  """The model name a grid's records and metrics carry ("softmax-ensemble" for the control)."""
  return model + ENSEMBLE_SUFFIX if ensemble else model


def theory_bound(config, model: str, a: float, b: float) -> dict | None:
  """The bound a grid of `model` is judged against, or None with bound_samples = 0.

  softmax: `theory.softmax_bound` (best single cosine-attention layer and best mixture);
  linear: `theory.linear_floor` of the deepest covariance polynomial of the grid.
  """
  if not config.bound_samples:
    return None
  key = jax.random.fold_in(jax.random.key(config.seed), THEORY_STREAM)
  problem = config_lib.problem(config, model, a, b)
  monte_carlo = dict(d=problem.d, P=problem.P, a=problem.a, b=problem.b, k=problem.k,
                     task=problem.task, num_samples=config.bound_samples,
                     chunk_size=max(1, min(10_000, BOUND_CHUNK_FLOATS // (problem.P * problem.d))))
  if model == "softmax":
    bound = theory.softmax_bound(key, **monte_carlo)
    return dict(kind="softmax_bound", reference=bound["single"],
                reference_se=bound["single_se"], **_jsonable(bound))
  floor = theory.linear_floor(key, depth=max(config.depths), **monte_carlo)
  return dict(kind="linear_floor", reference=floor["floor"], reference_se=floor["floor_se"],
              depth=max(config.depths), **_jsonable(floor))


def _jsonable(values: dict) -> dict:
  return {k: (np.asarray(v).tolist() if isinstance(v, np.ndarray) else v)
          for k, v in values.items()}


PLATEAU_FRACTION = 0.9


def uniform_attention_loss(mean_label, target) -> float:
  """Loss of the best predictor g * mean_i(y_i) (per context: `mean_label`, `target`): what a
  model on the uniform-attention plateau achieves.
  min_g E[(g ybar - y*)^2] = E[y*^2] - E[y* ybar]^2 / E[ybar^2]."""
  mean_label, target = np.asarray(mean_label, np.float64), np.asarray(target, np.float64)
  return float(np.mean(target ** 2) - np.mean(target * mean_label) ** 2 / np.mean(mean_label ** 2))


def evaluate(trainer: GridTrainer, params, key: jax.Array, size: int, chunk_size: int):
  """Per-layer predictions [S, T, E], targets [E] and context mean labels [E] on the
  evaluation set sample(key, size), drawn and evaluated chunk by chunk so that only one
  chunk of contexts is ever in memory (at d = 128, P = 1024 the whole set would not be)."""
  keys = jax.random.split(key, size)
  sample = jax.jit(trainer.problem.sample_contexts)
  preds, targets, mean_labels = [], [], []
  for start in range(0, size, chunk_size):
    chunk = sample(keys[start:start + chunk_size])
    preds.append(trainer.predict(params, chunk, chunk_size))
    targets.append(np.asarray(chunk.target_B, np.float64))
    mean_labels.append(np.asarray(chunk.y_context_BP, np.float64).mean(axis=1))
  return np.concatenate(preds, axis=-1), np.concatenate(targets), np.concatenate(mean_labels)


def _drop_metrics_after(path: str, model: str, a: float, b: float, step: int) -> None:
  """Removes metrics lines of grid (model, a, b) beyond `step` (left by an interrupted run),
  and any line a killed process left half written."""
  if not os.path.exists(path):
    return
  with open(path) as f:
    lines = f.readlines()

  def keep(line):
    try:
      record = json.loads(line)
    except json.JSONDecodeError:
      logging.warning("Dropping a half-written line of %s: %r", path, line[:80])
      return False
    return (record["model"], record["a"], record["b"]) != (model, a, b) or record["step"] <= step

  kept = [line.rstrip("\n") + "\n" for line in lines if line.strip() and keep(line)]
  if kept != lines:
    write_text_atomic(path, "".join(kept))


def train_grid(config, model: str, a: float, b: float, workdir: str, stop: StopSignals, *,
               ensemble: bool = False, bound: dict | None = None) -> dict:
  """Trains (or resumes) one grid and evaluates it.

  With `ensemble`, the grid is the ensemble control of a `model` grid: per seed,
  max(depths) one-layer models (independent initialisations, the seed's training
  stream), reported at each depth L as the average of the first L of them.
  Returns {"runs": one record per (seed, depth) model, "paired_differences",
  "bound", "train_time_s", "wall_time_s"}.
  """
  keys = _root_keys(config.seed)
  problem = config_lib.problem(config, model, a, b)
  depths = (1,) * max(config.depths) if ensemble else tuple(config.depths)
  trainer = GridTrainer(model, problem, depths, tuple(range(config.num_seeds)),
                        config_lib.train_settings(config), N=config_lib.width(config, model),
                        init_scales=config_lib.init_scales(config), init_key=keys["init"],
                        data_key=keys["data"])
  sample = jax.jit(problem.sample, static_argnums=1)
  val_set = sample(keys["val"], config.val_size)
  label = grid_label(model, ensemble)
  state, train_time_s = _train_resumably(config, trainer, label, val_set, workdir, stop)
  eval_start = time.time()
  if ensemble:
    views = [(L, slice(0, L), list(range(L))) for L in config.depths]
  else:
    views = [(L, trainer.layout.layer_slice(m), [m]) for m, L in enumerate(config.depths)]
  runs, paired = _run_records(config, trainer, state, keys["eval"], label, views, bound)
  return dict(runs=runs, paired_differences=paired, bound=bound, train_time_s=train_time_s,
              wall_time_s=train_time_s + time.time() - eval_start)


def _train_resumably(config, trainer: GridTrainer, label: str, val_set, workdir: str,
                     stop: StopSignals):
  """Runs trainer.fit from the newest checkpoint (or from initialisation), logging
  metrics (under the model name `label`) and checkpointing; returns (final state, training
  seconds over all attempts)."""
  name = grid_name(label, trainer.problem.a, trainer.problem.b)
  checkpoints = GridCheckpoints(os.path.join(workdir, "checkpoints", name),
                                max_to_keep=config.checkpoints_to_keep,
                                config_hash=config_lib.config_hash(config.to_dict()),
                                layout_depths=trainer.layout.depths)
  with contextlib.closing(checkpoints):
    state = trainer.init_state()
    previous_time_s = 0.0
    restored = checkpoints.restore_latest(state)
    if restored is not None:
      state, meta = restored
      previous_time_s = meta["train_time_s"]
      logging.info("[%s] resuming from the checkpoint at step %d", name, int(state.step))
    model, a, b = label, trainer.problem.a, trainer.problem.b
    metrics_path = os.path.join(workdir, METRICS_FILE)
    _drop_metrics_after(metrics_path, model, a, b, int(state.step))
    train_time_s = previous_time_s
    with open(metrics_path, "a") as metrics_file:
      for state, progress in trainer.fit(state, val_set, config.eval_chunk_size):
        train_time_s = previous_time_s + progress["elapsed_s"]
        metrics_file.write(json.dumps(dict(model=model, a=a, b=b, train_time_s=train_time_s,
                                           **progress)) + "\n")
        metrics_file.flush()
        val_by_model = np.mean(progress["val_loss"], axis=0)
        if len(val_by_model) == len(config.depths):
          val_text = " ".join(f"L{L}={r:.4g}" for L, r in zip(config.depths, val_by_model))
        else:  # the ensemble control's one-layer models
          val_text = (f"{len(val_by_model)} one-layer models, mean {val_by_model.mean():.4g} "
                      f"(min {val_by_model.min():.4g}, max {val_by_model.max():.4g})")
        logging.info("[%s] step %d/%d  %.0fs elapsed, <= %.0fs left  val R: %s  "
                     "converged %d/%d", name, progress["step"], config.max_steps,
                     progress["elapsed_s"], progress["eta_max_s"], val_text,
                     int(np.sum(progress["converged"])), np.size(progress["converged"]))
        if progress["step"] % config.checkpoint_every == 0 or stop.received is not None:
          checkpoints.save(state, train_time_s=train_time_s)
        stop.check(f"in grid {name} at step {progress['step']} (checkpoint saved)")
    checkpoints.save(state, train_time_s=train_time_s)  # the trained models, kept for analysis
  return state, train_time_s


def _run_records(config, trainer: GridTrainer, state, eval_key: jax.Array, label: str, views,
                 bound: dict | None) -> tuple[list[dict], list[dict]]:
  """One results.json run record per (seed, depth) model, from held-out predictions, and
  the paired differences of consecutive depths (`paired_differences`).

  `views` lists, per reported depth L, the packed layers whose predictors form the model
  (a slice) and the trained grid models they belong to (for the bookkeeping fields).
  """
  layer_preds_STE, target_E, mean_label_E = evaluate(trainer, state.params, eval_key,
                                                     config.eval_size, config.eval_chunk_size)
  plateau_loss = uniform_attention_loss(mean_label_E, target_E)
  squared_errors_SDE = np.stack([
      [(layer_preds_STE[s, layers].astype(np.float64).mean(axis=0) - target_E) ** 2
       for _, layers, _ in views] for s in range(len(trainer.seeds))])
  runs = []
  for s, seed in enumerate(trainer.seeds):
    for i, (depth, layers, members) in enumerate(views):
      parts = analysis.decompose(layer_preds_STE[s, layers], target_E)
      runs.append(dict(
          model=label, task=config.task, k=config.k, a=trainer.problem.a,
          b=trainer.problem.b, d=trainer.problem.d, P=trainer.problem.P, N=trainer.N,
          depth=depth, seed=seed, eval_loss=parts["R"],
          eval_loss_se=float(squared_errors_SDE[s, i].std() / np.sqrt(target_E.size)),
          A=parts["A"], C=parts["C"], disagreement=parts["disagreement"],
          identity_residual=parts["identity_residual"],
          diverged=bool(state.diverged_SM[s, members].any()),
          diverged_at_step=int(state.diverged_at_step_SM[s, members].max()),
          converged=bool(state.converged_SM[s, members].all()),
          steps=int(state.steps_trained_SM[s, members].max()),
          final_lr_scale=float(state.lr_scale_SM[s, members].mean()),
          uniform_attention_loss=plateau_loss,
          on_plateau=bool(parts["R"] > PLATEAU_FRACTION * plateau_loss),
          target_second_moment=float(np.mean(target_E ** 2))))
  flag_outliers(runs, None if bound is None else bound["reference"], config.outlier_factor)
  clean_SD = np.array([analysis.is_clean(r) for r in runs]).reshape(len(trainer.seeds),
                                                                    len(views))
  return runs, paired_differences([L for L, _, _ in views], squared_errors_SDE, clean_SD)


def flag_outliers(runs: list[dict], reference: float | None, factor: float) -> None:
  """Sets `flagged` (and `flag_reason`) on each run record in place.

  A model is flagged when its loss exceeds `factor` x the median loss of its depth peers
  (the other seeds), or `factor` x the theory `reference` (the single-layer bound of a
  softmax grid, the linear floor of a linear one). Flagged models are kept out of the
  means, the fits and the monotonicity check; the report names them.
  """
  for r in runs:
    peers = [p["eval_loss"] for p in runs if p["depth"] == r["depth"] and not p["diverged"]]
    reasons = []
    if not r["diverged"] and r["eval_loss"] > factor * float(np.median(peers)):
      reasons.append(f"{r['eval_loss']:.4g} > {factor:g} x the median of its depth "
                     f"({float(np.median(peers)):.4g})")
    if not r["diverged"] and reference is not None and r["eval_loss"] > factor * reference:
      reasons.append(f"{r['eval_loss']:.4g} > {factor:g} x the theory bound ({reference:.4g})")
    r["flagged"] = bool(reasons)
    r["flag_reason"] = "; ".join(reasons)


def paired_differences(depths, squared_errors_SDE: np.ndarray, clean_SD: np.ndarray) -> list:
  """R_L - R_L' of consecutive depths on the shared evaluation set, with its standard error
  over contexts: per context the squared-error difference averaged over the seeds where
  both models are clean, then mean and std / sqrt(contexts). Seed-to-seed spread (which
  one stuck seed inflates) does not enter."""
  out = []
  for i in range(1, len(depths)):
    both = clean_SD[:, i] & clean_SD[:, i - 1]
    if not both.any():
      out.append(dict(depth=depths[i], previous=depths[i - 1], difference=float("nan"),
                      se=float("nan"), seeds=0))
      continue
    per_context = (squared_errors_SDE[both, i] - squared_errors_SDE[both, i - 1]).mean(axis=0)
    out.append(dict(depth=depths[i], previous=depths[i - 1],
                    difference=float(per_context.mean()),
                    se=float(per_context.std() / np.sqrt(per_context.size)),
                    seeds=int(both.sum())))
  return out


def non_monotone_depths(paired: list[dict], num_se: float = 2.0) -> list[int]:
  """Depths whose loss rises above the previous depth's by more than `num_se` paired
  standard errors (SPEC 7: a converged parallel model has R_2L <= R_L)."""
  return [p["depth"] for p in paired
          if np.isfinite(p["difference"]) and p["difference"] > num_se * p["se"]]


def fit_grid(runs: list[dict], paired_differences: list[dict] | None = None,
             bound: dict | None = None) -> dict:
  """The fit record of one grid (model, task, spectrum) from its run records.

  Diverged and flagged models are left out of the means and the fit.
  """
  first = runs[0]
  clean = analysis.clean_runs(runs)
  depths, losses, loss_se = analysis.seed_means(clean, "eval_loss")
  _, shared, _ = analysis.seed_means(clean, "C")
  _, disagreement, _ = analysis.seed_means(clean, "disagreement")
  keep = [i for i, loss in enumerate(losses) if np.isfinite(loss)]
  paired = paired_differences or []
  fit = dict(model=first["model"], task=first["task"], k=first["k"], a=first["a"],
             b=first["b"], loss_se=loss_se, shared_error=shared, disagreement=disagreement,
             excluded_diverged=[dict(depth=r["depth"], seed=r["seed"],
                                     step=r["diverged_at_step"]) for r in runs if r["diverged"]],
             flagged=[dict(depth=r["depth"], seed=r["seed"], eval_loss=r["eval_loss"],
                           reason=r["flag_reason"]) for r in runs if r.get("flagged")],
             paired_differences=paired, non_monotone_depths=non_monotone_depths(paired),
             bound=bound,
             all_converged=all(r["converged"] for r in runs if not r["diverged"]))
  fit["clean"] = not fit["flagged"] and not fit["excluded_diverged"]
  if len(keep) >= 2:
    fit.update(analysis.fit_depth_scaling([depths[i] for i in keep], [losses[i] for i in keep],
                                          fit_floor=first["task"] == "topk"))
    fit["gap_fit"] = analysis.fit_gap(depths, shared, fit["L0"]) if fit["L0"] > 0 else None
  else:
    nan = float("nan")
    fit.update(L0=nan, L0_se=nan, c=nan, c_se=nan, alpha=nan, alpha_se=nan, r2=nan,
               depths=depths, losses=losses, gap_fit=None, resolved=False,
               verdict="fewer than two depths with a clean model: nothing to fit")
  return fit


def grid_plan(config) -> list[tuple[str, float, float, bool]]:
  """(model kind, a, b, is the ensemble control) of every grid, in training order."""
  plan = []
  for model in config_lib.model_names(config):
    for a, b in config.spectra:
      plan.append((model, float(a), float(b), False))
      if config.ensemble_control and model == "softmax":
        plan.append((model, float(a), float(b), True))
  return plan


def _cached_bound(config, model: str, a: float, b: float, workdir: str) -> dict | None:
  """theory_bound, computed once per workdir (bounds/<grid>.json) and shared by a grid and
  its ensemble control."""
  path = os.path.join(workdir, "bounds", grid_name(model, a, b) + ".json")
  if os.path.exists(path):
    with open(path) as f:
      return json.load(f)
  start = time.time()
  bound = theory_bound(config, model, a, b)
  if bound is not None:
    logging.info("[%s] theory bound %.4g (+- %.2g) from %d contexts in %.0f s",
                 grid_name(model, a, b), bound["reference"], bound["reference_se"],
                 config.bound_samples, time.time() - start)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_json_atomic(path, bound)
  return bound


class WorkdirConflict(RuntimeError):
  """The workdir holds results of a different config."""


def _refuse_foreign_directory(workdir: str, advice: str) -> None:
  """Raises WorkdirConflict for a path that is not a directory, or a non-empty directory
  without config.json."""
  if os.path.exists(workdir) and not os.path.isdir(workdir):
    raise WorkdirConflict(f"--workdir {workdir} exists and is not a directory. {advice}")
  if (os.path.isdir(workdir) and os.listdir(workdir)
      and not os.path.exists(os.path.join(workdir, "config.json"))):
    raise WorkdirConflict(f"{workdir} is not empty and holds no config.json: not an "
                          f"experiment workdir. {advice}")


def check_workdir(config_dict: dict, workdir: str) -> None:
  """Refuses a workdir whose saved config differs from `config_dict` (naming the fields),
  or a non-empty directory that is not an experiment workdir. Fields in
  config.RUNTIME_FIELDS may differ."""
  _refuse_foreign_directory(workdir, "Choose a new --workdir.")
  path = os.path.join(workdir, "config.json")
  if not os.path.exists(path):
    return
  with open(path) as f:
    saved = json.load(f)
  current = json.loads(json.dumps(config_dict))  # tuples -> lists, as saved
  differing = sorted(k for k in set(saved) | set(current)
                     if saved.get(k) != current.get(k) and k not in config_lib.RUNTIME_FIELDS)
  if differing:
    raise WorkdirConflict(
        f"{workdir} holds results of a different config (fields {', '.join(differing)}: "
        + "; ".join(f"{k} saved {saved.get(k)!r} vs now {current.get(k)!r}" for k in differing)
        + "). Choose a new --workdir, or pass --start_over to move the old one aside and "
        "start again.")


def move_aside(workdir: str) -> str | None:
  """Renames an existing experiment workdir to <workdir>.replaced-<time> (nothing is
  deleted); refuses any other non-empty directory."""
  if not os.path.exists(workdir):
    return None
  _refuse_foreign_directory(workdir, "--start_over will not move it.")
  stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
  destination = f"{os.path.normpath(workdir)}.replaced-{stamp}"
  os.rename(workdir, destination)
  logging.warning("Starting over: moved the previous %s to %s", workdir, destination)
  return destination


def run(config: ml_collections.ConfigDict, workdir: str, *, start_over: bool = False) -> dict:
  """Runs (or resumes) the experiment in `workdir` and writes results and report.

  With `start_over`, an existing workdir is first moved aside (`move_aside`).
  Raises config.ConfigError or WorkdirConflict before anything is written,
  checkpoint.CheckpointMismatch when a checkpoint belongs to another config or
  grid layout, and Interrupted when SIGTERM/SIGINT stopped training (after a
  checkpoint).
  """
  if jax.process_count() > 1:
    raise NotImplementedError("multi-process (jax.distributed) runs are not supported yet: "
                              "see README, 'Several devices and hosts'")
  config_lib.validate(config)
  config_dict = config.to_dict()
  if start_over:
    move_aside(workdir)
  check_workdir(config_dict, workdir)
  os.makedirs(os.path.join(workdir, "grids"), exist_ok=True)
  write_json_atomic(os.path.join(workdir, "config.json"), config_dict)
  all_runs, fits, grid_times, trained = [], [], [], []
  with StopSignals() as stop:
    for model, a, b, ensemble in grid_plan(config):
      name = grid_name(grid_label(model, ensemble), a, b)
      grid_path = os.path.join(workdir, "grids", name + ".json")
      if os.path.exists(grid_path):
        logging.info("Grid %s already done; loading %s", name, grid_path)
        with open(grid_path) as f:
          grid = json.load(f)
      else:
        stop.check(f"before grid {name}")
        bound = _cached_bound(config, model, a, b, workdir)
        grid = train_grid(config, model, a, b, workdir, stop, ensemble=ensemble, bound=bound)
        write_json_atomic(grid_path, grid)
        trained.append(name)
      all_runs.extend(grid["runs"])
      fits.append(fit_grid(grid["runs"], grid["paired_differences"], grid["bound"]))
      grid_times.append(grid["wall_time_s"])
  if not trained:
    logging.info("Every grid was already finished: results regenerated without training.")
  results = dict(runs=all_runs, fits=fits, config=config_dict,
                 config_hash=config_lib.config_hash(config_dict),
                 wall_time_s=float(sum(grid_times)),  # training + evaluation, all grids
                 backend=jax.default_backend(), num_devices=jax.device_count())
  write_json_atomic(os.path.join(workdir, RESULTS_FILE), results)
  report.write_report(workdir)
  return results
