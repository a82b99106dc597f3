"""The contract between the trainer and advantage-estimator plugins.

An estimator is a pure function ``estimate(batch, config) -> AdvantageOutput`` over padded
``(B, T)`` tensors: one row per trajectory, the whole multi-turn conversation laid out in one row
(prompt, then policy turns interleaved with environment observations).

Layout of a row, ``P`` = a token the policy sampled, ``E`` = prompt or environment token::

    tokens          E E E P P P E E E E P P P P E E P P
    response_mask   0 0 0 1 1 1 0 0 0 0 1 1 1 1 0 0 1 1
    token_rewards   0 0 0 0 0 r1 0 ...         r2 ...  0 R

The trainer puts every reward on a policy token (see :func:`agentgym_core.rl.rewards.place_rewards`):
a per-turn reward on the last token of that turn, the outcome reward on the last token the policy
sampled. So estimators never need to look at environment tokens, and none of the reward is lost
under the mask (the anchor's GAE and REINFORCE++ lose it exactly there).

An estimator whose baseline comes from the other samples of a task (GRPO, RLOO) declares how many
it needs when its plugin registers it (absent: 1)::

    register("grpo", grpo, min_group_size=2)

The trainer refuses a run whose ``rollout.group_size`` is smaller, at start, instead of training on
advantages that are all 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:  # annotations only: the recipe schema imports this module without loading torch
    import torch

__all__ = ["AdvantageBatch", "AdvantageConfig", "AdvantageOutput", "Estimator", "min_group_size"]


@dataclass
class AdvantageBatch:
    """What an estimator reads. All tensors share the batch size ``B`` and length ``T``."""

    token_rewards: torch.Tensor
    """(B, T) float: rewards placed on policy tokens; 0 elsewhere."""
    response_mask: torch.Tensor
    """(B, T) bool/float: 1 on tokens the policy sampled, 0 on prompt, environment and padding."""
    group_ids: torch.Tensor
    """(B,) long: rows with the same id are samples of the same task (GRPO/RLOO groups)."""
    values: torch.Tensor | None = None
    """(B, T) float: critic values V(s_t) on policy tokens (GAE only); None without a critic."""
    turn_spans: list[list[tuple[int, int]]] | None = None
    """Per row, the ``[start, end)`` token range of each policy turn, in order (step-level estimators)."""
    turn_states: list[list[str | None]] | None = None
    """Per row and turn, the environment's name for the state the turn acted in (``info['state_key']``;
    None where the environment names none). Turns of one group with equal names acted in the same state."""

    @property
    def mask(self) -> torch.Tensor:
        """(B, T) float version of ``response_mask``."""
        return self.response_mask.to(self.token_rewards.dtype)


class AdvantageConfig(BaseModel):
    """Knobs shared by all estimators; each estimator reads the ones it needs."""

    # Extra keys are kept until the named plugin is known; rl.plugin_options then checks them against
    # the options class the plugin declares (a subclass of this class), with "did you mean" for typos.
    model_config = ConfigDict(extra="allow")

    gamma: float = Field(1.0, ge=0.0, le=1.0, description="Discount per policy token (GAE, REINFORCE++).")
    lam: float = Field(1.0, ge=0.0, le=1.0, description="GAE lambda.")
    norm_by_std: bool = Field(
        True, description="GRPO: divide by the group's std. False gives Dr. GRPO (mean-centred only)."
    )
    whiten: bool = Field(True, description="REINFORCE++: whiten advantages over the batch's policy tokens.")
    eps: float = Field(1e-6, gt=0.0, description="Added to standard deviations before dividing.")


@dataclass
class AdvantageOutput:
    """What an estimator returns."""

    advantages: torch.Tensor
    """(B, T) float: advantage per token, 0 where ``response_mask`` is 0."""
    returns: torch.Tensor
    """(B, T) float: value targets (GAE) or returns; 0 where ``response_mask`` is 0."""


Estimator = Callable[[AdvantageBatch, AdvantageConfig], AdvantageOutput]
"""The signature of every registered advantage estimator."""


def min_group_size(estimate: Estimator | None, declared: object = None) -> int:
    """Samples per task ``estimate`` needs for a non-zero advantage: ``declared`` (what its registration says,
    ``Registration.declared("min_group_size")``), else 1.

    Raises ``TypeError`` when the value is not an integer >= 1 (a plugin bug).
    """
    value = declared if declared is not None else 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        name = getattr(estimate, "__name__", repr(estimate))
        raise TypeError(f"estimator {name!r} declares min_group_size={value!r}; it must be an int >= 1 "
                        "(the samples per task its baseline needs; 1 when it needs no group)")
    return value
