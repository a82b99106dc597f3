"""Batched sampling with a KV cache on Hugging Face transformers.

One ``generate`` call samples a reply for every prompt given: prompts are left-padded into one
batch, prefilled once, then decoded token by token from the KV cache. Rows that finish (end-of-turn
token, stop string, or their token cap) are dropped from the batch and the cache right away, so
long replies do not make short ones pay for padding. Log-probs are taken from the raw logits at
the sampling temperature, before top-k/top-p truncation, so ``score`` (a plain forward pass)
reproduces them.

Sessions (multi-turn reuse): when the caller names a session per prompt (the rollout engine passes
one per trajectory), the keys and values a row's model has read are kept after the call
(:mod:`agentgym_backend_transformers.sessions`). The next turn's prompt starts with exactly those
tokens, so only the new suffix (the last sampled token, the observation, the generation prompt) is
prefilled. In the batch, a row's cached prefix and its new suffix sit side by side with padding
columns masked out between them; positions are passed explicitly, and cached keys already carry
their rotary positions, so the row computes what a forward pass over its whole history computes.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import threading
from collections.abc import Hashable, Iterator, Mapping, Sequence
from typing import Any

import torch

from agentgym_backend_transformers.config import CAPABILITIES, TransformersBackendConfig
from agentgym_backend_transformers.decoding import DecodeBatch
from agentgym_backend_transformers.kv_cache import allow_reduced_precision_kv
from agentgym_backend_transformers.library_engine import LibraryBatch, LibraryEngine, library_engine_available
from agentgym_backend_transformers.sessions import SessionStore
from agentgym_core.models import load_pretrained
from agentgym_core.rollout.backend import Sample, SamplingParams

__all__ = ["CAPABILITIES", "TransformersBackend", "decode_attention", "kv_storage_dtype", "make_backend",
           "pick_attention", "pick_decode_engine", "pick_device", "sampling_copy"]

log = logging.getLogger(__name__)


def pick_device(device: str = "auto") -> str:
    """'auto' -> 'cuda' when a GPU is visible, else 'cpu'."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


