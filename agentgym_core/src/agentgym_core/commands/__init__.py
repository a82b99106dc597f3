"""Subcommands of `agentgym`; every public module here is one command (see agentgym_core.cli)."""
