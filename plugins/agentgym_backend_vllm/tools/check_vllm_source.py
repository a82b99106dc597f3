"""Check the vLLM source of tagged releases against what agentgym's vLLM backend relies on.

Run it before widening the pinned range (``engine = ["vllm>=...,<..."]`` in pyproject.toml):

    curl -sO <the vllm-X.Y.Z.tar.gz link on https://pypi.org/simple/vllm/>
    tar xzf vllm-X.Y.Z.tar.gz vllm-X.Y.Z/vllm
    python tools/check_vllm_source.py vllm-X.Y.Z [more unpacked sdists ...]

It reads source text only (nothing is imported), prints one line per release naming the facts
that do not hold there, and exits 1 if any fact fails. Each fact is one call or field the backend
(engine.py, server.py, weights.py) or the contract fake (tests/agentgym_backend_vllm/fake_vllm.py)
uses.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path


def _read(path: Path) -> str:
    return path.read_text(errors="ignore") if path.is_file() else ""


def _route_source(vllm: Path, route: str) -> str:
    """The source of the file that declares ``route`` (as a decorator or a decorator's first argument)."""
    pattern = re.compile(r'(post|get)\(\s*"' + re.escape(route) + r'"|^\s+"' + re.escape(route) + r'",', re.M)
    for path in sorted((vllm / "entrypoints").rglob("*.py")):
        text = _read(path)
        if pattern.search(text):
            return text
    return ""


def _route_body(vllm: Path, route: str) -> str:
    text = _route_source(vllm, route)
    at = text.find(f'"{route}"')
    return text[at:at + 1500] if at >= 0 else ""


def _fields(text: str, names: str) -> bool:
    return all(re.search(rf"^\s+{name}: ", text, re.M) for name in names.split())


def _generate_files(vllm: Path) -> tuple[str, str]:
    for path in sorted((vllm / "entrypoints").rglob("api_router.py")):
        if '"/inference/v1/generate"' in _read(path):
            return _read(path.parent / "protocol.py"), _read(path.parent / "serving.py")
    return "", ""


def facts(vllm: Path) -> dict[str, Callable[[], bool]]:
    """Fact name -> a check on the ``vllm/`` package directory of one release."""
    top = _read(vllm / "__init__.py")
    sampling = _read(vllm / "sampling_params.py")
    outputs = _read(vllm / "outputs.py")
    engine_args = _read(vllm / "engine" / "arg_utils.py")
    llm_engine = _read(vllm / "v1" / "engine" / "llm_engine.py")
    worker_base = _read(vllm / "v1" / "worker" / "worker_base.py")
    runner = _read(vllm / "v1" / "worker" / "gpu_model_runner.py")
    reload = _read(vllm / "model_executor" / "model_loader" / "reload" / "__init__.py")
    protocol, serving = _generate_files(vllm)
    cards = "\n".join(_read(p) for p in (vllm / "entrypoints").rglob("*.py"))
    lora_request = _read(vllm / "lora" / "request.py")
    lora_utils = _read(vllm / "lora" / "utils.py")
    return {
        "vllm exports TokensPrompt, SamplingParams, EngineArgs, LLMEngine":
            lambda: all(f'"{n}"' in top for n in ("TokensPrompt", "SamplingParams", "EngineArgs", "LLMEngine")),
        "SamplingParams fields": lambda: _fields(
            sampling, "n temperature top_p top_k seed stop stop_token_ids max_tokens logprobs prompt_logprobs "
            "skip_special_tokens"),
        "top_k 0 disables": lambda: "top_k must be 0 (disable)" in sampling,
        "CompletionOutput token_ids/logprobs/finish_reason/stop_reason":
            lambda: _fields(outputs, "token_ids logprobs finish_reason stop_reason"),
        "RequestOutput finished/prompt_logprobs/num_cached_tokens":
            lambda: all(x in outputs for x in ("finished: bool", "prompt_logprobs", "num_cached_tokens")),
        "EngineArgs fields": lambda: _fields(
            engine_args, "dtype max_model_len gpu_memory_utilization tensor_parallel_size enable_prefix_caching "
            "enforce_eager seed enable_sleep_mode logprobs_mode worker_extension_cls distributed_executor_backend"),
        "external_launcher executor reads LOCAL_RANK": lambda: "class ExecutorWithExternalLauncher" in _read(
            vllm / "v1" / "executor" / "uniproc_executor.py") and "LOCAL_RANK" in _read(
            vllm / "v1" / "executor" / "uniproc_executor.py"),
        "logprobs_mode processed_logprobs": lambda: "processed_logprobs" in _read(vllm / "config" / "model.py"),
        "LLMEngine add_request/step/abort_request(list)": lambda: all(re.search(p, llm_engine) for p in (
            r"def add_request\(\s*self,\s*request_id: str,\s*prompt", r"def step\(self\)",
            r"def abort_request\(self, request_ids: list\[str\]", r"def has_unfinished_requests\(self\)")),
        "LLMEngine collective_rpc/sleep/wake_up(tags)/reset_prefix_cache": lambda: all(
            re.search(p, llm_engine) for p in (
                r"def collective_rpc\(\s*self,\s*method", r"def sleep\(self, level: int = 1",
                r"def wake_up\(self, tags: list\[str\] \| None = None\)",
                r"def reset_prefix_cache\(\s*self, reset_running_requests: bool = False")),
        "worker_extension_cls joins the worker's bases, worker.model_config":
            lambda: "worker_extension_cls" in worker_base and "__bases__" in worker_base
            and "self.model_config = " in worker_base,
        "model_runner.get_model()": lambda: "def get_model(self)" in runner,
        "layerwise reload initialize/finalize": lambda: all(
            f'"{n}"' in reload for n in ("initialize_layerwise_reload", "finalize_layerwise_reload")),
        "EngineArgs enable_lora/max_lora_rank/max_loras": lambda: _fields(engine_args, "enable_lora max_lora_rank max_loras"),
        "max_lora_rank takes 1, 8, 16, 32, 64, 128, 256, 320, 512": lambda: "MaxLoRARanks = Literal[1, 8, 16, 32, 64, 128, "
            "256, 320, 512]" in _read(vllm / "config" / "lora.py"),
        "LoRARequest(lora_name, lora_int_id, lora_path)": lambda: _fields(lora_request, "lora_name lora_int_id lora_path"),
        "LLMEngine add_lora/remove_lora/list_loras, add_request(lora_request=)": lambda: all(
            re.search(p, llm_engine, re.S) for p in (
                r"def add_lora\(self, lora_request: LoRARequest\) -> bool", r"def remove_lora\(self, lora_id: int\) -> bool",
                r"def list_loras\(self\) -> set\[int\]", r"def add_request\(.*?lora_request: LoRARequest \| None = None")),
        "adapter tensors named ...<module>.lora_A.weight / lora_B.weight":
            lambda: '"lora_A"' in lora_utils and "is unsupported LoRA weight" in lora_utils,
        "POST /inference/v1/generate token_ids + sampling_params":
            lambda: "token_ids: list[int]" in protocol and "sampling_params: SamplingParams" in protocol,
        "generate answers token_ids/logprobs/finish_reason/prompt_logprobs": lambda: all(
            x in protocol for x in ("token_ids: list[int] | None", "finish_reason", "prompt_logprobs", "logprobs")),
        "generate answers log-probs for logprobs=0":
            lambda: bool(re.search(r"if (sampling_params\.logprobs|num_logprobs) is not None", serving)),
        "GET /v1/models max_model_len":
            lambda: bool(re.search(r"class ModelCard\(.*?max_model_len: int \| None", cards, re.S)),
        "POST /sleep?level": lambda: "level" in _route_body(vllm, "/sleep"),
        "POST /wake_up?tags": lambda: 'getlist("tags")' in _route_body(vllm, "/wake_up"),
        "POST /reset_prefix_cache": lambda: bool(_route_source(vllm, "/reset_prefix_cache")),
        "POST /pause?mode=wait": lambda: "mode: Annotated[PauseMode" in _route_body(vllm, "/pause"),
        "POST /resume": lambda: bool(_route_source(vllm, "/resume")),
        "POST /collective_rpc {method, args}": lambda: all(
            x in _route_body(vllm, "/collective_rpc") for x in ('body.get("method")', 'body.get("args"')),
    }


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    failed = False
    for folder in argv:
        vllm = Path(folder) / "vllm"
        if not (vllm / "__init__.py").is_file():
            print(f"{folder}: no vllm/__init__.py here; pass the folder an sdist unpacks to (vllm-X.Y.Z)")
            failed = True
            continue
        missing = [name for name, check in facts(vllm).items() if not check()]
        failed |= bool(missing)
        print(f"{folder}: {'all facts hold' if not missing else 'FAILS: ' + '; '.join(missing)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