class TransformersBackend:
    """A :class:`agentgym_core.rollout.RolloutBackend` over a transformers causal LM.

    Build it from a config (``TransformersBackend.from_config``) or around an existing model and
    tokenizer (``TransformersBackend(model, tokenizer)``), e.g. the trainer's own module: then the
    backend always samples from the current weights and ``load_weights`` is not needed.
    """

    name = "transformers"

    def __init__(
        self, model: Any, tokenizer: Any, *, max_batch_size: int = 64, session_cache_mb: float = 1024.0,
        share_prefixes: bool = True, prefill: str = "auto", kv_cache_dtype: str = "model",
        prefill_chunk_tokens: int | None = 16384, dtype: str = "model", decode_engine: str = "auto",
        owns_model: bool = False,
    ) -> None:
        if getattr(tokenizer, "chat_template", None) is None:
            raise ValueError("the tokenizer has no chat_template; the backend renders turns with the model's own template")
        self.source = model  # the module lent (or loaded); sampled from directly unless dtype asks for a copy
        self.owns_model = owns_model  # loaded by the backend itself (from_config), never the trainer's
        self.model = sampling_copy(model, dtype)
        self._source_version = _version(model) if self.model is not model else None
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        eos = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
        cfg_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        if cfg_eos is not None:
            eos.update(cfg_eos if isinstance(cfg_eos, list) else [cfg_eos])
        if not eos:
            raise ValueError("neither the tokenizer nor the model's generation config names an EOS token")
        self.eos_token_ids = frozenset(int(t) for t in eos)
        pad = tokenizer.pad_token_id
        self.pad_token_id = int(pad if pad is not None else min(self.eos_token_ids))
        self.sessions = SessionStore(int(session_cache_mb * 2**20))
        self.share_prefixes = share_prefixes  # read a prompt prefix common to several rows once (decoding.py)
        if prefill not in ("auto", "batched", "per_row"):
            raise ValueError(f"prefill={prefill!r}: use 'auto', 'batched' or 'per_row'")
        self.prefill = prefill  # how joining rows are read: per_row (no padding computed) or batched
        if prefill_chunk_tokens is not None and prefill_chunk_tokens < 1:
            raise ValueError(f"prefill_chunk_tokens={prefill_chunk_tokens}: use a positive number of columns (or None)")
        self.prefill_chunk_tokens = prefill_chunk_tokens  # batched: padded columns per forward pass (None: no bound)
        self.kv_dtype = kv_storage_dtype(self.model, kv_cache_dtype)  # None: the model's own
        self.allow_cudnn_attention = False  # True: let torch pick cuDNN's attention while sampling (decode_attention)
        if self.kv_dtype is not None:
            allow_reduced_precision_kv()
        self._library: LibraryEngine | None = None  # the library engine's manager, kept between batches
        self.library_engine_options: dict[str, Any] = {}  # extra ContinuousBatchingConfig fields
        if self.device.type == "cpu":  # the library sizes its cache from GPU memory; a CPU needs a size
            self.library_engine_options.update(num_blocks=256, max_batch_tokens=2048)
        else:  # the library's default takes 90% of the free memory, which the learner on the same GPU needs
            self.library_engine_options.update(max_memory_percent=0.3)
        self.set_decode_engine(decode_engine)

    def set_decode_engine(self, decode_engine: str) -> None:
        """Choose who runs the decode batch (``auto``, ``own`` or ``library``, see :func:`pick_decode_engine`)
        and the fastest attention kernel for it (:func:`pick_attention`), and say so in the log."""
        self.decode_engine = pick_decode_engine(decode_engine, self.device)
        # The library engine switches a module of the backend's own (never the trainer's) to FA3/FA2 when
        # installed; everything else runs sdpa without cuDNN's kernel (decode_attention).
        self.attention = pick_attention(self.device, flash_allowed=self.decode_engine == "library"
                                        and (self.owns_model or self.model is not self.source))
        self.library_engine_options["auto_switch_to_flash"] = self.attention.startswith("flash")
        if self._library is not None and self.decode_engine != "library":
            self._library.shutdown()
        log.info("sampling on %s (%s weights): decode engine %s, attention kernel %s", self.device,
                 str(next(self.model.parameters()).dtype).removeprefix("torch."), self.decode_engine, self.attention)

    @classmethod
    def from_config(cls, config: TransformersBackendConfig) -> TransformersBackend:
        if config.threads:
            torch.set_num_threads(config.threads)
        model, tokenizer = load_pretrained(config.model, device=pick_device(config.device), dtype=config.dtype)
        return cls(
            model, tokenizer, max_batch_size=config.max_batch_size, session_cache_mb=config.session_cache_mb,
            share_prefixes=config.share_prefixes, prefill=config.prefill, kv_cache_dtype=config.kv_cache_dtype,
            prefill_chunk_tokens=config.prefill_chunk_tokens, decode_engine=config.decode_engine, owns_model=True,
        )

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def sampling_setup(self) -> dict[str, str]:
        """What sampling runs on, written once into a run's metrics as ``rollout/<name>``: device, weights
        dtype, decode engine and attention kernel (:func:`pick_attention`)."""
        return {"device": str(self.device), "dtype": str(next(self.model.parameters()).dtype).removeprefix("torch."),
                "decode_engine": self.decode_engine, "attention_kernel": self.attention}

    def refresh(self) -> None:
        """Copy the lent module's weights into the sampling copy if they changed since the last copy
        (an optimizer step bumps every parameter's version counter; nothing is copied otherwise)."""
        if self._source_version is None:
            return
        version = _version(self.source)
        if version != self._source_version:
            with torch.no_grad():
                for mine, theirs in zip(self.model.parameters(), self.source.parameters(), strict=True):
                    mine.copy_(theirs)
            self._source_version = version
            self.sessions.clear()  # cached keys/values were computed by the old weights

    def sampling_kernels(self) -> contextlib.AbstractContextManager:
        """What sampling and scoring run under: attention kernels other than cuDNN's (see
        :func:`decode_attention`) unless ``allow_cudnn_attention``, and TF32 matmuls while float32
        weights sample on a GPU (tensor cores; log-probs move by about what the learner's bf16 autocast
        moves them)."""
        stack = contextlib.ExitStack()
        if not self.allow_cudnn_attention:
            stack.enter_context(decode_attention())
        if self.device.type == "cuda" and next(self.model.parameters()).dtype == torch.float32:
            stack.enter_context(_tf32())
        return stack

    # -- tokenizer side -------------------------------------------------------------------------
    def apply_chat_template(self, messages: Sequence[Mapping[str, str]], *, add_generation_prompt: bool,
                            tools: Sequence[Mapping[str, Any]] | None = None) -> str:
        return self.tokenizer.apply_chat_template(
            [dict(m) for m in messages], tokenize=False, add_generation_prompt=add_generation_prompt,
            tools=[dict(t) for t in tools] if tools else None,
        )

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=False)

    # -- weights --------------------------------------------------------------------------------
    @torch.no_grad()
    def load_weights(self, state_dict: Mapping[str, Any]) -> None:
        """Copy the trainer's weights in place (any device/dtype; names must match the model's)."""
        own = self.model.state_dict()
        unknown = sorted(set(state_dict) - set(own))
        if unknown:
            raise KeyError(f"load_weights: {len(unknown)} names the rollout model does not have, e.g. {unknown[:3]}")
        for name, value in state_dict.items():
            if own[name].data_ptr() != value.data_ptr():
                own[name].copy_(value)
        self.sessions.clear()  # cached keys/values were computed by the old weights

    def release_session(self, session: Hashable) -> None:
        """Free the KV cache kept for ``session`` (the engine calls it when a trajectory ends)."""
        self.sessions.release(session)

    # -- sampling -------------------------------------------------------------------------------
    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams,
        *,
        max_new_tokens: Sequence[int] | None = None,
        sessions: Sequence[Hashable | None] | None = None,
    ) -> list[Sample]:
        """Sample one reply per prompt; ``sessions`` (one key or None per prompt) reuses and keeps
        each row's KV cache across calls (see the module docstring)."""
        caps = [params.max_new_tokens] * len(prompts)
        if max_new_tokens is not None:
            caps = [max(1, min(params.max_new_tokens, int(c))) for c in max_new_tokens]
        keys: list[Hashable | None] = [None] * len(prompts) if sessions is None else list(sessions)
        if len(keys) != len(prompts):
            raise ValueError(f"generate: {len(keys)} sessions for {len(prompts)} prompts; pass one key (or None) each")
        named = [k for k in keys if k is not None]
        if len(set(named)) != len(named):
            raise ValueError("generate: a session key appears twice in one call; use one key per trajectory")
        batch = self.open_batch(params)
        try:
            for i, (prompt, cap, key) in enumerate(zip(prompts, caps, keys, strict=True)):
                batch.add(i, prompt, max_new_tokens=cap, session=key)
            out: dict[Any, Sample] = {}
            while batch.active:
                out.update(batch.step())
        finally:
            batch.close()
        return [out[i] for i in range(len(prompts))]

    def reuses_sessions(self, cache: Any) -> bool:
        """Session reuse needs plain full-attention cache layers (sliding windows drop old columns)."""
        from transformers.cache_utils import DynamicLayer

        return bool(cache.layers) and all(type(layer) is DynamicLayer for layer in cache.layers)

    def open_batch(self, params: SamplingParams) -> DecodeBatch | LibraryBatch:
        """A running decode batch the caller feeds between steps: the own engine's (decoding.py) or one on
        transformers' continuous batching (library_engine.py), as ``decode_engine`` says."""
        self.refresh()  # one engine run, one set of weights
        if self.decode_engine == "library":
            if params.constrain_actions:
                raise ValueError("constrained actions (rollout.constrain_actions) need the own decode engine; this "
                                 "backend runs decode_engine='library' (transformers' continuous batching, which "
                                 "takes no per-row token masks): set rollout.backend_options.decode_engine=own")
            if self._library is None:
                self._library = LibraryEngine(self)
            return LibraryBatch(self._library, params, weights_version=_version(self.model))
        return DecodeBatch(self, params, max_rows=self.max_batch_size)

    def close(self) -> None:
        """Stop the library engine's thread and free its paged cache (a later library batch starts a new
        one, so the backend stays usable). While that thread runs it holds :meth:`sampling_kernels`, whose
        attention flag is process-wide: cuDNN's attention stays off for every thread of the process until
        it stops. The trainer, fine-tuning and evaluation runs call it at their end (``close_backend``)."""
        if self._library is not None:
            self._library.shutdown()

    @torch.inference_mode()
    def score(self, sequences: Sequence[Sequence[int]], *, temperature: float = 1.0) -> list[list[float]]:
        self.refresh()
        with self.sampling_kernels():
            return self._score(sequences, temperature)

    def _score(self, sequences: Sequence[Sequence[int]], temperature: float) -> list[list[float]]:
        out: list[list[float]] = []
        for seq in sequences:  # one at a time: no padding, so nothing can differ from a plain forward
            ids = torch.tensor([list(seq)], dtype=torch.long, device=self.device)
            logits = self.model(input_ids=ids).logits[0, :-1].float() / temperature  # (T-1, V)
            lp = torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None]).squeeze(-1)
            out.append([0.0, *lp.tolist()])
        return out


