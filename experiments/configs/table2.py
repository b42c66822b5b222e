"""Table 2: the linear model on the easy task (top-1 copy), seven spectra.

    python -m experiments.run --config=experiments/configs/table2.py --workdir=runs/table2

Depths 1, 2, 4, 8 (`cpu`; 1..16 at `paper`), fit R_L = c L^-alpha (L0 = 0), beside
zeta = (a + b - 1)/a (repeated updates) and 2 zeta (free covariance polynomial,
`theory.jacobi_optimal_risk`). What it should show: alpha between zeta and 2 zeta.
Measured at `cpu` (results/reproduce/table2, 15 min on 2 shared cores): all seven
between, 6-14% below the paper's.

The start is the paper's repeated-update construction: every gain W_o W_v^j W_y = 1
(`value_init = "identity"`) and query/key scale sqrt(d L), so a depth-L model starts as
L unit steps of gradient descent on the context. From the scale-6 start of Table 1 every
depth ended at the depth-1 optimum (alpha ~ 0; results/table2_random_start).
"""

import math

from experiments.configs import tables


def get_config(tier: str = "cpu"):
  config = tables.base(tier, "linear", "top1", 1, tables.TABLE2_SPECTRA)
  config.model_overrides.linear.depths = (1, 2, 4, 8) if tier == "cpu" else (1, 2, 4, 8, 16)
  config.value_init = "identity"
  config.qk_init_depth_exponent = 1.0
  config.model_overrides.linear.qk_init_scale = math.sqrt(config.sizes.linear.d)
  return config
