"""What every metric in ``metrics.jsonl`` means: one table, read by the docs and by the viewer.

The docs page "What a run logs" is generated from :data:`METRICS` (``scripts/docs_reference.py``,
reference ``metrics``), grouped as the viewer groups its charts; the viewer shows the same text as
each chart's tooltip. ``tests/agentgym_core/viewer/test_metric_docs.py`` runs a short training and
an evaluation and fails on any key they write that no entry here matches: a new metric is added
here, where its writer's reviewer will look for it.

A name may hold placeholders: ``<env>`` (an environment's name), ``<server>`` (``s0``, ``s1``: a
server's position in the env's ``urls``) and ``<phase>`` (empty, ``_rollout`` or ``_update``). A
key ``<env>/<name>`` that no entry names is ``<name>`` over that environment's trajectories only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

__all__ = ["METRICS", "MetricDoc", "describe", "lookup", "undocumented", "undocumented_message"]


@dataclass(frozen=True)
class MetricDoc:
    """One metric: its name, what it measures, its healthy range and what to do outside it."""

    name: str
    meaning: str
    healthy: str = ""
    action: str = ""
    writer: str = "trainer"
    """``trainer`` (training lines), ``evaluation`` (evaluation lines and ``agentgym eval``), ``both``,
    ``server`` (the environment servers' counters, logged by the trainer) or ``fine-tuning``."""


METRICS: tuple[MetricDoc, ...] = (
    # ---- outcomes: what a reader opens the page for ----------------------------------------------------
    MetricDoc("success", "Share of the step's trajectories that reached the task's goal.",
              "Rising over steps; on a fresh task anywhere above 0.",
              "Stuck at 0 for many steps: no group has a success to learn from. Shorten the tasks, raise "
              "rollout.group_size or start from a fine-tuned model (how-to: fine-tune).", "both"),
    MetricDoc("reward", "Mean episode reward (the sum of a trajectory's turn rewards, averaged).",
              "Rising with success; its scale is the environment's.",
              "Rising while success is flat: the policy found reward the goal does not need (check the "
              "environment's shaping).", "both"),
    MetricDoc("invalid_action_rate", "Share of turns whose action the environment refused (could not parse or "
              "apply); only for environments that say so.",
              "Falling towards 0 in the first steps.",
              "Rising: the policy drifts from the action format. Set algorithm.invalid_action_penalty, check the "
              "prompt's format instructions, or lower the learning rate.", "both"),
    MetricDoc("turns", "Mean number of turns a trajectory took.", "At or below horizon; falls as the policy "
              "learns shorter solutions.", "Always equal to horizon: episodes are cut off, not finished "
              "(see truncated).", "both"),
    MetricDoc("horizon", "The turn budget of this step, set by the round scheduler (ScalingInter).",
              "Steps up on the scheduler's plan.", "", "both"),
    MetricDoc("truncated", "Trajectories cut off by the turn or token budget before the episode ended.",
              "Small once the policy learns; many at a short horizon is expected.",
              "Most trajectories: raise the horizon (algorithm.rounds_ctrl) or rollout.max_total_tokens.", "both"),
    MetricDoc("failed", "Trajectories that ended in an environment failure (server error, timeout), not a "
              "policy failure; they are not trained on.", "0.",
              "Above 0 every step: look at the env servers' errors (pool/<env>/<server>/errors) and logs.", "both"),
    # ---- the rollout side -----------------------------------------------------------------------------
    MetricDoc("trajectories", "Trajectories sampled this step (tasks x group size, all rounds).", "Constant.", ""),
    MetricDoc("trained_trajectories", "Trajectories the update trained on (those left after "
              "algorithm.drop_zero_advantage and failures).", "Close to trajectories.",
              "Far below it: many groups are tied (all succeed or all fail), so they carry no advantage. "
              "Use rollout.dynamic_sampling or a curriculum (rollout.curriculum)."),
    MetricDoc("skipped_update", "1 when no trajectory had a non-zero advantage, so the step made no optimizer "
              "step.", "0.", "Often 1: every group is tied. Raise rollout.group_size, use dynamic sampling, or "
              "pick tasks of middle difficulty."),
    MetricDoc("advantage_abs_mean", "Mean absolute advantage over the sampled tokens.",
              "Above 0; falls when groups tie.", "Near 0: zero-advantage groups dominate, the update learns "
              "nothing (see trained_trajectories)."),
    MetricDoc("sampled_tokens", "Tokens the policy sampled this step (the loss mask's ones).", "", ""),
    MetricDoc("generation_calls", "Calls to the rollout backend's generate this step.", "", ""),
    MetricDoc("infra_failed", "Trajectories lost to environment failures this step (after re-runs).", "0.",
              "Above 0: an env server fails; see pool/<env>/<server>/errors, rollout.rerun_failed."),
    MetricDoc("reruns", "Failed episodes sampled again this step (rollout.rerun_failed).", "0, or rare.",
              "Every step: a server is flaky; look at its logs and errors."),
    MetricDoc("failed_after_reruns", "Episodes still failed after their re-runs.", "0.",
              "Above 0: a server fails repeatedly; take it out of the env's urls."),
    MetricDoc("staleness_mean", "Mean policy versions between the weights that sampled a trajectory and the "
              "weights it trains (asynchronous rollouts).", "At most rollout.max_staleness; 0 when synchronous.",
              "At the maximum every step: the learner waits on nothing and the samples are old; watch sampler_kl."),
    MetricDoc("staleness_max", "Largest such lag this step.", "At most rollout.max_staleness.", ""),
    MetricDoc("sampling_rounds", "Rounds of sampling this step (rollout.dynamic_sampling).", "1 or 2.",
              "Always max_rounds: too few groups are mixed; pick easier or harder tasks."),
    MetricDoc("mixed_groups", "Groups whose samples' environment rewards differ (a success and a failure, or "
              "rewards of different size): the groups a group-relative estimator learns the task from. Logged "
              "every step.", "A good share of sampled_groups; at least rollout.dynamic_sampling.min_mixed_groups "
              "when that is on.", "A small share: the other groups teach nothing about the task (only "
              "algorithm.invalid_action_penalty's charges, if on, tell them apart). Use rollout.curriculum, "
              "rollout.dynamic_sampling or larger groups; the run's summary names a run under a quarter."),
    MetricDoc("sampled_groups", "Groups sampled this step, over all of its rounds.", "", ""),
    MetricDoc("rollout_worker_restarts", "Ray rollout workers restarted this step.", "0.",
              "Above 0: a worker died (out of memory, a crash); read its Ray log."),
    MetricDoc("rollout_worker_restarts_total", "Ray rollout workers restarted since the run began.", "0.", ""),
    MetricDoc("curriculum/<env>/expected_mixed", "The chance that a group drawn now is mixed, from the "
              "curriculum's pass rates (rollout.curriculum).", "Above 0.5.",
              "Low: most categories are solved or hopeless; add tasks of middle difficulty."),
    MetricDoc("curriculum/<env>/categories_weighted", "Categories the curriculum draws above its floor.", "", ""),
    MetricDoc("rollout/attention_kernel", "The attention kernel the rollout backend chose at start-up (sdpa, "
              "flash_attention_2, flash_attention_3; vLLM's backend names, e.g. FLASH_ATTN); text on the run's first "
              "training line (not charted).",
              "A flash kernel on a GPU with the flash-attn package and the library decode engine; sdpa elsewhere.",
              "sdpa where you expected flash: install flash-attn where the rollouts run and set "
              "rollout.backend_options.decode_engine to library."),
    MetricDoc("rollout/decode_engine", "Who decodes the rollout batch, as the backend says it (transformers: own or "
              "library; vllm <version>; vllm serve; an openai-compatible server); text on the first training line.",
              "", ""),
    MetricDoc("rollout/device", "The device the rollout backend samples on; text on the first training line.",
              "The GPU you meant (cuda:0, ...).", "cpu where you meant a GPU: check model.device."),
    MetricDoc("rollout/server", "The server an API backend (openai) samples through, and the model it asks for; "
              "text on the first training line.", "", ""),
    MetricDoc("rollout/dtype", "The dtype of the weights the rollout backend samples with; text on the first "
              "training line.", "", ""),
    # ---- the update: what the policy step is judged by ------------------------------------------------
    MetricDoc("pg_loss", "The clipped policy-gradient loss of the update (mean over its optimizer steps).",
              "Small, around 0, noisy; its sign carries no news.",
              "Large and growing: advantages are badly scaled or the learning rate is too high."),
    MetricDoc("kl_loss", "KL penalty of the policy to the reference model, as in the loss "
              "(algorithm.kl).", "Small and slowly rising.", "Rising fast: raise algorithm.kl.coef or lower the "
              "learning rate."),
    MetricDoc("sft_replay_loss", "Mean negative log-likelihood of the warm start's examples replayed in the "
              "update (warm_start.replay), before its coefficient.", "Low and flat: RL keeps what SFT taught.",
              "Rising: RL is unlearning the warm start; raise warm_start.replay.coef."),
    MetricDoc("kl", "KL of the policy to the reference model over the sampled tokens (0 without a reference).",
              "Slowly rising, well below 1.", "Jumps: the policy moves fast; lower optim.lr."),
    MetricDoc("value_loss", "The critic's value loss (algorithm.critic, GAE).", "Falling, then flat.",
              "Rising: lower the critic's learning rate or raise vf_coef."),
    MetricDoc("clip_frac", "Share of sampled tokens whose probability ratio the PPO clip cut (outside "
              "1 +/- clip_low/clip_high).", "0 with one optimizer step per batch; below 0.2 with several.",
              "Near 1: the policy moved far from the one that sampled; lower optim.lr, ppo_epochs or mini_batches."),
    MetricDoc("dual_clip_frac", "Share of negative-advantage tokens whose loss the dual clip capped "
              "(algorithm.clip_ratio_c).", "Near 0.", "Rising: ratios explode on bad tokens; lower the learning rate."),
    MetricDoc("approx_kl", "KL between the update's policy and the one that computed the old log-probs "
              "(how far the step moved it).", "Below about 0.02.", "Larger: lower optim.lr or the epochs."),
    MetricDoc("entropy", "Mean entropy of the policy over the sampled tokens.", "Falls slowly.",
              "Collapses to 0 early: the policy stopped exploring; raise the temperature or entropy_coef. Rises "
              "steadily: the policy degenerates; lower the learning rate."),
    MetricDoc("rollout_logprob_gap", "Mean |log-prob of the learner - log-prob of the sampler| over the sampled "
              "tokens.", "Near 0 (below 0.01 when both run the same precision).",
              "Large: the sampler is not the learner (weights not synced, another chat template, another "
              "precision); see sampler_kl."),
    MetricDoc("sampler_kl", "KL estimate from the sampler's token distribution to the learner's on the sampled "
              "tokens.", "Below algorithm.off_policy.warn_kl (0.05); the run stops past stop_kl (0.5).",
              "Above warn_kl: check the weight sync (weight_sync_gap), the chat template and the backends' "
              "precisions; raise stop_kl only once you know why (how-to: off-policy)."),
    MetricDoc("sampler_kl/<env>", "sampler_kl over the tokens of one environment's trajectories, or of one "
              "rollout worker's (sampler_kl/worker0, worker1: a learner rank's or a Ray actor's backend).",
              "Below warn_kl, like sampler_kl.",
              "One group far above the others: that environment's chat template, or that worker's weight sync, "
              "differs from the learner's."),
    MetricDoc("sampler_kl_worst", "The largest of the step's sampler_kl/<env> and sampler_kl/worker<i>; the "
              "mismatch stop reads it, so one broken environment is not diluted by the others.",
              "Below warn_kl (0.05); the run stops past stop_kl (0.5).",
              "Past stop_kl: the step trained nothing and the run stopped; see sampler_kl/<env> for where."),
    MetricDoc("mismatch_stopped", "1 on the step whose sampler/learner mismatch passed stop_kl: its update "
              "was skipped and the run stopped after writing this line.", "Absent.",
              "See sampler_kl_worst and the run's last message for the group and the likely causes."),
    MetricDoc("mismatch_skipped_update", "1 when the update measured the mismatch itself "
              "(algorithm.old_logprobs=current) and skipped its optimizer step past stop_kl.", "Absent or 0.",
              "As mismatch_stopped."),
    MetricDoc("sampler_ratio_mean", "Mean importance ratio learner / sampler over the sampled tokens.",
              "1.", "Far from 1: see sampler_kl."),
    MetricDoc("sampler_ratio_max", "Largest such ratio.", "Below algorithm.off_policy.cap.",
              "Far above it: a few tokens disagree badly; see sampler_kl."),
    MetricDoc("sampler_ratio_over_cap", "Share of sampled tokens whose ratio passes algorithm.off_policy.cap "
              "(cut by the correction).", "0.", "Above a few percent: the correction throws signal away; "
              "see sampler_kl."),
    MetricDoc("weight_sync_gap", "Log-prob difference on a probe prompt between the learner and the rollout "
              "backend after a weight sync (rollout.sync_check_tolerance).", "Below the tolerance.",
              "Above: the weights did not reach the backend; the run stops."),
    # ---- the optimizer --------------------------------------------------------------------------------
    MetricDoc("lr", "The learning rate of this step (optim.lr and its schedule).", "The schedule's.", "", "both"),
    MetricDoc("grad_norm", "Gradient norm before clipping (algorithm.max_grad_norm), mean over the "
              "optimizer steps.", "Stable; below max_grad_norm most steps.",
              "Spikes or steady growth: lower the learning rate; NaN: the run diverged.", "both"),
    MetricDoc("critic_grad_norm", "The critic's gradient norm before clipping.", "Stable.", ""),
    MetricDoc("optimizer_steps", "Optimizer steps this update (ppo_epochs x mini_batches).", "Constant.", ""),
    MetricDoc("update_tokens", "Tokens the update's forward and backward passes covered.", "", ""),
    # ---- time and memory ------------------------------------------------------------------------------
    MetricDoc("time_step", "Wall seconds of the whole step.", "Steady.", "Growing: see time_rollout and "
              "update_seconds for which side.", "both"),
    MetricDoc("time_rollout", "Wall seconds of sampling.", "", ""),
    MetricDoc("time_generation", "Seconds the rollout backend spent generating.", "", ""),
    MetricDoc("time_env", "Seconds spent waiting on environment steps, summed over trajectories.", "",
              "Close to time_rollout: the environments are the bottleneck; add servers or instances."),
    MetricDoc("update_seconds", "Wall seconds of the policy update.", "", ""),
    MetricDoc("update_tokens_per_s", "Tokens the update processed per second.", "", ""),
    MetricDoc("weight_sync_seconds", "Seconds to gather, cast and load the new weights into the rollout backend.",
              "", ""),
    MetricDoc("weight_sync_bytes", "Bytes the learner sent in a weight sync.", "", ""),
    MetricDoc("weight_sync_bytes_<name>", "Bytes the rollout backend took over one transport (vLLM server "
              "mode: http, in the requests; files) for the weights this step sampled with, summed over workers.",
              "http: no weight file is written.", "files where you expect http: the replicas lack the worker "
              "extension's http method (see the vLLM backend's README)."),
    MetricDoc("peak_rss<phase>_gb", "Peak resident memory of the process in GB (rollout, update, or the "
              "evaluation).", "Below the machine's memory.", "Near it: see how-to: several GPUs / memory keys.",
              "both"),
    MetricDoc("peak_gpu<phase>_gb", "Peak GPU memory reserved by PyTorch in GB.", "Below the GPU's memory.",
              "Near it: lower algorithm.micro_batch_tokens or turn on activation checkpointing.", "both"),
    MetricDoc("peak_gpu_allocated<phase>_gb", "Peak GPU memory allocated to tensors in GB.", "", "", "both"),
    # ---- the environment servers ----------------------------------------------------------------------
    MetricDoc("pool/<env>/<server>/steps_per_s", "Environment steps the server answered per second of the "
              "rollout.", "Similar across servers.", "One server far slower: it is overloaded or remote.",
              "server"),
    MetricDoc("pool/<env>/<server>/errors", "Calls the server failed to answer this step.", "0.",
              "Above 0: read the server's log; failed episodes are re-run (rollout.rerun_failed).", "server"),
    MetricDoc("pool/<env>/<server>/instances", "Environment instances placed on the server this step.",
              "Balanced across servers.", "", "server"),
    MetricDoc("pool/<env>/<server>/down", "1 when the pool marked the server down at the end of the step.", "0.",
              "1: the server stopped answering; the pool routes around it.", "server"),
    # ---- evaluation only ------------------------------------------------------------------------------
    MetricDoc("tasks", "Held-out tasks the evaluation played (each trainer.eval_samples times).",
              "Constant (trainer.eval_tasks per environment).", "", "evaluation"),
    MetricDoc("samples_per_task", "Episodes played per held-out task (trainer.eval_samples); above 1, success and "
              "per_task are each task's success rate over its samples (Avg@K).", "Constant.", "", "evaluation"),
    MetricDoc("temperature", "Sampling temperature of the held-out evaluation (rollout.eval_temperature; 0 = "
              "greedy).", "Constant.", "", "evaluation"),
    MetricDoc("wall_seconds", "How long the evaluation took, start to end, in seconds.", "", "Far longer than "
              "an earlier evaluation of the same panel: the machine was busy, or trainer.eval_samples grew.",
              "evaluation"),
    MetricDoc("per_task", "Success per env:task (not charted; agentgym compare pairs evaluations by it).", "", "",
              "evaluation"),
    MetricDoc("panel_hash", "Hash of the evaluated task ids: equal hashes, equal tasks (not charted).", "",
              "Differs between runs you compare: they evaluated different tasks.", "evaluation"),
    # ---- fine-tuning --------------------------------------------------------------------------------
    MetricDoc("loss", "The fine-tuning loss (SFT: token negative log-likelihood; DPO: the preference loss).",
              "Falling, then flat.", "Flat from the start: the learning rate is too low; rising: too high.",
              "fine-tuning"),
    MetricDoc("accuracy", "DPO: share of pairs where the policy prefers the chosen answer more than the reference "
              "does.", "Rising above 0.5.", "", "fine-tuning"),
    MetricDoc("margin", "DPO: mean reward margin of chosen over rejected.", "Rising.", "", "fine-tuning"),
    MetricDoc("reward_chosen", "DPO: implicit reward of the chosen answers.", "", "", "fine-tuning"),
    MetricDoc("reward_rejected", "DPO: implicit reward of the rejected answers.", "Falling.", "", "fine-tuning"),
    MetricDoc("pairs", "DPO: chosen/rejected pairs in this step's batch.", "", "", "fine-tuning"),
    MetricDoc("sft_nll", "DPO: the SFT term on chosen answers (negative log-likelihood).", "", "", "fine-tuning"),
    MetricDoc("trained_tokens", "SFT: tokens the loss covered this step.", "", "", "fine-tuning"),
    MetricDoc("sequences", "SFT: sequences in this step's batch.", "", "", "fine-tuning"),
    MetricDoc("tokens", "SFT: tokens in this step's batch, prompts included.", "", "", "fine-tuning"),
    MetricDoc("epoch", "SFT: epochs over the data so far.", "", "", "fine-tuning"),
    MetricDoc("round", "Rejection sampling: the round.", "", "", "fine-tuning"),
    MetricDoc("sampled", "Rejection sampling: trajectories sampled this round.", "", "", "fine-tuning"),
    MetricDoc("sample_success", "Rejection sampling: success rate of the samples.", "Rising over rounds.", "",
              "fine-tuning"),
    MetricDoc("tasks_solved", "Rejection sampling: share of the sampled tasks with a kept trajectory.",
              "Rising over rounds.", "", "fine-tuning"),
    MetricDoc("kept", "Rejection sampling: successful trajectories kept this round.", "", "", "fine-tuning"),
    MetricDoc("trained_on", "Rejection sampling: trajectories the round's SFT trained on.", "", "", "fine-tuning"),
    MetricDoc("sft_<name>", "Rejection sampling: the round's SFT metric <name> (sft_loss, ...).", "", "",
              "fine-tuning"),
    MetricDoc("time_round", "Rejection sampling: wall seconds of the round.", "", "", "fine-tuning"),
)

_PLACEHOLDERS = {"<env>": "[^/]+", "<server>": r"s\d+", "<phase>": "(?:_rollout|_update)?", "<name>": ".+"}


@cache
def _patterns() -> list[tuple[re.Pattern[str], MetricDoc]]:
    out = []
    for doc in METRICS:
        pattern = re.escape(doc.name)
        for holder, regex in _PLACEHOLDERS.items():
            pattern = pattern.replace(re.escape(holder), regex)
        out.append((re.compile(pattern + "$"), doc))
    return out


def lookup(key: str) -> MetricDoc | None:
    """The entry of a ``metrics.jsonl`` key, or None when no entry names it."""
    for pattern, doc in _patterns():
        if pattern.match(key):
            return doc
    if "/" in key:  # <env>/<name>: the per-environment breakdown of <name>
        return lookup(key.split("/", 1)[1])
    return None


def undocumented(keys: Iterable[str]) -> list[str]:
    """The keys, but ``step`` and ``kind``, that no entry names (sorted)."""
    return sorted({k for k in keys if k not in ("step", "kind") and lookup(k) is None})


def describe(key: str) -> str | None:
    """One tooltip's text: meaning, healthy range and what to do, for the viewer."""
    doc = lookup(key)
    if doc is None:
        return None
    scope = f"{key.split('/', 1)[0]} only: " if "/" in key and "/" not in doc.name else ""
    parts = [scope + doc.meaning]
    if doc.healthy:
        parts.append(f"Healthy: {doc.healthy}")
    if doc.action:
        parts.append(f"If not: {doc.action}")
    return "\n".join(parts)


def undocumented_message(keys: Iterable[str], written_by: str) -> str:
    """The failure message of a test that found keys no entry names: which, and where to add them."""
    return (f"{written_by} wrote metrics that no entry of METRICS explains: {', '.join(undocumented(keys))}. Add a "
            "MetricDoc(name, meaning, healthy, action, writer) for each to METRICS in "
            "agentgym_core/src/agentgym_core/viewer/metric_docs.py; the docs page 'What a run logs' "
            "(docs/reference/metrics.md) and the viewer's chart tooltips are generated from it.")
