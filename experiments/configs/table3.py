"""Table 3 (with Table 1's linear grids): the linear floor, theory against trained, top-16.

    python -m experiments.run --config=experiments/configs/table3.py --workdir=runs/table3

Linear model, difficult task with k = 16, spectra (1, 0) (paper: theory 0.448, trained
0.445) and (0, 0). The combined report's Table 3 lists these beside the seven k = 2
linear grids of table1.py and the paper's two other k = 2 rows (table3_top2.py): eleven
settings, `theory.linear_floor` (with its standard error) against the trained plateau.

The linear grid trains 1200 steps here, not the tier's 300: at k = 16 (0, 0) a depth-4
model stops 2.4% above the depth-1 and depth-2 ones at 300 steps and joins them (within
0.3%) at 1200. About 5 minutes on 2 CPU cores either way (the theory bounds and compilation
dominate).
"""

from experiments.configs import tables


def get_config(argument: str | None = None):
  tier = tables.parse_tier(argument)
  config = tables.base(tier, "linear", "topk", 16, ((1.0, 0.0), (0.0, 0.0)))
  linear = config.model_overrides.linear
  linear.train.max_steps = max(linear.train.max_steps, 1200)
  return config
