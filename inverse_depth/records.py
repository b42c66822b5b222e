"""Reading finished runs: a results.json's records by grid, saved configs as a kind's grids
ran them, the rule for when two runs' configs may be compared model by model, and the
per-depth summaries the reports print (seed means, counts, percentiles, floors). The data
side of the report layer (inverse_depth/report/), importable by science modules.
"""

import os

import numpy as np

from inverse_depth import analysis, config as config_lib
from inverse_depth.workdir import RESULTS_FILE, read_results


def grid_label(fit: dict) -> str:
  """'softmax, top-2, (a,b)=(0,0.5), lr 0.003': a fit record's grid in words."""
  task = f"top-{fit['k']}" if fit["task"] == "topk" else "top-1"
  return f"{fit['model']}, {task}, (a,b)=({fit['a']:g},{fit['b']:g}), lr {fit['learning_rate']:g}"


def load_results(root: str, names) -> dict[str, dict]:
  """results.json of every run named in `names` present under `root`, by run name."""
  found = {}
  for name in names:
    if os.path.exists(os.path.join(root, name, RESULTS_FILE)):
      found[name] = read_results(os.path.join(root, name))
  return found


def fits_of(results: dict | None, model: str) -> list[dict]:
  """The fit records of one model kind (none for a missing run)."""
  return [f for f in (results or {}).get("fits", []) if f["model"] == model]


def runs_of(results: dict, fit: dict) -> list[dict]:
  """The run records of one fit's grid (same model, task, k and spectrum)."""
  return [r for r in results["runs"]
          if all(r.get(f) == fit.get(f) for f in analysis.GRID_FIELDS)]


def kind_config(config: dict, kind: str) -> dict:
  """A saved config.json's fields by name (config.flat) as the grids of model kind `kind` ran
  them: its `model_overrides` applied (config.resolve, on the plain dict a results.json
  holds)."""
  fields = config_lib.flat(config)
  return dict(fields, **fields["model_overrides"].get(kind, {}))


# Config fields two runs may set differently and still be compared model by model: the
# schedule's length and which models each trained (a model's data and start depend on its
# spectrum, seed and depth only: a grid of other spectra leaves it unchanged, as
# docs/notes/reproduction.md records); anything else changes what
# a model is.
SCHEDULE_COMPARISON_FIELDS = ("max_steps", "depths", "num_seeds", "spectra",
                              "checkpoint_every", "ensemble_control")


def config_differences(first: dict, second: dict) -> tuple[dict, list[str]]:
  """({field: `field: first -> second`} for every field both saved configs set differently,
  the fields only one of them records: added to the config between the two runs), by field
  name (config.flat)."""
  first, second = config_lib.flat(first), config_lib.flat(second)
  differing = {field: f"{field}: {first[field]} -> {second[field]}"
               for field in sorted(first.keys() & second.keys())
               if first[field] != second[field]}
  return differing, sorted(first.keys() ^ second.keys())


def depth_means(runs: list[dict], field: str) -> dict[int, tuple[float, float]]:
  """depth -> (mean, standard error) over the non-diverged seeds (`analysis.seed_means`)."""
  return {L: (m, e) for L, m, e in zip(*analysis.seed_means(runs, field))}


def _finite_mean(values: list[float]) -> float:
  finite = [v for v in values if np.isfinite(v)]
  return float(np.mean(finite)) if finite else float("nan")


def _temperature_spread(run: dict) -> float:
  """std / mean of a model's layer temperatures (0 at L = 1)."""
  taus = np.asarray(run.get("layer_temperature", [np.nan]), np.float64)
  return float(taus.std() / abs(taus.mean())) if taus.size else float("nan")


# How `regime_rows` reads each field from one run record.
REGIME_FIELDS = {
    "eval_loss": lambda r: r["eval_loss"], "C": lambda r: r["C"],
    "disagreement": lambda r: r["disagreement"], "temperature_spread": _temperature_spread,
    "anisotropy": lambda r: float(np.mean(r.get("layer_anisotropy", [np.nan]))),
    "deviation_alignment": lambda r: r.get("deviation_alignment", np.nan)}


