"""Table 4 (top-16 part): softmax depth exponents at k = 16.

    python -m experiments.run --config=experiments/configs/table4_top16.py --workdir=runs/table4_top16

Softmax, k = 16, spectra (0, 0.25), (0, 0.5), (0.25, 0.25), (0.25, 0.5): fitted alpha
beside the paper's 0.79, 0.88, 0.81, 0.81.
"""

from experiments.configs import tables


def get_config(argument: str | None = None):
  tier = tables.parse_tier(argument)
  return tables.base(tier, "softmax", "topk", 16, tables.TABLE4_TOP16_SPECTRA)
