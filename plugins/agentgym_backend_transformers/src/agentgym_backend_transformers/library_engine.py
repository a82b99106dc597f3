"""The running decode batch on transformers' own continuous-batching engine.

:class:`LibraryBatch` is a :class:`~agentgym_core.rollout.backend.RunningBatch` whose rows are requests
of a ``transformers`` ``ContinuousBatchingManager``: a paged KV cache with prefix sharing, a scheduler
that admits requests as they arrive (no round barrier), and, on a GPU, decode steps replayed through
CUDA graphs. The manager runs its loop in a thread of its own; ``add`` submits a prompt the moment the
environment answers, and ``step`` waits briefly for replies and returns the ones that finished.

What this module keeps from the backend's own engine (:mod:`agentgym_backend_transformers.decoding`),
so the two are interchangeable under the trainer:

* **Sampling.** The library's sampling step is replaced by ours (:func:`_sample`): temperature, top-k,
  top-p as :func:`~agentgym_backend_transformers.decoding.filter_logits` applies them, and the
  counter-based draw (:func:`~agentgym_backend_transformers.decoding.draw_tokens`) from each row's
  own stream, seeded by :func:`~agentgym_core.rollout.backend.row_seed` and counted by the token's
  position. So a reply does not depend on which requests shared its steps, and the same seed draws
  the same tokens on both engines (the library's own ``torch.multinomial`` draws from one stream in
  arrival order). A row's seed reaches the device through the library's per-request
  logits-processor arguments (two int32 words), the channel its CUDA graphs already read.
* **Log-probs.** ``log_softmax(logits / T)`` of the sampled token, before top-k/top-p truncation
  (the library's are after it), so a learner forward reproduces them.
* **Stop strings** (the library has none): requests then stream their tokens, and a request whose
  text contains a stop string is cancelled and returned up to and including the token that completed it.
* **Sessions** need no bookkeeping: a turn's prompt starts with the previous turn's prompt and reply,
  and the paged cache shares every full page a finished request left behind with a later request that
  starts with the same tokens. The manager (:class:`LibraryEngine`) is kept from one batch to the next;
  when the weights changed in between, its cache is emptied first (its buffers and CUDA graphs stay:
  they read the weights in place), so a weight update can never leave pages of old keys behind and
  needs no reload; new sampling settings rebuild it (they are part of its captured sampling step).

Requests are never lost silently: a request the library fails, or a manager thread that dies, raises
from ``step``; ``close`` cancels what was still decoding, and request ids never repeat, so a cancelled
request's late output is never taken for a reply of the next batch.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import types
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from agentgym_backend_transformers.decoding import draw_tokens, filter_logits
from agentgym_core.rollout.backend import RowSeeds, Sample, SamplingParams

if TYPE_CHECKING:
    from agentgym_backend_transformers.backend import TransformersBackend

__all__ = ["LibraryBatch", "LibraryEngine", "library_engine_available"]

log = logging.getLogger(__name__)

WAIT_S = 0.005  # how long ``step`` waits for a reply before handing control back to the engine's loop
_SEED_WORDS = ("agentgym_seed_low", "agentgym_seed_high")


def library_engine_available() -> bool:
    """Whether the installed transformers has the continuous-batching API this module drives."""
    try:
        from transformers import ContinuousBatchingConfig, ContinuousBatchingManager  # noqa: F401
        from transformers.generation.continuous_batching.cb_logits_processors import (  # noqa: F401
            ContinuousBatchingLogitsProcessor,
        )
    except ImportError:
        return False
    return True


def _int32(word: int) -> int:
    """The low 32 bits of ``word`` as a signed int32 (how the library stores per-request arguments)."""
    word &= 0xFFFFFFFF
    return word - (1 << 32) if word >= 1 << 31 else word


def _seed_word_processor(name: str) -> Any:
    """A per-request logits 'processor' that leaves the logits alone and carries one int32 word of each
    request's seed to the device, in the arguments tensor the library fills per batch."""
    from transformers.generation.continuous_batching.cb_logits_processors import (
        ContinuousBatchingLogitsProcessor,
    )

    class SeedWord(ContinuousBatchingLogitsProcessor):
        supported_kwargs = {name: int}
        ignored_kwargs = ()

        def fill_defaults(self, int32_tensor: torch.Tensor) -> None:
            int32_tensor.zero_()

        def prepare_tensor_args(self, requests_with_new_token: list[Any]) -> torch.Tensor:
            words = [r.state.logit_processor_kwargs.get(name, 0) for r in requests_with_new_token]
            return torch.tensor(words, dtype=torch.int32)

        def __call__(self, scores: torch.Tensor, tensor_arg: torch.Tensor) -> torch.Tensor:
            return scores

    return SeedWord()


