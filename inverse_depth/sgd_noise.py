"""The SGD law's coefficients predicted from gradient noise, before looking at the depth curve.

Hypothesis (BUILD_NOTES.md "Why SGD"): at a constant rate eta with momentum mu and batch B,
SGD leaves each parameter fluctuating about the optimum, at an excess loss
eta_eff tr(Sigma) / (4 B), eta_eff = eta / (1 - mu), Sigma the per-context gradient
covariance (theory.sgd_stationary_excess). In a depth-L model whose layers all sit at the
one-layer optimum, each layer's gradient is 1/L of a one-layer model's (the 1/L of the
residual update), so its noise trace is 1/L^2 of the one-layer model's layer trace; L such
layers fluctuate independently and cost

    excess_L = eta_eff tr(Sigma_layer) / (4 B L) + eta_eff tr(Sigma_shared) / (4 B),

i.e. R_L = L0 + c / L with c = eta_eff tr(Sigma_layer) / (4 B) and L0 = (best one-layer loss)
+ eta_eff tr(Sigma_shared) / (4 B): alpha = 1, both excesses proportional to eta_eff / B.
Here Sigma is measured on the trained one-layer models of a run, over its averaging window.
"""

import json
import os

import jax
import ml_collections
import numpy as np

from inverse_depth import config as config_lib, diagnostics, experiment, models, theory
from inverse_depth.files import write_json_atomic, write_text_atomic

NOISE_STREAM = 6  # fold_in index of the contexts the noise is measured on (5: theory bounds)
NOISE_FILE = "sgd_noise.json"


def one_layer_noise(workdir: str, num_contexts: int, chunk_size: int = 512) -> dict:
  """tr Sigma of every one-layer model of a finished constant-rate run, per parameter group
  (`layer`, `model`: diagnostics.gradient_noise), at every step of its averaging window, on
  `num_contexts` fresh contexts: arrays [steps, seeds]."""
  with open(os.path.join(workdir, "config.json")) as f:
    config = ml_collections.ConfigDict(json.load(f))
  spec = config_lib.grid_specs(config)[0]
  if 1 not in spec.depths or spec.train.schedule != "constant":
    raise ValueError(f"{workdir}: needs a constant-rate run with depth 1 in its grid (schedule "
                     f"{spec.train.schedule!r}, depths {spec.depths})")
  (a, b), = spec.problem.spectra
  layout = experiment.grid_trainer(spec).layout
  member = spec.depths.index(1)
  key = jax.random.fold_in(jax.random.key(spec.root_seed), NOISE_STREAM)
  batch = spec.problem.sample(key, num_contexts, a, b)
  noise = jax.jit(lambda model, layers, chunk: diagnostics.gradient_noise(
      models.LAYER_PREDICTIONS[spec.model], model, layers, chunk))
  traces = {"layer": [], "model": []}
  for params in experiment.window_params(spec, workdir):
    per_seed = {"layer": [], "model": []}
    for seed in range(len(spec.seeds)):
      model, layers = layout.model_params(jax.tree.map(lambda x: x[seed], params), member)
      # Chunks of equal size: the mean of their variances plus the variance of their means.
      chunks = [noise(model, layers, jax.tree.map(lambda x: x[i:i + chunk_size], batch))
                for i in range(0, num_contexts, chunk_size)]
      for group in per_seed:
        per_seed[group].append(float(np.mean([c[group] for c in chunks])))
    for group in traces:
      traces[group].append(per_seed[group])
  del chunks
  return dict(spec=spec, **{group: np.asarray(v) for group, v in traces.items()})


