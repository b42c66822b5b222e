"""Predict the SGD law's c and floor excess from gradient noise (no training).

    python -m experiments.sgd_noise --workdir=results/sgd_law
    python -m experiments.sgd_noise --workdir=runs/shallow --results=results/joined

Reads a finished constant-rate run (config.json, results.json and the checkpoints of its
averaging window), measures the per-context gradient noise of its one-layer models and writes
WORKDIR/sgd_noise.json and WORKDIR/sgd_noise.md: eta_eff tr(Sigma) / (4 B) for the layer
weights (the predicted c) and the shared weights (the predicted L0 - best single layer),
beside the fitted values (`inverse_depth.sgd_noise`). With --results, the fitted values are
those of RESULTS/results.json (a join of the run with deeper ones) and the files go there.
"""

from absl import app, flags

from inverse_depth.report import noise_report

_WORKDIR = flags.DEFINE_string("workdir", None, "A finished constant-rate run.", required=True)
_CONTEXTS = flags.DEFINE_integer("contexts", 4096, "Contexts the noise is measured on.")
_RESULTS = flags.DEFINE_string("results", None, "Folder of the results.json whose fits are "
                               "compared, where the files go (default: the workdir).")


def main(argv):
  del argv
  print(f"Report: {noise_report.write_report(_WORKDIR.value, _CONTEXTS.value, _RESULTS.value)}")


if __name__ == "__main__":
  app.run(main)