def regime_rows(results: dict) -> dict[str, dict[int, float]]:
  """Per REGIME_FIELDS field: {depth: mean of its finite values over the clean models of the
  first fit's grid} (nan where none, as C_L at L = 1)."""
  runs = analysis.clean_runs(runs_of(results, results["fits"][0]))
  depths = sorted({r["depth"] for r in runs})
  return {field: {L: _finite_mean([read(r) for r in runs if r["depth"] == L]) for L in depths}
          for field, read in REGIME_FIELDS.items()}


def loss_and_parameters(results: dict, fit: dict) -> dict[int, tuple[float, int]]:
  """depth -> (mean R_L over clean seeds, parameters of one model) for one grid."""
  runs = analysis.clean_runs(runs_of(results, fit))
  loss = depth_means(runs, "eval_loss")
  return {r["depth"]: (loss[r["depth"]][0], r["parameters"]) for r in runs}


def looped_grids(all_results: dict[str, dict]) -> list[tuple[str, dict, dict]]:
  """(label, results, fit) of the untied controlled grid of the first run with looped layers
  and of every looped grid, labelled by how its layers' W_q, W_k are tied."""
  grids = []
  for results in all_results.values():
    fits = {f["model"]: f for f in results["fits"]}
    if "looped" not in fits:
      continue
    if "softmax" in fits and not grids:
      grids.append(("untied", results, fits["softmax"]))
    group = kind_config(results["config"], "looped")["loop_group"]
    grids.append(("looped, all tied" if group == 0 else f"looped, tied in groups of {group}",
                  results, fits["looped"]))
  return grids


def selection_percentiles(results: dict | None) -> dict | None:
  """The selection error E_L = |pbar_L - p*|^2 of the clean softmax top-2 (0, 0) models that
  recorded its percentiles over contexts: `keys` (the percentiles, ascending), `by_depth`
  {L: mean over seeds of each} and `contexts`; None where no model has them."""
  found = [r for r in (results or {}).get("runs", [])
           if r["model"] == "softmax" and (r["task"], r["k"], r["a"], r["b"]) == ("topk", 2, 0, 0)
           and "selection_error_percentiles" in r and analysis.is_clean(r)]
  if not found:
    return None
  keys = sorted(found[0]["selection_error_percentiles"], key=float)
  by_depth = {L: np.mean([[r["selection_error_percentiles"][q] for q in keys]
                          for r in found if r["depth"] == L], axis=0)
              for L in sorted({r["depth"] for r in found})}
  return dict(keys=keys, by_depth=by_depth, contexts=found[0]["diagnostic_contexts"])


def deepest(fit: dict) -> tuple[int | None, float]:
  """(depth, seed-mean loss) of the deepest depth with a clean model; (None, nan) if none."""
  return (int(fit["depths"][-1]), fit["losses"][-1]) if fit["losses"] else (None, float("nan"))


def floor_of(fit: dict) -> tuple[float, str]:
  """A softmax grid's floor: the fitted L0 where the fit resolves a depth law with a floor,
  else the deepest clean loss (a plateau); with the words saying which."""
  if fit["resolved"] and np.isfinite(fit["L0"]) and fit["L0"] > 0:
    return fit["L0"], "fitted L0"
  depth, loss = deepest(fit)
  return loss, f"R at L={depth}" if depth else "no clean model"


def linear_floor_of(results: dict, fit: dict) -> tuple[float, str]:
  """A linear grid's plateau at its deepest clean depth (`analysis.plateau_loss`: averaged
  exactly over beta where recorded, else the held-out MSE); with the words saying which."""
  depth = deepest(fit)[0]
  if depth is None:
    return float("nan"), "no clean model"
  loss, _, measure = analysis.plateau_loss(runs_of(results, fit), fit, depth)
  return loss, (f"averaged over beta, L={depth}" if measure == "averaged over beta"
                else f"R at L={depth}")