def predict(workdir: str, num_contexts: int = 4096) -> dict:
  """Predicted c and floor excess beside the run's fit (results.json), written to
  workdir/sgd_noise.json and returned."""
  found = one_layer_noise(workdir, num_contexts)
  spec = found["spec"]
  with open(os.path.join(workdir, "results.json")) as f:
    results = json.load(f)
  fit = results["fits"][0]
  settings = dict(learning_rate=spec.train.learning_rate, momentum=spec.train.momentum,
                  batch_size=spec.train.batch_size)
  out = dict(workdir=workdir, contexts=num_contexts, steps=list(spec.stationary_steps),
             eta_eff_over_B=spec.train.learning_rate / (1 - spec.train.momentum)
             / spec.train.batch_size)
  for group, name in (("layer", "c"), ("model", "floor_excess")):
    per_seed = found[group].mean(axis=0)  # time average, per seed
    trace, trace_se = per_seed.mean(), per_seed.std(ddof=1) / np.sqrt(per_seed.size)
    out[f"trace_{group}"], out[f"trace_{group}_se"] = float(trace), float(trace_se)
    out[f"predicted_{name}"] = theory.sgd_stationary_excess(trace, **settings)
    out[f"predicted_{name}_se"] = theory.sgd_stationary_excess(trace_se, **settings)
  bound = fit.get("bound") or {}
  single, single_se = bound.get("reference", float("nan")), bound.get("reference_se", 0.0)
  depth_1 = fit["losses"][fit["depths"].index(1)] if 1 in fit["depths"] else float("nan")
  out.update(fitted_c=fit["c"], fitted_c_se=fit["c_se"], fitted_alpha=fit["alpha"],
             fitted_L0=fit["L0"], fitted_L0_se=fit["L0_se"], single_layer_optimum=single,
             single_layer_optimum_se=single_se, measured_floor_excess=fit["L0"] - single,
             measured_floor_excess_se=float(np.hypot(fit["L0_se"], single_se)), R_1=depth_1,
             measured_R1_excess=depth_1 - single, measured_R1_excess_se=single_se,
             predicted_R1_excess=out["predicted_c"] + out["predicted_floor_excess"])
  write_json_atomic(os.path.join(workdir, NOISE_FILE), out)
  return out


def noise_markdown(found: dict) -> str:
  """The prediction beside the measurement, as a markdown table (from sgd_noise.json)."""
  def row(name, predicted, predicted_se, measured, measured_se):
    ratio = measured / predicted if predicted else float("nan")
    return (f"| {name} | {predicted:.4g} +- {predicted_se:.2g} | {measured:.4g} +- "
            f"{measured_se:.2g} | {ratio:.2f} |")
  return "\n".join([
      f"Gradient noise of the one-layer models, steps {found['steps'][0]}..{found['steps'][-1]}"
      f" of `{found['workdir']}`, {found['contexts']} contexts; eta_eff / B = "
      f"{found['eta_eff_over_B']:.3g}. tr Sigma: layer weights {found['trace_layer']:.4g} +- "
      f"{found['trace_layer_se']:.2g}, shared weights {found['trace_model']:.4g} +- "
      f"{found['trace_model_se']:.2g} (se over seeds).", "",
      "| quantity | predicted eta_eff tr(Sigma) / 4B | measured | measured / predicted |",
      "|---|---|---|---|",
      row("c (depth term)", found["predicted_c"], found["predicted_c_se"], found["fitted_c"],
          found["fitted_c_se"]),
      row("L0 - best single cosine layer", found["predicted_floor_excess"],
          found["predicted_floor_excess_se"], found["measured_floor_excess"],
          found["measured_floor_excess_se"]),
      row("R_1 - best single cosine layer", found["predicted_R1_excess"],
          found["predicted_c_se"] + found["predicted_floor_excess_se"],
          found["measured_R1_excess"], found["measured_R1_excess_se"]),
      "", f"Fitted alpha {found['fitted_alpha']:.3f} (the prediction assumes 1). The measured "
      "excesses subtract the Monte Carlo single-layer optimum (theory.softmax_bound, "
      f"{found['single_layer_optimum']:.4g} +- {found['single_layer_optimum_se']:.2g}), whose "
      "error is in theirs."])


def write_report(workdir: str, num_contexts: int = 4096) -> str:
  """Runs `predict` and writes workdir/sgd_noise.md; returns its path."""
  path = os.path.join(workdir, "sgd_noise.md")
  write_text_atomic(path, "# SGD noise: predicted against fitted coefficients\n\n"
                    + noise_markdown(predict(workdir, num_contexts)) + "\n")
  return path
