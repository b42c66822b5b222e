"""Table 1's softmax floors (and Table 5's gap fits) in the SGD law's regime.

    python -m experiments.run --config=experiments/configs/sgd_table1.py --workdir=runs/sgd_table1

Softmax, top-2, the seven Table 1 spectra, regimes.SGD_LAW (tables.sgd_law_base): depths
1..32, 2 seeds, 12000 steps, losses averaged over the last 16 evaluations at the `cpu` tier;
`:paper` for depths to 256. The fitted floor L0 of each spectrum beside the paper's and
`theory.softmax_bound`; every fit record carries the gap fit of L0 - C_L (Table 5).

Committed (results/sgd_tables/table1/): the stationary state, regimes.SGD_STATIONARY, 2 seeds,
500 L steps per depth (tables.py): `:stationary` (depths 1..16, 8000 steps) and
`:stationary_deep` (depth 32, 16000 steps), each split in two spectrum groups by
--config.problem.spectra (four runs of 35-55 min, two at a time on 2 cores), joined by
experiments.join_runs (the commands: results/README.md).
"""

from experiments.configs import tables


def get_config(argument: str | None = None):
  return tables.sgd_law_base(tables.parse_sgd_tier(argument), 2, tables.TABLE1_SPECTRA)