def clean_means(runs: list[dict], field: str) -> tuple[np.ndarray, np.ndarray]:
  """Depths and the seed means of a run-record field over the clean models."""
  depths, means, _ = analysis.seed_means(analysis.clean_runs(runs), field)
  return np.array(depths), np.array(means)


def depth_rows(runs: list[dict]) -> list[dict]:
  """Per depth of one grid's run records: the means over its clean models of R, A, C and
  A - C, R's standard error over seeds and its relative change from the previous depth, R
  averaged exactly over beta (`analysis.beta_averaged_loss`, nan where not recorded), the
  largest |identity residual|, the mean steps, and how many models converged (clean ones),
  were flagged and diverged out of `models`."""
  rows, previous = [], float("nan")
  for depth in sorted({r["depth"] for r in runs}):
    everyone = [r for r in runs if r["depth"] == depth]
    at = analysis.clean_runs(everyone)
    mean = {field: np.mean([r[field] for r in at]) if at else float("nan")
            for field in ("eval_loss", "A", "C", "disagreement")}
    beta, beta_se = analysis.beta_averaged_loss(runs, depth)
    rows.append(dict(
        mean, depth=depth, beta_averaged=beta, beta_averaged_se=beta_se,
        eval_loss_se=(np.std([r["eval_loss"] for r in at], ddof=1) / np.sqrt(len(at))
                      if len(at) > 1 else float("nan")),
        change=mean["eval_loss"] / previous - 1,
        residual=max(abs(r["identity_residual"]) for r in at) if at else float("nan"),
        steps=int(np.mean([r["steps"] for r in at])) if at else 0, models=len(everyone),
        converged=sum(r["converged"] for r in at),
        flagged=sum(r.get("flagged", False) for r in everyone),
        diverged=sum(r["diverged"] for r in everyone)))
    previous = mean["eval_loss"]
  return rows


def geometry_rows(runs: list[dict]) -> list[dict]:
  """Per depth, over the clean models that recorded their scoring geometry
  (diagnostics.scoring_geometry): every layer's temperature (`taus`), the mean anisotropy and
  the mean alignment of the layers' departures from cosine scoring."""
  runs = [r for r in analysis.clean_runs(runs) if "layer_temperature" in r]
  rows = []
  for depth in sorted({r["depth"] for r in runs}):
    at = [r for r in runs if r["depth"] == depth]
    rows.append(dict(depth=depth, taus=np.concatenate([r["layer_temperature"] for r in at]),
                     anisotropy=np.mean(np.concatenate([r["layer_anisotropy"] for r in at])),
                     alignment=np.mean([r["deviation_alignment"] for r in at])))
  return rows


def ensemble_pairs(results: dict) -> list[tuple[dict, dict]]:
  """(jointly trained softmax fit, its ensemble control's fit) for every grid that has both."""
  fits = {(f["model"], f["task"], f["k"], f["a"], f["b"]): f for f in results["fits"]}
  return [(fits[("softmax", *problem)], ensemble) for (model, *problem), ensemble in fits.items()
          if model == "softmax" + analysis.ENSEMBLE_SUFFIX and ("softmax", *problem) in fits]


def column_labels(config: dict, model: str) -> list[str]:
  """Labels of a grid's model columns in metrics.jsonl: its depths (flagged models included),
  or the one-layer members of an ensemble control."""
  depths = kind_config(config, analysis.model_kind(model))["depths"]
  if analysis.is_ensemble(model):
    return [f"member {i + 1}" for i in range(max(depths))]
  return [f"L={L}" for L in depths]


def final_selected_mass(metrics: list[dict]) -> dict[tuple, np.ndarray]:
  """(model, a, b) -> the last logged attention mass on the target's tokens (metrics.jsonl
  `selected_mass`), mean over seeds, one entry per model column (`column_labels`)."""
  return {(m["model"], m["a"], m["b"]): np.mean(m["selected_mass"], axis=0)
          for m in metrics if "selected_mass" in m}


