"""The generalised models (paper appendix C) and looped layers in the SGD law's regime, beside
the controlled softmax model of the same run.

    python -m experiments.run --config=experiments/configs/sgd_generalized.py:top2,short \
        --workdir=runs/sgd_generalized_top2_short

The argument is `variant=VARIANT,tier=TIER` (or `VARIANT,TIER`). Variants (VARIANTS): `top2` trains the controlled model,
single stream (C.1) and per-layer values (C.2) on the top-2 task; `looped` the controlled
model and looped layers with every layer's W_q, W_k tied (loop_group 0); `looped4` looped
layers tied in groups of 4 consecutive layers (its untied and fully tied neighbours are
`looped`'s two grids, trained on the same seeds and stream, so identical models);
`single_stream` and `per_layer_values` C.1 and C.2 alone (their controlled model likewise
`looped`'s; at the stationary tiers the single stream trains in SGD_LAW, having no
scale-free |W_x| to hold fixed);
`context_updates` and `context_updates_top16` the controlled model and context updates (C.3)
at top-2 and top-16, C.3 starting from m = -1 (from m = 0 it keeps m near 0:
docs/notes/generalized.md). Tiers are tables.py's SGD tiers (`short`: depths 1..32, one
seed, 6000 steps, the last 12 evaluations averaged; `cpu`: 2 seeds, 12000 steps; `paper`:
to depth 256, 3 seeds) and `short16` (SHORT16: depths 1..16, one seed, 3000 steps, the
last 12 evaluations, 125 steps apart, averaged), C.3's CPU tier.

The regime is sgd_law.py's (regimes.SGD_LAW: SGD, momentum 0.9, constant rate 3e-3, batch
256, query/key started at the identity at the top-k optimum's temperature, stationary
evaluation), isotropic spectrum, d = 16, P = 128, N = 32. The single stream's label
embedding W_y starts at 1/sqrt(d) (generalized.py:single_stream: at 1 the labels outweigh
the inputs in the keys and no depth-1 model trains). Costs on 2 CPU cores at the short
tier, scaled from results/generalized's grid times: about 6 min for the controlled and each
looped grid, 8 min for C.1, 10 min for C.2; C.3 costs many times the controlled model per step
at P = 128 (context attention is P x P): with issue 44's step (`make bench`, science figure)
1.38 s per step for one seed at depths 1..32, batch 256 (2.8 s before), so about 2.3 h at the
short tier alone; at depths 1..16 0.71 s (1.40 s before), so the short16 tier is about 35 min
per C.3 run alone.
"""

from experiments.configs import arguments, regimes, tables
from inverse_depth import config as config_lib

# variant -> (model kinds, k, loop_group)
VARIANTS = {
    "top2": ("softmax,single_stream,per_layer_values", 2, 0),
    "looped": ("softmax,looped", 2, 0),
    "looped4": ("looped", 2, 4),
    # C.1 and C.2 alone: at the stationary tiers their controlled model is `looped`'s (the
    # same seeds and stream make it the same model).
    "single_stream": ("single_stream", 2, 0),
    "per_layer_values": ("per_layer_values", 2, 0),
    "context_updates": ("softmax,context_updates", 2, 0),
    "context_updates_top16": ("softmax,context_updates", 16, 0),
}


# `short16`: the short tier halved in depth and in time (a depth-L model relaxes about L
# times slower under SGD, so depth 16 needs half depth 32's steps), the last 12 evaluations
# (the last half of the run, as at `short`) averaged. C.3's CPU tier.
SHORT16 = dict(depths=(1, 2, 4, 8, 16), max_steps=3000, eval_every=125)
TIERS = tables.SGD_TIERS + ("short16",)


def get_config(argument: str | None = None):
  parsed = arguments.parse(argument, variant=("top2", tuple(VARIANTS)), tier=("short", TIERS))
  variant, tier = parsed.variant, parsed.tier
  model, k, loop_group = VARIANTS[variant]
  config = tables.sgd_law_base("short" if tier == "short16" else tier, k, ((0.0, 0.0),))
  if tier == "short16":
    config_lib.set_fields(config, SHORT16)
  config.grid.model = model
  config.grid.loop_group = loop_group
  # Per kind: the controlled model's W_y keeps the scale that sets its starting gains.
  config.model_overrides.single_stream = dict(
      init=dict(W_y_init_scale=1 / config.grid.sizes.single_stream.d ** 0.5))
  if tier.startswith("stationary") and "single_stream" in model:
    # The single stream has no layer norm on W_x (its loss depends on |W_x|), so there is no
    # scale-free norm for SGD noise to grow and SGD_STATIONARY's one change does not apply:
    # it trains in SGD_LAW at the stationary tiers' budgets, and the drift check says whether
    # it reached its stationary state.
    regimes.apply(config, "sgd_law", model="single_stream")
  config.model_overrides.context_updates = dict(init=dict(context_update_m_init=-1.0))
  return config
