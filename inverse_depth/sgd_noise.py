"""The SGD law's coefficients predicted from gradient noise, before looking at the depth curve.

Hypothesis (BUILD_NOTES.md "Where the law appears"): at a constant rate eta with momentum mu and batch B,
SGD leaves each parameter fluctuating about the optimum, at an excess loss
eta_eff tr(Sigma) / (4 B), eta_eff = eta / (1 - mu), Sigma the per-context gradient
covariance (theory.sgd_stationary_excess). In a depth-L model whose layers all sit at the
one-layer optimum, each layer's gradient is 1/L of a one-layer model's (the 1/L of the
residual update): L layers fluctuating independently, each with 1/L^2 of the one-layer
model's layer noise, and L layers moving together at rate eta / L (at equal layers the
per-context noise is the same for all) both cost

    excess_L = eta_eff tr(Sigma_layer) / (4 B L) + eta_eff tr(Sigma_shared) / (4 B),

i.e. R_L = L0 + c / L with c = eta_eff tr(Sigma_layer) / (4 B) and L0 = (best one-layer loss)
+ eta_eff tr(Sigma_shared) / (4 B): alpha = 1, both excesses proportional to eta_eff / B.
Here Sigma is measured on the trained one-layer models of a run, over its averaging window.
"""

import json
import os

import jax
import numpy as np

from inverse_depth import analysis, config as config_lib, diagnostics, experiment, models
from inverse_depth import records, theory, trajectory
from inverse_depth.files import write_json_atomic
from inverse_depth.workdir import read_results

NOISE_FILE = "sgd_noise.json"


def one_layer_noise(workdir: str, num_contexts: int, chunk_size: int = 512) -> dict:
  """tr Sigma of every one-layer model of a finished constant-rate run, per parameter group
  (`layer`, `model`: diagnostics.gradient_noise), at every step of its averaging window, on
  `num_contexts` contexts of trajectory.noise_contexts (with trajectory.NOISE_CONTEXTS, and
  chunk_size >= that, the traces metrics.jsonl records at those steps): arrays [groups,
  steps, seeds] (groups: the run's spectra x rates, GridTrainer.groups), with
  `learning_rates` [groups] and the grid's `spec`."""
  with open(os.path.join(workdir, "config.json")) as f:
    config = config_lib.from_saved(json.load(f))
  spec = config_lib.grid_specs(config)[0]
  if 1 not in spec.depths or spec.train.schedule != "constant":
    raise ValueError(f"{workdir}: needs a constant-rate run with depth 1 in its grid (schedule "
                     f"{spec.train.schedule!r}, depths {spec.depths})")
  trainer = experiment.grid_trainer(spec)
  member = spec.depths.index(1)
  contexts = trajectory.noise_contexts(spec.problem, spec.root_seed, num_contexts)
  noise = jax.jit(lambda model, layers, chunk: diagnostics.gradient_noise(
      models.LAYER_PREDICTIONS[spec.model], model, layers, chunk))
  num_seeds = len(spec.seeds)
  traces = {name: np.zeros((len(trainer.groups), spec.eval.stationary_evals, num_seeds))
            for name in ("layer", "model")}
  for w, params in enumerate(experiment.window_params(spec, workdir)):
    for replicate in range(len(trainer.replicate_seed)):
      group, seed = divmod(replicate, num_seeds)
      batch = contexts[trainer.groups[group][0]]
      model, layers = trainer.layout.model_params(jax.tree.map(lambda x: x[replicate], params),
                                                  member)
      # The mean of equal chunks' variances: it misses the spread of the chunk means, about
      # 1/chunk_size of the total.
      chunks = [noise(model, layers, jax.tree.map(lambda x: x[i:i + chunk_size], batch))
                for i in range(0, num_contexts, chunk_size)]
      for name in traces:
        traces[name][group, w, seed] = float(np.mean([c[name] for c in chunks]))
  return dict(spec=spec, learning_rates=list(trainer.group_learning_rates), **traces)


def _fit_of(results: dict, learning_rate: float) -> dict:
  """The fit record of the grid trained at `learning_rate`."""
  for fit in results["fits"]:
    if fit["learning_rate"] == learning_rate:
      return fit
  raise ValueError(f"no fit at learning rate {learning_rate:g}")


