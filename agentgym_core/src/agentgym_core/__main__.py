"""``python -m agentgym_core ...`` is the ``agentgym`` command (what ``torchrun -m agentgym_core`` starts)."""

from agentgym_core.cli import main

if __name__ == "__main__":  # not when a spawned worker process imports this module
    raise SystemExit(main())
