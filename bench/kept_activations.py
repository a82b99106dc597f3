"""What one training forward of SmolLM2-135M keeps for its backward pass, by tensor shape.

Autograd keeps, until backward, the tensors each operation saves; they (not the weights) are what a
training forward adds to memory, in proportion to its tokens. This script runs one forward of
``--tokens`` tokens under bf16 autocast (the main job's setting: float32 weights, no autocast cache)
and adds up the distinct storages saved (``torch.autograd.graph.saved_tensors_hooks``; the weights
themselves not counted), three ways:

* ``log_softmax``: transformers' modules, log-probs by ``log_softmax(logits.float()).gather(...)``
  (how :func:`agentgym_core.rl.forward.forward_tokens` took them before 2026-12-07);
* ``token_logprobs``: transformers' modules, log-probs by :func:`agentgym_core.rl.forward.forward_tokens`;
* ``lean``: the same with :func:`agentgym_core.training.lean_activations.keep_fewer_activations`
  (``model.lean_activations``, on by default).

    python bench/kept_activations.py [--tokens 1024] [--out bench/results/kept_activations.json]

Prints each way's total and its largest kinds of tensors; writes the JSON. Bytes, not time: the
figures do not depend on the machine's load.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def kept_bytes(model, run) -> tuple[int, list[dict]]:
    """Bytes of the distinct storages autograd saves while ``run()`` runs, and the largest kinds."""
    import torch

    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, tuple[str, tuple[int, ...], int]] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in weights:
            seen.setdefault(storage.data_ptr(), (str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape),
                                                 storage.nbytes()))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        out = run()
    del out
    kinds: collections.Counter = collections.Counter()
    counts: collections.Counter = collections.Counter()
    for dtype, shape, nbytes in seen.values():
        kinds[(dtype, shape)] += nbytes
        counts[(dtype, shape)] += 1
    largest = [{"dtype": dtype, "shape": list(shape), "tensors": counts[(dtype, shape)], "bytes": nbytes}
               for (dtype, shape), nbytes in kinds.most_common(8)]
    return sum(kinds.values()), largest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=1024, help="tokens of the forward (all of them trained)")
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--out", default=str(RESULTS / "kept_activations.json"))
    args = parser.parse_args()

    import torch

    from agentgym_core.rl.config import ModelConfig, RuntimeConfig
    from agentgym_core.rl.forward import forward_tokens, mixed_precision
    from agentgym_core.rl.policy import load_policy
    from agentgym_core.training.lean_activations import keep_fewer_activations

    sys.path.insert(0, str(Path(__file__).parent))
    from common import write_json

    model, _ = load_policy(ModelConfig(path=args.model, mixed_precision="auto", lean_activations=False),
                           runtime=RuntimeConfig(threads=2))
    model.train()
    ids = torch.randint(100, 40000, (1, args.tokens), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(1, args.tokens)
    mask[0, 0] = 0  # the first token has no log-prob: every later one is trained

    def with_log_softmax():
        logits = model(input_ids=ids, use_cache=False).logits[0, :-1]  # (T-1, V)
        out = []
        for start in range(0, logits.shape[0], 512):  # float32 chunks of 512 positions, as forward_tokens did
            chunk = logits[start: start + 512].float()
            out.append(torch.log_softmax(chunk, -1).gather(-1, ids[0, start + 1: start + 513, None]))
        return out

    def with_forward_tokens():
        return forward_tokens(model, [ids[0].tolist()], mask, max_tokens=args.tokens)

    ways = {}
    with mixed_precision("auto", model, cache=False):
        ways["log_softmax"] = kept_bytes(model, with_log_softmax)
        ways["token_logprobs"] = kept_bytes(model, with_forward_tokens)
        keep_fewer_activations(model)
        ways["lean"] = kept_bytes(model, with_forward_tokens)
    base = ways["log_softmax"][0]
    for name, (total, largest) in ways.items():
        print(f"{name:15s} {total / 1e9:.3f} GB kept ({total / args.tokens / 1e6:.3f} MB a token, "
              f"x{total / base:.2f})")
        for kind in largest[:4]:
            print(f"    {kind['bytes'] / 1e6:7.1f} MB  {kind['tensors']:3d} x {kind['dtype']} {tuple(kind['shape'])}")
    result = {"tokens": args.tokens, "model": args.model, "autocast": "bf16 where the CPU has it",
              "ways": {name: {"kept_bytes": total, "largest": largest} for name, (total, largest) in ways.items()}}
    print(f"wrote {write_json(args.out, result)}")


if __name__ == "__main__":
    main()
