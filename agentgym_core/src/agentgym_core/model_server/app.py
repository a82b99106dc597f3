"""Serve a local model over the OpenAI-compatible HTTP API (``agentgym serve-model``).

Routes (all JSON; errors use OpenAI's shape ``{"error": {"message", "type", "param", "code"}}``):

=========================  ================================================================
``POST /v1/chat/completions``  messages in, ``choices[].message.content`` out, with
                           ``finish_reason`` (``stop`` | ``length``) and ``usage``
``POST /v1/completions``   a raw prompt string in (no chat template), ``choices[].text`` out
``GET  /v1/models``        the one served model; ``GET /v1/models/{id}`` too
``GET  /health``           ``{"status": "ok"}`` once the model is loaded
=========================  ================================================================

It also answers vLLM's token-in/token-out route (``POST /inference/v1/generate``) and its control
routes (sleep, wake, pause, resume, reset prefix cache, weight loading), so it stands in for a
``vllm serve`` replica: see :mod:`agentgym_core.model_server.tokens`.

The server wraps any :class:`agentgym_core.rollout.RolloutBackend`: the backend's own chat
template renders the messages, its ``generate`` samples. Requests that arrive while the model is
busy are queued and sampled together in one batched ``generate`` call as soon as it is free (no
waiting window): concurrent agents share forward passes instead of taking turns. Requests with a
``seed`` are sampled on their own, so the same seed and messages always give the same reply.

Unsupported OpenAI features (streaming, tools, logit bias, penalties, top_logprobs) answer 400
with a message naming the parameter, rather than being silently ignored.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import queue
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator
from starlette.exceptions import HTTPException as StarletteHTTPException

from agentgym_core.http.auth import bearer_matches
from agentgym_core.model_server.errors import OpenAIError
from agentgym_core.model_server.tokens import GENERATE_ROUTE, add_token_routes
from agentgym_core.rollout.backend import RolloutBackend, Sample, SamplingParams

__all__ = [
    "ChatCompletionRequest",
    "CompletionRequest",
    "GenerationQueue",
    "ModelServerConfig",
    "OpenAIError",
    "create_model_app",
]


class ModelServerConfig(BaseModel):
    """How `agentgym serve-model` serves one model."""

    model_config = ConfigDict(extra="forbid")

    model_name: str = Field(description="The model id clients send as `model` and `GET /v1/models` lists.")
    max_batch_size: int = Field(default=32, ge=1, description="Most sequences sampled together in one call.")
    default_max_tokens: int = Field(
        default=512, ge=1, description="Reply cap when a request gives neither max_tokens nor max_completion_tokens."
    )
    max_context_tokens: int | None = Field(
        default=None, ge=1,
        description="Prompt + reply limit (the model's context length); longer prompts answer 400 "
        "context_length_exceeded, replies are capped to fit. None: no limit.",
    )
    max_n: int = Field(default=16, ge=1, description="Largest `n` (choices per request) accepted.")
    api_key: str | None = Field(
        default=None, description="If set, requests must send `Authorization: Bearer <api_key>` (else 401)."
    )
    control_routes: bool = Field(
        default=True,
        description="Serve the control routes of a vLLM replica (/sleep, /wake_up, /pause, /resume, "
        "/reset_prefix_cache, /collective_rpc weight loading); false serves only the sampling routes.",
    )


# -- OpenAI request bodies -----------------------------------------------------------------------
class _ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    """One message; ``content`` may be a string or a list of ``{"type": "text", "text": ...}`` parts."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[_ContentPart] | None = None
    name: str | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        for part in self.content:
            if part.type != "text" or part.text is None:
                raise OpenAIError(400, f"content part of type {part.type!r} is not supported; only text parts are",
                                  param="messages")
        return "".join(part.text or "" for part in self.content)


