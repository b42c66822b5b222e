"""The paper's published numbers (docs/sizes.md): references to compare with, never
used to produce a result."""

from inverse_depth.analysis import model_kind

# Table 1: fitted floor L0 on the top-2 task, by (a, b).
TABLE1_L0 = {
    "softmax": {(0.0, 0.0): 2.007, (0.0, 0.25): 1.268, (0.0, 0.5): 0.836, (0.0, 1.0): 0.424,
                (0.25, 0.0): 1.255, (0.5, 0.0): 0.798, (1.0, 0.0): 0.341},
    "linear": {(0.0, 0.0): 59.853, (0.0, 0.25): 23.055, (0.0, 0.5): 9.766, (0.0, 1.0): 2.504,
               (0.25, 0.0): 22.962, (0.5, 0.0): 9.501, (1.0, 0.0): 2.120},
}


def table1_floor(model: str, task: str, k: int, a: float, b: float) -> float | None:
  """The paper's fitted L0 for this grid, or None where Table 1 has no entry."""
  if task != "topk" or k != 2:
    return None
  return TABLE1_L0.get(model_kind(model), {}).get((float(a), float(b)))


# Table 2: linear model, easy task: measured depth exponent, by (a, b) (zeta and 2 zeta are
# theory.zeta's).
TABLE2_ALPHA = {(2.0, 0.5): 1.121, (2.0, 1.0): 1.485, (2.0, 1.5): 1.684, (2.0, 2.0): 1.987,
                (0.5, 2.0): 3.310, (1.0, 2.0): 2.552, (1.5, 2.0): 2.163}

# Table 3: linear floor, theory T - h^T G^+ h against trained, by (k, a, b); the entries the
# paper's text quotes (docs/sizes.md, issue 8).
TABLE3_FLOOR = {(2, 0.0, 0.0): dict(theory=59.37, trained=59.85),
                (2, 0.5, 0.5): dict(theory=2.27, trained=2.33),
                (2, 1.0, 0.25): dict(theory=1.225, trained=None),
                (16, 1.0, 0.0): dict(theory=0.448, trained=0.445)}

# Table 4: softmax fitted depth exponent alpha, by (k, a, b), every fit with R^2 >= TABLE4_MIN_R2.
TABLE4_ALPHA = {(2, 0.25, 0.25): 0.97, (2, 0.25, 0.5): 0.93, (2, 0.5, 0.5): 0.97,
                (16, 0.0, 0.25): 0.79, (16, 0.0, 0.5): 0.88, (16, 0.25, 0.25): 0.81,
                (16, 0.25, 0.5): 0.81}
TABLE4_MIN_R2 = 0.998

# Table 5: gap fit L0 - C_L = c L^-alpha, softmax, the seven Table 1 spectra: alpha range.
TABLE5_ALPHA_RANGE = (0.977, 0.994)


# What the paper says about each appendix C variant (docs/sizes.md), shown beside our numbers.
APPENDIX_C_STATEMENTS = {
    "single_stream": "keeps an approximately inverse-depth trend (C.1)",
    "per_layer_values": "keeps an approximately inverse-depth trend (C.2)",
    "context_updates": "keeps the trend at top-2, saturates at top-16 with m near -2.3 (C.3)",
    "looped": "open question in the paper's discussion: does weight tying keep the averaging "
              "benefit with fewer parameters?",
    "softmax": "the controlled model: R_L = L0 + c L^-alpha with alpha near 1",
}


# The paper's words on each appendix C claim, as FINDINGS quotes them (claims.APPENDIX_C keys).
APPENDIX_C_WORDS = {"C.1": "similar scaling signals", "C.2": "similar scaling signals",
                    "C.3 top-2": "keeps an inverse-depth trend",
                    "C.3 top-16": "loses it (m near -2.3)",
                    "looped": "an open question: loss against depth and parameters"}


def appendix_c_trend(model: str, k: int) -> str | None:
  """What the paper says of a grid's depth trend in appendix C: "law" (approximately inverse
  depth: the controlled model, C.1, C.2, C.3 at top-2), "saturates" (the trend is lost: C.3 at
  top-16, with m near -2.3) or None (no claim: looped layers, C.3 at other k)."""
  if model == "looped":
    return None
  if model == "context_updates":
    return {2: "law", 16: "saturates"}.get(k)
  return "law"


def span(values) -> str:
  """'low ... high' of a set of the paper's numbers, as FINDINGS quotes them."""
  values = list(values)
  return f"{min(values):g} ... {max(values):g}"