def pick_decode_engine(decode_engine: str, device: torch.device) -> str:
    """``own`` (decoding.py) or ``library`` (transformers' continuous batching, library_engine.py).

    ``auto`` is ``own`` on every device for now: on a CPU it is faster in the same run (bench/README.md,
    "Decode engines"); on a GPU the library engine is expected to win but has no measurement yet
    (``scripts/gpu_check.sh`` takes it), so the default changes only once one shows it.
    """
    if decode_engine not in ("auto", "own", "library"):
        raise ValueError(f"decode_engine={decode_engine!r}: use 'auto', 'own' or 'library'")
    if decode_engine == "library" and not library_engine_available():
        import transformers

        raise ValueError(f"decode_engine='library' needs transformers' continuous batching with per-request "
                         f"arguments (transformers>=5.24; installed: {transformers.__version__}); "
                         f"pip install 'transformers>=5.24' or use decode_engine='own'")
    return "own" if decode_engine == "auto" else decode_engine


def pick_attention(device: torch.device, *, flash_allowed: bool) -> str:
    """The attention kernel sampling runs on, by name: ``flash_attention_3`` or ``flash_attention_2`` on a
    GPU that has the package installed (when ``flash_allowed``: a module of the backend's own, read by the
    library engine), else ``sdpa``, which on a GPU runs torch's flash or memory-efficient kernel (never
    cuDNN's, which plans per key length: :func:`decode_attention`)."""
    if device.type == "cuda" and flash_allowed:
        from transformers.utils import is_flash_attn_2_available

        try:
            from transformers.utils import is_flash_attn_3_available
        except ImportError:  # older transformers
            is_flash_attn_3_available = None
        if is_flash_attn_3_available is not None and is_flash_attn_3_available():
            return "flash_attention_3"
        if is_flash_attn_2_available():
            return "flash_attention_2"
    return "sdpa"


