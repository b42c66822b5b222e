"""One depth curve from several runs of one regime: results.json and report.md of the union.

Deep models cost more than shallow ones, so a curve to L = 256 is often trained in pieces
(depths 1..32 in one run, 64 and 128 in a second, 256 in a third). Models in one grid are
independent and a model's start, data stream and held-out contexts depend only on the
config, its seed and its depth, so runs whose configs differ only in JOINABLE_FIELDS hold
the same models that one run of the union would have trained. `join_results` joins their
records and refits each grid (`analysis.fit_grid`); `write_joined` writes the joined
results.json (experiments.join_runs then writes its report and figures: report.run_report).

What a join cannot recover: the paired standard error of a step between depths trained in
different runs (the per-context losses are not stored), so only the paired differences
within one source are kept.
"""

import json
import os

from inverse_depth import analysis, config as config_lib, records
from inverse_depth.files import write_json_atomic
from inverse_depth.workdir import RESULTS_FILE, SCHEMA_VERSION, read_results

# Config fields in which joined runs may differ: which models each trained, not how.
JOINABLE_FIELDS = ("depths", "spectra", "checkpoint_every", "checkpoints_to_keep")
# ... and, where every source trains at a constant rate (so that the rate at step t does not
# depend on where training stops), how long: a per-depth step budget, deep models trained
# longer in their own run. Each model records its `steps`; whether each reached its
# stationary state is the drift check's to say (checks.window_drift).
CONSTANT_RATE_JOINABLE_FIELDS = ("max_steps",)


def _model_key(run: dict) -> tuple:
  return tuple(run.get(field) for field in analysis.PAIRING_FIELDS)


def _grid_key(record: dict) -> tuple:
  return tuple(record.get(field) for field in analysis.GRID_FIELDS)


def _check_joinable(results_by_source: dict[str, dict]) -> None:
  """Raises ValueError when two sources' configs differ outside JOINABLE_FIELDS or a model
  (PAIRING_FIELDS) is in two sources."""
  if len(results_by_source) < 2:
    raise ValueError(f"joining needs at least two runs; got {len(results_by_source)}")
  (first_name, first), *others = results_by_source.items()
  joinable = JOINABLE_FIELDS
  if all(config_lib.flat(r["config"])["schedule"] == "constant"
         for r in results_by_source.values()):
    joinable = JOINABLE_FIELDS + CONSTANT_RATE_JOINABLE_FIELDS
  for name, results in others:
    differing, only_one = records.config_differences(first["config"], results["config"])
    other = ([text for field, text in differing.items() if field not in joinable]
             + [f"{field} recorded by one only" for field in only_one])
    if other:
      raise ValueError(f"{first_name} and {name} differ in more than which models they trained "
                       f"(allowed: {', '.join(joinable)}): {'; '.join(other)}")
  owner = {}
  for name, results in results_by_source.items():
    for run in results["runs"]:
      key = _model_key(run)
      if key in owner:
        raise ValueError(f"model {dict(zip(analysis.PAIRING_FIELDS, key))} is in both "
                         f"{owner[key]} and {name}")
      owner[key] = name


def join_results(results_by_source: dict[str, dict]) -> dict:
  """The results.json payload of the union of several runs ({source name: payload}).

  Every run record gains `source`; each grid (GRID_FIELDS) is refitted over all its
  models, with the theory bound of the first source that computed one and the paired
  differences of consecutive depths that one source trained both of. The config is the
  first source's with `depths` and `spectra` the unions (a spectrum need not have every
  depth: its fit record lists the depths it has; with per-depth step budgets, max_steps the
  largest); `joined_from` records each source.
  """
  _check_joinable(results_by_source)
  runs = [dict(run, source=name) for name, results in results_by_source.items()
          for run in results["runs"]]
  source_fits = [fit for results in results_by_source.values() for fit in results["fits"]]
  fits = []
  for grid in sorted({_grid_key(run) for run in runs}):
    grid_runs = [run for run in runs if _grid_key(run) == grid]
    depths = sorted({run["depth"] for run in analysis.clean_runs(grid_runs)})
    consecutive = set(zip(depths, depths[1:]))
    own_fits = [fit for fit in source_fits if _grid_key(fit) == grid]
    paired = sorted((p for fit in own_fits for p in fit["paired_differences"]
                     if (p["previous"], p["depth"]) in consecutive), key=lambda p: p["depth"])
    bound = next((fit["bound"] for fit in own_fits if fit.get("bound")), None)
    fits.append(analysis.fit_grid(grid_runs, paired, bound))
  configs = {name: config_lib.flat(r["config"]) for name, r in results_by_source.items()}
  config = config_lib.nested(dict(
      next(iter(configs.values())),
      depths=sorted({depth for c in configs.values() for depth in c["depths"]}),
      max_steps=max(c["max_steps"] for c in configs.values()),
      spectra=sorted({tuple(s) for c in configs.values() for s in c["spectra"]})))
  return dict(
      schema_version=SCHEMA_VERSION, config=config, runs=runs, fits=fits,
      wall_time_s=float(sum(r["wall_time_s"] for r in results_by_source.values())),
      backend=",".join(sorted({r["backend"] for r in results_by_source.values()})),
      num_devices=max(r["num_devices"] for r in results_by_source.values()),
      joined_from=[dict(source=name, config_hash=r["config_hash"],
                        depths=configs[name]["depths"], spectra=configs[name]["spectra"],
                        max_steps=configs[name]["max_steps"], wall_time_s=r["wall_time_s"])
                   for name, r in results_by_source.items()])


# A committed join keeps its runs beside it, in out_dir/sources/NAME (results/README.md).
SOURCES_FOLDER = "sources"


def write_joined(workdirs: list[str], out_dir: str) -> str:
  """out_dir/results.json joined from the workdirs' results.json (`join_results`), then
  returns its path (the report layer writes report.md from it). Refuses, before
  writing anything, an out_dir that is one of the sources, or that exists and is neither an
  empty directory (or one holding only SOURCES_FOLDER) nor an earlier join (rewritten in
  place)."""
  if os.path.abspath(out_dir) in {os.path.abspath(w) for w in workdirs}:
    raise ValueError(f"--out {out_dir} is one of the joined workdirs; give a new directory")
  results_by_source = {}
  for workdir in workdirs:
    if not os.path.exists(os.path.join(workdir, RESULTS_FILE)):
      raise ValueError(f"--workdirs: {workdir} holds no results.json (not a finished run)")
    results_by_source[workdir] = read_results(workdir)
  joined = join_results(results_by_source)
  out_results = os.path.join(out_dir, "results.json")
  if os.path.exists(out_results):
    with open(out_results) as f:
      if "joined_from" not in json.load(f):
        raise ValueError(f"--out {out_dir} holds the results.json of a run, not of a join; "
                         "give a new directory")
  elif os.path.exists(out_dir) and (not os.path.isdir(out_dir)
                                     or set(os.listdir(out_dir)) - {SOURCES_FOLDER}):
    raise ValueError(f"--out {out_dir} exists and is not an empty directory (but for "
                     f"{SOURCES_FOLDER}/) or an earlier join; give a new directory")
  os.makedirs(out_dir, exist_ok=True)
  write_json_atomic(out_results, joined)
  return out_results
