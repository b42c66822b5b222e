"""Table 2: the linear model on the easy task (top-1 copy), seven spectra.

    python -m experiments.run --config=experiments/configs/table2.py --workdir=runs/table2

Depths 1, 2, 4, 8 (`cpu`; 1..16 at `paper`), fit R_L = c L^-alpha (L0 = 0), beside
zeta = (a + b - 1)/a (repeated updates) and 2 zeta (free covariance polynomial,
`theory.jacobi_optimal_risk`). What it should show: alpha between zeta and 2 zeta.
"""

from experiments.configs import tables


def get_config(tier: str = "cpu"):
  config = tables.base(tier, "linear", "top1", 1, tables.TABLE2_SPECTRA)
  config.model_overrides.linear.depths = (1, 2, 4, 8) if tier == "cpu" else (1, 2, 4, 8, 16)
  return config
