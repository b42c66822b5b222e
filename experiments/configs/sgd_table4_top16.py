"""Table 4 (top-16 part) in the SGD law's regime: the fitted exponents of (0, 0.25), (0, 0.5),
(0.25, 0.25) and (0.25, 0.5) beside the paper's 0.79, 0.88, 0.81, 0.81.

    python -m experiments.run --config=experiments/configs/sgd_table4_top16.py \
        --workdir=runs/sgd_table4_top16

regimes.SGD_LAW with the query/key start at the top-16 optimum's temperature (scale 0.39,
regimes.SGD_QK_SCALE), `cpu` tier of tables.sgd_law_base (depths 1..32, 2 seeds, 12000 steps).
"""

from experiments.configs import tables


def get_config(argument: str | None = None):
  return tables.sgd_law_base(tables.parse_sgd_tier(argument), 16, tables.TABLE4_TOP16_SPECTRA)
