"""Table 4 (top-16 part) in the SGD law's regime: the fitted exponents of (0, 0.25), (0, 0.5),
(0.25, 0.25) and (0.25, 0.5) beside the paper's 0.79, 0.88, 0.81, 0.81.

    python -m experiments.run --config=experiments/configs/sgd_table4_top16.py \
        --workdir=runs/sgd_table4_top16

regimes.SGD_LAW with the query/key start at the top-16 optimum's temperature (scale 0.39,
regimes.SGD_QK_SCALE), `cpu` tier of tables.sgd_law_base (depths 1..32, 2 seeds, 12000 steps).

Committed (results/sgd_tables/table4_top16/): the stationary tiers, regimes.SGD_STATIONARY, 2
seeds, `:stationary` (depths 1..16, 8000 steps, 76 min) and `:stationary_deep` (depth 32,
16000 steps, 91 min), side by side on 2 cores, joined by experiments.join_runs (commands:
results/README.md). At top-16 the slow drift does not grow with depth, so 500 L steps per
depth is not enough here (docs/notes/sgd_tables.md).
"""

from experiments.configs import tables


def get_config(argument: str | None = None):
  return tables.sgd_law_base(tables.parse_sgd_tier(argument), 16, tables.TABLE4_TOP16_SPECTRA)