def sampling_copy(model: Any, dtype: str) -> Any:
    """The module to sample from: ``model`` itself, or a frozen copy of it in another dtype.

    ``dtype``: ``model`` (always ``model`` itself), ``auto`` (a bfloat16 copy of float32 weights on a
    GPU, where decoding reads every weight per token; ``model`` itself elsewhere), or a dtype name
    (a copy when the weights are in another). The copy is built tensor by tensor in its own dtype:
    the float32 model is never duplicated on the way.
    """
    if dtype not in ("model", "auto", "float32", "bfloat16", "float16"):
        raise ValueError(f"dtype={dtype!r}: use 'model', 'auto', 'float32', 'bfloat16' or 'float16'")
    first = next(model.parameters())
    if dtype == "auto":
        dtype = "bfloat16" if first.device.type == "cuda" and first.dtype == torch.float32 else "model"
    if dtype == "model" or getattr(torch, dtype) == first.dtype:
        return model
    target = getattr(torch, dtype)
    memo: dict[int, Any] = {id(p): torch.nn.Parameter(p.detach().to(target), requires_grad=False)
                            for p in model.parameters()}  # tied weights: one id, one copy
    return copy.deepcopy(model, memo).eval()


def _version(model: Any) -> int:
    """Sum of the parameters' version counters (each in-place change bumps its tensor's)."""
    return sum(p._version for p in model.parameters())


