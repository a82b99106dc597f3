"""Backends that hold threads or processes are closed by whoever made them (``close_backend``)."""

from __future__ import annotations

import pytest

from agentgym_core.rollout.backend import ClosableBackend, close_backend, closing_backend


class _Holds:
    """A stand-in for a backend with something to free (the real one: the last test here, test_library_engine_train)."""

    def __init__(self) -> None:
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


class _HoldsNothing:
    pass


def test_close_backend_closes_a_closable_backend_and_leaves_any_other_alone():
    holds, nothing = _Holds(), _HoldsNothing()
    assert isinstance(holds, ClosableBackend) and not isinstance(nothing, ClosableBackend)
    close_backend(holds)
    close_backend(nothing)  # nothing to free: no error
    assert holds.closed == 1


def test_closing_backend_closes_once_when_the_block_ends_even_on_an_error():
    holds = _Holds()
    with closing_backend(holds) as backend:
        assert backend is holds and holds.closed == 0
    assert holds.closed == 1
    failing = _Holds()
    with pytest.raises(RuntimeError, match="mid-run"), closing_backend(failing):
        raise RuntimeError("mid-run")
    assert failing.closed == 1


def test_an_evaluation_closes_the_backend_it_made_and_leaves_a_callers_open(tiny_model_dir, tmp_path):
    """The real transformers backend on its library engine, whose running thread holds cuDNN attention's
    process-wide flag off: the flag comes back once the backend is closed, and only then."""
    import torch
    from guess_env import GuessEnv

    from agentgym_backend_transformers import make_backend
    from agentgym_backend_transformers.library_engine import library_engine_available
    from agentgym_core.evaluation import EvalConfig, evaluate
    from agentgym_core.plugins import PluginManager, reset_plugin_manager

    if not library_engine_available():
        pytest.skip("transformers without continuous batching")

    def config(out: str) -> EvalConfig:
        return EvalConfig(env="guess", split="test", limit=1, max_new_tokens=4, max_rounds=2, num_envs=1,
                          model=str(tiny_model_dir), backend_options={"decode_engine": "library"},
                          out_dir=str(tmp_path / out))

    reset_plugin_manager(PluginManager(autoload=True, allow=["transformers"]))  # the backend as a user has it
    try:
        evaluate(config("own"), make_env=GuessEnv, progress=False)
    finally:
        reset_plugin_manager()
    assert torch.backends.cuda.cudnn_sdp_enabled()  # the backend it made was closed

    theirs = make_backend({"model": str(tiny_model_dir), "decode_engine": "library"})
    try:
        evaluate(config("theirs"), backend=theirs, make_env=GuessEnv, progress=False)
        assert not torch.backends.cuda.cudnn_sdp_enabled()  # still running: the caller closes it
    finally:
        theirs.close()
    assert torch.backends.cuda.cudnn_sdp_enabled()
