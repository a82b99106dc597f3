"""Typed configuration of the WebArena environment and of its shared browser."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["SITE_ENV_VARS", "BrowserConfig", "WebArenaConfig", "site_urls_from_environ"]

#: WebArena site name (as in the task JSON) -> the environment variable holding its base URL.
#: The names are WebArena's own, so a shell set up for WebArena works unchanged.
SITE_ENV_VARS: dict[str, str] = {
    "shopping": "SHOPPING",
    "shopping_admin": "SHOPPING_ADMIN",
    "reddit": "REDDIT",
    "gitlab": "GITLAB",
    "map": "MAP",
    "wikipedia": "WIKIPEDIA",
    "homepage": "HOMEPAGE",
}


def site_urls_from_environ(environ: dict[str, str] | None = None) -> dict[str, str]:
    """Site name -> base URL for every WebArena variable set in the environment."""
    environ = dict(os.environ) if environ is None else environ
    return {site: environ[var].rstrip("/") for site, var in SITE_ENV_VARS.items() if environ.get(var)}


class BrowserConfig(BaseModel):
    """How the one shared Chromium process is launched. Instances with equal configs share it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    executable_path: str = Field(
        default="/usr/bin/chromium",
        description="Chromium binary (Debian's `chromium` package). Playwright's own download is never used.",
    )
    headless: bool = Field(default=True, description="Run without a window (always true on servers).")
    extra_args: tuple[str, ...] = Field(
        default=(),
        description="More Chromium switches, appended after the off-network defaults.",
    )
    js_heap_mb: int = Field(
        default=512, ge=64, description="V8 old-space limit per renderer, so one runaway page cannot eat the host."
    )
    launch_timeout_s: float = Field(default=30.0, gt=0, description="Give up starting Chromium after this long.")


class WebArenaConfig(BaseModel):
    """Everything a `WebArenaEnv` instance can be told (`WebArenaEnv(**kwargs)` validates into this)."""

    model_config = ConfigDict(extra="forbid")

    sites: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Site name (shopping, shopping_admin, reddit, gitlab, map, wikipedia) -> base URL. "
            "Missing sites fall back to the SHOPPING, SHOPPING_ADMIN, REDDIT, GITLAB, MAP, WIKIPEDIA env vars."
        ),
    )
    viewport_width: int = Field(default=1280, ge=200, description="Browser viewport width in CSS pixels.")
    viewport_height: int = Field(default=720, ge=200, description="Browser viewport height in CSS pixels.")
    current_viewport_only: bool = Field(
        default=True, description="Show only elements inside the viewport, as WebArena's default observation does."
    )
    max_observation_chars: int | None = Field(
        default=16000, ge=200, description="Cut the accessibility tree after this many characters (None: never)."
    )
    max_steps: int = Field(default=30, ge=1, description="Actions per episode before it is truncated.")
    action_timeout_s: float = Field(
        default=15.0, gt=0, description="Wall-clock limit on one action, observation included."
    )
    navigation_timeout_s: float = Field(default=10.0, gt=0, description="Playwright limit on one page load.")
    max_tabs: int = Field(default=4, ge=1, description="Open tabs per instance; extra tabs and popups are closed.")
    max_trace_entries: int = Field(
        default=2000, ge=10, description="Network events kept per episode for grading (oldest dropped first)."
    )
    screenshot: Literal["off", "file", "base64"] = Field(
        default="off",
        description="Screenshot after every step for the viewer: 'file' writes a JPEG and puts its path in "
        "info['screenshot'], 'base64' puts the JPEG itself there. 'off' costs nothing.",
    )
    screenshot_dir: Path | None = Field(
        default=None, description="Where 'file' screenshots go (default: a temporary directory)."
    )
    answer_format: Literal["legacy", "json"] = Field(
        default="legacy",
        description="'legacy': `stop [answer]` takes WebArena's plain answer and is converted to "
        "webarena-verified's JSON response; 'json': the answer must already be that JSON object.",
    )
    browser: BrowserConfig = Field(default_factory=BrowserConfig, description="The shared browser process.")

    def resolved_sites(self) -> dict[str, str]:
        """Configured site URLs over those from the environment variables, without trailing slashes."""
        merged = site_urls_from_environ()
        merged.update({name: url.rstrip("/") for name, url in self.sites.items()})
        return merged
