"""agentgym's WebArena environment: a real Chromium, WebArena's observation and actions, verified grading."""

from agentgym_core.plugins import lazy_exports

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

# Loaded on first use, so that importing the plugin module (for `agentgym plugins`, or a server of
# another env) does not import this package's dependencies.
lazy_exports(__name__, {
    "Action": "agentgym_env_webarena.actions",
    "ActionParseError": "agentgym_env_webarena.actions",
    "BrowserConfig": "agentgym_env_webarena.config",
    "BrowserPool": "agentgym_env_webarena.browser",
    "BrowserUnavailableError": "agentgym_env_webarena.browser",
    "LocalWebArenaEnv": "agentgym_env_webarena.local",
    "WebArenaConfig": "agentgym_env_webarena.config",
    "WebArenaEnv": "agentgym_env_webarena.env",
    "extract_action": "agentgym_env_webarena.actions",
    "parse_action": "agentgym_env_webarena.actions",
})
