"""The SGD law's coefficients predicted from gradient noise, before looking at the depth curve.

Hypothesis (BUILD_NOTES.md "The SGD law"): at a constant rate eta with momentum mu and batch B,
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

from inverse_depth import (analysis, config as config_lib, diagnostics, experiment, models, report,
                           theory)
from inverse_depth.files import write_json_atomic, write_text_atomic

NOISE_STREAM = 6  # fold_in index of the contexts the noise is measured on (5: theory bounds)
NOISE_FILE = "sgd_noise.json"


def one_layer_noise(workdir: str, num_contexts: int, chunk_size: int = 512) -> dict:
  """tr Sigma of every one-layer model of a finished constant-rate run, per parameter group
  (`layer`, `model`: diagnostics.gradient_noise), at every step of its averaging window, on
  `num_contexts` fresh contexts: arrays [groups, steps, seeds] (groups: the run's spectra x
  rates, GridTrainer.groups), with `learning_rates` [groups] and the grid's `spec`."""
  with open(os.path.join(workdir, "config.json")) as f:
    config = config_lib.from_saved(json.load(f))
  spec = config_lib.grid_specs(config)[0]
  if 1 not in spec.depths or spec.train.schedule != "constant":
    raise ValueError(f"{workdir}: needs a constant-rate run with depth 1 in its grid (schedule "
                     f"{spec.train.schedule!r}, depths {spec.depths})")
  trainer = experiment.grid_trainer(spec)
  member = spec.depths.index(1)
  key = jax.random.fold_in(jax.random.key(spec.root_seed), NOISE_STREAM)
  contexts = [spec.problem.sample(key, num_contexts, a, b) for a, b in spec.problem.spectra]
  noise = jax.jit(lambda model, layers, chunk: diagnostics.gradient_noise(
      models.LAYER_PREDICTIONS[spec.model], model, layers, chunk))
  num_seeds = len(spec.seeds)
  traces = {name: np.zeros((len(trainer.groups), spec.stationary_evals, num_seeds))
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
  return dict(spec=spec, learning_rates=[spec.train.learning_rate * f for _, f in trainer.groups],
              **traces)


def _fit_of(results: dict, learning_rate: float) -> dict:
  """The fit record of the grid trained at `learning_rate` (records made before rate sweeps
  carry none: the run's only fit)."""
  for fit in results["fits"]:
    if fit.get("learning_rate", learning_rate) == learning_rate:
      return fit
  raise ValueError(f"no fit at learning rate {learning_rate:g}")


def predict(workdir: str, num_contexts: int = 4096) -> dict:
  """Per rate of a finished constant-rate run: the predicted c and floor excess beside the
  fitted ones (results.json); written to workdir/sgd_noise.json and returned."""
  found = one_layer_noise(workdir, num_contexts)
  spec = found["spec"]
  with open(os.path.join(workdir, "results.json")) as f:
    results = json.load(f)
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
  write_json_atomic(os.path.join(workdir, NOISE_FILE), out)
  return out


def noise_markdown(found: dict) -> str:
  """The predictions beside the measurements, one table per rate (from sgd_noise.json)."""
  lines = [f"Gradient noise of the one-layer models over steps {found['steps'][0]}.."
           f"{found['steps'][-1]} of `{found['workdir']}`, on {found['contexts']} contexts. "
           "Predicted excess = eta_eff tr(Sigma) / (4 B) (theory.sgd_stationary_excess): the "
           "layer weights' trace predicts c, the shared weights' predicts L0 minus the best "
           "single cosine layer (theory.softmax_bound, Monte Carlo: its error is in the "
           "measured excesses). Errors are over seeds (prediction) and from the fit "
           "(measurement)."]
  for entry in found["rates"]:
    lines += ["", f"**rate {entry['learning_rate']:g}, batch {entry['batch_size']}** "
              f"(eta_eff / B = {entry['eta_eff_over_B']:.3g}; tr Sigma: layer weights "
              f"{entry['trace_layer']:.4g} +- {entry['trace_layer_se']:.2g}, shared weights "
              f"{entry['trace_model']:.4g} +- {entry['trace_model_se']:.2g}; fitted alpha "
              f"{entry['fitted_alpha']:.3f}, the prediction assumes 1)", "",
              "| quantity | predicted | measured | measured / predicted |", "|---|---|---|---|"]
    for name, predicted, measured in (
        ("c (depth term)", "predicted_c", "fitted_c"),
        ("L0 - best single cosine layer", "predicted_floor_excess", "measured_floor_excess"),
        ("R_1 - best single cosine layer", "predicted_R1_excess", "measured_R1_excess")):
      measured_se = entry.get(f"{measured}_se", float("nan"))
      ratio = entry[measured] / entry[predicted] if entry[predicted] else float("nan")
      lines.append(f"| {name} | {entry[predicted]:.4g} +- {entry[f'{predicted}_se']:.2g} | "
                   f"{entry[measured]:.4g} +- {measured_se:.2g} | {ratio:.2f} |")
  return "\n".join(lines)


def write_report(workdir: str, num_contexts: int = 4096) -> str:
  """Runs `predict` and writes workdir/sgd_noise.md; returns its path."""
  path = os.path.join(workdir, "sgd_noise.md")
  write_text_atomic(path, "# SGD noise: predicted against fitted coefficients\n\n"
                    + noise_markdown(predict(workdir, num_contexts)) + "\n")
  return path


def _deepest_stationary(results: dict, fit: dict) -> int | None:
  """The deepest depth of a fit's grid at which every clean model passed the stationarity
  test (None when none did, or the run has no averaging window)."""
  runs = [r for r in analysis.clean_runs(report.runs_of(results, fit)) if "stationarity" in r]
  depths = [L for L in sorted({r["depth"] for r in runs})
            if all(r["stationarity"]["stationary"] for r in runs if r["depth"] == L)]
  return depths[-1] if depths else None


def sweep_rows(workdirs: list[str]) -> list[dict]:
  """One row per (run, rate) of finished constant-rate runs: eta_eff / B, the fit, A_L - C_L
  at the deepest stationary depth, and the predicted c where sgd_noise.json exists."""
  rows = []
  for workdir in workdirs:
    with open(os.path.join(workdir, "results.json")) as f:
      results = json.load(f)
    noise_path = os.path.join(workdir, NOISE_FILE)
    predictions = {}
    if os.path.exists(noise_path):
      with open(noise_path) as f:
        predictions = {e["learning_rate"]: e for e in json.load(f)["rates"]}
    config = results["config"]
    for fit in results["fits"]:
      rate = fit.get("learning_rate", config["learning_rate"])
      deepest = _deepest_stationary(results, fit)
      gap = (fit["disagreement"][fit["depths"].index(deepest)]
             if deepest in fit["depths"] else float("nan"))
      predicted = predictions.get(rate, {})
      rows.append(dict(workdir=workdir, learning_rate=rate, batch_size=config["batch_size"],
                       eta_eff_over_B=rate / (1 - config["momentum"]) / config["batch_size"],
                       fit=fit, deepest_stationary=deepest, disagreement=gap,
                       predicted_c=predicted.get("predicted_c", float("nan")),
                       predicted_c_se=predicted.get("predicted_c_se", float("nan"))))
  return sorted(rows, key=lambda r: r["eta_eff_over_B"])


def write_sweep_report(out_dir: str, workdirs: list[str]) -> str:
  """out_dir/sweep.md (the table) and out_dir/figures/sweep.png (R_L - L0 against L, log-log,
  one curve per setting) from the runs' results.json and sgd_noise.json; returns the path."""
  rows = sweep_rows(workdirs)
  lines = ["# The SGD law against optimiser noise", "",
           "Per setting: the fit R_L = L0 + c L^-alpha over the clean models, A_L - C_L at the "
           "deepest depth whose models all passed the stationarity test, and c predicted from "
           "the one-layer models' gradient noise (`sgd_noise.json`; - where not computed).", "",
           "| run | batch | rate | eta_eff / B | L0 | c | alpha | R^2 | A_L - C_L (at L) | "
           "predicted c | fitted / predicted c |", "|---|---|---|---|---|---|---|---|---|---|---|"]
  fig, ax = report.plt.subplots(figsize=(6, 4.5))
  for i, row in enumerate(rows):
    fit = row["fit"]
    ratio = fit["c"] / row["predicted_c"] if np.isfinite(row["predicted_c"]) else float("nan")
    fit_cells = (f"{fit['L0']:.4g} +- {fit['L0_se']:.2g} | {fit['c']:.3g} +- {fit['c_se']:.2g} "
                 f"| {fit['alpha']:.3f} +- {fit['alpha_se']:.3f} | {fit['r2']:.4f}"
                 if fit["resolved"] else f"{fit['verdict']} | - | - | -")
    lines.append(f"| `{row['workdir']}` | {row['batch_size']} | {row['learning_rate']:g} | "
                 f"{row['eta_eff_over_B']:.3g} | {fit_cells} | {row['disagreement']:.3g} "
                 f"(L = {row['deepest_stationary']}) | "
                 + (f"{row['predicted_c']:.3g} +- {row['predicted_c_se']:.2g} | {ratio:.2f} |"
                    if np.isfinite(ratio) else "- | - |"))
    if fit["resolved"]:
      depths, losses = np.asarray(fit["depths"]), np.asarray(fit["losses"])
      excess = losses - fit["L0"]
      shown = excess > 0
      ax.plot(depths[shown], excess[shown], "o", color=f"C{i}",
              label=f"B {row['batch_size']}, rate {row['learning_rate']:g}")
      dense = np.geomspace(depths.min(), depths.max(), 50)
      ax.plot(dense, fit["c"] * dense ** -fit["alpha"], "-", color=f"C{i}", alpha=0.6)
  ax.set(xscale="log", yscale="log", xlabel="depth L", ylabel="R_L - L0")
  if ax.get_legend_handles_labels()[0]:  # no resolved fit: nothing to label
    ax.legend(fontsize=7)
  os.makedirs(os.path.join(out_dir, "figures"), exist_ok=True)
  report.save_figure(fig, os.path.join(out_dir, "figures", "sweep.png"))
  lines += ["", "![R_L - L0](figures/sweep.png)", ""]
  path = os.path.join(out_dir, "sweep.md")
  write_text_atomic(path, "\n".join(lines))
  return path
