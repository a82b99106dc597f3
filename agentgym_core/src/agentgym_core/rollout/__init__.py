"""Multi-turn rollouts: the trajectory record, the backend protocol, the engine, the logs."""

from agentgym_core.rollout.backend import (
    ClosableBackend,
    ContinuousBackend,
    RolloutBackend,
    RunningBatch,
    Sample,
    SamplingParams,
    SessionBackend,
    closing_backend,
)
from agentgym_core.rollout.chat import ChatFormat, ChatTemplateError
from agentgym_core.rollout.engine import EngineConfig, EnvSource, EpisodeSpec, RolloutEngine, RolloutStats
from agentgym_core.rollout.logs import LOG_FORMAT, RolloutLogWriter, read_rollout_log, trajectory_log_record
from agentgym_core.rollout.trajectory import Span, Trajectory, Turn

__all__ = [
    "LOG_FORMAT",
    "RolloutLogWriter",
    "read_rollout_log",
    "trajectory_log_record",
    "ChatFormat",
    "ClosableBackend",
    "closing_backend",
    "ContinuousBackend",
    "ChatTemplateError",
    "EnvSource",
    "EpisodeSpec",
    "RolloutBackend",
    "EngineConfig",
    "RolloutEngine",
    "RolloutStats",
    "RunningBatch",
    "Sample",
    "SamplingParams",
    "SessionBackend",
    "Span",
    "Trajectory",
    "Turn",
]
