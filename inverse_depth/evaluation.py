"""Held-out evaluation of a trained grid: per-layer predictions and diagnostics on a shared
set of contexts, one results.json run record per model, outlier flags and the paired
differences of consecutive depths.

Which diagnostics (diagnostics.py) a model kind gets is decided once, by `diagnostics_of`;
the evaluator computes exactly those, chunk by chunk, combines the chunks as
`CHUNK_COMBINATION` says, and writes each into the run records.
"""

import jax
import jax.numpy as jnp
import numpy as np

from inverse_depth import analysis, diagnostics, hosts, models, modules, tasks
from inverse_depth.config import GridSpec
from inverse_depth.train import GridTrainer

MODEWISE = "modewise"  # mode-wise loss: kinds whose prediction is linear in the labels
SELECTION = "selection"  # selection error of the mean attention row: kinds with query rows
CONTEXT_ATTENTION = "context_attention"  # the first layer's S_1 and its rho fit
M_PROFILE = "m_profile"  # loss along the learned context step m, and m g_2 / g_1
SCORING_GEOMETRY = "scoring_geometry"  # each layer's score form: temperature, anisotropy


def diagnostics_of(model: str) -> tuple[str, ...]:
  """The diagnostics computed and recorded for a model kind."""
  return tuple(name for name, applies in (
      (MODEWISE, model in models.LINEAR_IN_LABELS),
      (SELECTION, model in models.TEST_ATTENTION),
      (CONTEXT_ATTENTION, model in models.CONTEXT_ATTENTION),
      (M_PROFILE, model in models.LEARNED_CONTEXT_STEP),
      (SCORING_GEOMETRY, model in models.FIXED_INPUT_SCORING)) if applies)


# How a diagnostic's per-chunk values make the evaluation set's: "mean" for means over a
# chunk's contexts (weighted by the chunk's size), "concat" for per-context values (context
# axis last), "first" for one context's picture.
CHUNK_COMBINATION = dict(modewise_loss="mean", modewise_zero_loss="mean",
                         beta_averaged_loss="concat",
                         selection_error="concat", context_attention_trace="concat",
                         context_attention_square="concat", context_attention_heatmap="first",
                         m_profile_loss="mean")
# Tokens kept of the first context's S_1 for the report's heatmaps (context_updates).
HEATMAP_TOKENS = 32
SELECTION_PERCENTILES = (1, 5, 10, 25, 50, 75, 90, 95, 99)
# Held-out contexts (from the evaluation key) on which each model's own forward pass
# (modules.AttentionModel, the token-by-token form) is run at the final parameters, for the
# identity R = C + (A - C)/L that can fail (checks.identity_from_forward).
FORWARD_IDENTITY_CONTEXTS = 512


def combine_chunks(per_chunk: list[dict], counts: list[float]) -> dict:
  """One dict of diagnostics over all chunks (`counts`: contexts per chunk)."""
  combined = {}
  for name in per_chunk[0] if per_chunk else ():
    values = [chunk[name] for chunk in per_chunk]
    how = CHUNK_COMBINATION[name]
    if how == "mean":
      combined[name] = sum(c * v for c, v in zip(counts, values)) / sum(counts)
    elif how == "concat":
      combined[name] = np.concatenate(values, axis=-1)
    else:
      combined[name] = values[0]
  return combined


def uniform_attention_loss(mean_label, target) -> float:
  """Loss of the best predictor g * mean_i(y_i) (per context: `mean_label`, `target`): what a
  model on the uniform-attention plateau achieves.
  min_g E[(g ybar - y*)^2] = E[y*^2] - E[y* ybar]^2 / E[ybar^2]."""
  mean_label, target = np.asarray(mean_label, np.float64), np.asarray(target, np.float64)
  return float(np.mean(target ** 2) - np.mean(target * mean_label) ** 2 / np.mean(mean_label ** 2))


# Jitted once per shape and task (the exponents are traced), shared by every spectrum and grid.
_sample_contexts = jax.jit(tasks.sample_contexts, static_argnames=("d", "P", "task", "k"))
_context_rotations = jax.jit(jax.vmap(tasks.context_rotation, in_axes=(0, None)),
                             static_argnums=1)


