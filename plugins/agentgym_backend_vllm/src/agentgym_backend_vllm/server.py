"""Server mode: ``vllm serve`` replicas over HTTP, token in and token out; this process never imports vllm.

Routes used (vLLM's own, the same in every release of the pinned range ``vllm>=0.16,<0.34``; the
README's "Pinned versions" names the source file of each per release; the control routes need
``VLLM_SERVER_DEV_MODE=1`` on the server):

==================================  ==================================================================
``POST /inference/v1/generate``     ``{"token_ids", "sampling_params", "model"?}`` -> ``choices[0]``
                                    with ``token_ids``, ``logprobs.content[].logprob``, ``finish_reason``
``GET  /v1/models``                 ``data[0].max_model_len`` caps each request
``POST /sleep?level=N``             free GPU memory
``POST /wake_up?tags=weights``      then ``tags=kv_cache``
``POST /reset_prefix_cache``        after every weight update
``POST /pause?mode=wait``,          hold generation around a weight update (``mode`` exists from 0.16)
``POST /resume``
``POST /collective_rpc``            ``{"method": "agentgym_begin_weight_update"}``, then per bucket
                                    ``{"method": "agentgym_load_weights_bytes", "args": [base64]}``
                                    (the bucket's safetensors bytes in the request: no file), or with
                                    the file transport ``{"method": "agentgym_load_weights_file",
                                    "args": [path]}``, then ``{"method":
                                    "agentgym_finish_weight_update"}`` (JSON arguments only, so tensors
                                    travel as text or by path; in the replicas' dtype when named)
==================================  ==================================================================

Weight transports (``weight_transport``): ``http`` (the default under ``auto``) sends each bucket in the
request, so no file is written and replicas on other machines need no shared disk; ``files`` writes
each bucket where every replica reads it (``weight_dir``; shared memory by default). ``auto`` falls
back to files when the replicas' worker extension lacks the http method. vLLM's own NCCL weight
transfer (``/init_weight_transfer_engine``, ``/update_weights``; a server started with
``--weight-transfer-config``) is not used: its trainer side is vLLM code (``NCCLWeightTransferEngine.
trainer_init``), and this process never imports vllm (see the README's "Weight transports").

A replica must be started with ``--worker-extension-cls
agentgym_backend_vllm.weights.AgentgymWorkerExtension`` for the weight methods to exist, and from
vLLM 0.30 on with ``--enable-scale-out`` for the generate route to answer (403 otherwise).
``agentgym serve-model`` answers the same routes (backed by the transformers backend), so it is
the CPU stand-in for a replica.

Routing: a trajectory's turns (one session key) go to the replica that served its first turn, so
that replica's prefix cache holds its earlier turns; a new session goes to the replica with the
fewest requests in flight.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Hashable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import requests

from agentgym_backend_vllm.config import VllmBackendConfig
from agentgym_backend_vllm.tokenizer import ModelTokenizer, finish_reason, request_cap
from agentgym_backend_vllm.weights import (
    BEGIN_METHOD,
    FINISH_METHOD,
    LOAD_BYTES_METHOD,
    LOAD_FILE_METHOD,
    SETUP_METHOD,
    bucket_payload,
    weight_buckets,
)
from agentgym_core.rollout.backend import (
    RowSeeds,
    Sample,
    SamplingParams,
    generate_with_batch,
    merge_sampling_setups,
)

__all__ = ["ReplicaError", "ServerBatch", "VllmServerBackend"]

log = logging.getLogger(__name__)

GENERATE_ROUTE = "/inference/v1/generate"
_DEV_ROUTES = {"/sleep", "/wake_up", "/reset_prefix_cache", "/pause", "/resume", "/collective_rpc"}


class ReplicaError(RuntimeError):
    """A replica refused a request or could not be reached; the message says which and how to fix it."""


class _Replica:
    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.in_flight = 0


class VllmServerBackend:
    """A :class:`agentgym_core.rollout.ContinuousBackend` over ``vllm serve`` replicas (see the module docstring)."""

    name = "vllm"

    def __init__(self, config: VllmBackendConfig, tokenizer: ModelTokenizer) -> None:
        self.config, self.tokens = config, tokenizer
        self.eos_token_ids = tokenizer.eos_token_ids
        self.replicas = [_Replica(u) for u in config.urls]
        self.asleep = False
        self.weight_syncs: list[dict[str, Any]] = []  # one per load_weights: seconds, buckets, bytes, transport
        self.weight_transport = "files" if config.weight_transport == "files" else "http"  # what the next sync uses
        self._http_confirmed = False  # a sync in the requests went through: later refusals are errors, not fallbacks
        # The replicas' dtype when the recipe names it; else the trainer's choice stands (bfloat16 on a GPU).
        self.weights_dtype = None if config.dtype == "auto" else _torch_dtype(config.dtype)
        self._sessions: dict[Hashable, _Replica] = {}
        self._lock = threading.Lock()
        self._local = threading.local()
        self._pool = ThreadPoolExecutor(max_workers=config.max_concurrent_requests, thread_name_prefix="agentgym-vllm")
        self._open_batches = 0
        self.max_model_len = config.max_model_len or self._served_max_model_len()

    @classmethod
    def from_config(cls, config: VllmBackendConfig) -> VllmServerBackend:
        tokenizer, _path, _dir = ModelTokenizer.load(config.model)
        return cls(config, tokenizer)

    @property
    def sampling_setup(self) -> dict[str, str]:
        """What sampling runs on, written once into a run's metrics as ``rollout/<name>``: every replica's
        workers' device, dtype and attention kernel (the dev route ``/collective_rpc``), and the replicas.
        A replica that cannot say (no dev routes, no worker extension) is logged and counted as unknown: a
        report never stops a run."""
        setups = []
        for replica in self.replicas:
            try:
                answer = self._call(replica, "POST", "/collective_rpc", body={"method": SETUP_METHOD})
                workers = [w for w in (answer or {}).get("results") or [] if isinstance(w, dict)]
            except ReplicaError as exc:
                log.warning("vllm: %s cannot say what it samples on (%s); rollout/* shows it as unknown",
                            replica.url, exc)
                workers = []
            setups.append(merge_sampling_setups(workers) if workers else {"attention_kernel": "unknown"})
        return {"decode_engine": "vllm serve", **merge_sampling_setups(setups, engine="replica"),
                "server": ", ".join(r.url for r in self.replicas)}

    # -- tokenizer side -------------------------------------------------------------------------
    def apply_chat_template(self, messages: Sequence[Mapping[str, str]], *, add_generation_prompt: bool,
                            tools: Sequence[Mapping[str, Any]] | None = None) -> str:
        return self.tokens.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tools=tools)

    def encode(self, text: str) -> list[int]:
        return self.tokens.encode(text)

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.tokens.decode(token_ids)

    # -- HTTP -----------------------------------------------------------------------------------
    def _http(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
        return session

    def _call(self, replica: _Replica, method: str, route: str, *, body: Any = None,
              params: Any = None) -> Any:
        url = f"{replica.url}{route}"
        try:
            response = self._http().request(method, url, json=body, params=params, timeout=self.config.timeout_s)
        except requests.RequestException as exc:
            raise ReplicaError(f"{method} {url} failed ({type(exc).__name__}): is the replica running? "
                               "Check backend_options.urls") from exc
        if response.status_code >= 400:
            hint = ""
            if response.status_code == 404 and route in _DEV_ROUTES:
                hint = " (start `vllm serve` with VLLM_SERVER_DEV_MODE=1 for the control routes)"
            elif response.status_code in (403, 404) and route == GENERATE_ROUTE:
                hint = (" (vLLM 0.30 and later serve the token-in/token-out route only when started with "
                        "--enable-scale-out; older ones outside the pinned range lack it)")
            raise ReplicaError(f"{method} {url} answered {response.status_code}: {response.text[:300]}{hint}")
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            return None

    def _served_max_model_len(self) -> int:
        lengths = []
        for replica in self.replicas:
            cards = (self._call(replica, "GET", "/v1/models") or {}).get("data") or [{}]
            value = cards[0].get("max_model_len")
            if not isinstance(value, int):
                raise ReplicaError(f"{replica.url}/v1/models names no max_model_len; set backend_options.max_model_len")
            lengths.append(value)
        return min(lengths)

    def _pick(self, session: Hashable | None) -> _Replica:
        with self._lock:
            replica = self._sessions.get(session) if session is not None else None
            if replica is None:
                replica = min(self.replicas, key=lambda r: r.in_flight)
                if session is not None:
                    self._sessions[session] = replica
            replica.in_flight += 1
            return replica

    def _generate_one(self, replica: _Replica, body: dict[str, Any]) -> dict[str, Any]:
        try:
            return self._call(replica, "POST", GENERATE_ROUTE, body=body)
        finally:
            with self._lock:
                replica.in_flight -= 1

    # -- requests ---------------------------------------------------------------------------------
    def request_cap(self, prompt_length: int, cap: int, turn_cap: int) -> int:
        """min(turn cap, remaining trajectory budget, room left in the model's context)."""
        return request_cap(self.max_model_len, prompt_length, cap, turn_cap)

    def request_body(self, prompt: Sequence[int], params: SamplingParams, cap: int, *, seed: int | None,
                     prompt_logprobs: bool = False) -> dict[str, Any]:
        sampling: dict[str, Any] = {
            "n": 1, "temperature": params.temperature, "top_p": params.top_p, "top_k": params.top_k,
            "max_tokens": cap, "stop_token_ids": sorted(self.eos_token_ids), "logprobs": 0,
            "skip_special_tokens": False,
        }
        if params.stop:
            sampling["stop"] = list(params.stop)
        if seed is not None:
            sampling["seed"] = seed
        if prompt_logprobs:
            sampling["prompt_logprobs"] = 0
        body: dict[str, Any] = {"token_ids": list(prompt), "sampling_params": sampling}
        if self.config.served_model_name:
            body["model"] = self.config.served_model_name
        return body

    def submit(self, body: dict[str, Any], session: Hashable | None) -> Future:
        self.wake_all()
        replica = self._pick(session)
        return self._pool.submit(self._generate_one, replica, body)

    def to_sample(self, answer: dict[str, Any]) -> Sample:
        try:
            choice = answer["choices"][0]
            ids = [int(t) for t in choice["token_ids"]]
            logprobs = [float(entry["logprob"]) for entry in choice["logprobs"]["content"]]
        except (KeyError, IndexError, TypeError) as exc:
            raise ReplicaError(f"the generate answer lacks choices[0].token_ids or logprobs: {str(answer)[:300]}") from exc
        if len(logprobs) != len(ids):
            raise ReplicaError(f"the generate answer has {len(logprobs)} log-probs for {len(ids)} tokens")
        reason = finish_reason(ids, choice.get("finish_reason"), self.eos_token_ids)
        return Sample(token_ids=ids, logprobs=logprobs, finish_reason=reason)  # type: ignore[arg-type]

    def open_batch(self, params: SamplingParams) -> ServerBatch:
        with self._lock:
            self._open_batches += 1
        return ServerBatch(self, params)

    def _batch_closed(self) -> None:
        with self._lock:
            self._open_batches -= 1
            idle = self._open_batches == 0
        if idle and self.config.gpu_sharing == "colocate" and not self.asleep:
            self.sleep()

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams,
        *,
        max_new_tokens: Sequence[int] | None = None,
        sessions: Sequence[Hashable | None] | None = None,
    ) -> list[Sample]:
        """One request per prompt, all in flight at once; a session's turns stay on one replica."""
        return generate_with_batch(self, prompts, params, max_new_tokens=max_new_tokens, sessions=sessions)

    def release_session(self, session: Hashable) -> None:
        """Forget which replica served ``session`` (its next turn may go anywhere)."""
        with self._lock:
            self._sessions.pop(session, None)

    def score(self, sequences: Sequence[Sequence[int]], *, temperature: float = 1.0) -> list[list[float]]:
        """Per-token log-probs from ``prompt_logprobs=0`` (computed at temperature 1 only)."""
        if temperature != 1.0:
            raise NotImplementedError("vLLM computes prompt log-probs at temperature 1 only")
        params = SamplingParams(temperature=1.0, max_new_tokens=1)
        futures = [self.submit(self.request_body(seq, params, 1, seed=0, prompt_logprobs=True), None)
                   for seq in sequences]
        rows = []
        for seq, future in zip(sequences, futures, strict=True):
            entries = future.result().get("prompt_logprobs") or []
            row = [0.0]
            for position, token in enumerate(seq[1:], start=1):
                entry = entries[position] if position < len(entries) else None
                if not entry or str(token) not in entry:
                    raise ReplicaError(f"no prompt log-prob for token {token} at position {position}")
                row.append(float(entry[str(token)]["logprob"]))
            rows.append(row)
        return rows

    # -- control routes ---------------------------------------------------------------------------
    def _all(self, method: str, route: str, **kwargs: Any) -> list[Any]:
        return [self._call(replica, method, route, **kwargs) for replica in self.replicas]

    def sleep(self) -> None:
        """Put every replica to sleep (``POST /sleep?level=N``)."""
        self._all("POST", "/sleep", params={"level": self.config.sleep_level})
        self.asleep = True

    def wake_all(self) -> None:
        if self.asleep:
            self._all("POST", "/wake_up")
            self.asleep = False

    def reset_prefix_cache(self) -> None:
        self._all("POST", "/reset_prefix_cache")

    def load_weights(self, state_dict: Mapping[str, Any]) -> None:
        """Pause, (wake weights,) send each bucket, (wake KV cache,) reset, resume. ``weight_transport``: each
        bucket in the request (http) or as a file; with ``auto`` a replica that refuses the http method gets this
        update again as files, and every later one (said once in the log)."""
        try:
            self._load_weights(state_dict, self.weight_transport)
        except _TransportRefused as exc:
            log.warning("vllm server: a replica refused weights in the request (%s); sending them as files from now "
                        "on. Start the replicas with this agentgym's worker extension to send none", exc.__cause__)
            self.weight_transport = "files"
            self._load_weights(state_dict, "files")

    def _load_weights(self, state_dict: Mapping[str, Any], transport: str) -> None:
        start, buckets, total = time.perf_counter(), 0, 0
        folder = None
        if transport == "files":
            folder = Path(tempfile.mkdtemp(prefix="agentgym-weights-", dir=self.config.weight_dir or _memory_dir()))
        self._all("POST", "/pause", params={"mode": "wait"})
        try:
            if self.asleep:
                self._all("POST", "/wake_up", params={"tags": "weights"})
            self._all("POST", "/collective_rpc", body={"method": BEGIN_METHOD})
            try:
                for bucket in weight_buckets(state_dict, int(self.config.weight_bucket_mb * 2**20),
                                             dtype=self.weights_dtype):
                    if folder is None:
                        self._send_in_request(bucket, first=buckets == 0)
                    else:
                        _send_as_file(self, bucket, folder / f"bucket_{buckets:05d}.safetensors")
                    buckets += 1
                    total += sum(t.numel() * t.element_size() for _, t in bucket)
            except BaseException:
                # close the update anyway: vLLM puts the old kernel tensors back into layers that got nothing
                with contextlib.suppress(ReplicaError):
                    self._all("POST", "/collective_rpc", body={"method": FINISH_METHOD})
                raise
            self._all("POST", "/collective_rpc", body={"method": FINISH_METHOD})
            if self.asleep:
                self._all("POST", "/wake_up", params={"tags": "kv_cache"})
                self.asleep = False
            self.reset_prefix_cache()
        finally:
            with contextlib.suppress(ReplicaError):
                self._all("POST", "/resume")
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
        seconds = time.perf_counter() - start
        self._http_confirmed = self._http_confirmed or transport == "http"
        self.weight_syncs.append({"seconds": seconds, "buckets": float(buckets), "bytes": float(total),
                                  "transport": transport})
        log.info("vllm server: loaded %.1f MB of weights in %d bucket(s) on %d replica(s) in %.3fs (%s)",
                 total / 2**20, buckets, len(self.replicas), seconds,
                 "in the requests" if transport == "http" else "as files")

    def _send_in_request(self, bucket: list[tuple[str, Any]], *, first: bool) -> None:
        """One bucket in the body of ``collective_rpc`` on every replica. Under ``auto`` the first bucket of the
        first update is the test of whether the replicas have the method."""
        body = {"method": LOAD_BYTES_METHOD, "args": [bucket_payload(bucket)]}
        try:
            self._all("POST", "/collective_rpc", body=body)
        except ReplicaError as exc:
            if first and not self._http_confirmed and self.config.weight_transport == "auto":
                raise _TransportRefused(str(exc)) from exc
            raise

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class _TransportRefused(ReplicaError):
    """The first bucket sent in a request was refused (``weight_transport: auto`` then sends files)."""


