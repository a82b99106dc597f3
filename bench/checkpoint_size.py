"""What one checkpoint costs on disk: the policy's HF weights plus the trainer state (AdamW moments).

Loads the model as `agentgym train` does (float32 on CPU), takes one real AdamW step on a short
sequence so the optimizer holds its two moments per weight, writes a checkpoint with the trainer's
own ``save_checkpoint`` into a temporary directory, and reports the sizes. Writes
bench/results/checkpoint_size.json.

    python bench/checkpoint_size.py                    # SmolLM2-135M-Instruct
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch
from common import write_json

from agentgym_core.finetune.common import detach_dequantized_gguf
from agentgym_core.rl.config import ModelConfig, RuntimeConfig
from agentgym_core.rl.policy import load_policy
from agentgym_core.training.checkpoint import rng_state, save_checkpoint


def size_mb(path: Path) -> float:
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--out", default="bench/results/checkpoint_size.json")
    args = parser.parse_args()
    model, tokenizer = load_policy(ModelConfig(path=args.model, device="cpu"), runtime=RuntimeConfig(threads=1))
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-6)
    ids = torch.tensor([tokenizer.encode("Thought: go to the red ball. Action: go to red ball 1")])
    model.train()
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()  # now the optimizer holds exp_avg and exp_avg_sq for every weight
    detach_dequantized_gguf(model)
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = save_checkpoint(tmp, 1, model=model, tokenizer=tokenizer, keep=1, trainer_state={
            "step": 1, "optimizer": optimizer.state_dict(), "rng": rng_state()})
        result = {
            "model": args.model, "parameters": sum(p.numel() for p in model.parameters()),
            "dtype": str(next(model.parameters()).dtype),
            "model_dir_mb": round(size_mb(checkpoint / "model"), 1),
            "trainer_state_mb": round(size_mb(checkpoint / "trainer_state.pt"), 1),
            "checkpoint_mb": round(size_mb(checkpoint), 1),
        }
    print(f"{args.model}: {result['parameters'] / 1e6:.1f}M parameters ({result['dtype']}); one checkpoint = "
          f"{result['checkpoint_mb']:.0f} MB: model/ {result['model_dir_mb']:.0f} MB + trainer_state.pt "
          f"{result['trainer_state_mb']:.0f} MB (AdamW moments)")
    print(f"wrote {write_json(args.out, result)}")


if __name__ == "__main__":
    main()
