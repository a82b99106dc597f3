"""The rollout backend protocol: what the engine needs from a model server.

A backend samples continuations of token-id prompts for many live trajectories in one call and
returns the sampled ids with their log-probs. It also owns the tokenizer side of the chat
template (render messages to text, encode template text, decode for display), because the
template belongs to the model, never to the framework.

Weight sync with the trainer: ``load_weights(state_dict)`` copies new policy weights in place
(the transformers backend may also simply share the trainer's ``torch.nn.Module``, in which case
``load_weights`` is a no-op by identity). ``score(sequences, temperature)`` recomputes per-token
log-probs with a forward pass; the auditor and PPO-style trainers use it. Backends that cannot
score (remote API models) raise :class:`NotImplementedError` there.

Sessions (optional): a backend that keeps each trajectory's KV cache between turns implements
:class:`SessionBackend`: ``generate`` then also takes ``sessions`` (one hashable key or None per
prompt) and ``release_session(key)`` frees one. The engine names one session per trajectory and
releases it when the trajectory ends. A session is only a hint: the backend reuses a cache only for
the leading tokens that equal the ones it cached, so the samples never depend on it.

Continuous batching (optional): a backend implementing :class:`ContinuousBackend` opens a
:class:`RunningBatch` per rollout run. The engine adds a trajectory's prompt the moment its
environment answers and calls ``step()`` (one decode step for every row) in between, so nobody waits
for a whole batch to finish; ``step`` returns the replies that finished. Sampled ids and log-probs
obey the same contract as ``generate``.

Capabilities are declared, never guessed: a plugin registers a :class:`BackendCapabilities` beside
its factory (``register(name, factory, capabilities=...)``; :func:`capabilities_of` reads it; none
declared means "loads its own model, receives weights through ``load_weights``"). The trainer's
defaults follow from them, never from the backend's name. A factory that declares
``shares_trainer_module`` is called as ``factory(options, model=module, tokenizer=tokenizer)`` when
the trainer has a live module to lend, and then samples from the trainer's own weights.

LoRA: a backend that declares ``lora_adapters`` takes the adapter tensors alone in ``load_weights`` after
each update. One that keeps its own base model needs the adapters' shape before the first sync; its
options class then has a ``lora`` field, which the trainer fills from ``model.lora`` (r, alpha, dropout,
target_modules; None when LoRA is off), as it fills ``model`` from ``model.path``.

Closing (optional): a backend that holds more than memory -- a decode thread, a server process, a GPU
engine -- implements :class:`ClosableBackend`; whoever made it calls :func:`close_backend` once it is done
(a rollout worker when it closes, an evaluation or fine-tuning run at its end), so nothing it started
outlives the run.

What sampling runs on (optional): a backend may have a ``sampling_setup`` property, a dict of names
to strings (the transformers backend: ``device``, ``dtype``, ``decode_engine``, ``attention_kernel``,
chosen at start-up; vLLM: what its workers chose; an API backend: the server), and the trainer writes
each entry once, as ``rollout/<name>``, into the first training line of ``metrics.jsonl``, so a run's
metrics say which kernels produced them. Where several engines sample (Ray's rollout workers, vLLM
replicas), :func:`merge_sampling_setups` says each value once, or each engine's where they differ.

Plugins register a factory ``make_backend(config) -> RolloutBackend`` through
``agentgym_register_rollout_backends``; :func:`agentgym_core.testing.check_backend` checks one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Hashable, Iterator, Mapping, Sequence
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

_B = TypeVar("_B")

__all__ = [
    "BackendCapabilities", "ClosableBackend", "ContinuousBackend", "capabilities_of", "close_backend",
    "closing_backend", "generate_with_batch", "merge_sampling_setups", "RolloutBackend", "RunningBatch",
    "RowSeeds", "Sample", "SamplingParams", "SessionBackend", "row_seed",
]


class BackendCapabilities(BaseModel):
    """What a backend can do, declared by its plugin where it registers the factory (``capabilities=``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    shares_trainer_module: bool = Field(
        False, description="Can sample from the trainer's own torch module (factory takes model=, tokenizer=); "
        "then no weights are copied after an update.")
    token_level: bool = Field(
        True, description="Samples token ids with log-probs (trainable); False: text in, text out (evaluation only).")
    sessions: bool = Field(False, description="Keeps a trajectory's KV cache between turns (SessionBackend).")
    continuous_batching: bool = Field(
        False, description="Prompts join a running decode batch (ContinuousBackend.open_batch).")
    weight_sync: Literal["shared_module", "load_weights", "none"] = Field(
        "load_weights", description="How new policy weights arrive: the shared module itself, "
        "load_weights(state_dict) after each update, or not at all (API models).")
    expandable_segments: bool = Field(
        True, description="Works under PyTorch's CUDA allocator with expandable segments, which the trainer then "
        "turns on; False where the backend's own memory pool refuses them.")
    lora_adapters: bool = Field(
        False, description="load_weights takes a LoRA policy's adapter tensors alone (peft's names) and applies "
        "them to its base model, so several learner ranks training LoRA send only the adapters.")
    constrain_actions: bool = Field(
        False, description="Its running batch takes each reply's available actions (RunningBatch.add's actions=) "
        "and samples the reply's action from them alone (SamplingParams.constrain_actions).")


def capabilities_of(declared: Any) -> BackendCapabilities:
    """The capabilities a backend declares (``Registration.declared("capabilities")``; the defaults when it
    declares none)."""
    if declared is None:
        return BackendCapabilities()
    if not isinstance(declared, BackendCapabilities):
        raise TypeError(f"a rollout backend declared capabilities={declared!r}: it must be an "
                        f"agentgym_core.rollout.backend.BackendCapabilities, got {type(declared).__name__}")
    return declared


class SamplingParams(BaseModel):
    """How replies are sampled; one set per generation call."""

    model_config = ConfigDict(extra="forbid")

    temperature: float = Field(
        default=1.0, ge=0.0, description="Softmax temperature; 0 = greedy (log-probs then at temperature 1)."
    )
    top_p: float = Field(default=1.0, gt=0.0, le=1.0, description="Nucleus sampling mass; 1 disables it.")
    top_k: int = Field(default=0, ge=0, description="Keep only the k most likely tokens; 0 disables it.")
    max_new_tokens: int = Field(default=256, ge=1, description="Per-turn cap on sampled tokens.")
    stop: list[str] = Field(
        default_factory=list, description="Stop strings; sampling of a reply ends once its text contains one."
    )
    seed: int | None = Field(
        default=None,
        description="Seed of one batch: each reply draws from its own stream, seeded by this, its row's key and "
        "turn (row_seed), so the same seed replays the same samples.",
    )
    constrain_actions: bool = Field(
        default=False,
        description="Once a reply has written 'Action:', sample only tokens that continue one of the actions the "
        "environment lists (RunningBatch.add's actions=), then the end of the reply "
        "(agentgym_core.rollout.action_choices). Needs a backend declaring constrain_actions.",
    )
    guarantee_action: bool = Field(
        default=True,
        description="With constrain_actions: a reply may not end before it has written 'Action:', and is given "
        "the marker when its budget runs low, so every reply names a listed action (evaluations). Training "
        "rollouts turn it off, so that a reply without the marker is refused and the policy learns to write it.",
    )

    @property
    def logprob_temperature(self) -> float:
        """The temperature the recorded log-probs refer to (1 for greedy decoding)."""
        return self.temperature if self.temperature > 0 else 1.0


class Sample(BaseModel):
    """One sampled reply."""

    token_ids: list[int] = Field(description="Sampled ids, including the end-of-turn token if produced.")
    logprobs: list[float] = Field(description="log p(token) under log_softmax(logits / temperature).")
    finish_reason: Literal["eos", "stop_string", "length"] = Field(description="Why sampling ended.")


@runtime_checkable
class RolloutBackend(Protocol):
    """What the rollout engine calls. See the module docstring for the contract."""

    name: str
    eos_token_ids: frozenset[int]

    def apply_chat_template(self, messages: Sequence[Mapping[str, str]], *, add_generation_prompt: bool,
                            tools: Sequence[Mapping[str, Any]] | None = None) -> str:
        """Render messages with the model's own chat template, as text (special tokens as text); ``tools``
        (JSON schemas) go to the template's ``tools=``. Optional: a backend without the argument gets tools
        described in the system message instead (:class:`~agentgym_core.rollout.chat.ChatFormat`)."""
        ...

    def encode(self, text: str) -> list[int]:
        """Tokenize template text without adding BOS/EOS (the template already holds them)."""
        ...

    def decode(self, token_ids: Sequence[int]) -> str:
        """Text of token ids, special tokens kept (for display and stop strings; never re-encoded)."""
        ...

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams,
        *,
        max_new_tokens: Sequence[int] | None = None,
    ) -> list[Sample]:
        """Sample one reply per prompt (one batched call); ``max_new_tokens`` caps each further."""
        ...

    def score(self, sequences: Sequence[Sequence[int]], *, temperature: float = 1.0) -> list[list[float]]:
        """Per-token log-probs by a forward pass: entry i is log p(seq[i] | seq[:i]); entry 0 is 0.0."""
        ...

    def load_weights(self, state_dict: Mapping[str, Any]) -> None:
        """Replace the policy weights (the trainer's state dict, same parameter names)."""
        ...


