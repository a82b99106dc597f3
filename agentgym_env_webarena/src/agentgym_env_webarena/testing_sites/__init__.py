"""Small local stand-ins for WebArena's sites (a shop, a forum), served on 127.0.0.1.

The real WebArena sites are multi-GB Docker images; these let the plugin be exercised end to end
(real browser, real HTTP, real graders) anywhere. `tasks.json` holds tasks for them in
webarena-verified's format.
"""

from __future__ import annotations

import threading

from agentgym_env_webarena.testing_sites.forum import ForumHandler
from agentgym_env_webarena.testing_sites.shop import ShopHandler
from agentgym_env_webarena.testing_sites.web import SiteServer

__all__ = ["LocalSites", "local_sites"]


class LocalSites:
    """The shop (site `shopping`) and the forum (site `reddit`), each on its own free port."""

    def __init__(self) -> None:
        self.shop = SiteServer(ShopHandler)
        self.forum = SiteServer(ForumHandler)

    @property
    def urls(self) -> dict[str, str]:
        """Site name -> base URL, in the shape `WebArenaEnv(sites=...)` takes."""
        return {"shopping": self.shop.url, "reddit": self.forum.url}

    def stop(self) -> None:
        self.shop.stop()
        self.forum.stop()


_shared: LocalSites | None = None
_shared_lock = threading.Lock()


def local_sites() -> LocalSites:
    """The process-wide local sites, started on first use."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = LocalSites()
        return _shared