def predict(workdir: str, num_contexts: int = 4096, results_dir: str | None = None) -> dict:
  """Per rate of a finished constant-rate run: the predicted c and floor excess beside the
  fitted ones of results_dir/results.json (default: the workdir's; a join of this run with
  deeper ones gives the fit over every depth); written to results_dir/sgd_noise.json and
  returned."""
  results_dir = results_dir or workdir
  found = one_layer_noise(workdir, num_contexts)
  spec = found["spec"]
  results = read_results(results_dir)
  entries = []
  for g, rate in enumerate(found["learning_rates"]):
    fit = _fit_of(results, rate)
    settings = dict(learning_rate=rate, momentum=spec.train.momentum,
                    batch_size=spec.train.batch_size)
    entry = dict(learning_rate=rate, batch_size=spec.train.batch_size,
                 eta_eff_over_B=rate / (1 - spec.train.momentum) / spec.train.batch_size)
    for name, quantity in (("layer", "c"), ("model", "floor_excess")):
      per_seed = found[name][g].mean(axis=0)  # time average, per seed
      trace, trace_se = per_seed.mean(), per_seed.std(ddof=1) / np.sqrt(per_seed.size)
      entry[f"trace_{name}"], entry[f"trace_{name}_se"] = float(trace), float(trace_se)
      entry[f"predicted_{quantity}"] = theory.sgd_stationary_excess(trace, **settings)
      entry[f"predicted_{quantity}_se"] = theory.sgd_stationary_excess(trace_se, **settings)
    bound = fit.get("bound") or {}
    single, single_se = bound.get("reference", float("nan")), bound.get("reference_se", 0.0)
    depth_1 = fit["losses"][fit["depths"].index(1)] if 1 in fit["depths"] else float("nan")
    entry.update(fitted_c=fit["c"], fitted_c_se=fit["c_se"], fitted_alpha=fit["alpha"],
                 fitted_L0=fit["L0"], fitted_L0_se=fit["L0_se"], resolved=fit["resolved"],
                 single_layer_optimum=single, single_layer_optimum_se=single_se,
                 measured_floor_excess=fit["L0"] - single,
                 measured_floor_excess_se=float(np.hypot(fit["L0_se"], single_se)), R_1=depth_1,
                 measured_R1_excess=depth_1 - single, measured_R1_excess_se=single_se,
                 predicted_R1_excess=entry["predicted_c"] + entry["predicted_floor_excess"],
                 predicted_R1_excess_se=float(np.hypot(entry["predicted_c_se"],
                                                       entry["predicted_floor_excess_se"])))
    entries.append(entry)
  out = dict(workdir=workdir, contexts=num_contexts, steps=list(spec.stationary_steps),
             rates=entries)
  write_json_atomic(os.path.join(results_dir, NOISE_FILE), out)
  return out


def _deepest_stationary(results: dict, fit: dict) -> int | None:
  """The deepest depth of a fit's grid at which every clean model passed the stationarity
  test (None when none did, or the run has no averaging window)."""
  runs = [r for r in analysis.clean_runs(records.runs_of(results, fit)) if "stationarity" in r]
  depths = [L for L in sorted({r["depth"] for r in runs})
            if all(r["stationarity"]["stationary"] for r in runs if r["depth"] == L)]
  return depths[-1] if depths else None


def sweep_rows(workdirs: list[str]) -> list[dict]:
  """One row per (run, rate) of finished constant-rate runs: eta_eff / B, the fit, A_L - C_L
  at the deepest stationary depth, and the predicted c and fitted / predicted c (`c_ratio`)
  where sgd_noise.json exists."""
  rows = []
  for workdir in workdirs:
    results = read_results(workdir)
    noise_path = os.path.join(workdir, NOISE_FILE)
    predictions = {}
    if os.path.exists(noise_path):
      with open(noise_path) as f:
        predictions = {e["learning_rate"]: e for e in json.load(f)["rates"]}
    config = config_lib.flat(results["config"])
    for fit in results["fits"]:
      rate = fit["learning_rate"]
      deepest = _deepest_stationary(results, fit)
      gap = (fit["disagreement"][fit["depths"].index(deepest)]
             if deepest in fit["depths"] else float("nan"))
      predicted = predictions.get(rate, {})
      predicted_c = predicted.get("predicted_c", float("nan"))
      ratio = fit["c"] / predicted_c if fit["resolved"] and np.isfinite(predicted_c) else np.nan
      rows.append(dict(workdir=workdir, learning_rate=rate, batch_size=config["batch_size"],
                       eta_eff_over_B=rate / (1 - config["momentum"]) / config["batch_size"],
                       fit=fit, deepest_stationary=deepest, disagreement=gap,
                       predicted_c=predicted_c,
                       predicted_c_se=predicted.get("predicted_c_se", float("nan")),
                       c_ratio=float(ratio)))
  return sorted(rows, key=lambda r: r["eta_eff_over_B"])