@runtime_checkable
class SessionBackend(RolloutBackend, Protocol):
    """A backend that keeps per-trajectory KV caches between turns (see the module docstring)."""

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams,
        *,
        max_new_tokens: Sequence[int] | None = None,
        sessions: Sequence[Hashable | None] | None = None,
    ) -> list[Sample]:
        """As :meth:`RolloutBackend.generate`; row i reuses and then keeps the cache of ``sessions[i]``."""
        ...

    def release_session(self, session: Hashable) -> None:
        """Free what is kept for ``session`` (no-op when nothing is)."""
        ...


@runtime_checkable
class RunningBatch(Protocol):
    """Replies being sampled together; prompts join between decode steps (see the module docstring)."""

    @property
    def active(self) -> int:
        """Replies queued or decoding."""
        ...

    def add(self, key: Hashable, prompt: Sequence[int], *, max_new_tokens: int, session: Hashable | None = None) -> None:
        """Queue a prompt; its reply comes out of a later ``step`` under ``key``. A backend declaring
        ``constrain_actions`` also takes ``actions=`` (the reply's available actions; see SamplingParams)."""
        ...

    def step(self) -> list[tuple[Hashable, Sample]]:
        """Admit queued prompts, sample one token for every row; returns ``(key, reply)`` of finished rows."""
        ...

    def close(self) -> None:
        """Abandon whatever is still decoding."""
        ...


