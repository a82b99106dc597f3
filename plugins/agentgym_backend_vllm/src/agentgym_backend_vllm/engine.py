"""In-process mode: vLLM's step-level engine as an agentgym continuous-batching backend.

The rollout engine's :class:`RunningBatch` maps onto vLLM's ``LLMEngine`` one call for one call:
``add`` is ``engine.add_request(request_id, TokensPrompt(prompt_token_ids=...), SamplingParams)``,
``step`` is ``engine.step()`` (the replies that finished come back as ``RequestOutput``s with
their ``CompletionOutput.token_ids``, the sampled tokens' log-probs and the finish reason), and
``close`` is ``engine.abort_request(ids)``. vLLM schedules, pages the KV cache and reuses cached
prefixes (a trajectory's earlier turns) by itself, so sessions need nothing here.

Each request's token cap is ``min(turn cap, remaining trajectory budget, max_model_len -
prompt length)``. Log-probs: ``logprobs=0`` asks for the sampled token's log-prob only; with
``logprobs_mode='processed_logprobs'`` it is taken after temperature, as the trainer recomputes it.

Seeds: a seeded batch gives each request its own seed from (batch seed, row key, turn)
(:func:`agentgym_core.rollout.backend.row_seed`, the transformers backend's too), never from the
order requests arrived, so a run replays whatever the environments' timing and whichever worker
samples an episode. vLLM samples requests that carry a seed with a generator each, a slower path
than an unseeded batch: the price of replayable runs.

Weights (see :mod:`agentgym_backend_vllm.weights`): ``load_weights`` sends the state dict in
buckets through ``collective_rpc`` to :class:`AgentgymWorkerExtension`, then calls
``reset_prefix_cache()`` so no cached block holds keys of the old weights. Sharing the learner's
GPU (``gpu_sharing: colocate``): the engine sleeps when the last running batch closes (the
rollout is over, the update is next) and ``load_weights`` wakes it in vLLM's order for weight
updates: ``wake_up(tags=["weights"])``, the transfer, ``wake_up(tags=["kv_cache"])``.

LoRA (``lora`` in the options, filled by the trainer from ``model.lora``): the engine is built with
``enable_lora`` and a ``max_lora_rank`` of at least the recipe's rank, and ``load_weights`` takes the
adapter tensors alone (peft's names, as every learner rank gathers them from its FSDP2 shards). vLLM
loads adapters from a directory, so each sync writes one in PEFT's format (``adapter_config.json``,
``adapter_model.safetensors``; kilobytes to megabytes) to this backend's temporary directory, adds it
as a ``LoRARequest`` with a new id and name (one version per sync), removes the previous version
from the engine and its directory, and every request from then on carries the new ``lora_request``.
The base weights never move: vLLM keys cached prefixes by adapter too, and the prefix cache is reset
anyway, as after a full sync.

Placement (:func:`engine_placement`): with several learner ranks (``WORLD_SIZE > 1``) every rank
builds its own engine with vLLM's ``external_launcher`` executor, which joins the ranks' process
group (one data-parallel engine per rank) and takes ``cuda:LOCAL_RANK``. That is the rank's own GPU
under ``torchrun`` (every rank sees every GPU) and under the trainer's own spawning (each rank sees
only its GPU, as ``cuda:0``, with ``LOCAL_RANK=0``). vLLM's single-process executor would take
device index 0 in both cases: every torchrun rank's engine on the first GPU.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import re
import shutil
import tempfile
import threading
import time
import uuid
import weakref
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentgym_backend_vllm.config import INSTALL_HINT, VllmBackendConfig
from agentgym_backend_vllm.tokenizer import ModelTokenizer, finish_reason, request_cap
from agentgym_backend_vllm.weights import (
    BEGIN_METHOD,
    FINISH_METHOD,
    LOAD_METHOD,
    SETUP_METHOD,
    weight_buckets,
)
from agentgym_core.plugins import PluginError
from agentgym_core.rollout.backend import (
    RowSeeds,
    Sample,
    SamplingParams,
    generate_with_batch,
    merge_sampling_setups,
)

__all__ = ["EngineBatch", "EnginePlacement", "VllmEngineBackend", "VllmNotInstalledError", "engine_placement",
           "import_vllm", "write_peft_adapter"]

log = logging.getLogger(__name__)



class VllmNotInstalledError(PluginError, ImportError):
    """vLLM is missing for engine mode; a setup error, so the command line shows it as one line (rc 2)."""


def import_vllm() -> Any:
    """The ``vllm`` module, or an ImportError whose one-line message says what to install."""
    try:
        import vllm
    except ImportError as exc:
        raise VllmNotInstalledError(INSTALL_HINT) from exc
    return vllm


@dataclass(frozen=True)
class EnginePlacement:
    """Where this process's engine runs: the vLLM executor, and the CUDA device index it takes."""

    executor: str | None  # EngineArgs.distributed_executor_backend; None: vLLM's single-process default
    local_rank: int  # the engine takes cuda:local_rank among the GPUs this process sees

    def gpu(self, cuda_visible_devices: str | None) -> str:
        """The GPU the engine takes, as a ``CUDA_VISIBLE_DEVICES`` entry (the physical index when unset)."""
        if cuda_visible_devices is None:
            return str(self.local_rank)
        return [g.strip() for g in cuda_visible_devices.split(",") if g.strip()][self.local_rank]