_CUDNN_ATTENTION_LOCK = threading.Lock()
_cudnn_attention = {"holders": 0, "before": True}  # decode_attention's holders; the flag before the first


@contextlib.contextmanager
def decode_attention() -> Iterator[None]:
    """Scaled-dot-product attention without the cuDNN kernels: flash, memory-efficient or math.

    Recent torch prefers cuDNN's attention on Hopper GPUs, and cuDNN keeps an execution plan per
    input shape. A decode step attends over one more cached column than the step before, so decoding
    keeps meeting shapes it has no plan for; a profile of sampling on such a GPU found most of its
    time on the host, inside the attention call, with the GPU waiting (``bench/README.md``, "One
    NVIDIA H100"). The other kernels take any length as it comes. Prefill and scoring meet new
    shapes too, so the whole of sampling runs under this. On a CPU it changes nothing (torch has no
    cuDNN attention there).

    The flag is process-wide, and holders overlap in any order (the library engine's thread holds it
    while the caller's thread scores): the first holder saves it, the last one out restores it.
    Nested ``sdpa_kernel`` contexts would restore in the order they exit and could leave it off.
    """
    with _CUDNN_ATTENTION_LOCK:
        if _cudnn_attention["holders"] == 0:
            _cudnn_attention["before"] = torch.backends.cuda.cudnn_sdp_enabled()
        _cudnn_attention["holders"] += 1
        torch.backends.cuda.enable_cudnn_sdp(False)
    try:
        yield
    finally:
        with _CUDNN_ATTENTION_LOCK:
            _cudnn_attention["holders"] -= 1
            if _cudnn_attention["holders"] == 0:
                torch.backends.cuda.enable_cudnn_sdp(_cudnn_attention["before"])


@contextlib.contextmanager
def _tf32() -> Iterator[None]:
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def kv_storage_dtype(model: Any, kv_cache_dtype: str) -> torch.dtype | None:
    """The dtype the KV caches are kept in when it is not the model's (``kv_cache_dtype`` is
    ``model``, ``float32``, ``bfloat16`` or ``float16``); None when it is the model's.

    A narrower one needs the model's attention to be ``sdpa``: only that attention is taught to read
    keys and values of another dtype than its query (:func:`.kv_cache.allow_reduced_precision_kv`).
    """
    if kv_cache_dtype not in ("model", "float32", "bfloat16", "float16"):
        raise ValueError(f"kv_cache_dtype={kv_cache_dtype!r}: use 'model', 'float32', 'bfloat16' or 'float16'")
    if kv_cache_dtype == "model":
        return None
    dtype = getattr(torch, kv_cache_dtype)
    if dtype == next(model.parameters()).dtype:
        return None
    attention = getattr(model.config, "_attn_implementation", None)
    if attention != "sdpa":
        raise ValueError(f"kv_cache_dtype={kv_cache_dtype!r} needs the model's attention to be 'sdpa' (it is "
                         f"{attention!r}); load the model with attn_implementation='sdpa' or use kv_cache_dtype='model'")
    return dtype


LIVE_MODULE_OPTIONS = ("max_batch_size", "session_cache_mb", "share_prefixes", "prefill", "prefill_chunk_tokens",
                       "kv_cache_dtype", "dtype", "decode_engine")
"""Options that apply to a module the trainer lends (the others say how to load one)."""


def make_backend(
    config: TransformersBackendConfig | Mapping[str, Any] | None = None, *, model: Any = None, tokenizer: Any = None
) -> TransformersBackend:
    """The registered factory: a config (or dict of its fields) -> a loaded backend.

    With ``model`` and ``tokenizer`` (the trainer's live module) it samples from that module and
    loads nothing; only the options in :data:`LIVE_MODULE_OPTIONS` apply then.
    """
    if not isinstance(config, TransformersBackendConfig):
        config = TransformersBackendConfig.model_validate(dict(config or {}))
    if model is not None:
        if tokenizer is None:
            raise ValueError("make_backend(model=...) needs the tokenizer too")
        return TransformersBackend(model, tokenizer, **{k: getattr(config, k) for k in LIVE_MODULE_OPTIONS})
    return TransformersBackend.from_config(config)

