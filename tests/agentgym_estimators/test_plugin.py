import pytest
import torch

from agentgym_core.plugins import PluginManager
from agentgym_core.rl import (
    AdvantageBatch,
    AdvantageConfig,
    AdvantageOutput,
    EstimatorCheckError,
    check_estimator,
)


def _check_registered(name: str, **kwargs) -> None:
    """The conformance checker on ``name`` as registered: with the options and group size it declares."""
    registration = PluginManager(autoload=True, allow=["estimators"]).registration("advantage_estimator", name)
    options = registration.declared("options") or AdvantageConfig
    check_estimator(registration.obj, options(), declared_min_group_size=registration.declared("min_group_size"),
                    **kwargs)


@pytest.mark.parametrize("name", ["gae", "grpo", "rloo", "reinforce_pp", "gigpo"])
def test_registered_estimators_conform(name):
    _check_registered(name)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["gae", "grpo", "rloo", "reinforce_pp", "gigpo"])
def test_registered_estimators_conform_on_cuda(name):
    """The trainer's batches live on the learner's device: every estimator keeps its tensors there."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    _check_registered(name, device="cuda")


def test_checker_catches_outputs_on_another_device():
    def elsewhere(batch: AdvantageBatch, config) -> AdvantageOutput:
        # Builds its result on a fixed device, not the batch's (on a GPU run: CPU tensors beside CUDA ones).
        a = (batch.token_rewards * batch.mask).to("meta")
        return AdvantageOutput(a, a)

    with pytest.raises(EstimatorCheckError, match="advantages is on meta, the batch on cpu"):
        check_estimator(elsewhere)


def test_checker_catches_reward_on_masked_token():
    def broken(batch: AdvantageBatch, config) -> AdvantageOutput:
        # Ignores the mask: advantages leak onto environment tokens.
        a = batch.token_rewards.cumsum(1)
        return AdvantageOutput(a, a)

    with pytest.raises(EstimatorCheckError, match="non-zero on prompt"):
        check_estimator(broken)


def test_checker_catches_env_tokens_counted_as_steps():
    def per_position(batch: AdvantageBatch, config) -> AdvantageOutput:
        # Discounts by position, so an observation between turns shrinks the reward.
        T = batch.token_rewards.shape[1]
        disc = 0.9 ** torch.arange(T - 1, -1, -1, dtype=torch.float32)
        a = batch.token_rewards.sum(1, keepdim=True) * disc * batch.mask
        return AdvantageOutput(a, a)

    with pytest.raises(EstimatorCheckError, match="environment tokens are inserted"):
        check_estimator(per_position)