def _sample(runner: Any, params: SamplingParams, scores: torch.Tensor, output_ids: torch.Tensor) -> None:
    """Our sampling step in place of the library's ``ModelRunner._sample`` (captured into its CUDA graphs).

    scores: (1, N, V) raw float logits of the N rows that sample a token; output_ids: (2, >=N) int32,
    row 0 the tokens, row 1 their log-probs as float32 bits. Reads the batch's positions and seed words
    from the tensors the runner was last handed (:func:`_remember_batch`).
    """
    batch = runner._agentgym_batch
    indices = batch["logits_indices"]  # (N,)
    logits = scores[0] / params.logprob_temperature  # (N, V)
    n = logits.shape[0]
    log_p = torch.log_softmax(logits, dim=-1)
    if params.temperature == 0:
        chosen = logits.argmax(-1)  # (N,)
    else:
        words = batch["logits_processor_args"][-2:, :n].long() & 0xFFFFFFFF  # (2, N)
        seeds = (words[1] << 32) | words[0]  # (N,)
        counters = batch["position_ids"][0, indices[:n]].long() + 1  # the position of the token drawn (int64: the hash)
        probs = filter_logits(logits, params.top_k, params.top_p).softmax(-1)
        chosen = draw_tokens(probs, seeds, counters)
    output_ids[0, :n].copy_(chosen)
    output_ids[1, :n].copy_(log_p.gather(-1, chosen[:, None]).squeeze(-1).float().view(torch.int32))


def _remember_batch(runner: Any, forward: Any) -> Any:
    """Wrap the runner's forward-and-sample so :func:`_sample` sees the batch tensors it runs on."""

    def wrapped(self: Any, model: Any, batch_data: dict, *args: Any) -> None:
        self._agentgym_batch = batch_data
        return forward(model, batch_data, *args)

    return types.MethodType(wrapped, runner)


def _manager_class() -> type:
    from transformers import ContinuousBatchingManager

    class SeededManager(ContinuousBatchingManager):
        """The library's manager with our sampling step, the backend's kernel settings in its thread, and
        that thread a daemon (a manager kept between runs must not hold the interpreter open at exit)."""

        agentgym_params: SamplingParams
        agentgym_kernels: Any

        def _create_batch_processor(self) -> Any:
            processor = super()._create_batch_processor()
            runner = processor.model_runner
            if getattr(runner, "_agentgym_batch", None) is None:
                runner._agentgym_batch = {}
                runner._forward_process_and_sample = _remember_batch(runner, runner._forward_process_and_sample)
                runner._sample = types.MethodType(
                    lambda r, scores, out, p=self.agentgym_params: _sample(r, p, scores, out), runner)
            return processor

        def _run_generation_loop(self, use_inference_mode: bool) -> None:
            with self.agentgym_kernels():
                super()._run_generation_loop(use_inference_mode)

        def start(self) -> None:
            self.background_thread_status.clear()
            self._generation_thread = threading.Thread(
                target=self._run_generation_loop, kwargs={"use_inference_mode": torch.is_inference_mode_enabled()},
                daemon=True, name="agentgym-continuous-batching")
            self._generation_thread.start()

    return SeededManager


