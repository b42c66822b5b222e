"""Table 3, the paper's own k = 2 rows that Table 1 does not cover: the linear floor,
theory against trained, at (a, b) = (0.5, 0.5) and (1, 0.25).

    python -m experiments.run --config=experiments/configs/table3_top2.py --workdir=runs/table3_top2

Linear model, difficult task with k = 2 (paper: (0.5, 0.5) theory 2.27, trained 2.33;
(1, 0.25) theory 1.225). The combined report's Table 3 lists these beside table1.py's
seven k = 2 linear grids and table3.py's two k = 16 grids: eleven settings, four of them
with a value quoted by the paper. About 6 minutes on 2 CPU cores (3 of them the two
theory floors).
"""

from experiments.configs import tables


def get_config(argument: str | None = None):
  tier = tables.parse_tier(argument)
  return tables.base(tier, "linear", "topk", 2, ((0.5, 0.5), (1.0, 0.25)))
