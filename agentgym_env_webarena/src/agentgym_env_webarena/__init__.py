"""agentgym's WebArena environment: a real Chromium, WebArena's observation and actions, verified grading."""

from agentgym_env_webarena.actions import Action, ActionParseError, extract_action, parse_action
from agentgym_env_webarena.browser import BrowserPool, BrowserUnavailableError
from agentgym_env_webarena.config import BrowserConfig, WebArenaConfig
from agentgym_env_webarena.env import WebArenaEnv
from agentgym_env_webarena.local import LocalWebArenaEnv

__all__ = [
    "Action",
    "ActionParseError",
    "BrowserConfig",
    "BrowserPool",
    "BrowserUnavailableError",
    "LocalWebArenaEnv",
    "WebArenaConfig",
    "WebArenaEnv",
    "extract_action",
    "parse_action",
]
