"""Checkpoints: written atomically, so a kill -9 loses at most the step in progress.

Layout of ``<run_dir>/checkpoints/step_000012/``::

    model/            the policy in Hugging Face format (LoRA merged in), loadable by
                      transformers and vLLM, with its tokenizer (sharded runs: the final
                      checkpoint, or every one with trainer.hf_weights_every_checkpoint)
    adapter/          the LoRA adapter alone (LoRA runs only; resume loads base + adapter)
    sharded/          several learner ranks: weights and optimizer state written with
                      torch.distributed.checkpoint, one file per rank (``__<rank>_0.distcp``)
                      plus ``.metadata``; read back by any number of ranks, each reading its share
    trainer_state.pt  optimizer (one process), LR schedule, value head, RNG states (each
                      learner rank's), round-scheduler state, step
    DONE              written last; a directory without it is never used

Ranks on several machines write their shards into the same directory: ``run_dir`` must then be
on a filesystem they share. A checkpoint written by one process holds the whole model and optimizer state
(``model/`` + ``trainer_state.pt``); resuming it on several ranks, rank 0 reads the weights and
broadcasts them tensor by tensor, and ``trainer_state.pt`` is memory-mapped, so the ranks of one
machine share one copy of its pages.

A checkpoint is built in ``step_000012.tmp/`` and renamed into place (one atomic rename); then
``latest`` (a one-line file with the directory name) is replaced atomically. The data order needs
no state: the tasks of step k are a function of (seed, k) (see ``tasks_for_step``).
"""

from __future__ import annotations

import copy
import os
import random
import shutil
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "SHARDED", "CheckpointWriteError", "check_weights_match", "checkpoint_dir", "commit_checkpoint", "export_model", "is_sharded",
    "latest_checkpoint", "load_policy_weights", "load_sharded", "load_trainer_state", "merged_lora_weights",
    "pending_dir", "rank_rng_state", "unwritten_checkpoint_message",
    "read_model_weights", "rng_state", "save_checkpoint", "save_sharded", "set_rng_state", "start_checkpoint",
]


SHARDED = "sharded"
"""The subdirectory of a checkpoint that holds torch.distributed.checkpoint's per-rank files."""


