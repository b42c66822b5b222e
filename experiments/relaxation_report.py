"""Relaxation times of a constant-rate run: predicted from curvature, measured from its curves.

    python -m experiments.relaxation_report --workdir=runs/sgd_law_trajectory \
        [--out=results/sgd_law_trajectory]

Needs the run's kept checkpoints (its config's checkpoints_to_keep covering the run). Per depth,
seed means of:

- measured: the relaxation time of the mean score temperature and of A - C, fits of
  y(t) = y_inf + a exp(-t / tau) to the recorded series (trajectory.relaxation_time; resolved
  where tau is under half the run);
- predicted (inverse_depth.relaxation): (1 - beta) / (eta q) with q the curvature at the final
  parameters along the temperature direction, along the disagreement direction, and along the
  drift, the change of W_q, W_k between the mean parameters of two windows of checkpoints (the
  first `window` checkpoints from the middle of the run, the last `window`): the direction in
  which the model was still moving.

and A - C driven by the common mode (relaxation.driven_time). Writes OUT/relaxation.json and
OUT/relaxation.md (OUT defaults to the workdir); without --workdir, rewrites OUT/relaxation.md
from OUT/relaxation.json and OUT/config.json alone:

    python -m experiments.relaxation_report --out=results/sgd_law_trajectory
"""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from inverse_depth import config as config_lib, experiment, relaxation, trajectory
from inverse_depth.files import write_json_atomic
from inverse_depth.report.markdown import row, table, write_lines

flags.DEFINE_string("workdir", None, "a finished constant-rate run with its checkpoints (none: "
                    "rewrite --out's relaxation.md from its relaxation.json)")
flags.DEFINE_string("out", None, "where relaxation.md and .json go (default: the workdir)")
flags.DEFINE_integer("contexts", 2048, "contexts of the fixed batch the curvature is taken on")
flags.DEFINE_integer("window", 8, "checkpoints averaged at each end of the drift direction")
FLAGS = flags.FLAGS

AGREEMENT_FACTOR = 1.5  # a prediction agrees when within this factor of the measurement


def measured_times(workdir: str, label: str) -> dict[str, list[dict]]:
  """Per depth: relaxation-time fits of the seed-mean temperature and A - C series."""
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    found = trajectory.read_metrics([json.loads(line) for line in f], label)
  series = dict(temperature=found["temperature"], disagreement=found["val_A"] - found["val_C"])
  return {name: [trajectory.relaxation_time(found["step"], values[:, :, m].mean(axis=1))
                 for m in range(values.shape[2])] for name, values in series.items()}


def _mean_params(spec, trainer, like, workdir: str, steps) -> dict:
  params = experiment.read_window(spec, trainer, like, workdir, tuple(steps))
  return jax.tree.map(lambda *leaves: np.mean([np.asarray(x) for x in leaves], axis=0), *params)


