"""`agentgym serve-model MODEL`: serve a local model over the OpenAI-compatible HTTP API."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from agentgym_core.http.auth import TOKEN_ENV, check_exposure, read_secret_file


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve-model", help="serve a local model over the OpenAI-compatible API (/v1/chat/completions)",
        description="Load MODEL (a named model such as smollm2-135m-instruct, a .gguf file, or a Hugging Face "
                    "directory) with a rollout backend and serve it at /v1/chat/completions, /v1/completions "
                    "and /v1/models, so `agentgym eval --backend openai` and any OpenAI client can use it. "
                    "It also answers vLLM's token-in/token-out route /inference/v1/generate and control routes, "
                    "so it stands in for a `vllm serve` replica of the vllm backend's server mode. "
                    "Concurrent requests are sampled together in batches.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("model", help="named model, .gguf file or Hugging Face model directory")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to bind; an address other than loopback needs --api-key (or --insecure)")
    parser.add_argument("--insecure", action="store_true",
                        help="allow binding an address other than loopback without an API key")
    parser.add_argument("--port", type=int, default=8001,
                        help="TCP port; 0 picks a free one, and the 'serving ... at http://HOST:PORT/v1' line says which")
    parser.add_argument("--served-model-name", default=None,
                        help="the model id clients send (default: MODEL as given)")
    parser.add_argument("--backend", default="transformers", help="rollout backend that loads and samples the model")
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: half the CPUs, at least 1, or $OMP_NUM_THREADS; 1 is fastest when "
                             "other jobs share the CPU)")
    parser.add_argument("--max-batch-size", type=int, default=32, help="most sequences sampled in one call")
    parser.add_argument("--default-max-tokens", type=int, default=512,
                        help="reply cap for requests that do not set max_tokens")
    parser.add_argument("--max-context-tokens", type=int, default=None,
                        help="prompt + reply limit (default: the model's max_position_embeddings)")
    parser.add_argument("--api-key", "--token", dest="api_key",
                        default=os.environ.get("AGENTGYM_SERVE_API_KEY") or os.environ.get(TOKEN_ENV),
                        help=f"require 'Authorization: Bearer KEY' on every route but /health. Every user of "
                             f"this machine can read it in `ps`: prefer $AGENTGYM_SERVE_API_KEY, ${TOKEN_ENV} or "
                             f"--api-key-file (default: $AGENTGYM_SERVE_API_KEY, else ${TOKEN_ENV}; none)")
    parser.add_argument("--api-key-file", "--token-file", dest="api_key_file", default=None, metavar="FILE",
                        help="read the API key from the first line of FILE (keep it readable by you alone)")
    parser.add_argument("--no-control-routes", dest="control_routes", action="store_false",
                        help="do not serve the vLLM-style control routes (/sleep, /wake_up, /pause, /resume, "
                             "/reset_prefix_cache, /collective_rpc weight loading)")
    parser.set_defaults(func=run)


def context_length(backend: Any) -> int | None:
    """The model's context length when the backend exposes a transformers model, else None."""
    config = getattr(getattr(backend, "model", None), "config", None)
    value = getattr(config, "max_position_embeddings", None)
    return int(value) if isinstance(value, int) and value > 0 else None


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from agentgym_core.http.serving import listening_socket
    from agentgym_core.model_server import ModelServerConfig, create_model_app
    from agentgym_core.plugins import get_plugin_manager

    if args.api_key_file is not None:
        args.api_key = read_secret_file(args.api_key_file)
    check_exposure(args.host, args.api_key, insecure=args.insecure, what="model server (and its weights)")
    sock = listening_socket(args.host, args.port)  # before the model loads: a port in use fails now, not after it
    port = sock.getsockname()[1]
    factory = get_plugin_manager().get("rollout_backend", args.backend)
    options: dict[str, Any] = {"model": args.model, "device": args.device}
    if args.threads:
        options["threads"] = args.threads
    print(f"loading {args.model!r} with the {args.backend} backend ...", file=sys.stderr, flush=True)
    backend = factory(options)
    if not hasattr(backend, "generate"):
        raise ValueError(f"the {args.backend!r} backend does not sample tokens itself (it has no generate()); "
                         "serve-model needs a local backend such as 'transformers'")
    config = ModelServerConfig(
        model_name=args.served_model_name or args.model, max_batch_size=args.max_batch_size,
        default_max_tokens=args.default_max_tokens,
        max_context_tokens=args.max_context_tokens or context_length(backend), api_key=args.api_key,
        control_routes=args.control_routes,
    )
    app = create_model_app(backend, config)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: binding {args.host}: anyone who can reach this address can use the model"
              + (" and replace its weights (--no-control-routes turns that off)" if args.control_routes else "")
              + ("" if args.api_key else " (no --api-key set)"), file=sys.stderr)
    print(f"serving {config.model_name!r} at http://{args.host}:{port}/v1 "
          f"(try: agentgym eval --backend openai --base-url http://{args.host}:{port}/v1 "
          f"--model {config.model_name} --env ENV)", flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
    return 0
