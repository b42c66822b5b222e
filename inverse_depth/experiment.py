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

from inverse_depth import (analysis, config as config_lib, diagnostics, models, report, tasks,
                           theory)
from inverse_depth.checkpoint import GridCheckpoints
from inverse_depth.config import GridSpec
from inverse_depth.files import write_json_atomic
from inverse_depth.train import GridTrainer
from inverse_depth.workdir import (CONFIG_FILE, RESULTS_FILE, MetricsLog, WorkdirConflict,
                                   check_workdir, move_aside)

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


THEORY_STREAM = 5  # fold_in index of the theory bounds' key (the four streams above are split)
BOUND_CHUNK_FLOATS = 2 ** 25  # context inputs per Monte Carlo chunk of a bound (memory)
SELECTION_PERCENTILES = (1, 5, 10, 25, 50, 75, 90, 95, 99)


def grid_name(model: str, a: float, b: float) -> str:
  """Name of one (model, spectrum) grid, as in bounds/<name>.json and the log."""
  return f"{model}_{config_lib.spectrum_name(a, b)}"


def theory_bound(spec: GridSpec, a: float, b: float) -> dict | None:
  """The bound the (a, b) models of a grid are judged against, or None with
  bound_samples = 0 or on the copy task (the bounds are floors of the difficult task; on
  the copy task the loss keeps falling with depth, so no depth's floor bounds the others).

  linear: `theory.linear_floor` of the deepest covariance polynomial of the grid; every
  softmax-attention kind: `theory.softmax_bound` (best single cosine-attention layer and
  best mixture).
  """
  if not spec.bound_samples or spec.problem.task != "topk":
    return None
  key = jax.random.fold_in(jax.random.key(spec.root_seed), THEORY_STREAM)
  problem = spec.problem
  monte_carlo = dict(d=problem.d, P=problem.P, a=a, b=b, k=problem.k, task=problem.task,
                     num_samples=spec.bound_samples,
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
  path = os.path.join(workdir, "bounds", grid_name(spec.model, a, b) + ".json")
  if os.path.exists(path):
    with open(path) as f:
      return json.load(f)
  start = time.time()
  bound = theory_bound(spec, a, b)
  if bound is not None:
    logging.info("[%s] theory bound %.4g (+- %.2g) from %d contexts in %.0f s",
                 grid_name(spec.model, a, b), bound["reference"], bound["reference_se"],
                 spec.bound_samples, time.time() - start)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_json_atomic(path, bound)
  return bound


PLATEAU_FRACTION = 0.9


def uniform_attention_loss(mean_label, target) -> float:
  """Loss of the best predictor g * mean_i(y_i) (per context: `mean_label`, `target`): what a
  model on the uniform-attention plateau achieves.
  min_g E[(g ybar - y*)^2] = E[y*^2] - E[y* ybar]^2 / E[ybar^2]."""
  mean_label, target = np.asarray(mean_label, np.float64), np.asarray(target, np.float64)
  return float(np.mean(target ** 2) - np.mean(target * mean_label) ** 2 / np.mean(mean_label ** 2))


# Jitted once per shape and task (the exponents are traced), shared by every spectrum and grid.
_sample_contexts = jax.jit(tasks.sample_contexts, static_argnames=("d", "P", "task", "k"))
_context_rotations = jax.jit(jax.vmap(tasks.context_rotation, in_axes=(0, None)),
                             static_argnums=1)


def evaluate(trainer: GridTrainer, params, key: jax.Array, size: int, chunk_size: int,
             spectrum: int, views: list[slice], diagnostic_size: int):
  """Held-out evaluation of one spectrum's seeds on sample_contexts(split(key, size)), drawn
  and evaluated chunk by chunk so that only one chunk of contexts is in memory (at d = 128,
  P = 1024 the whole set would not be).

  Returns per-layer predictions [seeds, T, E], targets [E], context mean labels [E], and
  the diagnostics (diagnostics.py) of each view (`views`: the packed layers whose mean is a
  reported model) on the first whole chunks covering `diagnostic_size` contexts: mode-wise
  losses [seeds, V, D] and their zero-predictor values [D] (means over those contexts; models
  linear in the labels), selection errors [seeds, V, n] (attention models), the first
  layer's tr S_1 and |S_1|_F^2 [seeds, M, n] and one context's S_1 block (context
  attention), the loss with m moved by each of diagnostics.M_OFFSETS [seeds, V, offsets]
  (models with a learned m), and n.
  """
  problem = trainer.problem
  a, b = problem.spectra[spectrum]
  keys = jax.random.split(key, size)
  weights_VT = diagnostics.view_weights(trainer.layout.total_layers, views)
  preds, targets, mean_labels, diagnosed, counts = [], [], [], [], []
  for start in range(0, size, chunk_size):
    chunk_keys = keys[start:start + chunk_size]
    chunk = _sample_contexts(chunk_keys, d=problem.d, P=problem.P, a=a, b=b, task=problem.task,
                             k=problem.k)
    preds.append(trainer.predict(params, chunk, chunk_size, spectrum))
    targets.append(np.asarray(chunk.target_B, np.float64))
    mean_labels.append(np.asarray(chunk.y_context_BP, np.float64).mean(axis=1))
    if start < diagnostic_size:
      diagnosed.append(jax.tree.map(np.asarray, trainer.diagnostics(
          params, chunk, _context_rotations(chunk_keys, problem.d), spectrum, weights_VT)))
      if "m" in params["model"]:
        diagnosed[-1]["m_profile_loss"] = diagnostics.loss_along_m(
            lambda moved: trainer.predict(moved, chunk, len(chunk_keys), spectrum), params,
            chunk.target_B, weights_VT)
      counts.append(float(len(chunk_keys)))
  found = dict(contexts=int(sum(counts)))
  if diagnosed and "modewise_loss" in diagnosed[0]:
    found["modewise_loss"] = sum(c * d["modewise_loss"] for c, d in zip(counts, diagnosed)
                                 ) / sum(counts)
    found["modewise_zero_loss"] = sum(c * d["modewise_zero_loss"]
                                      for c, d in zip(counts, diagnosed)) / sum(counts)
  if diagnosed and "m_profile_loss" in diagnosed[0]:
    found["m_profile_loss"] = sum(c * d["m_profile_loss"] for c, d in zip(counts, diagnosed)
                                  ) / sum(counts)
  if diagnosed and "selection_error" in diagnosed[0]:
    found["selection_error"] = np.concatenate([d["selection_error"] for d in diagnosed], -1)
  if diagnosed and "context_attention_trace" in diagnosed[0]:
    found.update({name: np.concatenate([d[name] for d in diagnosed], -1) for name in
                  ("context_attention_trace", "context_attention_square")},
                 context_attention_heatmap=diagnosed[0]["context_attention_heatmap"])
  return (np.concatenate(preds, axis=-1), np.concatenate(targets), np.concatenate(mean_labels),
          found)


def train_grid(spec: GridSpec, workdir: str, stop: StopSignals,
               bounds: list[dict | None]) -> dict:
  """Trains (or resumes) one grid and evaluates it, spectrum by spectrum.

  With `spec.ensemble`, the grid is the ensemble control of a softmax grid: per seed,
  max(depths) one-layer models (independent initialisations, the seed's training
  stream), reported at each depth L as the average of the first L of them.
  Returns {"runs": one record per (spectrum, seed, depth) model, "paired_differences" and
  "bounds" (one entry per spectrum), "train_time_s", "wall_time_s"}.
  """
  keys = _root_keys(spec.root_seed)
  trainer = GridTrainer(spec.model, spec.problem, spec.trained_depths, spec.seeds, spec.train,
                        N=spec.N, init_scales=spec.init, init_key=keys["init"],
                        data_key=keys["data"], loop_group=spec.loop_group)
  sample = jax.jit(spec.problem.sample, static_argnums=1)
  val_sets = tuple(sample(keys["val"], spec.val_size, a, b) for a, b in spec.problem.spectra)
  state, train_time_s = _train_resumably(spec, trainer, val_sets, workdir, stop)
  eval_start = time.time()
  if spec.ensemble:
    views = [(L, slice(0, L), list(range(L))) for L in spec.depths]
  else:
    views = [(L, trainer.layout.layer_slice(m), [m]) for m, L in enumerate(spec.depths)]
  runs, paired = [], []
  for spectrum, bound in enumerate(bounds):
    spectrum_runs, spectrum_paired = _run_records(spec, trainer, state, keys["eval"], spectrum,
                                                  views, bound)
    runs += spectrum_runs
    paired.append(spectrum_paired)
  return dict(runs=runs, paired_differences=paired, bounds=bounds, train_time_s=train_time_s,
              wall_time_s=train_time_s + time.time() - eval_start)


def _train_resumably(spec: GridSpec, trainer: GridTrainer, val_sets, workdir: str,
                     stop: StopSignals):
  """Runs trainer.fit from the newest checkpoint (or from initialisation), logging
  metrics (one line per spectrum and evaluation) and checkpointing; returns (final state,
  training seconds over all attempts)."""
  checkpoints = GridCheckpoints(os.path.join(workdir, "checkpoints", spec.name),
                                max_to_keep=spec.checkpoints_to_keep,
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
    metrics.drop_after(spec.label, spec.problem.spectra, int(state.step))
    train_time_s = previous_time_s
    for state, progress in trainer.fit(state, val_sets, spec.eval_chunk_size):
      train_time_s = previous_time_s + progress["elapsed_s"]
      per_model = {k: v for k, v in progress.items() if isinstance(v, list)}
      metrics.append([
          dict(model=spec.label, a=a, b=b, train_time_s=train_time_s,
               **{k: v for k, v in progress.items() if k not in per_model},
               **{k: v[j * num_seeds:(j + 1) * num_seeds] for k, v in per_model.items()})
          for j, (a, b) in enumerate(spec.problem.spectra)])
      logging.info("[%s] step %d/%d  %.0fs elapsed, <= %.0fs left  val R: %s  converged %d/%d",
                   spec.name, progress["step"], spec.train.max_steps, progress["elapsed_s"],
                   progress["eta_max_s"], _validation_text(spec, progress["val_loss"]),
                   int(np.sum(progress["converged"])), np.size(progress["converged"]))
      if progress["step"] % spec.checkpoint_every == 0 or stop.received is not None:
        checkpoints.save(state, train_time_s=train_time_s)
      stop.check(f"in grid {spec.name} at step {progress['step']} (checkpoint saved)")
    checkpoints.save(state, train_time_s=train_time_s)  # the trained models, kept for analysis
  return state, train_time_s


def _validation_text(spec: GridSpec, val_loss_SM) -> str:
  """Mean validation loss per depth (over every replicate), for the progress line."""
  val_by_model = np.mean(val_loss_SM, axis=0)
  if spec.ensemble:
    return (f"{len(val_by_model)} one-layer models, mean {val_by_model.mean():.4g} "
            f"(min {val_by_model.min():.4g}, max {val_by_model.max():.4g})")
  num_spectra = len(spec.problem.spectra)
  return (" ".join(f"L{L}={r:.4g}" for L, r in zip(spec.depths, val_by_model))
          + (f" (mean over {num_spectra} spectra)" if num_spectra > 1 else ""))


def _run_records(spec: GridSpec, trainer: GridTrainer, state, eval_key: jax.Array,
                 spectrum: int, views, bound: dict | None) -> tuple[list[dict], list[dict]]:
  """One results.json run record per (seed, depth) model of one spectrum, from held-out
  predictions, and the paired differences of consecutive depths (`paired_differences`).

  `views` lists, per reported depth L, the packed layers whose predictors form the model
  (a slice) and the trained grid models they belong to (for the bookkeeping fields).
  """
  a, b = spec.problem.spectra[spectrum]
  layer_preds_STE, target_E, mean_label_E, found = evaluate(
      trainer, state.params, eval_key, spec.eval_size, spec.eval_chunk_size, spectrum,
      [layers for _, layers, _ in views], spec.diagnostic_size)
  plateau_loss = uniform_attention_loss(mean_label_E, target_E)
  squared_errors_SDE = np.stack([
      [(layer_preds_STE[s, layers].astype(np.float64).mean(axis=0) - target_E) ** 2
       for _, layers, _ in views] for s in range(len(spec.seeds))])
  runs = []
  for s, seed in enumerate(spec.seeds):
    r = spectrum * len(spec.seeds) + s  # the replicate
    for i, (depth, layers, members) in enumerate(views):
      parts = analysis.decompose(layer_preds_STE[s, layers], target_E)
      record = dict(
          model=spec.label, task=spec.problem.task, k=spec.problem.k, a=a, b=b,
          d=spec.problem.d, P=spec.problem.P, N=spec.N, depth=depth, seed=seed,
          eval_loss=parts["R"],
          eval_loss_se=float(squared_errors_SDE[s, i].std() / np.sqrt(target_E.size)),
          A=parts["A"], C=parts["C"], disagreement=parts["disagreement"],
          identity_residual=parts["identity_residual"],
          diverged=bool(state.diverged_SM[r, members].any()),
          diverged_at_step=int(state.diverged_at_step_SM[r, members].max()),
          converged=bool(state.converged_SM[r, members].all()),
          steps=int(state.steps_trained_SM[r, members].max()),
          final_lr_scale=float(state.lr_scale_SM[r, members].mean()),
          uniform_attention_loss=plateau_loss,
          on_plateau=bool(parts["R"] > PLATEAU_FRACTION * plateau_loss),
          target_second_moment=float(np.mean(target_E ** 2)),
          parameters=models.parameter_count(spec.model, depth, d=spec.problem.d, N=spec.N,
                                            loop_group=spec.loop_group),
          diagnostic_contexts=found["contexts"])
      if "m" in state.params["model"]:  # context_updates: the learned context attention weight
        record["m"] = float(state.params["model"]["m"][r, members].mean())
        record["m_effective"] = float(np.mean([diagnostics.effective_context_step(
            jax.tree.map(lambda x: x[r, member], state.params["model"]))
            for member in members]))
        record["m_profile"] = dict(offsets=list(diagnostics.M_OFFSETS),
                                   loss=found["m_profile_loss"][s, i].tolist())
      if "context_attention_trace" in found:  # S_1 ~ rho I + (1 - rho) 11^T/P
        model = members[0]
        fit = diagnostics.uniform_mixture_fit(found["context_attention_trace"][s, model],
                                              found["context_attention_square"][s, model],
                                              spec.problem.P)
        record.update(first_layer_rho=fit["rho"], first_layer_rho_r2=fit["r2"],
                      first_layer_attention=np.round(
                          found["context_attention_heatmap"][s, model], 5).tolist())
      if "modewise_loss" in found:
        record.update(modewise_loss=found["modewise_loss"][s, i].tolist(),
                      modewise_zero_loss=found["modewise_zero_loss"].tolist())
      if "selection_error" in found:
        errors = found["selection_error"][s, i]
        record.update(selection_error_mean=float(errors.mean()),
                      selection_error_percentiles=dict(zip(
                          (str(q) for q in SELECTION_PERCENTILES),
                          np.percentile(errors, SELECTION_PERCENTILES).tolist())))
      runs.append(record)
  flag_outliers(runs, depth_references(bound, spec.depths), spec.outlier_factor)
  clean_SD = np.array([analysis.is_clean(r) for r in runs]).reshape(len(spec.seeds),
                                                                    len(views))
  return runs, paired_differences([L for L, _, _ in views], squared_errors_SDE, clean_SD)


def depth_references(bound: dict | None, depths) -> dict:
  """The theory reference the models of each depth are judged against ({} without a bound).

  softmax kinds: the best single cosine-attention layer at every depth. linear: the floor
  of the depth-L covariance polynomial, T - h_:L^T G_:L,:L^+ h_:L; the moments that
  `theory.linear_floor` returns for the deepest polynomial contain every shallower one.
  """
  if bound is None:
    return {}
  if bound["kind"] != "linear_floor":
    return {L: bound["reference"] for L in depths}
  h_R, G_RR = np.asarray(bound["h"]), np.asarray(bound["G"])
  return {L: float(bound["T"] - h_R[:L] @ np.linalg.pinv(G_RR[:L, :L]) @ h_R[:L])
          for L in depths}


# A loss below this fraction of E[y*^2] counts as solved (the copy task): its ratio to its
# peers' losses says nothing about training.
SOLVED_FRACTION = 1e-3


def flag_outliers(runs: list[dict], references: dict, factor: float) -> None:
  """Sets `flagged` (and `flag_reason`) on each run record in place.

  A model is flagged when its loss exceeds `factor` x the median loss of the other seeds at
  its depth (unless the loss is below SOLVED_FRACTION x E[y*^2]), or `factor` x the theory
  reference of its depth (`depth_references`). Flagged models are kept out of the means,
  the fits and the monotonicity check; the report names them.
  """
  for r in runs:
    peers = [p["eval_loss"] for p in runs
             if p is not r and p["depth"] == r["depth"] and not p["diverged"]]
    reference = references.get(r["depth"])
    solved = r["eval_loss"] <= SOLVED_FRACTION * r["target_second_moment"]
    reasons = []
    if not r["diverged"] and peers and not solved and r["eval_loss"] > factor * float(
        np.median(peers)):
      reasons.append(f"{r['eval_loss']:.4g} > {factor:g} x the median of the other seeds at "
                     f"its depth ({float(np.median(peers)):.4g})")
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
    fit["gap_fit"] = (analysis.fit_gap(depths, shared, fit["L0"])
                      if fit["resolved"] and fit["L0"] > 0 else None)
  else:
    nan = float("nan")
    fit.update(L0=nan, L0_se=nan, c=nan, c_se=nan, alpha=nan, alpha_se=nan, r2=nan,
               depths=depths, losses=losses, gap_fit=None, resolved=False,
               verdict="fewer than two depths with a clean model: nothing to fit")
  return fit


def run(config: ml_collections.ConfigDict, workdir: str, *, start_over: bool = False) -> dict:
  """Runs (or resumes) the experiment in `workdir` and writes results and report.

  With `start_over`, an existing workdir is first moved aside (`workdir.move_aside`).
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
  specs = config_lib.grid_specs(config)  # the typed settings every later step reads
  if start_over:
    move_aside(workdir)
  check_workdir(config_dict, workdir)
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
        write_json_atomic(grid_path, grid)
        trained.append(spec.name)
      all_runs.extend(grid["runs"])
      for (a, b), paired, bound in zip(spec.problem.spectra, grid["paired_differences"],
                                       grid["bounds"]):
        fits.append(fit_grid([r for r in grid["runs"] if (r["a"], r["b"]) == (a, b)], paired,
                             bound))
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
