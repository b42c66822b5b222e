"""Table 1: the floor of both models on the difficult task (top-2), seven spectra.

    python -m experiments.run --config=experiments/configs/table1.py --workdir=runs/table1

One grid per model kind holds every spectrum, seed and depth. Softmax (d = 16, P = 128):
depths 1..32, 2 seeds at the `cpu` tier; its fitted floor L0 is compared with the paper's
and with `theory.softmax_bound` (best single cosine-attention layer, best mixture).
Linear (d = 128, P = 1024): depths 1, 2, 4; its plateau is compared with the paper's and
with `theory.linear_floor` (Table 3). What it should show: every softmax floor within a
few percent of the single-layer optimum and far below the linear floor, and the linear
loss flat in depth. Runtime on 2 CPU cores (`cpu`): see README "Reproducing the paper".
Table 5 (gap fit of L0 - C_L) is computed from this run's softmax records.
"""

from experiments.configs import tables


def get_config(argument: str | None = None):
  tier = tables.parse_tier(argument)
  return tables.base(tier, "softmax,linear", "topk", 2, tables.TABLE1_SPECTRA)