@runtime_checkable
class ContinuousBackend(SessionBackend, Protocol):
    """A session backend that can also run one decode batch that prompts join while it decodes."""

    def open_batch(self, params: SamplingParams) -> RunningBatch:
        """A new, empty running batch sampling with ``params``."""
        ...


@runtime_checkable
class ClosableBackend(Protocol):
    """A backend that frees what it started (threads, processes, engines) when its maker is done with it."""

    def close(self) -> None:
        """Stop and free what the backend started. Calling it twice is harmless."""
        ...


def close_backend(backend: object) -> None:
    """Close ``backend`` if it is a :class:`ClosableBackend`; any other backend has nothing to free."""
    if isinstance(backend, ClosableBackend):
        backend.close()


@contextlib.contextmanager
def closing_backend(backend: _B) -> Iterator[_B]:
    """``with closing_backend(make_backend(...)) as backend:``: :func:`close_backend` when the block exits."""
    try:
        yield backend
    finally:
        close_backend(backend)


def row_seed(seed: int, key: Hashable, turn: int) -> int:
    """The sampling seed of one reply: a pure function of the batch seed, the row's key and how many
    replies that key asked for before (its turn), never of the order rows joined a batch.

    Every backend that seeds rows derives the seed here, so a trajectory gets the same seed whatever
    backend, worker or rank samples it. Keys are ints or tuples of ints (the rollout engine's episode
    numbers), whose hash is the same in every process.
    """
    return hash((seed, key, turn)) & (2**63 - 1)


class RowSeeds:
    """Hands out :func:`row_seed` for each reply a running batch adds (None when the batch is unseeded)."""

    def __init__(self, seed: int | None) -> None:
        self.seed = seed
        self._turns: dict[Hashable, int] = {}  # key -> replies it asked for so far (a new stream per turn)

    def next(self, key: Hashable) -> int | None:
        """The seed of ``key``'s next reply."""
        turn = self._turns.get(key, 0)
        self._turns[key] = turn + 1
        return None if self.seed is None else row_seed(self.seed, key, turn)


def generate_with_batch(
    backend: ContinuousBackend,
    prompts: Sequence[Sequence[int]],
    params: SamplingParams,
    *,
    max_new_tokens: Sequence[int] | None = None,
    sessions: Sequence[Hashable | None] | None = None,
) -> list[Sample]:
    """``generate`` for a backend whose native call is the running batch: every prompt joins one
    batch, which steps until all replies are done (row i of the result is prompt i's reply)."""
    caps = list(max_new_tokens) if max_new_tokens is not None else [params.max_new_tokens] * len(prompts)
    keys = list(sessions) if sessions is not None else [None] * len(prompts)
    if not len(caps) == len(keys) == len(prompts):
        raise ValueError(f"generate: {len(prompts)} prompts, {len(caps)} token caps, {len(keys)} sessions")
    batch = backend.open_batch(params)
    try:
        for i, (prompt, cap, key) in enumerate(zip(prompts, caps, keys, strict=True)):
            batch.add(i, prompt, max_new_tokens=int(cap), session=key)
        out: dict[Hashable, Sample] = {}
        while batch.active:
            out.update(batch.step())
    finally:
        batch.close()
    return [out[i] for i in range(len(prompts))]


def merge_sampling_setups(setups: Sequence[Mapping[str, str]], *, engine: str = "worker") -> dict[str, str]:
    """One ``sampling_setup`` for several engines: a value they all share once, else every engine's value
    beside its index (``"cuda:0 (worker 0), cpu (worker 1)"``), so one that fell back to another device or
    kernel shows in the run's metrics. An engine that does not name a key counts as ``-`` for it."""
    names = dict.fromkeys(name for setup in setups for name in setup)
    merged = {}
    for name in names:
        values = [str(setup.get(name, "-")) for setup in setups]
        merged[name] = values[0] if len(set(values)) == 1 else ", ".join(
            f"{value} ({engine} {i})" for i, value in enumerate(values))
    return merged
