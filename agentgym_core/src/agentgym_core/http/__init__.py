"""The environment HTTP room: the server generated from an Env class, its client, pool and workers.

    from agentgym_core.http import HTTPEnv, serve_env
    with serve_env(MyEnv) as url:
        env = HTTPEnv(url)

Where things are: ``protocol`` (the wire format, pydantic models), ``server`` (the app generated
from an Env class) with ``instances`` (live instances), ``errors`` (exceptions -> protocol errors),
``direct_routes`` and ``asgi_body`` (the fast request path), ``compat`` + ``compat_spec`` (AgentGym's
legacy routes), ``openenv_face`` (OpenEnv's routes) and ``mcp_face`` (MCP tools at ``/mcp``),
``workers`` (``agentgym serve --workers N``), ``serving`` (run a server in a thread, or in the
foreground as ``agentgym serve``), ``auth`` (the shared token), ``client`` (``HTTPEnv``), ``pool`` (several servers behind
one client), ``opening`` (an environment by name, class or URL, for ``play``, ``eval``, ``collect``
and the TRL shim) and ``openenv_remote`` (an OpenEnv server's environment as an agentgym Env). Names load on first use, so a client does not import the server stack.
"""

from agentgym_core.plugins import lazy_exports

__all__ = [
    "AgentGymCompat",
    "EnvClient",
    "EnvFactory",
    "EnvPool",
    "HTTPEnv",
    "OpenEnvRemote",
    "RemoteError",
    "ServerUnreachableError",
    "create_app",
    "env_factory",
    "serve_app",
    "serve_env",
    "serve_forever",
]

lazy_exports(__name__, {
    "AgentGymCompat": "agentgym_core.http.compat_spec",
    "EnvClient": "agentgym_core.http.client",
    "EnvFactory": "agentgym_core.http.opening",
    "EnvPool": "agentgym_core.http.pool",
    "HTTPEnv": "agentgym_core.http.client",
    "OpenEnvRemote": "agentgym_core.http.openenv_remote",
    "RemoteError": "agentgym_core.http.client",
    "ServerUnreachableError": "agentgym_core.http.client",
    "create_app": "agentgym_core.http.server",
    "env_factory": "agentgym_core.http.opening",
    "serve_app": "agentgym_core.http.serving",
    "serve_env": "agentgym_core.http.serving",
    "serve_forever": "agentgym_core.http.serving",
})