def engine_placement(environ: Mapping[str, str]) -> EnginePlacement:
    """The placement of an engine built in a process with these environment variables (see the module
    docstring): one engine per learner rank on ``cuda:LOCAL_RANK``, or vLLM's default in one process."""
    if int(environ.get("WORLD_SIZE", "1")) > 1:
        return EnginePlacement("external_launcher", int(environ.get("LOCAL_RANK", environ.get("RANK", "0"))))
    return EnginePlacement(None, 0)


class VllmEngineBackend:
    """A :class:`agentgym_core.rollout.ContinuousBackend` over an in-process ``vllm.LLMEngine``."""

    name = "vllm"

    def __init__(self, engine: Any, tokenizer: ModelTokenizer, config: VllmBackendConfig, vllm: Any) -> None:
        self.engine, self.tokens, self.config, self.vllm = engine, tokenizer, config, vllm
        self.eos_token_ids = tokenizer.eos_token_ids
        self.max_model_len = int(config.max_model_len or engine.model_config.max_model_len)
        self.asleep = False
        self.weights_discarded = False  # sleep level 2 dropped them; only load_weights brings weights back
        self.weight_syncs: list[dict[str, float]] = []  # one record per load_weights: seconds, buckets, bytes
        dtype = getattr(engine.model_config, "dtype", None)  # vLLM resolves 'auto' to a torch dtype
        self.weights_dtype = dtype if not isinstance(dtype, str) else None  # what load_weights sends
        self._lock = threading.RLock()  # one engine, possibly several batches (generate, score, rollouts)
        self._owners: dict[str, EngineBatch] = {}  # request id -> the batch its reply goes to
        self._open_batches = 0
        self._ids = itertools.count()
        self._prefix = uuid.uuid4().hex[:8]
        self.lora_request: Any = None  # the adapter version every request carries (None: the base model)
        self._lora_versions = itertools.count(1)  # vLLM's lora_int_id must be positive
        self._lora_dir: Path | None = None  # this backend's adapter versions, removed with it
        try:
            workers = engine.collective_rpc(SETUP_METHOD)
        except (AttributeError, RuntimeError) as exc:  # an engine built without agentgym's worker extension
            log.warning("vllm: the workers cannot say what they sample on (%s); rollout/* shows it as unknown", exc)
            workers = [{"attention_kernel": "unknown"}]
        self._setup = {**merge_sampling_setups(workers), "decode_engine": f"vllm {getattr(vllm, '__version__', '?')}"}

    @classmethod
    def from_config(cls, config: VllmBackendConfig) -> VllmEngineBackend:
        placement = engine_placement(os.environ)
        if placement.executor is not None and not config.engine_in_this_process:
            raise PluginError("backend_options.engine_in_this_process=false with several learner ranks: each rank's "
                              "engine joins the ranks' process group (vLLM's external_launcher executor), which "
                              "needs the engine core in the rank's own process. Set engine_in_this_process: true")
        if placement.executor is not None and config.tensor_parallel_size > 1:
            raise PluginError(f"backend_options.tensor_parallel_size={config.tensor_parallel_size} with several learner "
                              "ranks: each rank samples its own slice of a step with an engine on its own GPU. Set "
                              "tensor_parallel_size: 1, or roll out on the Ray launcher's rollout workers")
        vllm = import_vllm()
        if config.engine_in_this_process:
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        tokenizer, model_path, tokenizer_dir = ModelTokenizer.load(config.model)
        lora = {} if config.lora is None else {  # one adapter version at a time: the old one goes as the new one comes
            "enable_lora": True, "max_lora_rank": config.lora.max_lora_rank, "max_loras": 1}
        args = vllm.EngineArgs(
            model=model_path, tokenizer=tokenizer_dir, dtype=config.dtype, max_model_len=config.max_model_len,
            gpu_memory_utilization=config.gpu_memory_utilization, tensor_parallel_size=config.tensor_parallel_size,
            enable_prefix_caching=config.enable_prefix_caching, enforce_eager=config.enforce_eager, seed=config.seed,
            enable_sleep_mode=config.gpu_sharing == "colocate", logprobs_mode=config.logprobs_mode,
            worker_extension_cls="agentgym_backend_vllm.weights.AgentgymWorkerExtension",
            distributed_executor_backend=placement.executor, **lora,
        )
        log.info("vllm: engine on GPU %s (executor %s)", placement.gpu(os.environ.get("CUDA_VISIBLE_DEVICES")),
                 placement.executor or "single-process")
        return cls(vllm.LLMEngine.from_engine_args(args), tokenizer, config, vllm)

    @property
    def sampling_setup(self) -> dict[str, str]:
        """What sampling runs on, written once into a run's metrics as ``rollout/<name>``: each worker's device,
        dtype and attention kernel, asked through ``collective_rpc`` when the engine was built (a sleeping
        engine's workers answer nothing), and vLLM's version."""
        return self._setup

    # -- tokenizer side -------------------------------------------------------------------------
    def apply_chat_template(self, messages: Sequence[Mapping[str, str]], *, add_generation_prompt: bool,
                            tools: Sequence[Mapping[str, Any]] | None = None) -> str:
        return self.tokens.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tools=tools)

    def encode(self, text: str) -> list[int]:
        return self.tokens.encode(text)

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.tokens.decode(token_ids)

    # -- requests -------------------------------------------------------------------------------
    def request_cap(self, prompt_length: int, cap: int, turn_cap: int) -> int:
        """min(turn cap, remaining trajectory budget, room left in the model's context)."""
        return request_cap(self.max_model_len, prompt_length, cap, turn_cap)

    def vllm_params(self, params: SamplingParams, cap: int, *, seed: int | None, prompt_logprobs: bool = False) -> Any:
        """vLLM SamplingParams for one request (stop ids = our EOS set, so 'stop' on them means eos)."""
        return self.vllm.SamplingParams(
            n=1, temperature=params.temperature, top_p=params.top_p, top_k=params.top_k, max_tokens=cap,
            stop=list(params.stop) or None, stop_token_ids=sorted(self.eos_token_ids), seed=seed, logprobs=0,
            prompt_logprobs=0 if prompt_logprobs else None, skip_special_tokens=False,
        )

    def _submit(self, batch: EngineBatch, prompt: Sequence[int], sampling: Any) -> str:
        request_id = f"agentgym-{self._prefix}-{next(self._ids)}"
        with self._lock:
            self._wake_all()
            self.engine.add_request(request_id, self.vllm.TokensPrompt(prompt_token_ids=list(prompt)), sampling,
                                    lora_request=self.lora_request)
            self._owners[request_id] = batch
        return request_id

    def _advance(self) -> None:
        """One engine step; every finished output goes to the batch that asked for it."""
        with self._lock:
            if not self.engine.has_unfinished_requests():
                return
            for output in self.engine.step():
                if output.finished:
                    owner = self._owners.pop(output.request_id, None)
                    if owner is not None:
                        owner.deliver(output)

    def _forget(self, request_ids: Sequence[str]) -> None:
        with self._lock:
            live = [r for r in request_ids if self._owners.pop(r, None) is not None]
            if live:
                self.engine.abort_request(live)

    # -- continuous batching ------------------------------------------------------------------------
    def open_batch(self, params: SamplingParams) -> EngineBatch:
        """A running batch on the shared engine (prompts join between steps)."""
        with self._lock:
            self._open_batches += 1
        return EngineBatch(self, params)

    def _batch_closed(self) -> None:
        with self._lock:
            self._open_batches -= 1
            if self._open_batches == 0 and self.config.gpu_sharing == "colocate" and not self.asleep:
                self._sleep()  # the learner's update comes next

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams,
        *,
        max_new_tokens: Sequence[int] | None = None,
        sessions: Sequence[Hashable | None] | None = None,
    ) -> list[Sample]:
        """Sample one reply per prompt (sessions are accepted; vLLM's prefix cache does the reuse)."""
        return generate_with_batch(self, prompts, params, max_new_tokens=max_new_tokens)

    def release_session(self, session: Hashable) -> None:
        """Nothing is kept per session: vLLM's prefix cache holds earlier turns by content."""

    def score(self, sequences: Sequence[Sequence[int]], *, temperature: float = 1.0) -> list[list[float]]:
        """Per-token log-probs via ``prompt_logprobs=0`` (vLLM computes them at temperature 1 only)."""
        if temperature != 1.0:
            raise NotImplementedError("vLLM computes prompt log-probs at temperature 1 only")
        batch = self.open_batch(SamplingParams(temperature=1.0, max_new_tokens=1))
        try:
            ids = {batch.add_scoring(i, seq): i for i, seq in enumerate(sequences)}
            rows: dict[int, Any] = {}
            while batch.pending_outputs < len(ids):
                self._advance()
            for output in batch.take_outputs():
                rows[ids[output.request_id]] = output
        finally:
            batch.close()
        return [prompt_logprob_row(sequences[i], rows[i].prompt_logprobs) for i in range(len(sequences))]

    # -- weights, sleep and wake ------------------------------------------------------------------
    def _sleep(self) -> None:
        self.engine.sleep(level=self.config.sleep_level)
        self.asleep = True
        self.weights_discarded = self.weights_discarded or self.config.sleep_level == 2

    def _wake_all(self) -> None:
        if self.weights_discarded:
            raise RuntimeError(
                "vLLM's weights were discarded when the engine slept (sleep_level 2) and none were loaded since: "
                "sampling now would use garbage. Load weights first, or use backend_options.sleep_level: 1")
        if self.asleep:
            self.engine.wake_up()  # all tags: sampling asked for before any weight update
            self.asleep = False

    def sleep(self) -> None:
        """Free the engine's GPU memory now (colocated mode does this by itself after a rollout)."""
        with self._lock:
            if not self.asleep:
                self._sleep()

    def load_weights(self, state_dict: Mapping[str, Any]) -> None:
        """Replace the engine's weights in place, in buckets; then drop every cached prefix. A LoRA policy's
        adapter tensors alone (peft's names) become a new LoRA adapter version instead (see the module docstring)."""
        adapters = [name for name in state_dict if ".lora_" in name]
        if adapters:  # peft's names: a LoRA policy's adapters, which vLLM takes as a LoRA request
            self._load_adapter(state_dict)
            return
        bucket_bytes = int(self.config.weight_bucket_mb * 2**20)
        start, buckets, total = time.perf_counter(), 0, 0
        with self._lock:
            if self._owners:  # their cached keys would mix old and new weights, and reset_prefix_cache refuses
                raise RuntimeError(f"load_weights with {len(self._owners)} request(s) still running: load weights "
                                   "only between rollouts (close every running batch first)")
            if self.asleep:
                self.engine.wake_up(tags=["weights"])  # weights first: the KV cache is not needed yet
            self.engine.collective_rpc(BEGIN_METHOD)
            try:
                for bucket in weight_buckets(state_dict, bucket_bytes, dtype=self.weights_dtype):
                    if not self.config.engine_in_this_process:  # serialized to the engine process
                        bucket = [(name, tensor.cpu()) for name, tensor in bucket]
                    self.engine.collective_rpc(LOAD_METHOD, args=(bucket,))
                    buckets += 1
                    total += sum(t.numel() * t.element_size() for _, t in bucket)
            except BaseException:
                # close the update anyway: vLLM puts the old kernel tensors back into layers that got nothing
                with contextlib.suppress(Exception):
                    self.engine.collective_rpc(FINISH_METHOD)
                raise
            self.engine.collective_rpc(FINISH_METHOD)
            self.weights_discarded = False
            self._ready_after_load()
        seconds = time.perf_counter() - start
        self.weight_syncs.append({"seconds": seconds, "buckets": float(buckets), "bytes": float(total)})
        log.info("vllm: loaded %.1f MB of weights in %d bucket(s) in %.3fs", total / 2**20, buckets, seconds)

    def _ready_after_load(self) -> None:
        """After new weights or a new adapter (under the lock): the cache awake again and emptied, since its
        cached blocks hold keys and values of the old weights (vLLM refuses while requests hold blocks)."""
        if self.asleep:
            self.engine.wake_up(tags=["kv_cache"])
            self.asleep = False
        if not self.engine.reset_prefix_cache():
            raise RuntimeError("vLLM did not reset its prefix cache: requests are still running. Load weights "
                               "only between rollouts (close every running batch first)")

    def _load_adapter(self, adapters: Mapping[str, Any]) -> None:
        """One adapter version: written in PEFT's format, added to the engine as a new LoRA request that every
        request from now on carries, the previous version removed (engine and directory)."""
        if self.config.lora is None:
            raise PluginError(f"load_weights got LoRA adapter weights ({next(iter(adapters))}, ...) but the engine "
                              "was built without LoRA: the trainer sets backend_options.lora from model.lora. Build "
                              "the backend through the trainer, or pass lora={r, alpha, target_modules}")
        start = time.perf_counter()
        version = next(self._lora_versions)
        if self._lora_dir is None:
            self._lora_dir = Path(tempfile.mkdtemp(prefix="agentgym-vllm-lora-"))
            weakref.finalize(self, shutil.rmtree, self._lora_dir, ignore_errors=True)
        path = self._lora_dir / f"v{version}"
        total = write_peft_adapter(path, adapters, self.config.lora, base_model=self.config.model)
        from vllm.lora.request import LoRARequest

        request = LoRARequest(
            lora_name=f"agentgym-{self._prefix}-v{version}", lora_int_id=version, lora_path=str(path))
        with self._lock:
            if self._owners:
                raise RuntimeError(f"load_weights with {len(self._owners)} request(s) still running: load weights "
                                   "only between rollouts (close every running batch first)")
            if self.asleep:
                self.engine.wake_up(tags=["weights"])
            old, self.lora_request = self.lora_request, None
            if old is not None:  # vLLM keeps an adapter until told; one version at a time (max_loras=1)
                self.engine.remove_lora(old.lora_int_id)
                shutil.rmtree(old.lora_path, ignore_errors=True)
            if not self.engine.add_lora(request):
                raise RuntimeError(f"vLLM did not add the LoRA adapter at {path}")
            self.lora_request = request
            self._ready_after_load()
        seconds = time.perf_counter() - start
        self.weight_syncs.append({"seconds": seconds, "buckets": 1.0, "bytes": float(total)})
        log.info("vllm: loaded LoRA adapter v%d (%.1f KB) in %.3fs", version, total / 2**10, seconds)