def checkpoint_dir(run_dir: str | Path, step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"step_{step:06d}"


def rng_state() -> dict[str, Any]:
    """Python and torch RNG states (CUDA too when present)."""
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def rank_rng_state(state: dict[str, Any], rank: int, world_size: int) -> dict[str, Any]:
    """The RNG state learner rank ``rank`` of ``world_size`` resumes with, from a checkpoint's trainer state.

    Its own (``rng_by_rank``) when the checkpoint was written by as many ranks; otherwise rank 0's
    (``rng``) on every rank, as all ranks start a run from the same seed: a checkpoint written before
    per-rank states were saved, or resumed with another ``trainer.learners``.
    """
    by_rank = state.get("rng_by_rank")
    if by_rank is not None and len(by_rank) == world_size:
        return by_rank[rank]
    return state["rng"]


def export_model(model: Any, tokenizer: Any, directory: Path,
                 state_dict: dict[str, Any] | None = None) -> None:
    """Save plain HF weights; for a peft model, the merged weights plus the adapter.

    ``state_dict``: the full weights of a sharded model (gathered by the caller), saved with its config.
    """
    if state_dict is not None and hasattr(model, "peft_config"):  # sharded LoRA: merged by hand, adapter beside
        model.save_pretrained(directory.parent / "adapter", state_dict=state_dict)
        model.get_base_model().save_pretrained(directory, state_dict=merged_lora_weights(model, state_dict))
    elif state_dict is not None:
        model.save_pretrained(directory, state_dict=state_dict)
    elif hasattr(model, "peft_config"):
        model.save_pretrained(directory.parent / "adapter")
        # merge_and_unload is destructive: merge a copy so the training model keeps its adapters.
        copy.deepcopy(model).merge_and_unload().save_pretrained(directory)
    else:
        model.save_pretrained(directory)
    if tokenizer is not None:
        tokenizer.save_pretrained(directory)


def merged_lora_weights(model: Any, state_dict: dict[str, Any]) -> dict[str, Any]:
    """The base model's weights with each LoRA adapter merged in, ``W + scaling * B @ A``, by the base model's
    names, from the gathered peft ``state_dict`` of ``model`` (what ``merge_and_unload`` computes, for a model
    too sharded to copy)."""
    prefix = "base_model.model."
    scaling = {name.removeprefix(prefix): module.scaling for name, module in model.named_modules()
               if isinstance(getattr(module, "scaling", None), dict) and hasattr(module, "base_layer")}
    merged: dict[str, Any] = {}
    for name, tensor in state_dict.items():
        if ".lora_" in name:
            continue
        plain = name.removeprefix(prefix).replace(".base_layer.", ".")
        layer = plain.rsplit(".", 1)[0]
        if plain.endswith(".weight") and layer in scaling:
            tensor = tensor.clone()
            for adapter, scale in scaling[layer].items():
                a = state_dict[f"{prefix}{layer}.lora_A.{adapter}.weight"].to(tensor.dtype)  # (r, in)
                b = state_dict[f"{prefix}{layer}.lora_B.{adapter}.weight"].to(tensor.dtype)  # (out, r)
                tensor += scale * (b @ a)
        merged[plain] = tensor
    return merged


def save_checkpoint(
    run_dir: str | Path, step: int, *, model: Any, tokenizer: Any, trainer_state: dict[str, Any], keep: int = 2,
    state_dict: dict[str, Any] | None = None,
) -> Path:
    """Write checkpoint ``step`` (the number of completed steps) atomically; prune old ones.

    ``state_dict`` replaces ``model.state_dict()`` (the gathered weights of a sharded model).
    """
    tmp = start_checkpoint(run_dir, step)
    try:
        (tmp / "model").mkdir()
        export_model(model, tokenizer, tmp / "model", state_dict)
        torch.save(trainer_state, tmp / "trainer_state.pt")
    except Exception as exc:  # a full disk: torch.save says "iostream error", safetensors SafetensorError
        raise CheckpointWriteError(unwritten_checkpoint_message(run_dir, step, tmp, exc)) from exc
    return commit_checkpoint(run_dir, step, keep=keep)


class CheckpointWriteError(RuntimeError):
    """A checkpoint could not be written (most often a full disk); earlier checkpoints are intact."""


def unwritten_checkpoint_message(run_dir: str | Path, step: int, tmp: Path, exc: BaseException) -> str:
    """What failed, the space left where it was written, and how the run continues from its latest checkpoint.

    The partly written ``tmp`` is removed first, so the space it held is free again and the figure is what a
    retry would find."""
    shutil.rmtree(tmp, ignore_errors=True)
    free_gb = shutil.disk_usage(tmp.parent).free / 1e9
    previous = latest_checkpoint(run_dir)
    resume = (f"the latest complete checkpoint, {previous.name}, is intact: free some space, then continue with "
              f"`agentgym train --resume {run_dir}`" if previous is not None
              else "no earlier checkpoint exists: free some space and start the run again")
    return (f"could not write checkpoint {step} under {tmp.parent} ({type(exc).__name__}: {exc}); that disk has "
            f"{free_gb:.1f} GB free now. {resume[0].upper()}{resume[1:]}")


def pending_dir(run_dir: str | Path, step: int) -> Path:
    """Where checkpoint ``step`` is built before its atomic rename."""
    final = checkpoint_dir(run_dir, step)
    return final.with_name(final.name + ".tmp")


def start_checkpoint(run_dir: str | Path, step: int) -> Path:
    """An empty :func:`pending_dir` for checkpoint ``step`` (one process creates it, then all write into it)."""
    tmp = pending_dir(run_dir, step)
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    return tmp


def commit_checkpoint(run_dir: str | Path, step: int, *, keep: int) -> Path:
    """Mark the :func:`pending_dir` of ``step`` complete, rename it into place, point ``latest`` at it,
    prune old ones."""
    final, tmp = checkpoint_dir(run_dir, step), pending_dir(run_dir, step)
    (tmp / "DONE").write_text(str(step))
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    pointer = final.parent / "latest"
    pointer_tmp = final.parent / "latest.tmp"
    pointer_tmp.write_text(final.name)
    os.replace(pointer_tmp, pointer)
    done = sorted(p for p in final.parent.glob("step_*") if p.is_dir() and (p / "DONE").exists()
                  and not p.name.endswith(".tmp"))
    for old in done[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint (``latest`` pointer, else the highest complete step), or None."""
    root = Path(run_dir) / "checkpoints"
    pointer = root / "latest"
    if pointer.exists():
        candidate = root / pointer.read_text().strip()
        if (candidate / "DONE").exists():
            return candidate
    done = sorted(p for p in root.glob("step_*") if p.is_dir() and (p / "DONE").exists() and not p.name.endswith(".tmp"))
    return done[-1] if done else None


def load_trainer_state(checkpoint: Path) -> dict[str, Any]:
    """``trainer_state.pt``, memory-mapped: tensors are read from the file as they are used, and the
    ranks of one machine share the pages."""
    return torch.load(checkpoint / "trainer_state.pt", weights_only=False, mmap=True)


def is_sharded(checkpoint: Path) -> bool:
    """Whether ``checkpoint`` holds its weights and optimizer state as per-rank shards (``sharded/``)."""
    return (checkpoint / SHARDED / ".metadata").exists()


def save_sharded(directory: Path, state: dict[str, Any]) -> None:
    """Every rank writes its own shard of ``state`` (DTensors, or plain tensors on one process) under
    ``directory`` (collective); rank 0 adds the metadata once every shard is written."""
    import torch.distributed.checkpoint as dcp

    dcp.save(state, checkpoint_id=str(directory))


def load_sharded(directory: Path, state: dict[str, Any]) -> None:
    """Fill ``state`` in place from the shards under ``directory``: each rank reads the parts of the
    files that overlap its own shards, whatever number of ranks wrote them (collective)."""
    import torch.distributed.checkpoint as dcp

    dcp.load(state, checkpoint_id=str(directory))


def load_policy_weights(model: Any, checkpoint: Path) -> None:
    """Load the checkpoint's trained weights into ``model`` (built from the initial weights).

    A LoRA (peft) model gets its adapter back; a plain model its full HF weights.
    """
    from safetensors.torch import load_file

    if hasattr(model, "peft_config"):
        from peft import set_peft_model_state_dict

        files = sorted((checkpoint / "adapter").glob("*.safetensors"))
        state: dict[str, Any] = {}
        for f in files:
            state.update(load_file(str(f)))
        set_peft_model_state_dict(model, state)
        return
    state = read_model_weights(checkpoint, device=str(next(model.parameters()).device))
    missing, unexpected = model.load_state_dict(state, strict=False)
    check_weights_match(model, checkpoint, missing, unexpected)


def read_model_weights(checkpoint: Path, device: str = "cpu") -> dict[str, Any]:
    """The checkpoint's full Hugging Face weights (``model/*.safetensors``) as one state dict."""
    from safetensors.torch import load_file

    state: dict[str, Any] = {}
    for f in sorted((checkpoint / "model").glob("*.safetensors")):
        state.update(load_file(str(f), device=device))
    if not state:
        raise FileNotFoundError(f"no *.safetensors weights in {checkpoint / 'model'}")
    return state


def check_weights_match(model: Any, checkpoint: Path, missing: Any, unexpected: Any) -> None:
    """Refuse weights written for another model (a tied LM head may be absent: it is the embedding)."""
    tied = {"lm_head.weight"} if getattr(model.config, "tie_word_embeddings", False) else set()
    if unexpected or set(missing) - tied:
        raise RuntimeError(f"checkpoint {checkpoint} does not match the model: missing {sorted(missing)[:5]}, "
                           f"unexpected {sorted(unexpected)[:5]}; was it written for a different model.path?")
