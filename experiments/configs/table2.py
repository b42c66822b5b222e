"""Table 2: the linear model on the easy task (top-1 copy), seven spectra.

    python -m experiments.run --config=experiments/configs/table2.py --workdir=runs/table2

Depths 1, 2, 4, 8 (`cpu`; 1..16 at `paper`), fit R_L = c L^-alpha (L0 = 0), beside
zeta = (a + b - 1)/a (repeated updates) and 2 zeta (free covariance polynomial; the
report also fits the exponent of `theory.optimal_polynomial_risk` at the same d and
depths). What it should show: alpha between zeta and 2 zeta.
Measured at `cpu` (results/reproduce/table2, 18 min on 2 shared cores): all seven
between, 6-14% below the paper's.

The linear model starts as the paper's repeated-update construction (tables.base): a
depth-L model is L unit steps of gradient descent on the context. From the earlier
scale-6 start every depth ended at the depth-1 optimum (alpha ~ 0;
docs/notes/reproduction.md).
"""

from experiments.configs import tables


def get_config(argument: str | None = None):
  tier = tables.parse_tier(argument)
  config = tables.base(tier, "linear", "top1", 1, tables.TABLE2_SPECTRA)
  config.model_overrides.linear.grid.depths = (1, 2, 4, 8) if tier == "cpu" else (1, 2, 4, 8, 16)
  return config
