"""Table 3 (with Table 1's linear grids): the linear floor, theory against trained, top-16.

    python -m experiments.run --config=experiments/configs/table3.py --workdir=runs/table3

Linear model, difficult task with k = 16, spectra (1, 0) (paper: theory 0.448, trained
0.445) and (0, 0). The combined report's Table 3 lists these beside the seven k = 2
linear grids of table1.py and the paper's two other k = 2 rows (table3_top2.py): eleven
settings, `theory.linear_floor` (with its standard error) against the trained plateau.
"""

from experiments.configs import tables


def get_config(tier: str = "cpu"):
  return tables.base(tier, "linear", "topk", 16, ((1.0, 0.0), (0.0, 0.0)))
