"""Token-in/token-out and control routes of ``agentgym serve-model``, in vLLM's wire format.

With these routes ``agentgym serve-model`` answers what a rollout backend asks of a ``vllm serve``
replica, so it stands in for one on a machine without a GPU (and in tests):

=================================  ===================================================================
``POST /inference/v1/generate``    ``{"token_ids": [...], "sampling_params": {...}}`` -> ``choices[0]``
                                   with ``token_ids``, ``logprobs.content[].logprob`` (when
                                   ``logprobs`` is set), ``finish_reason`` (``stop`` | ``length``);
                                   ``prompt_logprobs`` when asked (``[null, {"id": {"logprob"}}, ...]``)
``POST /sleep?level=N``            mark the model asleep (generation answers 409 until woken)
``POST /wake_up?tags=T``           wake ``weights`` and/or ``kv_cache`` (no tag: both)
``GET  /is_sleeping``              ``{"is_sleeping": bool}``
``POST /pause?mode=wait``          hold new generation (``wait`` lets in-flight requests finish first)
``POST /resume``, ``GET /is_paused``
``POST /reset_prefix_cache``       drop cached prefixes (this server batches without keeping any)
``POST /collective_rpc``           ``{"method": "agentgym_load_weights_bytes", "args": [base64]}``: load
                                   (some of) the model's weights in place from safetensors bytes sent
                                   in the request; ``agentgym_load_weights_file`` (``[path]``): from a
                                   safetensors file;
                                   ``agentgym_begin_weight_update`` / ``agentgym_finish_weight_update``
                                   (no args) bracket one update's files, as on the vLLM worker;
                                   ``agentgym_sampling_setup`` (no args): device, dtype and kernels
=================================  ===================================================================

vLLM serves the control routes only with ``VLLM_SERVER_DEV_MODE=1``; this server serves them
unless started with ``--no-control-routes``, and guards them with ``--api-key`` when one is set.
``app.state.control_calls`` records the control calls in order (tests assert the order).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from agentgym_core.rollout.backend import RolloutBackend, Sample, SamplingParams

__all__ = ["CONTROL_ROUTES", "LOAD_WEIGHTS_BYTES_METHOD", "LOAD_WEIGHTS_FILE_METHOD", "SAMPLING_SETUP_METHOD",
           "WEIGHT_UPDATE_BRACKETS", "GenerateTokensRequest", "add_token_routes"]

LOAD_WEIGHTS_FILE_METHOD = "agentgym_load_weights_file"
"""The ``collective_rpc`` method that loads weights (the vLLM backend's worker extension has it too)."""

LOAD_WEIGHTS_BYTES_METHOD = "agentgym_load_weights_bytes"
"""The ``collective_rpc`` method that loads weights sent in the request (base64 safetensors bytes; the vLLM
backend's worker extension has it too)."""

WEIGHT_UPDATE_BRACKETS = frozenset({"agentgym_begin_weight_update", "agentgym_finish_weight_update"})
"""``collective_rpc`` methods (no arguments) around one update's files. vLLM's worker needs them to re-run
its layerwise weight processing; this server loads each file completely, so it only records them."""

SAMPLING_SETUP_METHOD = "agentgym_sampling_setup"
"""``collective_rpc`` method (no arguments): what the server samples on (its backend's ``sampling_setup``:
device, dtype, kernels), as the vLLM backend's worker extension answers it."""

CONTROL_ROUTES = frozenset({"/sleep", "/wake_up", "/is_sleeping", "/pause", "/resume", "/is_paused",
                            "/reset_prefix_cache", "/collective_rpc"})
GENERATE_ROUTE = "/inference/v1/generate"


class TokenSamplingParams(BaseModel):
    """``sampling_params`` of a generate request: the vLLM fields this server honours (others answer 400)."""

    model_config = ConfigDict(extra="forbid")

    n: int = Field(default=1, ge=1, le=1, description="Choices per request; this server samples one.")
    temperature: float = Field(default=1.0, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=0, ge=-1, description="0 or -1: off.")
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = Field(default=None, description="Must be among the model's EOS ids.")
    max_tokens: int | None = Field(default=None, ge=1)
    logprobs: int | None = Field(default=None, ge=0, le=0, description="0: the sampled token's log-prob.")
    prompt_logprobs: int | None = Field(default=None, ge=0, le=0, description="0: each prompt token's log-prob.")
    skip_special_tokens: bool = True
    detokenize: bool = True

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else [s for s in self.stop if s]


class GenerateTokensRequest(BaseModel):
    """Body of ``POST /inference/v1/generate`` (vLLM's ``GenerateRequest``, without streaming or features)."""

    model_config = ConfigDict(extra="forbid")

    token_ids: list[int] = Field(min_length=1)
    sampling_params: TokenSamplingParams = Field(default_factory=TokenSamplingParams)
    model: str | None = None
    request_id: str | None = None
    stream: bool = False
    cache_salt: str | None = None
    priority: int = 0


class ControlState:
    """Sleep, pause and in-flight bookkeeping of one served model."""

    def __init__(self) -> None:
        self.sleeping: set[str] = set()
        self.paused = False
        self.in_flight = 0
        self.calls: list[tuple[Any, ...]] = []


def _finish_reason(sample: Sample) -> str:
    return "length" if sample.finish_reason == "length" else "stop"


def _prompt_logprobs(backend: RolloutBackend, prompt: Sequence[int]) -> list[dict[str, Any] | None]:
    row = backend.score([list(prompt)], temperature=1.0)[0]
    return [None] + [{str(token): {"logprob": lp, "rank": None, "decoded_token": backend.decode([token])}}
                     for token, lp in zip(prompt[1:], row[1:], strict=True)]


def add_token_routes(app: FastAPI, backend: RolloutBackend, *, submit: Any, model_name: str,
                     default_max_tokens: int, max_context_tokens: int | None, control: bool = True) -> None:
    """Add the generate route (and, with ``control``, the control routes) to a serve-model app.

    ``submit(prompt_ids, params, n=, max_new_tokens=)`` is the app's generation queue; it returns a
    future of the samples.
    """
    from agentgym_core.model_server.errors import OpenAIError

    state = ControlState()
    app.state.control_calls = state.calls

    @app.post(GENERATE_ROUTE)
    async def generate_tokens(body: GenerateTokensRequest) -> dict[str, Any]:
        if body.model is not None and body.model != model_name:
            raise OpenAIError(404, f"the model {body.model!r} does not exist on this server; it serves "
                              f"{model_name!r}", param="model", code="model_not_found")
        if body.stream:
            raise OpenAIError(400, "streaming is not supported; send stream=false", param="stream")
        sp = body.sampling_params
        unknown_stops = set(sp.stop_token_ids or ()) - set(backend.eos_token_ids)
        if unknown_stops:
            raise OpenAIError(400, f"stop_token_ids {sorted(unknown_stops)} are not EOS ids of this model "
                              f"({sorted(backend.eos_token_ids)}); only those can end a reply here",
                              param="sampling_params.stop_token_ids")
        prompt = body.token_ids
        cap = sp.max_tokens or default_max_tokens
        if max_context_tokens is not None:
            room = max_context_tokens - len(prompt)
            if room < 1:
                raise OpenAIError(400, f"the prompt has {len(prompt)} tokens; this model's context is "
                                  f"{max_context_tokens} tokens", param="token_ids", code="context_length_exceeded")
            cap = min(cap, room)
        while state.paused:  # held, as vLLM holds requests while paused
            await asyncio.sleep(0.01)
        if state.sleeping:
            raise OpenAIError(409, f"the model sleeps ({sorted(state.sleeping)}); POST /wake_up first",
                              code="model_sleeping")
        params = SamplingParams(temperature=sp.temperature, top_p=sp.top_p, top_k=max(sp.top_k, 0),
                                max_new_tokens=cap, stop=sp.stop_list(), seed=sp.seed)
        state.in_flight += 1
        try:
            samples = await asyncio.wrap_future(submit(prompt, params, n=1, max_new_tokens=cap))
            prompt_logprobs = None
            if sp.prompt_logprobs is not None:
                prompt_logprobs = await asyncio.to_thread(_prompt_logprobs, backend, prompt)
        except OpenAIError:
            raise
        except Exception as exc:  # noqa: BLE001 -- answered as a 500 in OpenAI's shape
            raise OpenAIError(500, f"generation failed: {type(exc).__name__}: {exc}") from exc
        finally:
            state.in_flight -= 1
        sample = samples[0]
        logprobs = None
        if sp.logprobs is not None:
            logprobs = {"content": [{"token": backend.decode([t]), "logprob": lp, "bytes": None, "top_logprobs": []}
                                    for t, lp in zip(sample.token_ids, sample.logprobs, strict=True)]}
        return {
            "request_id": body.request_id or "", "model": model_name, "prompt_logprobs": prompt_logprobs,
            "choices": [{"index": 0, "token_ids": list(sample.token_ids), "logprobs": logprobs,
                         "finish_reason": _finish_reason(sample)}],
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(sample.token_ids),
                      "total_tokens": len(prompt) + len(sample.token_ids)},
        }

    if not control:
        return

    @app.post("/sleep")
    async def sleep(level: int = Query(default=1, ge=1, le=2)) -> dict[str, Any]:
        state.calls.append(("sleep", level))
        state.sleeping = {"weights", "kv_cache"}
        return {"status": "sleeping", "level": level}

    @app.post("/wake_up")
    async def wake_up(request: Request) -> dict[str, Any]:
        tags = request.query_params.getlist("tags") or ["weights", "kv_cache"]
        bad = sorted(set(tags) - {"weights", "kv_cache"})
        if bad:
            raise OpenAIError(400, f"unknown wake_up tags {bad}; use weights and/or kv_cache", param="tags")
        state.calls.append(("wake_up", tuple(request.query_params.getlist("tags")) or None))
        state.sleeping -= set(tags)
        return {"status": "awake" if not state.sleeping else "partly awake", "sleeping": sorted(state.sleeping)}

    @app.get("/is_sleeping")
    async def is_sleeping() -> dict[str, bool]:
        return {"is_sleeping": bool(state.sleeping)}

    @app.post("/pause")
    async def pause(mode: str = Query(default="abort")) -> dict[str, str]:
        if mode not in ("abort", "wait", "keep"):
            raise OpenAIError(400, f"mode must be abort, wait or keep, got {mode!r}", param="mode")
        state.calls.append(("pause", mode))
        state.paused = True
        while state.in_flight:  # requests already sampling finish (this server cannot abort a batch midway)
            await asyncio.sleep(0.01)
        return {"status": "paused"}

    @app.post("/resume")
    async def resume() -> dict[str, str]:
        state.calls.append(("resume",))
        state.paused = False
        return {"status": "resumed"}

    @app.get("/is_paused")
    async def is_paused() -> dict[str, bool]:
        return {"is_paused": state.paused}

    @app.post("/reset_prefix_cache")
    async def reset_prefix_cache() -> dict[str, str]:
        state.calls.append(("reset_prefix_cache",))
        return {"status": "reset"}

    @app.post("/collective_rpc")
    async def collective_rpc(request: Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except ValueError:
            raise OpenAIError(400, "the request body is not valid JSON", code="invalid_json") from None
        method = body.get("method") if isinstance(body, dict) else None
        if method in WEIGHT_UPDATE_BRACKETS:
            state.calls.append(("collective_rpc", method))
            return {"results": [None]}
        if method == SAMPLING_SETUP_METHOD:  # what this replica samples on, as vLLM's worker extension says it
            return {"results": [dict(getattr(backend, "sampling_setup", None) or {})]}
        loaders = {LOAD_WEIGHTS_FILE_METHOD: _load_file, LOAD_WEIGHTS_BYTES_METHOD: _load_bytes}
        if method not in loaders:
            known = sorted({*loaders, *WEIGHT_UPDATE_BRACKETS, SAMPLING_SETUP_METHOD})
            raise OpenAIError(400, f"this server runs only the collective_rpc methods {known}, got {method!r}",
                              param="method")
        args = body.get("args") or []
        if len(args) != 1 or not isinstance(args[0], str):
            what = "the path of a safetensors file" if method == LOAD_WEIGHTS_FILE_METHOD else \
                "safetensors bytes in base64"
            raise OpenAIError(400, f"{method} takes one argument: {what}", param="args")
        if "weights" in state.sleeping:
            raise OpenAIError(409, "the weights sleep; POST /wake_up?tags=weights before loading weights",
                              code="model_sleeping")
        state.calls.append(("collective_rpc", method))
        try:
            count = await asyncio.to_thread(loaders[method], backend, args[0])
        except (OSError, KeyError, ValueError, RuntimeError) as exc:
            shown = repr(args[0]) if method == LOAD_WEIGHTS_FILE_METHOD else f"{len(args[0])} characters of base64"
            raise OpenAIError(400, f"cannot load weights from {shown}: {type(exc).__name__}: {exc}",
                              param="args") from exc
        return {"results": [count]}


def _load_bytes(backend: RolloutBackend, payload: str) -> int:
    import base64
    import binascii

    from safetensors.torch import load

    try:
        weights = load(base64.b64decode(payload, validate=True))
    except binascii.Error as exc:
        raise ValueError(f"not base64: {exc}") from exc
    backend.load_weights(weights)
    return len(weights)


def _load_file(backend: RolloutBackend, path: str) -> int:
    from safetensors.torch import load_file

    weights = load_file(path, device="cpu")
    backend.load_weights(weights)
    return len(weights)