class _SamplingFields(BaseModel):
    """Fields shared by chat and text completions (OpenAI names; top_k as vLLM's extension)."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(description="Served model id (see GET /v1/models).")
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=0, ge=0, description="Not in OpenAI's API; 0 disables it.")
    max_tokens: int | None = Field(default=None, ge=1)
    n: int = Field(default=1, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    logprobs: Any = None
    # Accepted for compatibility, only at the value that means "off".
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[str, float] | None = None
    user: str | None = None

    @field_validator("stop")
    @classmethod
    def _at_most_four(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list) and len(value) > 4:
            raise ValueError(f"at most 4 stop sequences, got {len(value)}")
        return value

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else [s for s in self.stop if s]

    def unsupported(self) -> tuple[str, str] | None:
        """(param, reason) of the first parameter this server cannot honour."""
        if self.stream:
            return "stream", "streaming is not supported; send stream=false"
        if self.presence_penalty or self.frequency_penalty:
            name = "presence_penalty" if self.presence_penalty else "frequency_penalty"
            return name, f"{name} is not supported; leave it at 0"
        if self.logit_bias:
            return "logit_bias", "logit_bias is not supported"
        return None


class ChatCompletionRequest(_SamplingFields):
    """Body of ``POST /v1/chat/completions``."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    top_logprobs: int | None = Field(default=None, ge=0)
    tools: list[Any] | None = None
    tool_choice: Any = None
    response_format: dict[str, Any] | None = None

    def unsupported(self) -> tuple[str, str] | None:
        if self.tools:
            return "tools", "tool calls are not supported; describe actions in the messages instead"
        if self.tool_choice not in (None, "none"):
            return "tool_choice", "tool calls are not supported"
        if self.response_format and self.response_format.get("type", "text") != "text":
            return "response_format", "only response_format {'type': 'text'} is supported"
        if self.top_logprobs:
            return "top_logprobs", "top_logprobs is not supported; logprobs=true gives the sampled tokens' log-probs"
        if self.logprobs not in (None, False, True):
            return "logprobs", "logprobs must be true or false for chat completions"
        return super().unsupported()


class CompletionRequest(_SamplingFields):
    """Body of ``POST /v1/completions`` (the prompt is used as is, without a chat template)."""

    prompt: str | list[str]
    echo: bool = False

    def unsupported(self) -> tuple[str, str] | None:
        if self.echo:
            return "echo", "echo is not supported"
        if self.logprobs not in (None, 0, False):
            return "logprobs", "logprobs are only supported on /v1/chat/completions"
        return super().unsupported()


# -- batching ------------------------------------------------------------------------------------
@dataclass
class _Job:
    prompt_ids: list[int]
    n: int
    params: SamplingParams
    max_new_tokens: int
    future: Future = field(default_factory=Future)


class GenerationQueue:
    """Feeds queued requests to one backend from one thread, batching whatever is waiting.

    ``submit`` returns a future of the job's ``n`` samples. The worker takes the first waiting
    job, then every other waiting job with the same sampling settings (up to ``max_batch_size``
    sequences), and samples them all in one ``generate`` call. Seeded jobs run alone, so their
    samples do not depend on which other requests happened to arrive at the same time.
    """

    def __init__(self, backend: RolloutBackend, *, max_batch_size: int = 32) -> None:
        self.backend, self.max_batch_size = backend, max_batch_size
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self.batches: list[int] = []  # sequences per generate call, for tests and stats

    def submit(self, prompt_ids: list[int], params: SamplingParams, *, n: int = 1,
               max_new_tokens: int | None = None) -> Future:
        job = _Job(prompt_ids, n, params, max_new_tokens or params.max_new_tokens)
        self._queue.put(job)
        return job.future

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="agentgym-model", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=30)
            self._thread = None

    @staticmethod
    def _key(job: _Job) -> Any:
        p = job.params
        return id(job) if p.seed is not None else (p.temperature, p.top_p, p.top_k, tuple(p.stop))

    def _loop(self) -> None:
        pending: collections.deque[_Job | None] = collections.deque()
        while True:
            if not pending:
                pending.append(self._queue.get())
            while True:  # everything already waiting: no timer, the model never idles for batching
                try:
                    pending.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            first = pending.popleft()
            if first is None:
                for job in pending:
                    if job is not None:
                        job.future.set_exception(RuntimeError("the model server is shutting down"))
                return
            batch, size, key, rest = [first], first.n, self._key(first), collections.deque()
            while pending:
                job = pending.popleft()
                if job is not None and self._key(job) == key and size + job.n <= self.max_batch_size:
                    batch.append(job)
                    size += job.n
                else:
                    rest.append(job)
            pending = rest
            self._run(batch)

    def _run(self, batch: list[_Job]) -> None:
        prompts = [job.prompt_ids for job in batch for _ in range(job.n)]
        caps = [job.max_new_tokens for job in batch for _ in range(job.n)]
        params = batch[0].params.model_copy(update={"max_new_tokens": max(caps)})
        self.batches.append(len(prompts))
        try:
            samples = self.backend.generate(prompts, params, max_new_tokens=caps)
        except Exception as exc:  # noqa: BLE001 -- every waiting request must hear about it
            for job in batch:
                job.future.set_exception(exc)
            return
        start = 0
        for job in batch:
            job.future.set_result(samples[start:start + job.n])
            start += job.n


