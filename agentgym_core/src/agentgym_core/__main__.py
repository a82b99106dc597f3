"""``python -m agentgym_core ...`` is the ``agentgym`` command (what ``torchrun -m agentgym_core`` starts)."""

from agentgym_core.cli import main

raise SystemExit(main())
