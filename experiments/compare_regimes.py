"""Training regimes of one problem side by side (no training).

    python -m experiments.compare_regimes --out=results/regimes_compared \
        --runs=sgd_law=results/sgd_law,annealed_adam=results/depth_law

Writes OUT/regimes.md and OUT/figures/regimes.png from each run's results.json:
R_L, C_L, A_L - C_L and the layers' scoring geometry by depth
(`inverse_depth.report.regime_report`).
"""

from absl import app, flags

from inverse_depth.report import regime_report

_OUT = flags.DEFINE_string("out", None, "Directory for regimes.md and figures/.", required=True)
_RUNS = flags.DEFINE_list("runs", None, "NAME=WORKDIR of each regime, in the order to show.",
                          required=True)


def main(argv):
  del argv
  runs = dict(entry.split("=", 1) for entry in _RUNS.value)
  print(f"Report: {regime_report.write_comparison(_OUT.value, runs)}")


if __name__ == "__main__":
  app.run(main)
