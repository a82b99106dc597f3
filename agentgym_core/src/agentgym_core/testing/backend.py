"""Conformance checker for rollout backends: :func:`check_backend`.

Run it on any object registered through ``agentgym_register_rollout_backends``. It samples short
replies for prompts of different lengths in one batch and checks what the rollout engine and the
trainer rely on: one sample per prompt, per-prompt token caps, ids and log-probs of equal length,
finish reasons that match the tokens, greedy decoding that does not depend on the batch it runs in
(left padding done right), seeded sampling that repeats, and (when the backend can score)
log-probs that a forward pass reproduces. With ``close=True`` it ends by closing a backend that has
``close()`` (:class:`~agentgym_core.rollout.backend.ClosableBackend`) twice, as the trainer's and the
evaluation's exit paths may: both calls must return.
"""

from __future__ import annotations

from agentgym_core.rollout.backend import ClosableBackend, RolloutBackend, SamplingParams
from agentgym_core.rollout.chat import ChatFormat

__all__ = ["BackendCheckError", "check_backend"]


class BackendCheckError(AssertionError):
    """The backend breaks the rollout backend contract; the message says how."""


def _fail(message: str) -> None:
    raise BackendCheckError(message)


def check_backend(backend: RolloutBackend, *, max_new_tokens: int = 8, atol: float = 1e-3, close: bool = False) -> None:
    """Check ``backend`` against the :class:`~agentgym_core.rollout.RolloutBackend` contract
    (``close=True``: and its ``close()``, which leaves it closed)."""
    _check_sampling(backend, max_new_tokens=max_new_tokens, atol=atol)
    if close and isinstance(backend, ClosableBackend):
        for attempt in ("first", "second"):
            try:
                backend.close()
            except Exception as e:  # any failure is the finding
                _fail(f"the {attempt} close() raised {type(e).__name__}: {e} (closing twice must be harmless)")


def _check_sampling(backend: RolloutBackend, *, max_new_tokens: int, atol: float) -> None:
    if not isinstance(backend, RolloutBackend):
        _fail(f"{type(backend).__name__} lacks RolloutBackend methods (see agentgym_core.rollout.backend)")
    if not backend.eos_token_ids or not all(isinstance(t, int) for t in backend.eos_token_ids):
        _fail(f"eos_token_ids must be a non-empty set of ints, got {backend.eos_token_ids!r}")
    chat = ChatFormat(backend)
    chat.probe(with_system=True)  # raises ChatTemplateError if turns cannot be appended incrementally
    prompts = [
        chat.prompt_ids([{"role": "system", "content": "You play a game."}, {"role": "user", "content": "Start."}]),
        chat.prompt_ids([{"role": "user", "content": "Say something about the number seven, please."}]),
        chat.prompt_ids([{"role": "user", "content": "Hi"}]),
    ]
    if len({len(p) for p in prompts}) < 2:
        _fail("the probe prompts should differ in length; the chat template ignores message content?")

    caps = [max_new_tokens, 3, max_new_tokens]
    params = SamplingParams(temperature=1.0, max_new_tokens=max_new_tokens, seed=1234)
    samples = backend.generate(prompts, params, max_new_tokens=caps)
    if len(samples) != len(prompts):
        _fail(f"generate returned {len(samples)} samples for {len(prompts)} prompts")
    for i, (sample, cap) in enumerate(zip(samples, caps, strict=True)):
        ids = sample.token_ids
        if not 1 <= len(ids) <= cap:
            _fail(f"sample {i}: {len(ids)} tokens, expected 1..{cap} (per-prompt max_new_tokens)")
        if len(sample.logprobs) != len(ids):
            _fail(f"sample {i}: {len(ids)} tokens but {len(sample.logprobs)} log-probs")
        if not all(lp <= 0.0 for lp in sample.logprobs):
            _fail(f"sample {i}: a log-prob above 0: {sample.logprobs}")
        if any(t in backend.eos_token_ids for t in ids[:-1]):
            _fail(f"sample {i}: sampling continued after an end-of-turn token: {ids}")
        if sample.finish_reason == "eos" and ids[-1] not in backend.eos_token_ids:
            _fail(f"sample {i}: finish_reason 'eos' but the last token {ids[-1]} is not an EOS id")
        if sample.finish_reason == "length" and len(ids) != cap:
            _fail(f"sample {i}: finish_reason 'length' after {len(ids)} of {cap} tokens")

    again = backend.generate(prompts, params.model_copy(update={"seed": 99}), max_new_tokens=caps)
    repeat = backend.generate(prompts, params.model_copy(update={"seed": 99}), max_new_tokens=caps)
    if [s.token_ids for s in again] != [s.token_ids for s in repeat]:
        _fail("the same seed gave different samples; seeded sampling must repeat")

    greedy = SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens)
    together = backend.generate(prompts, greedy)
    for i, prompt in enumerate(prompts):
        alone = backend.generate([prompt], greedy)[0]
        if alone.token_ids != together[i].token_ids:
            _fail(
                f"greedy reply {i} changes with its batch (alone {alone.token_ids}, batched "
                f"{together[i].token_ids}): padding or attention masking is wrong"
            )

    try:
        scored = backend.score([p + s.token_ids for p, s in zip(prompts, samples, strict=True)], temperature=1.0)
    except NotImplementedError:
        return
    for i, (prompt, sample, row) in enumerate(zip(prompts, samples, scored, strict=True)):
        if len(row) != len(prompt) + len(sample.token_ids):
            _fail(f"score row {i} has {len(row)} entries for {len(prompt) + len(sample.token_ids)} tokens")
        error = max(abs(a - b) for a, b in zip(row[len(prompt):], sample.logprobs, strict=True))
        if error > atol:
            _fail(f"sample {i}: recomputed log-probs differ from the sampling log-probs by {error:.3g} (> {atol:g})")
