"""Reading finished runs: a results.json's records by grid, saved configs as a kind's grids
ran them, and the rule for when two runs' configs may be compared model by model. The data
side of the report layer (inverse_depth/report/), importable by science modules.
"""

import os

from inverse_depth import analysis
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
  """A saved config.json as the grids of model kind `kind` ran it: its `model_overrides`
  applied (config.resolve, on the plain dict a results.json holds)."""
  return dict(config, **config.get("model_overrides", {}).get(kind, {}))


# Config fields two runs may set differently and still be compared model by model: the
# schedule's length and which models each trained (a model's data and start depend on its
# spectrum, seed and depth only: a grid of other spectra leaves it unchanged, as
# docs/notes/reproduction.md records); anything else changes what
# a model is.
SCHEDULE_COMPARISON_FIELDS = ("max_steps", "depths", "num_seeds", "spectra",
                              "checkpoint_every", "ensemble_control")


def config_differences(first: dict, second: dict) -> tuple[dict, list[str]]:
  """({field: `field: first -> second`} for every field both configs set differently, the
  fields only one of them records: added to the config between the two runs)."""
  differing = {field: f"{field}: {first[field]} -> {second[field]}"
               for field in sorted(first.keys() & second.keys())
               if first[field] != second[field]}
  return differing, sorted(first.keys() ^ second.keys())
