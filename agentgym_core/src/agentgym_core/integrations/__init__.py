"""Other trainers driving agentgym environments: :mod:`agentgym_core.integrations.trl` (TRL's GRPOTrainer)."""