_PEFT_ADAPTER_NAME = re.compile(r"\.(lora_[AB])\.[^.]+\.weight$")  # ...q_proj.lora_A.<adapter name>.weight


def write_peft_adapter(path: Path, adapters: Mapping[str, Any], lora: Any, *, base_model: str) -> int:
    """Write ``adapters`` (a peft model's adapter tensors, by the learner's names) to ``path`` as PEFT saves
    an adapter: ``adapter_config.json`` and ``adapter_model.safetensors`` with the adapter's name dropped
    from each tensor's (``...q_proj.lora_A.weight``, what vLLM parses). Returns the tensors' bytes."""
    from safetensors.torch import save_file

    tensors = {}
    for name, tensor in adapters.items():
        saved = _PEFT_ADAPTER_NAME.sub(r".\1.weight", name)
        if saved == name:
            raise PluginError(f"load_weights got {name} beside LoRA adapters: vLLM takes lora_A and lora_B weights "
                              "of linear layers only. Keep model.lora.target_modules to linear layers")
        tensors[saved] = tensor.detach().to("cpu").contiguous()
    path.mkdir(parents=True)
    save_file(tensors, str(path / "adapter_model.safetensors"))
    (path / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": base_model, "r": lora.r,
        "lora_alpha": lora.alpha, "lora_dropout": lora.dropout, "target_modules": list(lora.target_modules),
        "bias": "none", "fan_in_fan_out": False, "use_rslora": False, "use_dora": False, "modules_to_save": None,
    }, indent=1))
    return sum(t.numel() * t.element_size() for t in tensors.values())