class GridEvaluator:
  """Held-out predictions and diagnostics of a trained grid (the models of `trainer`).

  A *view* is a reported model: the packed layers whose mean predictor it is (one grid
  model, or the first L one-layer models of an ensemble control).
  """

  def __init__(self, trainer: GridTrainer):
    self.trainer = trainer
    self.problem = trainer.problem
    self.diagnostic_names = diagnostics_of(trainer.model)
    self._layer_predictions = models.LAYER_PREDICTIONS[trainer.model]
    self._diagnose = jax.jit(self._chunk_diagnostics, out_shardings=trainer.replicated)

  def _chunk_diagnostics(self, params, batch: tasks.Batch, rotations_BDD: jax.Array,
                         group: jax.Array, view_weights_VT: jax.Array) -> dict:
    """The kind's diagnostics on one batch of a group's spectrum, per seed and view (a view's
    prediction is sum_t view_weights_VT[v, t] f_t): mode-wise losses [seeds, V, D], the
    zero predictor's [D] and the loss averaged over beta per context [seeds, V, B];
    selection errors [seeds, V, B]; the first layer's tr S_1 and |S_1|_F^2 [seeds, M, B]
    and S_1 of the batch's first context, first HEATMAP_TOKENS tokens
    [seeds, M, HEATMAP_TOKENS, HEATMAP_TOKENS]."""
    model, layout = self.trainer.model, self.trainer.layout
    seed_params = self.trainer.group_params(params, group)
    spectrum = jnp.asarray([j for j, _ in self.trainer.groups])[group]
    out = {}
    if MODEWISE in self.diagnostic_names:
      omega_D = tasks.power_spectrum(self.problem.d,
                                     jnp.asarray(self.problem.spectra, jnp.float32)[spectrum, 1])

      def modewise(p):
        weights_VBP = diagnostics.prediction_weights(self._layer_predictions, p, batch, layout,
                                                     view_weights_VT)
        return diagnostics.modewise_losses(weights_VBP, batch, rotations_BDD, omega_D)

      losses_SVD, zero_loss_SD, beta_averaged_SVB = jax.vmap(modewise)(seed_params)
      out.update(modewise_loss=losses_SVD, modewise_zero_loss=zero_loss_SD[0],
                 beta_averaged_loss=beta_averaged_SVB)
    if SELECTION in self.diagnostic_names:
      attention = models.TEST_ATTENTION[model]
      selected_BK = tasks.selected_indices(batch, self.problem.num_selected)
      out["selection_error"] = jax.vmap(lambda p: diagnostics.selection_errors(
          attention(p, batch, layout), selected_BK, view_weights_VT))(seed_params)
    if CONTEXT_ATTENTION in self.diagnostic_names:
      attention_SMBPP = jax.vmap(lambda p: models.CONTEXT_ATTENTION[model](p, batch, layout))(
          seed_params)
      trace_SMB, square_SMB = diagnostics.attention_moments(attention_SMBPP)
      out.update(context_attention_trace=trace_SMB, context_attention_square=square_SMB,
                 context_attention_heatmap=attention_SMBPP[:, :, 0, :HEATMAP_TOKENS,
                                                           :HEATMAP_TOKENS])
    return out

  def evaluate(self, params, key: jax.Array, size: int, chunk_size: int, group: int,
               views: list[slice], diagnostic_size: int):
    """Evaluation of one group's seeds (trainer.groups) on sample_contexts(split(key, size))
    of its spectrum, drawn and evaluated chunk by chunk so that only one chunk of contexts
    is in memory (at d = 128, P = 1024 the whole set would not be).

    Returns per-layer predictions [seeds, T, E], targets [E], context mean labels [E], and
    the diagnostics of every view (`views`: slices of packed layers) on the first whole
    chunks covering `diagnostic_size` contexts (`_chunk_diagnostics`; with M_PROFILE also
    the loss with m moved by each of diagnostics.M_OFFSETS [seeds, V, offsets]), with
    `contexts`, how many contexts they cover.
    """
    trainer, problem = self.trainer, self.problem
    a, b = problem.spectra[trainer.groups[group][0]]
    keys = jax.random.split(key, size)
    weights_VT = diagnostics.view_weights(trainer.layout.total_layers, views)
    preds, targets, mean_labels, per_chunk, counts = [], [], [], [], []
    for start in range(0, size, chunk_size):
      chunk_keys = keys[start:start + chunk_size]
      chunk = _sample_contexts(chunk_keys, d=problem.d, P=problem.P, a=a, b=b,
                               task=problem.task, k=problem.k)
      preds.append(trainer.predict(params, chunk, chunk_size, group))
      targets.append(np.asarray(chunk.target_B, np.float64))
      mean_labels.append(np.asarray(chunk.y_context_BP, np.float64).mean(axis=1))
      if start < diagnostic_size:
        found = jax.tree.map(np.asarray, self._diagnose(
            params, chunk, _context_rotations(chunk_keys, problem.d), group, weights_VT))
        if M_PROFILE in self.diagnostic_names:
          found["m_profile_loss"] = diagnostics.loss_along_m(
              lambda moved: trainer.predict(moved, chunk, len(chunk_keys), group), params,
              chunk.target_B, weights_VT)
        per_chunk.append(found)
        counts.append(float(len(chunk_keys)))
    found = dict(combine_chunks(per_chunk, counts), contexts=int(sum(counts)))
    return (np.concatenate(preds, axis=-1), np.concatenate(targets),
            np.concatenate(mean_labels), found)

  def _member_params(self, params, replicate: int, members: list[int]) -> list[tuple]:
    """(model leaves, layer leaves [depth, ...]) of each member of one replicate, in numpy."""
    replicate_params = jax.tree.map(lambda x: hosts.to_host(x[replicate]), params)
    return [self.trainer.layout.model_params(replicate_params, member) for member in members]

  def diagnostic_fields(self, found: dict, params, replicate: int, seed_index: int,
                        view: int, members: list[int]) -> dict:
    """Run-record fields of the kind's diagnostics for one view of one seed (`members`: the
    grid models the view is made of; the first layer's S_1 is the first member's)."""
    fields = {}
    if M_PROFILE in self.diagnostic_names:  # the learned context step m of each member
      member_params = self._member_params(params, replicate, members)
      fields["m"] = float(np.mean([model["m"] for model, _ in member_params]))
      fields["m_effective"] = float(np.mean([diagnostics.effective_context_step(model)
                                             for model, _ in member_params]))
    if SCORING_GEOMETRY in self.diagnostic_names:  # from the parameters alone
      fields.update(diagnostics.scoring_geometry([
          (model["W_x"], W_q, W_k)
          for model, layers in self._member_params(params, replicate, members)
          for W_q, W_k in zip(layers["W_q"], layers["W_k"])]))
    if not found["contexts"]:  # diagnostic_size = 0: nothing else was computed
      return fields
    if MODEWISE in self.diagnostic_names:
      per_context = found["beta_averaged_loss"][seed_index, view].astype(np.float64)
      fields.update(modewise_loss=found["modewise_loss"][seed_index, view].tolist(),
                    modewise_zero_loss=found["modewise_zero_loss"].tolist(),
                    beta_averaged_loss=float(per_context.mean()),
                    beta_averaged_loss_se=float(per_context.std(ddof=1)
                                                / np.sqrt(per_context.size))
                    if per_context.size > 1 else float("nan"))
    if SELECTION in self.diagnostic_names:
      errors = found["selection_error"][seed_index, view]
      fields.update(selection_error_mean=float(errors.mean()),
                    selection_error_percentiles=dict(zip(
                        (str(q) for q in SELECTION_PERCENTILES),
                        np.percentile(errors, SELECTION_PERCENTILES).tolist())))
    if CONTEXT_ATTENTION in self.diagnostic_names:  # S_1 ~ rho I + (1 - rho) 11^T/P
      first = members[0]
      fit = diagnostics.uniform_mixture_fit(found["context_attention_trace"][seed_index, first],
                                            found["context_attention_square"][seed_index, first],
                                            self.problem.P)
      fields.update(first_layer_rho=fit["rho"], first_layer_rho_r2=fit["r2"],
                    first_layer_attention=np.round(
                        found["context_attention_heatmap"][seed_index, first], 5).tolist())
    if M_PROFILE in self.diagnostic_names:
      fields["m_profile"] = dict(offsets=list(diagnostics.M_OFFSETS),
                                 loss=found["m_profile_loss"][seed_index, view].tolist())
    return fields

  def forward_identity(self, params, eval_key: jax.Array, group: int, replicate: int,
                       depth: int, member: int) -> dict:
    """One grid model on FORWARD_IDENTITY_CONTEXTS held-out contexts: R from its
    own forward output z_L (modules.AttentionModel, readout=True) and A, C from the packed
    layer predictors f_l of the trainer, which share no code with it."""
    trainer, problem = self.trainer, self.problem
    a, b = problem.spectra[trainer.groups[group][0]]
    size = FORWARD_IDENTITY_CONTEXTS
    batch = _sample_contexts(jax.random.split(eval_key, size), d=problem.d, P=problem.P, a=a,
                             b=b, task=problem.task, k=problem.k)
    target = np.asarray(batch.target_B, np.float64)
    seed = replicate - group * len(trainer.seeds)
    layers = trainer.layout.layer_slice(member)
    layer_preds_TB = trainer.predict(params, batch, size, group)[seed, layers]
    parts = analysis.decompose(layer_preds_TB, target)
    module = modules.AttentionModel(kind=trainer.model, depth=depth, d=problem.d, N=trainer.N,
                                    loop_group=trainer.layout.loop_group)
    output_B = module.apply(modules.variables(*self._member_params(params, replicate, [member])[0]),
                            batch, readout=True)
    forward_loss = float(np.mean((np.asarray(output_B, np.float64) - target) ** 2))
    return dict(forward_eval_loss=forward_loss,
                forward_identity=dict(contexts=size, A=parts["A"], C=parts["C"]))

  def run_records(self, spec: GridSpec, state, eval_key: jax.Array, group: int, views,
                  bound: dict | None, window_params: list | None = None
                  ) -> tuple[list[dict], list[dict]]:
    """One results.json run record per (seed, view) model of one group (a spectrum and a
    learning rate: trainer.groups), from held-out predictions, and the paired differences of
    consecutive views (`paired_differences`).

    `views` lists, per reported depth L, the packed layers whose predictors form the model
    (a slice) and the trained grid models they belong to (for the bookkeeping fields).
    `window_params` (oldest first, the last being `state.params`) are the parameters at the
    evaluations to average (spec.stationary_steps): R, A, C, the per-context squared errors
    behind the paired differences and the loss's standard error are time averages over
    them, and each model records the window's `stationarity` (analysis.stationarity). The
    diagnostics and the ensemble's member check use the final parameters.
    """
    spectrum, _ = self.trainer.groups[group]
    a, b = spec.problem.spectra[spectrum]
    window_params = window_params or [state.params]
    num_seeds, num_views = len(spec.seeds), len(views)
    parts_WSV = np.empty((len(window_params), num_seeds, num_views), dtype=object)
    squared_errors_SVE = 0.0
    for w, params in enumerate(window_params):
      last = w == len(window_params) - 1
      layer_preds_STE, target_E, mean_label_E, window_found = self.evaluate(
          params, eval_key, spec.eval.eval_size, spec.eval.eval_chunk_size, group,
          [layers for _, layers, _ in views], spec.eval.diagnostic_size if last else 0)
      squared_errors_SVE = squared_errors_SVE + np.stack([
          [(layer_preds_STE[s, layers].astype(np.float64).mean(axis=0) - target_E) ** 2
           for _, layers, _ in views] for s in range(num_seeds)]) / len(window_params)
      for s in range(num_seeds):
        for i, (_, layers, _) in enumerate(views):
          parts_WSV[w, s, i] = analysis.decompose(layer_preds_STE[s, layers], target_E)
      if last:
        found = window_found
    uniform_loss = uniform_attention_loss(mean_label_E, target_E)
    references = depth_references(bound, spec.depths)
    replicates = slice(group * len(spec.seeds), (group + 1) * len(spec.seeds))  # its seeds
    if spec.ensemble:  # one-layer members (member m is packed layer m), judged as models are
      members_STE = layer_preds_STE[:, :self.trainer.num_models]  # not a padding model's
      member_loss_ST = ((members_STE.astype(np.float64) - target_E) ** 2).mean(axis=-1)
      live_ST = (~np.asarray(state.diverged_SM)[replicates, :self.trainer.num_models]
                 & np.isfinite(member_loss_ST))  # a diverged member is nobody's peer
      median = float(np.median(member_loss_ST[live_ST])) if live_ST.any() else np.inf
      member_limit = spec.eval.outlier_factor * min(median, references.get(1, np.inf))
    runs = []
    for s, seed in enumerate(spec.seeds):
      replicate = replicates.start + s
      for i, (depth, layers, members) in enumerate(views):
        window = [parts_WSV[w, s, i] for w in range(len(window_params))]
        parts = {name: float(np.mean([p[name] for p in window])) for name in window[0]}
        window_fields = {}
        if len(window) > 1:
          window_fields = dict(
              window_eval_losses=[p["R"] for p in window], final_eval_loss=window[-1]["R"],
              stationarity=analysis.stationarity([p["R"] for p in window],
                                                 spec.eval.stationarity_z))
        forward_fields = {}
        if len(members) == 1 and depth == self.trainer.layout.depths[members[0]]:
          forward_fields = self.forward_identity(state.params, eval_key, group, replicate,
                                                 depth, members[0])
        ensemble_fields = {}
        if spec.ensemble:
          ensemble_fields["outlier_members"] = [
              dict(member=m, loss=float(member_loss_ST[s, m]), limit=member_limit)
              for m in members if member_loss_ST[s, m] > member_limit]
        runs.append(dict(
            model=spec.label, task=spec.problem.task, k=spec.problem.k, a=a, b=b,
            d=spec.problem.d, P=spec.problem.P, N=spec.N, depth=depth, seed=seed,
            learning_rate=self.trainer.group_learning_rates[group],
            eval_loss=parts["R"],
            eval_loss_se=float(squared_errors_SVE[s, i].std() / np.sqrt(target_E.size)),
            A=parts["A"], C=parts["C"], disagreement=parts["disagreement"],
            identity_residual=parts["identity_residual"],
            diverged=bool(state.diverged_SM[replicate, members].any()),
            diverged_at_step=int(state.diverged_at_step_SM[replicate, members].max()),
            converged=bool(state.converged_SM[replicate, members].all()),
            steps=int(state.steps_trained_SM[replicate, members].max()),
            final_lr_scale=float(state.lr_scale_SM[replicate, members].mean()),
            uniform_attention_loss=uniform_loss,
            on_plateau=bool(parts["R"] > analysis.UNIFORM_PLATEAU_FRACTION * uniform_loss),
            target_second_moment=float(np.mean(target_E ** 2)),
            parameters=models.parameter_count(spec.model, depth, d=spec.problem.d, N=spec.N,
                                              loop_group=spec.loop_group),
            diagnostic_contexts=found["contexts"], **ensemble_fields, **window_fields,
            **forward_fields,
            **self.diagnostic_fields(found, state.params, replicate, s, i, members)))
    flag_outliers(runs, references, spec.eval.outlier_factor)
    clean_SV = np.array([analysis.is_clean(r) for r in runs]).reshape(len(spec.seeds),
                                                                      len(views))
    return runs, paired_differences([L for L, _, _ in views], squared_errors_SVE, clean_SV)


