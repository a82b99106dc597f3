"""The learner role: the policy's weights and everything that changes them.

A :class:`Learner` holds the policy (and its frozen KL reference, the value head when a critic is
on), the optimizer and LR schedule. It answers four calls from the training loop:

* :meth:`Learner.score` — old, reference log-probs, entropies and values of a batch (no grad);
* :meth:`Learner.update` — the PPO update of one step (:func:`agentgym_core.rl.update.ppo_update`);
* :meth:`Learner.policy_state_dict` — the full policy weights in the rollout engine's dtype, for a
  rollout backend that keeps its own copy (:mod:`agentgym_core.rl.weight_sync`);
* :meth:`Learner.save` / :meth:`Learner.load` — checkpoints in one portable layout, with every
  rank's RNG state (dropout draws from it during the update), each rank resuming its own.

With ``trainer.learners = N > 1`` every rank builds a Learner on the same initial weights and
shards them with FSDP2 ``fully_shard`` (one shard per decoder layer, then the root). Each rank
trains on its share of every mini-batch's rows with the loss normalised by the mini-batch's
global token count, so N ranks step exactly as one process does. A checkpoint of one process
holds full Hugging Face weights and an optimizer state keyed by parameter name; on several ranks
each writes its own shard with ``torch.distributed.checkpoint`` (HF weights gathered for the final
one). A run saved with N ranks resumes with any other number, each rank reading its share.

Precision. The weights the optimizer updates are float32 ("master weights"); matmuls run in
bfloat16 under ``model.mixed_precision`` (autocast on one process, FSDP2's
``MixedPrecisionPolicy`` on several). AdamW over bfloat16 weights barely moves them at RL learning
rates (updates below bf16's resolution round to zero), so it happens only when the user names it:
``optim.low_precision_params: true``, with a warning.
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from agentgym_core.recipes import ConfigError
from agentgym_core.rl.batch import RLBatch
from agentgym_core.rl.config import TrainConfig
from agentgym_core.rl.critic import build_critic
from agentgym_core.rl.distributed import DistContext, barrier, broadcast_object, gather_object
from agentgym_core.rl.forward import (
    TokenStats,
    bf16_autocast,
    count_forwards,
    forward_tokens,
    mixed_precision,
)
from agentgym_core.rl.losses import kl_penalty
from agentgym_core.rl.update import UpdateInputs, ppo_update
from agentgym_core.rl.weight_sync import gather_weights, weight_bytes
from agentgym_core.training.checkpoint import (
    SHARDED,
    CheckpointWriteError,
    check_weights_match,
    commit_checkpoint,
    export_model,
    is_sharded,
    load_policy_weights,
    load_sharded,
    load_trainer_state,
    pending_dir,
    rank_rng_state,
    read_model_weights,
    rng_state,
    save_checkpoint,
    save_sharded,
    set_rng_state,
    start_checkpoint,
    unwritten_checkpoint_message,
)
from agentgym_core.training.optimizer import build_optimizer
from agentgym_core.training.optimizer_on_disk import OptimizerStateOnDisk

__all__ = ["Learner", "ScoredBatch", "balanced_shares", "master_weights", "narrow_linear_weights"]


@dataclass
class ScoredBatch:
    """The learner's view of a batch before the update; every tensor is (B, T) on the learner's device."""

    mask: torch.Tensor
    token_rewards: torch.Tensor  # the environment's rewards, minus the KL penalty when it is in the reward
    rollout_logprobs: torch.Tensor
    old: TokenStats | None  # None when the update's own log-probs stand in (``algorithm.old_logprobs``)
    ref_logprobs: torch.Tensor | None
    token_kl: torch.Tensor | None  # KL estimator per token (0 off the mask); None without a reference


def master_weights(model: torch.nn.Module, config: TrainConfig) -> None:
    """Make the trainable weights float32, unless the recipe asks for low-precision ones by name."""
    low = [p for p in model.parameters() if p.requires_grad and p.dtype in (torch.bfloat16, torch.float16)]
    if not low:
        return
    if config.optim.low_precision_params:
        warnings.warn(f"optim.low_precision_params: AdamW updates {low[0].dtype} weights directly; at small "
                      "learning rates most updates round to zero. Prefer float32 masters "
                      "(model.dtype=float32 with model.mixed_precision=bf16).", stacklevel=2)
        return
    for p in low:
        p.data = p.data.float()


def narrow_linear_weights(module: torch.nn.Module, dtype: torch.dtype) -> int:
    """Store ``module``'s ``nn.Linear`` weights and biases in ``dtype``; returns the bytes saved.

    For a frozen module only run under autocast to ``dtype``: autocast casts a linear layer's
    weights to ``dtype`` for every matmul, so storing them cast already computes exactly the same
    numbers. Parameters another kind of module also uses (an output layer tied to the input
    embeddings, whose lookups autocast leaves in float32) keep their dtype.
    """
    shared = {id(p) for m in module.modules() if not isinstance(m, torch.nn.Linear)
              for p in m.parameters(recurse=False)}
    saved = 0
    for linear in (m for m in module.modules() if isinstance(m, torch.nn.Linear)):
        for p in linear.parameters(recurse=False):
            if id(p) not in shared and p.dtype != dtype and p.is_floating_point():
                saved += p.numel() * (p.element_size() - torch.empty((), dtype=dtype).element_size())
                p.data = p.data.to(dtype)
    return saved


class Learner:
    """Policy, reference, critic, optimizer: see the module docstring."""

    def __init__(self, config: TrainConfig, model: torch.nn.Module, *, tokenizer: Any = None,
                 ctx: DistContext | None = None) -> None:
        self.config, self.ctx = config, ctx or DistContext(device=next(model.parameters()).device)
        # Several ranks with a critic or an optimizer state on disk: refused when the recipe loads (rl/config.py).
        alg = config.algorithm
        initial: dict[str, torch.Tensor] = {}
        unsaved: dict[str, torch.Tensor] | None = None
        if self.ctx.distributed:  # rank 0's weights, broadcast into every rank's shards once sharded
            initial = model.state_dict() if self.ctx.is_main else {}
            unsaved = _unsaved_buffers(model) if self.ctx.is_main else None
            _to_meta(model)  # no rank holds a full copy on its device before sharding (rank 0: in host memory)
        self.reference: torch.nn.Module | None = None
        if alg.kl.coef > 0 and not config.model.lora.enabled:  # LoRA: the reference is the model with adapters off
            # Copied before the masters are made: a frozen reference keeps the dtype it was loaded in.
            self.reference = copy.deepcopy(model).eval().requires_grad_(False)
            if not self.ctx.distributed and bf16_autocast(config.model.mixed_precision, self.ctx.device):
                narrow_linear_weights(self.reference, torch.bfloat16)  # scored under bf16 autocast only
        master_weights(model, config)
        self.model = model
        self.device = self.ctx.device if self.ctx.distributed else next(model.parameters()).device
        self.pad_token_id = int(getattr(tokenizer, "pad_token_id", None) or 0)
        # The critic: its own model (separate, the default) or a head on the policy's trunk (rl/critic.py).
        self.value_head = build_critic(alg.critic, model, model_config=config.model,
                                       vocab_size=len(tokenizer) if tokenizer is not None else None) \
            if alg.critic.enabled else None
        if self.ctx.distributed:
            self._shard()
            self._fill_shards(initial, unsaved)
            del initial
        policy_params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer, self.lr_schedule = build_optimizer(
            policy_params, list(self.value_head.parameters()) if self.value_head else [], config.optim,
            config.trainer.steps)
        self.state_on_disk: OptimizerStateOnDisk | None = None  # AdamW's moments between updates
        self.weight_sync_bytes: int | None = None  # of the last policy_state_dict
        if config.runtime.optimizer_state_to_disk:
            self.state_on_disk = OptimizerStateOnDisk.in_run_dir(self.optimizer, config.trainer.run_dir)

    # ---- set-up -----------------------------------------------------------------------------------
    def _shard(self) -> None:
        """FSDP2: one unit per decoder layer, then the root; the reference the same way."""
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        policy = None
        if self.config.model.mixed_precision == "bf16" or (
                self.config.model.mixed_precision == "auto" and self.device.type == "cuda"):
            policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        kwargs = {"mp_policy": policy} if policy is not None else {}
        for module in (self.model, self.reference):
            if module is None:
                continue
            for layer in _decoder_layers(module):
                fully_shard(layer, **kwargs)
            fully_shard(module, **kwargs)

    def _fill_shards(self, initial: dict[str, torch.Tensor], unsaved: dict[str, torch.Tensor] | None) -> None:
        """Give the sharded policy and reference (on the meta device) their shards on this rank's device,
        filled from rank 0's ``initial`` weights one tensor at a time (collective). ``unsaved``: rank 0's
        buffers a state dict leaves out (rotary frequencies), a few small tensors sent whole."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        unsaved = broadcast_object(unsaved, self.ctx)
        for module in (self.model, self.reference):
            if module is None:
                continue
            module.to_empty(device=self.device)
            set_model_state_dict(module, dict(initial), options=StateDictOptions(
                full_state_dict=True, broadcast_from_rank0=True))
            with torch.no_grad():
                for name, value in unsaved.items():
                    module.get_buffer(name).copy_(value)

    @property
    def precision(self) -> contextlib.AbstractContextManager[Any]:
        """Autocast on one process; under FSDP2 the mixed-precision policy casts instead."""
        if self.ctx.distributed:
            return contextlib.nullcontext()
        return mixed_precision(self.config.model.mixed_precision, self.model, cache=self.config.runtime.autocast_cache)

    # ---- 1. score a batch -----------------------------------------------------------------------------
    @torch.no_grad()
    def score(self, batch: RLBatch, *, temperature: float) -> ScoredBatch:
        """Old and reference log-probs, entropy and values of ``batch``, on the learner's device.

        On several ranks each rank scores its share of the rows (shares balanced by tokens) and every
        rank receives every row's results. FSDP2's forwards are collective, so a rank whose share
        needs fewer forwards than the busiest rank's runs one-token forwards until the counts agree.
        """
        alg = self.config.algorithm
        device = self.device
        mask = batch.mask.to(device)
        kw: dict[str, Any] = {"temperature": temperature, "packing": alg.packing, "max_tokens": alg.micro_batch_tokens,
              "pad_token_id": self.pad_token_id}
        if not alg.recomputes_old_logprobs:  # one optimizer step: the update's own log-probs are the old ones
            return ScoredBatch(mask=mask, token_rewards=batch.token_rewards.to(device),
                               rollout_logprobs=batch.rollout_logprobs.to(device), old=None, ref_logprobs=None,
                               token_kl=None)
        shares = balanced_shares([len(s) for s in batch.sequences], self.ctx.world_size)
        mine = shares[self.ctx.rank]
        sequences, rows_mask, idle = batch.sequences, mask, 0
        if self.ctx.distributed:
            sequences, rows_mask = [batch.sequences[i] for i in mine], mask[mine]
            plan: dict[str, Any] = {"packing": alg.packing, "max_tokens": alg.micro_batch_tokens}
            busiest = max(count_forwards([batch.sequences[i] for i in s], mask[s], **plan) for s in shares)
            idle = busiest - count_forwards(sequences, rows_mask, **plan)
        with self.precision:
            old = forward_tokens(self.model, sequences, rows_mask, with_entropy=True, value_head=self.value_head, **kw)
            _idle_forwards(self.model, idle, self.pad_token_id)
            ref_logprobs = None
            if alg.kl.coef > 0:
                if self.reference is not None:
                    ref_logprobs = forward_tokens(self.reference, sequences, rows_mask, **kw).logprobs
                    _idle_forwards(self.reference, idle, self.pad_token_id)
                else:
                    with self.model.disable_adapter():
                        ref_logprobs = forward_tokens(self.model, sequences, rows_mask, **kw).logprobs
        if self.ctx.distributed:  # every rank's rows, in batch order, on every rank
            old, ref_logprobs = _gather_rows((old, ref_logprobs), shares, len(batch.sequences), self.ctx)
        token_kl = None
        if ref_logprobs is not None:
            token_kl = kl_penalty(old.logprobs, ref_logprobs, alg.kl.estimator) * mask  # (B, T)
        token_rewards = batch.token_rewards.to(device)
        if token_kl is not None and alg.kl.in_reward:
            token_rewards = token_rewards - alg.kl.coef * token_kl
        return ScoredBatch(mask=mask, token_rewards=token_rewards, rollout_logprobs=batch.rollout_logprobs.to(device),
                           old=old, ref_logprobs=ref_logprobs, token_kl=token_kl)

    # ---- 2. update ------------------------------------------------------------------------------------
    def update(self, inputs: UpdateInputs, *, temperature: float, generator: torch.Generator) -> dict[str, float]:
        """The PPO update of one step over ``inputs`` (identical on every rank); metrics summed over ranks."""
        # With state_on_disk, AdamW's moments come back only inside optimizer.step() (its hooks), not for
        # the forward and backward passes.
        with self.precision:
            metrics = ppo_update(self.model, self.optimizer, inputs, self.config.algorithm, temperature=temperature,
                                 generator=generator, value_head=self.value_head,
                                 norm_length=self.config.rollout.max_total_tokens, pad_token_id=self.pad_token_id,
                                 ctx=self.ctx, correction=self.config.off_policy_correction,
                                 stop_kl=self.config.algorithm.off_policy.stop_kl)
        return metrics

    def step_schedule(self) -> None:
        with warnings.catch_warnings():  # a step whose groups all tie makes no optimizer step
            warnings.simplefilter("ignore", UserWarning)
            self.lr_schedule.step()

    @property
    def lr(self) -> float:
        return float(self.lr_schedule.get_last_lr()[0])

    @torch.no_grad()
    def probe_logprobs(self, token_ids: list[int]) -> list[float]:
        """Per-token log-probs (temperature 1, no autocast) of one short sequence, entry 0 being 0.0: the learner's
        side of the check after a weight sync (:mod:`agentgym_core.rl.guards`). Collective on several ranks."""
        mask = torch.ones(1, len(token_ids), device=self.device)
        out = forward_tokens(self.model, [token_ids], mask, pad_token_id=self.pad_token_id)
        return out.logprobs[0].tolist()

    # ---- 3. weights out ---------------------------------------------------------------------------------
    def policy_state_dict(self, dtype: torch.dtype | None = None) -> Mapping[str, torch.Tensor]:
        """The full policy weights in ``dtype`` (None: the learner's), on the learner's device.

        Sharded: gathered one tensor at a time, cast before the all-gather (collective; see
        :mod:`agentgym_core.rl.weight_sync`). ``weight_sync_bytes`` is set to their size.
        """
        tied = None
        if getattr(getattr(self.model, "config", None), "tie_word_embeddings", False):
            output = self.model.get_output_embeddings()  # one copy, as save_pretrained writes it
            tied = next((f"{name}.weight" for name, module in self.model.named_modules() if module is output),
                        None)
        weights = gather_weights(self.model, dtype=dtype, tied_output=tied)
        self.weight_sync_bytes = weight_bytes(weights)
        return weights

    def rollout_weights(self, dtype: torch.dtype | None = None) -> Mapping[str, torch.Tensor]:
        """The weights for this rank's own rollout engine (every rank gets them, on its device; collective
        when sharded): :meth:`policy_state_dict`, or with LoRA only the adapters, by the learner's names
        (the engine holds the frozen base weights since it started). ``weight_sync_bytes`` is their size."""
        if not self.config.model.lora.enabled:
            return self.policy_state_dict(dtype)
        weights = gather_weights(self.model, dtype=dtype, include=is_adapter_weight)
        self.weight_sync_bytes = weight_bytes(weights)
        return weights

    def close(self) -> None:
        """Delete what the learner keeps on disk between updates (``runtime.optimizer_state_to_disk``); the
        learner updates no more after it."""
        if self.state_on_disk is not None:
            self.state_on_disk.close()

    # ---- 4. checkpoints -----------------------------------------------------------------------------------
    def _trainable(self) -> torch.nn.Module:
        modules = {"policy": self.model}
        if self.value_head is not None:
            modules["value_head"] = self.value_head
        return torch.nn.ModuleDict(modules)

    def optimizer_state(self) -> dict[str, Any]:
        """The optimizer state keyed by parameter name, whole (collective on several ranks)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        stored = self.state_on_disk is not None and self.state_on_disk.stored
        with self.state_on_disk.paused() if self.state_on_disk is not None else contextlib.nullcontext():
            found = get_optimizer_state_dict(self._trainable(), self.optimizer,
                                             options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if stored and self.state_on_disk is not None:
            self.state_on_disk.store()  # the file still holds it: nothing written
        return found

    def save(self, run_dir: Path, step: int, *, tokenizer: Any, extra_state: dict[str, Any], keep: int,
             hf_weights: bool = True) -> None:
        """Checkpoint ``step`` (collective; rank 0 commits it). Every rank's RNG state (``rng_by_rank``;
        ``rng`` is rank 0's) with the LR schedule and ``extra_state``.

        One process: the model in HF format and the optimizer by parameter name. Several ranks: each
        writes its own shard of weights and optimizer state (``sharded/``, torch.distributed.checkpoint),
        and the full HF weights are gathered tensor by tensor only when ``hf_weights`` asks for them.
        """
        rngs = gather_object(rng_state(), self.ctx)  # taken before the collectives below, which draw nothing
        state = {**extra_state, "lr_schedule": self.lr_schedule.state_dict(),
                 "value_head": self.value_head.state_dict() if self.value_head is not None else None,
                 "rng": rngs[0], "rng_by_rank": rngs}
        if not self.ctx.distributed:
            save_checkpoint(run_dir, step, model=self.model, tokenizer=tokenizer, keep=keep,
                            trainer_state={**state, "optimizer_by_name": self.optimizer_state()})
            return

        if self.ctx.is_main:
            start_checkpoint(run_dir, step)
        barrier(self.ctx)  # on the host group: the directory exists before any rank writes into it
        tmp = pending_dir(run_dir, step)
        save_sharded(tmp / SHARDED, self._sharded_state())
        weights = self.policy_state_dict() if hf_weights else None  # gathered per tensor, on the device
        if not self.ctx.is_main:
            return
        try:
            if weights is not None:
                (tmp / "model").mkdir()
                export_model(self.model, tokenizer, tmp / "model", {k: v.cpu() for k, v in weights.items()})
            del weights
            torch.save(state, tmp / "trainer_state.pt")
        except Exception as exc:  # most often a full disk (torch and safetensors say it in their own words)
            raise CheckpointWriteError(unwritten_checkpoint_message(run_dir, step, tmp, exc)) from exc
        commit_checkpoint(run_dir, step, keep=keep)

    def _sharded_state(self) -> dict[str, Any]:
        """This rank's shards of the weights and optimizer state, keyed by parameter name (DTensors when
        sharded, plain tensors on one process): what torch.distributed.checkpoint saves and fills."""
        from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

        return {"model": get_model_state_dict(self.model),
                "optimizer": get_optimizer_state_dict(self._trainable(), self.optimizer)}

    def load(self, checkpoint: Path) -> dict[str, Any]:
        """Restore weights, optimizer, LR schedule, value head and this rank's RNG state (see
        :func:`~agentgym_core.training.checkpoint.rank_rng_state`) from ``checkpoint``; returns its state."""
        with self.state_on_disk.paused() if self.state_on_disk is not None else contextlib.nullcontext():
            state = self._load(checkpoint)
        if self.state_on_disk is not None:  # loaded into memory: to the file until the first optimizer step
            self.state_on_disk.changed()
            self.state_on_disk.store()
        # Last, so nothing above draws from the restored streams: the next update's dropout masks are
        # the ones an uninterrupted run would draw, on every rank (Ray actors and spawned ranks alike).
        set_rng_state(rank_rng_state(state, self.ctx.rank, self.ctx.world_size))
        return state

    def _load(self, checkpoint: Path) -> dict[str, Any]:
        """Weights, value head, optimizer and LR schedule from ``checkpoint``; returns its state."""
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        state = load_trainer_state(checkpoint)
        if is_sharded(checkpoint):  # any number of ranks wrote it: each reads its own share of the files
            if self.value_head is not None:
                raise ConfigError(f"{checkpoint} was written by several learner ranks, which train no critic; "
                                  "resume it with the recipe it was written with")
            sharded = self._sharded_state()
            load_sharded(checkpoint / SHARDED, sharded)
            set_model_state_dict(self.model, sharded["model"])
            set_optimizer_state_dict(self._trainable(), self.optimizer, sharded["optimizer"])
            self.lr_schedule.load_state_dict(state["lr_schedule"])
            return state
        if self.ctx.distributed:  # a whole-model checkpoint: rank 0 reads it and broadcasts tensor by tensor
            weights = read_model_weights(checkpoint) if self.ctx.is_main else {}
            result = set_model_state_dict(self.model, weights, options=StateDictOptions(
                full_state_dict=True, broadcast_from_rank0=True, strict=False))
            check_weights_match(self.model, checkpoint, result.missing_keys, result.unexpected_keys)
        else:
            load_policy_weights(self.model, checkpoint)
        if self.value_head is not None and state.get("value_head") is not None:
            self.value_head.load_state_dict(state["value_head"])
        if "optimizer_by_name" in state:
            set_optimizer_state_dict(self._trainable(), self.optimizer, state["optimizer_by_name"],
                                     options=StateDictOptions(full_state_dict=True))
        else:  # checkpoints written before optimizer states were keyed by name (one process only)
            self.optimizer.load_state_dict(state["optimizer"])
        self.lr_schedule.load_state_dict(state["lr_schedule"])
        return state


def balanced_shares(lengths: list[int], world_size: int) -> list[list[int]]:
    """Rows split over ``world_size`` ranks with about equal tokens (longest first, each to the rank with
    the fewest tokens so far); each share in batch order. The same on every rank."""
    shares: list[list[int]] = [[] for _ in range(world_size)]
    load = [0] * world_size
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        rank = min(range(world_size), key=lambda r: (load[r], r))
        shares[rank].append(i)
        load[rank] += lengths[i]
    return [sorted(share) for share in shares]


def _idle_forwards(model: torch.nn.Module, count: int, pad_token_id: int) -> None:
    """``count`` one-token forwards: this rank joins the sharded module's collectives of forwards it has no
    rows for."""
    device = next(model.parameters()).device
    for _ in range(count):
        model(input_ids=torch.full((1, 1), pad_token_id, device=device), use_cache=False)


def _gather_rows(parts: tuple[TokenStats, torch.Tensor | None], shares: list[list[int]], batch_size: int,
                 ctx: DistContext) -> tuple[TokenStats, torch.Tensor | None]:
    """Every rank's scored rows put back in batch order, on every rank (over the host group: a few
    floats per token, no weights)."""
    old, ref = parts
    mine = {"logprobs": old.logprobs, "entropy": old.entropy, "values": old.values, "ref": ref}
    gathered = gather_object({k: v.cpu() if v is not None else None for k, v in mine.items()}, ctx)
    device = old.logprobs.device
    whole: dict[str, torch.Tensor | None] = {}
    for key, value in mine.items():
        if value is None:
            whole[key] = None
            continue
        out = torch.zeros(batch_size, value.shape[1], dtype=value.dtype)
        for share, part in zip(shares, gathered, strict=True):
            if share:
                out[share] = part[key]
        whole[key] = out.to(device)
    return TokenStats(logprobs=whole["logprobs"], entropy=whole["entropy"], values=whole["values"]), whole["ref"]


def _to_meta(model: torch.nn.Module) -> None:
    """Move ``model`` to the meta device, keeping tied parameters tied (``Module.to`` gives each module
    that shares a parameter a new one of its own when the device type changes)."""
    owners: dict[int, list[tuple[torch.nn.Module, str]]] = {}
    for module in model.modules():
        for name, param in module._parameters.items():
            if param is not None:
                owners.setdefault(id(param), []).append((module, name))
    model.to("meta")
    for (first, first_name), *others in owners.values():
        for module, name in others:
            setattr(module, name, getattr(first, first_name))


def _unsaved_buffers(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``model``'s non-persistent buffers by name, on the CPU (a state dict does not hold them)."""
    out = {}
    for prefix, module in model.named_modules():
        for name in module._non_persistent_buffers_set:
            buffer = module._buffers.get(name)
            if buffer is not None:
                out[f"{prefix}.{name}" if prefix else name] = buffer.detach().cpu()
    return out


def is_adapter_weight(name: str) -> bool:
    """A LoRA adapter's tensor (peft names them ``...lora_A.<adapter>.weight``, ``lora_B``, ``lora_embedding_*``,
    ``lora_magnitude_vector``), as opposed to a frozen base weight."""
    return ".lora_" in name


def _decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The repeated transformer blocks of a Hugging Face causal LM (``model.model.layers`` and kin)."""
    for module in model.modules():
        layers = getattr(module, "layers", None)
        if isinstance(layers, torch.nn.ModuleList) and len(layers) > 0:
            return list(layers)
    return []