class LibraryEngine:
    """One running ``ContinuousBatchingManager`` for a backend, kept from one batch to the next (its paged
    cache then still holds the pages of earlier requests); emptied when the weights change, so no page
    computed by old weights is ever read, and rebuilt when the sampling settings change."""

    def __init__(self, backend: TransformersBackend) -> None:
        self.backend = backend
        self.manager: Any = None
        self._key: tuple | None = None
        self._requests = 0  # request ids are unique over the manager's life: a dropped batch's replies are ignored

    def manager_for(self, params: SamplingParams, weights_version: int) -> Any:
        """The running manager for ``params`` on the current weights (built and started when needed)."""
        key = (params.temperature, params.top_k, params.top_p, weights_version)
        running = self.manager is not None and self.manager.is_running()
        if running and key == self._key:
            return self.manager
        if running and self._key is not None and key[:3] == self._key[:3] and self._forget_pages():
            self._key = key  # new weights, same sampling: the same manager, its cache emptied
            return self.manager
        self.shutdown()
        self.manager = self._build(params)
        self._key = key
        return self.manager

    def _forget_pages(self) -> bool:
        """Empty the paged cache of an idle manager, so that no page of keys computed by old weights is
        shared with a new request; its buffers and CUDA graphs stay (they read the weights in place).
        False when a request is still in it (a cancelled one not yet cleared): then the manager is rebuilt."""
        with self.manager.pause():
            processor = self.manager.batch_processor
            if processor is None or processor.has_pending_requests() or not self.manager.input_queue.empty():
                return False
            processor.cache.reset()
        return True

    def next_request_id(self) -> str:
        self._requests += 1
        return f"r{self._requests}"

    def shutdown(self) -> None:
        """Stop the manager's thread and free its cache."""
        if self.manager is not None:
            self.manager.stop(block=True, timeout=30, hard_stop=True)
            self.manager.destroy()
            self.manager, self._key = None, None

    def _build(self, params: SamplingParams) -> Any:
        from transformers import ContinuousBatchingConfig, GenerationConfig

        backend = self.backend
        start = time.perf_counter()
        # No sampling options for the library: temperature, top-k, top-p are applied by _sample.
        generation = GenerationConfig(do_sample=False, temperature=None, top_k=None, top_p=None,
                                      max_new_tokens=params.max_new_tokens, eos_token_id=sorted(backend.eos_token_ids),
                                      pad_token_id=backend.pad_token_id)
        config = ContinuousBatchingConfig(
            return_logprobs=True, max_requests_per_batch=backend.max_batch_size, per_request_processors=True,
            allow_block_sharing=True, **backend.library_engine_options)
        manager = _manager_class()(backend.model, generation, config)
        manager.agentgym_params = params
        manager.agentgym_kernels = backend.sampling_kernels
        processors = manager.logit_processor
        for name in _SEED_WORDS:  # after the library's own (none here): _sample reads the last two rows
            processors.logits_processor.append(_seed_word_processor(name))
            processors.tensors_required += 1
            processors.supported_keys[name] = int
        processors.do_processing = True
        if backend.device.type == "cuda":
            with backend.sampling_kernels():  # graphs capture the kernels chosen here: the ones sampling uses
                manager.warmup()  # CUDA graphs captured now, not inside the first rollout
        manager.start()
        log.info("continuous-batching manager ready in %.2fs (attention %s)", time.perf_counter() - start,
                 backend.model.config._attn_implementation)
        return manager