def prompt_logprob_row(sequence: Sequence[int], prompt_logprobs: Sequence[Any]) -> list[float]:
    """Entry i = log p(seq[i] | seq[:i]) from vLLM's per-position ``{token_id: Logprob}`` dicts (first is None)."""
    row = [0.0]
    for position, token in enumerate(sequence[1:], start=1):
        entry = prompt_logprobs[position]
        if entry is None or token not in entry:
            raise RuntimeError(f"vLLM returned no prompt log-prob for token {token} at position {position}")
        row.append(float(entry[token].logprob))
    return row


class EngineBatch:
    """A :class:`agentgym_core.rollout.RunningBatch` of requests on the backend's shared engine."""

    def __init__(self, backend: VllmEngineBackend, params: SamplingParams) -> None:
        self.backend, self.params = backend, params
        self._keys: dict[str, Hashable] = {}  # request id -> caller's key, while decoding
        self._outputs: list[Any] = []  # finished RequestOutputs not yet returned
        self._seeds = RowSeeds(params.seed)  # per reply, from (seed, key, turn): not from the add order
        self._closed = False

    @property
    def active(self) -> int:
        return len(self._keys)

    @property
    def pending_outputs(self) -> int:
        return len(self._outputs)

    def add(self, key: Hashable, prompt: Sequence[int], *, max_new_tokens: int, session: Hashable | None = None) -> None:
        if self._closed:
            raise RuntimeError("add() on a closed batch; open a new one with open_batch()")
        cap = self.backend.request_cap(len(prompt), max_new_tokens, self.params.max_new_tokens)
        sampling = self.backend.vllm_params(self.params, cap, seed=self._seeds.next(key))
        self._keys[self.backend._submit(self, prompt, sampling)] = key

    def add_scoring(self, key: Hashable, sequence: Sequence[int]) -> str:
        """Queue ``sequence`` for its prompt log-probs (one token is sampled and ignored)."""
        sampling = self.backend.vllm_params(self.params, 1, seed=0, prompt_logprobs=True)
        request_id = self.backend._submit(self, sequence, sampling)
        self._keys[request_id] = key
        return request_id

    def deliver(self, output: Any) -> None:
        """Called by the backend when one of this batch's requests finished."""
        self._outputs.append(output)

    def take_outputs(self) -> list[Any]:
        outputs, self._outputs = self._outputs, []
        for output in outputs:
            self._keys.pop(output.request_id, None)
        return outputs

    def step(self) -> list[tuple[Hashable, Sample]]:
        """One engine step; returns ``(key, reply)`` for this batch's requests that finished."""
        if not self._outputs:
            self.backend._advance()
        done = []
        for output in self._outputs:
            key = self._keys.pop(output.request_id)
            done.append((key, self._sample(output)))
        self._outputs = []
        return done

    def _sample(self, output: Any) -> Sample:
        completion = output.outputs[0]
        ids = [int(t) for t in completion.token_ids]
        if completion.logprobs is None or len(completion.logprobs) != len(ids):
            raise RuntimeError(f"vLLM returned {0 if completion.logprobs is None else len(completion.logprobs)} "
                               f"log-prob entries for {len(ids)} tokens (logprobs=0 was requested)")
        logprobs = [float(entry[token].logprob) for entry, token in zip(completion.logprobs, ids, strict=True)]
        reason = finish_reason(ids, completion.finish_reason, self.backend.eos_token_ids)
        return Sample(token_ids=ids, logprobs=logprobs, finish_reason=reason)  # type: ignore[arg-type]

    def close(self) -> None:
        """Abort what is still decoding; the last batch closed puts a colocated engine to sleep."""
        if self._closed:
            return
        self._closed = True
        self.backend._forget(list(self._keys))
        self._keys.clear()
        self._outputs = []
        self.backend._batch_closed()