def model_counts(runs: list[dict]) -> dict[str, int]:
  """How many run records were trained, converged by the stated rule, have an averaging
  window (`windowed`) and were stationary over it, and are clean."""
  windows = [r for r in runs if "stationarity" in r]
  return dict(trained=len(runs), converged=sum(r["converged"] for r in runs),
              windowed=len(windows),
              stationary=sum(r["stationarity"]["stationary"] for r in windows),
              clean=sum(analysis.is_clean(r) for r in runs))


def modewise_means(runs: list[dict]) -> tuple[list[int], np.ndarray]:
  """Depths and [depth, mode] the seed mean over clean models of each mode's loss over that of
  predicting 0 (`modewise_loss` / `modewise_zero_loss`); no depths without those records."""
  runs = [r for r in analysis.clean_runs(runs) if "modewise_loss" in r]
  depths = sorted({r["depth"] for r in runs})
  return depths, np.array([np.mean([np.asarray(r["modewise_loss"])
                                    / np.asarray(r["modewise_zero_loss"])
                                    for r in runs if r["depth"] == L], axis=0) for L in depths])


def m_profiles(results: dict) -> list[dict]:
  """Per depth, over the non-diverged models with a loss profile along m (`m_profile`): the
  mean learned m, the mean loss at each offset, and the offset of the lowest loss (None where
  the profile is flat: m never enters)."""
  runs = [r for r in results["runs"] if "m_profile" in r and not r["diverged"]]
  rows = []
  offsets = runs[0]["m_profile"]["offsets"] if runs else []
  for depth in sorted({r["depth"] for r in runs}):
    at = [r for r in runs if r["depth"] == depth]
    loss = np.mean([r["m_profile"]["loss"] for r in at], axis=0)
    rows.append(dict(depth=depth, m=np.mean([r["m"] for r in at]), offsets=offsets, loss=loss,
                     lowest=(None if np.ptp(loss) <= 1e-9 * loss.min()
                             else offsets[int(np.argmin(loss))])))
  return rows


def variant_rows(results: dict, fit: dict) -> list[dict]:
  """Per depth of one grid, over its non-diverged models (flagged ones included): the seed
  means of R (with its se, `eval_loss_se`), C and A - C, how many are flagged of `models`,
  one model's parameters, and where learned each seed's m and m g_2/g_1 and the mean rho of
  S_1 with its R^2 (None where not)."""
  runs = [r for r in runs_of(results, fit) if not r["diverged"]]
  means = {field: depth_means(runs, field) for field in ("eval_loss", "C", "disagreement")}
  rows = []
  for depth in sorted(means["eval_loss"]):
    at = [r for r in runs if r["depth"] == depth]
    found = {field: by_depth[depth][0] for field, by_depth in means.items()}
    found.update(depth=depth, eval_loss_se=means["eval_loss"][depth][1], models=len(at),
                 flagged=sum(bool(r.get("flagged")) for r in at), parameters=at[0]["parameters"])
    for field in ("m", "m_effective"):
      found[field] = [r[field] for r in at] if field in at[0] else None
    for name, field in (("rho", "first_layer_rho"), ("rho_r2", "first_layer_rho_r2")):
      found[name] = np.mean([r[field] for r in at]) if "first_layer_rho" in at[0] else None
    rows.append(found)
  return rows


def context_weights(results: dict) -> dict | None:
  """The learned context weight m of a run's non-diverged C.3 models
  (diagnostics.effective_context_step): their k and {depth: seed mean} of m and of m g_2/g_1
  (None where not recorded); None without C.3 models."""
  runs = [r for r in results["runs"] if r["model"] == "context_updates" and not r["diverged"]]
  if not runs:
    return None
  means = {field: {d: m for d, (m, _) in sorted(depth_means(runs, field).items())}
           if field in runs[0] else None for field in ("m", "m_effective")}
  return dict(means, k=runs[0]["k"])
