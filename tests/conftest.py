"""Suite-wide fixtures. Entry-point autoload is off: a test that wants installed plugins asks."""

from __future__ import annotations

import os

os.environ["AGENTGYM_DISABLE_PLUGIN_AUTOLOAD"] = "1"
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