def depth_references(bound: dict | None, depths) -> dict:
  """The theory reference the models of each depth are judged against ({} without a bound).

  softmax kinds: the best single cosine-attention layer at every depth. linear: the floor
  of the depth-L covariance polynomial, T - h_:L^T G_:L,:L^+ h_:L; the moments that
  `theory.linear_floor` returns for the deepest polynomial contain every shallower one.
  """
  if bound is None:
    return {}
  if bound["kind"] != "linear_floor":
    return {L: bound["reference"] for L in depths}
  h_R, G_RR = np.asarray(bound["h"]), np.asarray(bound["G"])
  return {L: float(bound["T"] - h_R[:L] @ np.linalg.pinv(G_RR[:L, :L]) @ h_R[:L])
          for L in depths}


# A loss below this fraction of E[y*^2] counts as solved (the copy task): its ratio to its
# peers' losses says nothing about training.
SOLVED_FRACTION = 1e-3


def flag_outliers(runs: list[dict], references: dict, factor: float) -> None:
  """Sets `flagged` (and `flag_reason`) on each run record in place.

  A model is flagged when its loss exceeds `factor` x the median loss of the other seeds at
  its depth (unless the loss is below SOLVED_FRACTION x E[y*^2]), or `factor` x the theory
  reference of its depth (`depth_references`), or when its held-out loss was not stationary
  over the averaging window (`stationarity`), or when it averages one-layer models of which
  one is an outlier by the same rule (`outlier_members` of an ensemble control: a member above
  `factor` x the median of all members or x the depth-1 reference). Flagged models are kept
  out of the means, the fits and the monotonicity check; the report names them. A model that
  is not marked diverged but whose held-out loss is not finite is flagged for that, and is
  nobody's peer.
  """
  for run in runs:
    peers = [p["eval_loss"] for p in runs if p is not run and p["depth"] == run["depth"]
             and not p["diverged"] and np.isfinite(p["eval_loss"])]
    reference = references.get(run["depth"])
    solved = run["eval_loss"] <= SOLVED_FRACTION * run["target_second_moment"]
    reasons = []
    if not run["diverged"] and not np.isfinite(run["eval_loss"]):
      reasons.append(f"its held-out loss is {run['eval_loss']}")
    if not run["diverged"] and peers and not solved and run["eval_loss"] > factor * float(
        np.median(peers)):
      reasons.append(f"{run['eval_loss']:.4g} > {factor:g} x the median of the other seeds at "
                     f"its depth ({float(np.median(peers)):.4g})")
    if not run["diverged"] and reference is not None and run["eval_loss"] > factor * reference:
      reasons.append(f"{run['eval_loss']:.4g} > {factor:g} x the theory bound ({reference:.4g})")
    window = run.get("stationarity")
    if not run["diverged"] and window is not None and not window["stationary"]:
      reasons.append(f"not stationary over its last {window['evals']} evaluations (halves "
                     f"{window['first_half']:.4g} -> {window['second_half']:.4g}, "
                     f"{window['half_z']:.1f} se; slope {window['slope_z']:.1f} se)")
    for member in run.get("outlier_members", []):
      reasons.append(f"its one-layer member {member['member']} is an outlier "
                     f"({member['loss']:.4g} > {member['limit']:.4g})")
    run["flagged"] = bool(reasons)
    run["flag_reason"] = "; ".join(reasons)


def paired_differences(depths, squared_errors_SVE: np.ndarray, clean_SV: np.ndarray) -> list:
  """R_L - R_L' of consecutive depths on the shared evaluation set (axis V: one view per
  depth, in the order of `depths`), with its standard error over contexts: per context the
  squared-error difference averaged over the seeds where both models are clean, then mean
  and std / sqrt(contexts). Seed-to-seed spread (which one stuck seed inflates) does not
  enter."""
  out = []
  for i in range(1, len(depths)):
    both = clean_SV[:, i] & clean_SV[:, i - 1]
    if not both.any():
      out.append(dict(depth=depths[i], previous=depths[i - 1], difference=float("nan"),
                      se=float("nan"), seeds=0))
      continue
    per_context = (squared_errors_SVE[both, i] - squared_errors_SVE[both, i - 1]).mean(axis=0)
    out.append(dict(depth=depths[i], previous=depths[i - 1],
                    difference=float(per_context.mean()),
                    se=float(per_context.std() / np.sqrt(per_context.size)),
                    seeds=int(both.sum())))
  return out