# -- the app ---------------------------------------------------------------------------------------
def _reply_text(backend: RolloutBackend, sample: Sample, stops: Sequence[str]) -> tuple[str, str]:
    """(content, OpenAI finish_reason): the end-of-turn token dropped, text cut before a stop string."""
    ids = list(sample.token_ids)
    if ids and ids[-1] in backend.eos_token_ids:
        ids = ids[:-1]
    text = backend.decode(ids)
    if stops:
        cuts = [text.find(s) for s in stops if s in text]
        if cuts:
            return text[: min(cuts)], "stop"
    return text, "length" if sample.finish_reason == "length" else "stop"


def _logprobs_payload(backend: RolloutBackend, sample: Sample) -> dict[str, Any]:
    content = []
    for token_id, logprob in zip(sample.token_ids, sample.logprobs, strict=True):
        token = backend.decode([token_id])
        content.append({"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8")),
                        "top_logprobs": []})
    return {"content": content}


def create_model_app(backend: RolloutBackend, config: ModelServerConfig | Mapping[str, Any]) -> FastAPI:
    """A FastAPI app serving ``backend`` over the OpenAI-compatible API (see the module docstring)."""
    if not isinstance(config, ModelServerConfig):
        config = ModelServerConfig.model_validate(dict(config))
    cfg = config
    generation = GenerationQueue(backend, max_batch_size=cfg.max_batch_size)
    created = int(time.time())

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI):
        generation.start()
        try:
            yield
        finally:
            generation.stop()

    app = FastAPI(title=f"agentgym serve-model: {cfg.model_name}", lifespan=lifespan)
    app.state.generation = generation
    app.state.config = cfg

    @app.exception_handler(OpenAIError)
    async def _openai_error(_request: Request, exc: OpenAIError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {}
        loc = [str(p) for p in first.get("loc", ()) if p != "body"]
        if first.get("type") == "json_invalid":
            return OpenAIError(400, "the request body is not valid JSON: " + str(first.get("msg", "")),
                               code="invalid_json").response()
        if first.get("type") == "extra_forbidden":
            return OpenAIError(400, f"unrecognized request argument supplied: {'.'.join(loc)}",
                               param=".".join(loc) or None, code="unknown_parameter").response()
        if not loc:
            return OpenAIError(400, "the request body must be a JSON object (send Content-Type: application/json): "
                               + str(first.get("msg", "")), code="invalid_json").response()
        details = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()) if p != 'body') or 'body'}: {e.get('msg')}" for e in errors
        )
        return OpenAIError(400, f"invalid request: {details}", param=".".join(loc) or None).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404:
            message = (f"unknown route {request.method} {request.url.path}; this server answers "
                       f"POST /v1/chat/completions, POST /v1/completions, GET /v1/models, POST {GENERATE_ROUTE}"
                       + (" and the control routes" if cfg.control_routes else ""))
            return OpenAIError(404, message, code="unknown_url").response()
        return OpenAIError(exc.status_code, str(exc.detail)).response()

    @app.middleware("http")
    async def _auth(request: Request, call_next):
        path = request.url.path
        # Every route but /health (a liveness probe that tells only the model's name) needs the key.
        if cfg.api_key and path != "/health":
            given = request.headers.get("authorization", "")
            if not bearer_matches(given.encode("latin-1"), cfg.api_key):
                what = "no API key was sent" if not given else "the API key is wrong"
                return OpenAIError(401, f"{what}: send the header 'Authorization: Bearer <key>' with the key this "
                                   "server was started with (--api-key)", code="invalid_api_key").response()
        return await call_next(request)

    def check_model(name: str) -> None:
        if name != cfg.model_name:
            raise OpenAIError(404, f"the model {name!r} does not exist on this server; it serves "
                              f"{cfg.model_name!r}", param="model", code="model_not_found")

    def plan(body: _SamplingFields, prompt_ids: list[int], max_tokens: int | None) -> tuple[SamplingParams, int]:
        bad = body.unsupported()
        if bad is not None:
            raise OpenAIError(400, bad[1], param=bad[0], code="unsupported_parameter")
        if body.n > cfg.max_n:
            raise OpenAIError(400, f"n must be at most {cfg.max_n}, got {body.n}", param="n")
        if not prompt_ids:
            raise OpenAIError(400, "the prompt is empty", param="messages")
        cap = max_tokens or cfg.default_max_tokens
        if cfg.max_context_tokens is not None:
            room = cfg.max_context_tokens - len(prompt_ids)
            if room < 1:
                raise OpenAIError(400, f"the prompt has {len(prompt_ids)} tokens; this model's context is "
                                  f"{cfg.max_context_tokens} tokens. Shorten the messages.",
                                  param="messages", code="context_length_exceeded")
            cap = min(cap, room)
        params = SamplingParams(temperature=body.temperature, top_p=body.top_p, top_k=body.top_k,
                                max_new_tokens=cap, stop=body.stop_list(), seed=body.seed)
        return params, cap

    async def sample(prompt_ids: list[int], params: SamplingParams, n: int, cap: int) -> list[Sample]:
        future = generation.submit(prompt_ids, params, n=n, max_new_tokens=cap)
        try:
            return await asyncio.wrap_future(future)
        except Exception as exc:  # noqa: BLE001 -- answered as a 500 in OpenAI's shape
            raise OpenAIError(500, f"generation failed: {type(exc).__name__}: {exc}") from exc

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok", "model": cfg.model_name}

    def model_card() -> dict[str, Any]:
        return {"id": cfg.model_name, "object": "model", "created": created, "owned_by": "agentgym",
                "max_model_len": cfg.max_context_tokens}

    @app.get("/v1/models")
    async def list_models() -> dict[str, Any]:
        return {"object": "list", "data": [model_card()]}

    @app.get("/v1/models/{model_id:path}")
    async def get_model(model_id: str) -> dict[str, Any]:
        check_model(model_id)
        return model_card()

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionRequest) -> dict[str, Any]:
        check_model(body.model)
        messages = [{"role": "system" if m.role == "developer" else m.role, "content": m.text()}
                    for m in body.messages]
        try:
            prompt_ids = backend.encode(backend.apply_chat_template(messages, add_generation_prompt=True))
        except Exception as exc:  # noqa: BLE001 -- templates raise for orders they do not support
            raise OpenAIError(400, f"the model's chat template cannot render these messages: {exc}",
                              param="messages") from exc
        params, cap = plan(body, prompt_ids, body.max_completion_tokens or body.max_tokens)
        samples = await sample(prompt_ids, params, body.n, cap)
        choices = []
        for index, s in enumerate(samples):
            content, finish = _reply_text(backend, s, params.stop)
            choice: dict[str, Any] = {"index": index, "message": {"role": "assistant", "content": content},
                                      "finish_reason": finish, "logprobs": None}
            if body.logprobs:
                choice["logprobs"] = _logprobs_payload(backend, s)
            choices.append(choice)
        completion = sum(len(s.token_ids) for s in samples)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion", "created": int(time.time()),
            "model": cfg.model_name, "choices": choices, "system_fingerprint": None,
            "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": completion,
                      "total_tokens": len(prompt_ids) + completion},
        }

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest) -> dict[str, Any]:
        check_model(body.model)
        prompts = [body.prompt] if isinstance(body.prompt, str) else body.prompt
        if not prompts:
            raise OpenAIError(400, "prompt must not be an empty list", param="prompt")
        encoded = [backend.encode(p) for p in prompts]
        planned = [plan(body, ids, body.max_tokens) for ids in encoded]
        results = await asyncio.gather(*(sample(ids, params, body.n, cap)
                                         for ids, (params, cap) in zip(encoded, planned, strict=True)))
        choices = []
        for samples, (params, _cap) in zip(results, planned, strict=True):
            for s in samples:
                text, finish = _reply_text(backend, s, params.stop)
                choices.append({"index": len(choices), "text": text, "finish_reason": finish, "logprobs": None})
        prompt_tokens = sum(len(ids) for ids in encoded)
        completion = sum(len(s.token_ids) for samples in results for s in samples)
        return {
            "id": f"cmpl-{uuid.uuid4().hex[:24]}", "object": "text_completion", "created": int(time.time()),
            "model": cfg.model_name, "choices": choices,
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
                      "total_tokens": prompt_tokens + completion},
        }

    add_token_routes(app, backend, submit=generation.submit, model_name=cfg.model_name,
                     default_max_tokens=cfg.default_max_tokens, max_context_tokens=cfg.max_context_tokens,
                     control=cfg.control_routes)
    return app
