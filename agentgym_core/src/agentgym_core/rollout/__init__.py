"""Multi-turn rollouts: the trajectory record, the backend protocol, the engine, the logs."""

from agentgym_core.rollout.trajectory import Span, Trajectory, Turn

__all__ = ["Span", "Trajectory", "Turn"]
