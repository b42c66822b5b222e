"""The SGD law against optimiser noise, from finished runs (no training).

    python -m experiments.sgd_noise --workdir=runs/sgd_sweep_b256   # per run, once
    python -m experiments.sgd_sweep_report --out=results/sgd_sweep \
        --workdirs=results/sgd_sweep/b256,results/sgd_sweep/b1024,results/sgd_law

(the command that made the committed results/sgd_sweep/sweep.md: the sweep beside the law's
run at batch 256).

Writes OUT/sweep.md (L0, c, alpha, R^2 and A_L - C_L at the deepest stationary depth against
eta_eff / B, with c predicted from gradient noise beside the fitted c) and
OUT/figures/sweep.png (R_L - L0 against L, one curve per setting): `noise_report.write_sweep_report`.
"""

from absl import app, flags

from inverse_depth.report import noise_report

_OUT = flags.DEFINE_string("out", None, "Directory for sweep.md and figures/.", required=True)
_WORKDIRS = flags.DEFINE_list("workdirs", None, "Finished constant-rate runs.", required=True)


def main(argv):
  del argv
  print(f"Report: {noise_report.write_sweep_report(_OUT.value, _WORKDIRS.value)}")


if __name__ == "__main__":
  app.run(main)