def _send_as_file(backend: VllmServerBackend, bucket: list[tuple[str, Any]], path: Path) -> None:
    """One bucket as a safetensors file every replica reads (the file transport), removed once loaded."""
    from safetensors.torch import save_file

    # clone: tied weights share storage, which safetensors refuses to write twice
    save_file({name: t.detach().to("cpu").contiguous().clone() for name, t in bucket}, str(path))
    backend._all("POST", "/collective_rpc", body={"method": LOAD_FILE_METHOD, "args": [str(path)]})
    path.unlink()


def _torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, name)


def _memory_dir() -> str | None:
    """Where bucket files go by default: shared memory, so a weight update never touches a disk
    (None: the system's temporary directory, where there is no /dev/shm)."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


class ServerBatch:
    """A :class:`agentgym_core.rollout.RunningBatch` whose rows are HTTP requests in flight."""

    def __init__(self, backend: VllmServerBackend, params: SamplingParams) -> None:
        self.backend, self.params = backend, params
        self._futures: dict[Future, Hashable] = {}
        self._seeds = RowSeeds(params.seed)  # per reply, from (seed, key, turn): not from the add order
        self._closed = False

    @property
    def active(self) -> int:
        return len(self._futures)

    def add(self, key: Hashable, prompt: Sequence[int], *, max_new_tokens: int, session: Hashable | None = None) -> None:
        if self._closed:
            raise RuntimeError("add() on a closed batch; open a new one with open_batch()")
        cap = self.backend.request_cap(len(prompt), max_new_tokens, self.params.max_new_tokens)
        seed = self._seeds.next(key)
        self._futures[self.backend.submit(self.backend.request_body(prompt, self.params, cap, seed=seed), session)] = key

    def step(self) -> list[tuple[Hashable, Sample]]:
        """Wait until at least one request is answered; returns every answered one."""
        if not self._futures:
            return []
        done, _ = wait(list(self._futures), return_when=FIRST_COMPLETED)
        return [(self._futures.pop(f), self.backend.to_sample(f.result())) for f in done]

    def close(self) -> None:
        """Drop what is still in flight (answers that arrive later are ignored)."""
        if self._closed:
            return
        self._closed = True
        for future in self._futures:
            future.cancel()
        self._futures.clear()
        self.backend._batch_closed()
