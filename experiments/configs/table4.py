"""Table 4 (top-2 part): softmax depth exponents with both exponents non-zero.

    python -m experiments.run --config=experiments/configs/table4.py --workdir=runs/table4

Softmax, k = 2, spectra (0.25, 0.25), (0.25, 0.5), (0.5, 0.5): fitted alpha with its
standard error and R^2 beside the paper's 0.97, 0.93, 0.97. The top-16 part is
table4_top16.py.
"""

from experiments.configs import tables


def get_config(argument: str | None = None):
  tier = tables.parse_tier(argument)
  return tables.base(tier, "softmax", "topk", 2, tables.TABLE4_TOP2_SPECTRA)