class LibraryBatch:
    """A running batch on transformers' continuous-batching engine (see the module docstring).

    Args:
        engine: the backend's :class:`LibraryEngine`.
        params: sampling settings shared by every row.
        weights_version: changes whenever the weights change (the manager is rebuilt then).
    """

    def __init__(self, engine: LibraryEngine, params: SamplingParams, *, weights_version: int) -> None:
        self.engine = engine
        self.backend = engine.backend
        self.params = params
        self._row_seeds = RowSeeds(params.seed)
        self._unseeded = random.Random()  # unseeded rows still draw from a stream of their own
        self._requests: dict[str, tuple[Hashable, int]] = {}  # request id -> (caller's key, token cap)
        self._checked: dict[str, int] = {}  # stop strings: tokens of each streaming request already tested
        self._manager = engine.manager_for(params, weights_version)

    @property
    def active(self) -> int:
        """Requests submitted whose reply has not come back."""
        return len(self._requests)

    def add(self, key: Hashable, prompt: Sequence[int], *, max_new_tokens: int, session: Hashable | None = None) -> None:
        """Submit ``prompt`` now; its reply comes out of a later ``step`` under ``key``. ``session`` is not
        needed: the paged cache finds the previous turn's pages by their tokens."""
        if not prompt:
            raise ValueError("add: empty prompt; a reply needs at least one prompt token")
        cap = max(1, min(self.params.max_new_tokens, int(max_new_tokens)))
        seed = self._row_seeds.next(key)
        if seed is None:
            seed = self._unseeded.getrandbits(63)
        request_id = self.engine.next_request_id()
        submitted = self._manager.add_request(
            list(prompt), request_id=request_id, max_new_tokens=cap, eos_token_id=sorted(self.backend.eos_token_ids),
            streaming=bool(self.params.stop),
            **{_SEED_WORDS[0]: _int32(seed), _SEED_WORDS[1]: _int32(seed >> 32)},
        )
        if submitted is None:
            raise RuntimeError("transformers' continuous-batching manager refused a request (it is stopping or "
                               "failed); see its log above")
        self._requests[request_id] = (key, cap)
        if self.params.stop:
            self._checked[request_id] = 0

    def step(self) -> list[tuple[Hashable, Sample]]:
        """Wait up to a few milliseconds for replies; returns ``(key, reply)`` of those that finished."""
        if not self._requests:
            return []
        done: list[tuple[Hashable, Sample]] = []
        output = self._manager.get_result(timeout=WAIT_S)
        while output is not None:
            reply = self._take(output)
            if reply is not None:
                done.append(reply)
            output = self._manager.get_result(timeout=0)
        if not done and not self._manager.is_running():
            error = self._manager.background_thread_status.fatal_error
            raise RuntimeError(f"transformers' continuous-batching thread stopped with {len(self._requests)} "
                               f"replies outstanding: {error!r}")
        return done

    def close(self) -> None:
        """Cancel the replies still decoding (the manager keeps running for the next batch)."""
        for request_id in self._requests:
            self._manager.cancel_request(request_id)
        self._requests.clear()
        self._checked.clear()

    # -- internals -------------------------------------------------------------------------------
    def _take(self, output: Any) -> tuple[Hashable, Sample] | None:
        """Fold one output of the manager in; the finished reply, if it is one."""
        from transformers.generation.continuous_batching.requests import RequestStatus

        if output.request_id not in self._requests:  # a streamed token of a request already returned
            return None
        if output.status == RequestStatus.FAILED or output.error is not None:
            raise RuntimeError(f"transformers' continuous batching failed request {output.request_id}: {output.error}")
        tokens, logprobs = list(output.generated_tokens), list(output.logprobs)
        reason = None
        if self.params.stop:
            reason = self._stop_at(output.request_id, tokens)
            if reason is not None:
                self._manager.cancel_request(output.request_id)
                tokens, logprobs = tokens[:reason], logprobs[:reason]
            elif not output.is_finished():
                return None
        key, cap = self._requests.pop(output.request_id)
        self._checked.pop(output.request_id, None)
        if reason is not None:
            finish = "stop_string"
        elif tokens and tokens[-1] in self.backend.eos_token_ids:
            finish = "eos"
        else:
            finish = "length"
            if len(tokens) != cap:
                raise RuntimeError(f"request {output.request_id} ended after {len(tokens)} of {cap} tokens without "
                                   "an end-of-turn token")
        return key, Sample(token_ids=tokens, logprobs=logprobs[: len(tokens)], finish_reason=finish)  # type: ignore[arg-type]

    def _stop_at(self, request_id: str, tokens: list[int]) -> int | None:
        """How many tokens to keep when a stop string appears in ``tokens`` (None: none does); the own
        engine's test, on each token not tested before."""
        stop, decode = self.params.stop, self.backend.decode
        start, self._checked[request_id] = self._checked[request_id], len(tokens)
        for n in range(start + 1, len(tokens) + 1):
            if tokens[n - 1] in self.backend.eos_token_ids:
                return None
            if any(s in decode(tokens[max(0, n - 64):n]) for s in stop):
                return n
        return None

