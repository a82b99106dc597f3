"""TextArena's games as one agentgym environment (``textarena``), a task family per game id: the 22 offline
single-player games by default, any TextArena id (variants, two-player games against a frozen partner) on request."""

from agentgym_env_textarena.env import (
    EXTRA_FROM,
    GAMES,
    INSTANCES_PER_GAME,
    TEST_FROM,
    TextArenaEnv,
    task_id_of,
    textarena_ids,
)
from agentgym_env_textarena.partners import (
    ModelPartner,
    Partner,
    RandomListedMove,
    ScriptedPartner,
    make_partner,
)

__all__ = [
    "EXTRA_FROM",
    "GAMES",
    "INSTANCES_PER_GAME",
    "TEST_FROM",
    "ModelPartner",
    "Partner",
    "RandomListedMove",
    "ScriptedPartner",
    "TextArenaEnv",
    "make_partner",
    "task_id_of",
    "textarena_ids",
]
