"""TRL's GRPOTrainer on an agentgym environment through ``environment_factory``, on the CPU.

    python examples/trl_grpo.py --env guess --steps 2                 # a tiny random model: the plumbing
    python examples/trl_grpo.py --env babyai --model ./SmolLM2-135M-Instruct --steps 50
    python examples/trl_grpo.py --url http://127.0.0.1:8000 --steps 2  # a running `agentgym serve`

The model plays by calling the ``step`` tool through its chat template's tool calls; the reward is the
episode's return. Needs ``trl`` (in the ``dev`` extra) and a chat template that renders tool calls: the
tiny model gets TRL's own Qwen3 template.
"""

from __future__ import annotations

import argparse
import os
from importlib.resources import files
from typing import Any


def tiny_tool_model() -> tuple[Any, Any]:
    """A tiny random model whose chat template renders tool calls (TRL's Qwen3 template)."""
    from agentgym_core.testing.tiny_model import tiny_chat_model

    template = (files("trl") / "chat_templates" / "qwen3.jinja").read_text()
    return tiny_chat_model(seed=0, chat_template=template)


def main(argv: list[str] | None = None) -> Any:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", help="a registered environment (agentgym envs)")
    parser.add_argument("--url", help="a running agentgym serve, instead of --env")
    parser.add_argument("--model", help="a local model folder; default: a tiny random model")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--output-dir", default="runs/trl_grpo")
    parser.add_argument("--max-completion-length", type=int, default=64)
    args = parser.parse_args(argv)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # environment_factory is marked experimental

    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from agentgym_core.integrations.trl import trl_environment

    if args.model:
        model = AutoModelForCausalLM.from_pretrained(args.model, local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(args.model, local_files_only=True)
    else:
        model, tokenizer = tiny_tool_model()
    tokenizer.padding_side = "left"
    config = GRPOConfig(
        output_dir=args.output_dir, max_steps=args.steps, per_device_train_batch_size=2, num_generations=2,
        max_completion_length=args.max_completion_length, max_tool_calling_iterations=4, use_cpu=True,
        report_to="none", logging_steps=1, save_strategy="no", bf16=False,
    )  # fmt: skip
    environment = trl_environment(args.env, url=args.url) if args.url else trl_environment(args.env)
    trainer = GRPOTrainer(model=model, args=config, processing_class=tokenizer, environment_factory=environment)
    trainer.train()
    return trainer


if __name__ == "__main__":
    main()
