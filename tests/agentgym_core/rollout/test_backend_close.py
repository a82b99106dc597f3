"""Backends that hold threads or processes are closed by whoever made them (``close_backend``)."""

from __future__ import annotations

import pytest

from agentgym_core.rollout.backend import ClosableBackend, close_backend, closing_backend


class _Holds:
    """A stand-in for a backend with something to free (the real one is tested in test_library_engine_train)."""

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
