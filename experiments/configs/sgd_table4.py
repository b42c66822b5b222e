"""Table 4 (top-2 part) in the SGD law's regime: the fitted exponents of (0.25, 0.25),
(0.25, 0.5) and (0.5, 0.5) beside the paper's 0.97, 0.93, 0.97.

    python -m experiments.run --config=experiments/configs/sgd_table4.py --workdir=runs/sgd_table4

regimes.SGD_LAW at the `cpu` tier of tables.sgd_law_base (depths 1..32, 2 seeds, 12000 steps).
"""

from experiments.configs import tables


def get_config(argument: str | None = None):
  return tables.sgd_law_base(tables.parse_sgd_tier(argument), 2, tables.TABLE4_TOP2_SPECTRA)