def curvature_times(workdir: str, num_contexts: int, window: int) -> dict:
  """Curvatures and predicted times per seed and depth (module docstring)."""
  with open(os.path.join(workdir, "config.json")) as f:
    spec = config_lib.grid_specs(config_lib.from_saved(json.load(f)))[0]
  trainer = experiment.grid_trainer(spec)
  like = trainer.init_state()
  every, last = spec.checkpoint.checkpoint_every, spec.train.max_steps
  middle = (last // 2) // every * every
  final = _mean_params(spec, trainer, like, workdir, [last])
  start = _mean_params(spec, trainer, like, workdir, range(middle, middle + window * every, every))
  end = _mean_params(spec, trainer, like, workdir, range(last - (window - 1) * every, last + 1,
                                                         every))
  batch = relaxation.curvature_batch(spec, num_contexts)
  rates = dict(learning_rate=spec.train.learning_rate, momentum=spec.train.momentum)
  out = {name: np.full((len(spec.seeds), len(spec.depths)), np.nan)
         for name in ("temperature", "disagreement", "drift")}
  for s in range(len(spec.seeds)):
    for m, depth in enumerate(spec.depths):
      model, layers = trainer.layout.model_params(jax.tree.map(lambda x: x[s], final), m)
      params = dict(model=model, layer=layers)
      for name, found in relaxation.predicted_times(spec.model, depth, params, batch,
                                                    **rates).items():
        out[name][s, m] = found["tau"]
      _, start_layers = trainer.layout.model_params(jax.tree.map(lambda x: x[s], start), m)
      _, end_layers = trainer.layout.model_params(jax.tree.map(lambda x: x[s], end), m)
      zeros = jax.tree.map(jnp.zeros_like, params)
      drift = dict(zeros, layer=dict(zeros["layer"], **{
          k: jnp.asarray(start_layers[k] - end_layers[k]) for k in relaxation.QUERY_KEY}))
      q = relaxation.rayleigh_quotient(relaxation.model_loss(spec.model, depth, batch), params,
                                       drift)
      out["drift"][s, m] = relaxation.relaxation_time(q, **rates)
  return dict(spec=spec, drift_window=[middle, last], **out)


def _tau(fit: dict) -> str:
  return f"{fit['tau']:.0f}" if fit["resolved"] else f"> {fit['tau']:.0f} (unresolved)"


def _ratio(measured: dict, predicted: float) -> str:
  if not measured["resolved"] or not np.isfinite(predicted):
    return "-"
  ratio = measured["tau"] / predicted
  verdict = "agrees" if 1 / AGREEMENT_FACTOR <= ratio <= AGREEMENT_FACTOR else "misses"
  return f"{ratio:.2f} ({verdict})"


def _slowest_per_depth(records: list[dict]) -> tuple[float, float]:
  """A - C's tau / L over the depths >= 4 where it is resolved, and the largest departure
  (relaxation.per_depth_constant: NaN with fewer than two such depths)."""
  resolved = [r for r in records
              if r["depth"] >= 4 and r["measured_disagreement"]["resolved"]]
  return relaxation.per_depth_constant([r["depth"] for r in resolved],
                                       [r["measured_disagreement"]["tau"] for r in resolved])


def write_markdown(out_dir: str) -> str:
  """OUT/relaxation.md from OUT/relaxation.json and OUT/config.json alone."""
  with open(os.path.join(out_dir, "relaxation.json")) as f:
    found = json.load(f)
  with open(os.path.join(out_dir, "config.json")) as f:
    spec = config_lib.grid_specs(config_lib.from_saved(json.load(f)))[0]
  rows = []
  for record in found["depths"]:
    tau = record["predicted"]
    temperature, disagreement = record["measured_temperature"], record["measured_disagreement"]
    driven = relaxation.driven_time(tau["disagreement"], tau["temperature"])
    rows.append(row(record["depth"], _tau(temperature), f"{tau['temperature']:.0f}",
                    _ratio(temperature, tau["temperature"]), _tau(disagreement),
                    f"{tau['disagreement']:.0f}", _ratio(disagreement, tau["disagreement"]),
                    f"{driven:.0f}" if np.isfinite(driven) else "-", _ratio(disagreement, driven),
                    f"{tau['drift']:.0f}", _ratio(disagreement, tau["drift"])))
  constant, spread = _slowest_per_depth(found["depths"])
  lines = [
      f"# Relaxation times of {os.path.basename(found['workdir'].rstrip('/'))}", "",
      f"Heavy-ball SGD, eta {spec.train.learning_rate:g}, momentum {spec.train.momentum:g}, "
      f"{len(spec.seeds)} seed(s), {spec.train.max_steps} steps. Measured: tau of "
      "y_inf + a exp(-t / tau) fitted to the seed-mean series from the start; predicted: "
      "(1 - beta) / (eta q), q the curvature at the final parameters along the temperature, "
      f"disagreement and drift directions ({found['contexts']} contexts; drift: mean W_q, W_k "
      f"of {found['window']} checkpoints from step {found['drift_window'][0]} minus those of "
      f"the last {found['window']}). Driven: A - C following the common mode "
      "(relaxation.driven_time: the slower of the disagreement's and the temperature's "
      "predicted times). Ratios are measured / predicted; a prediction agrees within "
      f"{AGREEMENT_FACTOR:g}x.", "",
      *table("L", "tau temperature", "predicted", "ratio", "tau A - C",
             "predicted (disagreement)", "ratio", "predicted (driven by the common mode)",
             "ratio", "predicted (drift)", "ratio to tau A - C"), *rows, ""]
  if np.isfinite(constant):
    lines.append(
        f"The slowest mode, A - C, measured where resolved at L >= 4: tau / L = {constant:.0f} "
        f"steps (depths depart from it by up to {spread:.2f}x); three such times (5% of a gap "
        "left) then take " + ", ".join(
            f"{relaxation.steps_to_settle(constant, L):,.0f} steps at L = {L}"
            for L in (64, 128, 256)) + ".")
  else:
    lines.append("Fewer than two depths L >= 4 resolve A - C's time: no time per layer of "
                 "depth is given.")
  return write_lines(out_dir, "relaxation.md", lines + [""])


def main(argv):
  del argv
  out_dir = FLAGS.out or FLAGS.workdir
  if FLAGS.workdir is None:  # the markdown again, from OUT's relaxation.json
    print(write_markdown(out_dir))
    return
  predicted = curvature_times(FLAGS.workdir, FLAGS.contexts, FLAGS.window)
  spec = predicted["spec"]
  measured = measured_times(FLAGS.workdir, spec.model)
  records = []
  for m, depth in enumerate(spec.depths):
    # Times are averaged over seeds as rates (1 / tau), the quantity the curvature gives.
    tau = {name: 1.0 / np.mean(1.0 / predicted[name][:, m])
           for name in ("temperature", "disagreement", "drift")}
    records.append(dict(depth=depth, predicted=tau, measured_temperature=measured[
        "temperature"][m], measured_disagreement=measured["disagreement"][m]))
  os.makedirs(out_dir, exist_ok=True)
  write_json_atomic(os.path.join(out_dir, "relaxation.json"), dict(
      workdir=FLAGS.workdir, contexts=FLAGS.contexts, window=FLAGS.window,
      drift_window=predicted["drift_window"],
      disagreement_tau_per_depth=_slowest_per_depth(records)[0], depths=records))
  if not os.path.exists(os.path.join(out_dir, "config.json")):
    with open(os.path.join(FLAGS.workdir, "config.json")) as f:
      write_json_atomic(os.path.join(out_dir, "config.json"), json.load(f))
  print(write_markdown(out_dir))


if __name__ == "__main__":
  app.run(main)
