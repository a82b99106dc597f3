"""GEM's environments that run offline, behind agentgym's ``Env``: ``gem.make(env_id)`` through the text bridge.

GEM (``gem-llm``) already speaks the Gymnasium text API (``reset(seed) -> (observation, info)``,
``step(action) -> (observation, reward, terminated, truncated, info)``), so this adapter is
:class:`agentgym_core.text_gym.TextGymEnv` with the GEM id chosen by the task id: id ``e`` (its index
in :data:`ENV_IDS`) instance ``k`` is task ``e * 1000 + k``, GEM's ``reset(seed=k)``; instances 0-99
train, 100-119 test; categories are the GEM ids.

The board of a GEM game comes in ``info["suffix"]``; it is appended to the observation. GEM pays
1.0 for a solved task (``success``). End states are put in agentgym's terms: GEM ends a single-turn
task with ``terminated`` and ``truncated`` both true and its internal ``<|TERMINAL_STATE|>`` marker as
the observation; here it is ``terminated`` alone, answered ``Correct.`` or ``Incorrect.``. A game GEM
ends out of turns (both flags again) is a loss by the game's own rule: ``terminated``, with
``info["out_of_turns"]``. Only this adapter's ``max_steps`` truncates.

``tools={...}`` wraps every GEM environment in GEM's own ``ToolEnvWrapper`` with its tools: ``python``
(``PythonCodeTool``: ``<python>...</python>`` runs in a subprocess), ``search`` (``SearchTool``:
``<search>...</search>`` against a retrieval server's ``search_url``), ``mcp`` (``MCPTool``: an MCP
server's tools). A reply that calls a tool gets the tool's output as the observation and is a valid
action; a reply with neither a tool call nor a ``\\boxed{}`` answer is invalid. GEM's games seed Python's global ``random``, so
instances play on their own streams under a process-wide lock (``thread_safe = False``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from agentgym_core.env import InvalidTaskError, ResetResult, TaskCatalog
from agentgym_core.text_gym import OwnGlobalRandom, TextGymEnv

__all__ = ["ENV_IDS", "GAME_IDS", "RG_IDS", "GemEnv", "task_id_of"]

GAME_IDS: tuple[str, ...] = (
    "game:FifteenPuzzle-v0-easy", "game:FifteenPuzzle-v0-hard", "game:Game2048-v0-easy",
    "game:Game2048-v0-extreme-hard", "game:Game2048-v0-hard", "game:Game2048-v0-random",
    "game:GuessTheNumber-v0-easy", "game:GuessTheNumber-v0-hard", "game:GuessTheNumber-v0-random",
    "game:Mastermind-v0-easy", "game:Mastermind-v0-hard", "game:Mastermind-v0-random",
    "game:Minesweeper-v0-easy", "game:Minesweeper-v0-hard", "game:Minesweeper-v0-random",
    "game:Sokoban-v0-easy", "game:Sokoban-v0-hard", "game:Sudoku-v0-easy", "game:Sudoku-v0-hard",
    "game:Sudoku-v0-random", "game:TowerofHanoi-v0-easy", "game:TowerofHanoi-v0-hard",
    "game:TowerofHanoi-v0-random",
)  # fmt: skip
"""GEM's games that reset offline. Left out: Crosswords (needs pandas), Hangman, WordSearch and Wordle
(NLTK corpora downloaded at run time), FifteenPuzzle-v0-random (fails to reset) and Sokoban-v0-random
(minutes to generate)."""

RG_IDS: tuple[str, ...] = tuple(f"rg:{name}" for name in (
    "ab", "acre", "advanced_geometry", "aiw", "arc_1d", "arc_agi", "base_conversion", "basic_arithmetic",
    "binary_alternation", "binary_matrix", "bitwise_arithmetic", "caesar_cipher", "calendar_arithmetic",
    "chain_sum", "circuit_logic", "codeio", "coin_flip", "color_cube_rotation", "complex_arithmetic",
    "count_bits", "count_primes", "countdown", "course_schedule", "cryptarithm", "decimal_arithmetic",
    "decimal_chain_sum", "dice", "emoji_mystery", "family_relationships", "figlet_font",
    "fraction_simplification", "futoshiki", "game_of_life", "game_of_life_halting", "gcd",
    "group_anagrams", "gsm_symbolic", "intermediate_integration", "isomorphic_strings", "jugs", "kakurasu",
    "knights_knaves", "largest_island", "lcm", "leg_counting", "letter_counting", "letter_jumble",
    "list_functions", "mahjong_puzzle", "manipulate_matrix", "maze", "mini_sudoku", "modulo_grid",
    "n_queens", "needle_haystack", "number_filtering", "number_format", "number_sequence",
    "number_sorting", "palindrome_generation", "palindrome_partitioning", "path_star",
    "polynomial_equations", "polynomial_multiplication", "pool_matrix", "power_function",
    "prime_factorization", "products", "puzzle24", "quantum_lock", "ransom_note", "rearc",
    "rectangle_count", "rotate_matrix", "rotten_oranges", "self_reference", "sentence_reordering",
    "shortest_path", "simple_equations", "simple_geometry", "simple_integration", "spell_backward",
    "spiral_matrix", "string_insertion", "string_manipulation", "string_splitting", "string_synthesis",
    "sudoku", "survo", "syllogism", "time_intervals", "tower_of_hanoi", "tsumego", "word_ladder",
    "word_sequence_reversal", "word_sorting", "zebra_puzzles",
))  # fmt: skip
"""GEM's reasoning-gym tasks that reset offline and score their own gold answer 1 (agentgym_env_reasoning_gym's list)."""

ENV_IDS: tuple[str, ...] = GAME_IDS + RG_IDS
"""Everything offered by default; GEM's math, code, qa and eval sets download data and are left out."""

INSTANCES = 120
TEST_FROM = 100

INSTRUCTION = (
    "You solve a task from GEM: a game or a reasoning problem. The first observation states the rules, the "
    "answer format and the current state. Each turn, think, then reply with your move or answer in the format "
    "the rules ask for (games usually want it in \\boxed{...}, e.g. \\boxed{up}), after `Action:` on the last line."
)


def task_id_of(env_id: str, instance: int) -> int:
    """The task id of ``instance`` of the GEM environment ``env_id``."""
    if env_id not in ENV_IDS:
        raise InvalidTaskError(f"{env_id!r} is not one of the GEM ids offered here (ENV_IDS)")
    if not 0 <= instance < INSTANCES:
        raise InvalidTaskError(f"instance must be in 0..{INSTANCES - 1}, got {instance}")
    return ENV_IDS.index(env_id) * 1000 + instance


def _catalog(env_ids: tuple[str, ...]) -> TaskCatalog:
    train: list[int] = []
    test: list[int] = []
    categories: dict[str, list[int]] = {}
    for env_id in env_ids:
        base = ENV_IDS.index(env_id) * 1000
        train.extend(range(base, base + TEST_FROM))
        test.extend(range(base + TEST_FROM, base + INSTANCES))
        categories[env_id] = list(range(base, base + INSTANCES))
    return TaskCatalog(splits={"train": train, "test": test}, categories=categories)


class _BoardInObservation:
    """A GEM env whose observations carry the board (``info["suffix"]``) and whose info says ``success``."""

    def __init__(self, gem_env: Any) -> None:
        self.gem_env = gem_env

    @staticmethod
    def _with_suffix(observation: str, info: dict[str, Any]) -> str:
        suffix = str(info.get("suffix") or "").strip()
        return f"{observation}\n\n{suffix}" if suffix and suffix not in observation else observation

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        observation, info = self.gem_env.reset(seed=seed)
        return self._with_suffix(str(observation), info or {}), dict(info or {})

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        from gem.utils.constants import TERMINAL_STATE

        observation, reward, terminated, truncated, info = self.gem_env.step(action)
        info = dict(info or {})
        observation = str(observation)
        if terminated or truncated:
            info["success"] = float(reward) >= 1.0
        if observation.strip() == TERMINAL_STATE:  # a single-turn task answered: no text for the policy
            observation = "Correct." if info["success"] else "Incorrect."
            truncated = False
        elif terminated and truncated:  # GEM's own turn limit: the game's end, a loss by its rules
            info["out_of_turns"] = True
            truncated = False
        return self._with_suffix(observation, info), float(reward), bool(terminated), bool(truncated), info


def _without_boxed_answer(action: str, observation: str, info: dict[str, Any]) -> bool:
    """GEM's games and reasoning tasks read the last ``\\boxed{...}`` of a reply and refuse a reply without
    one (a tool call, which GEM's tool wrapper answers, is valid). GEM does not flag its games' rule
    refusals (a repeated guess, a cell off the board): those count as valid moves here."""
    from gem.utils.parsing import extract_last_boxed_answer

    if "tool_type" in info:  # GEM's ToolEnvWrapper parsed a tool call from the reply
        return False
    return extract_last_boxed_answer(action) is None


TOOLS = {
    "python": ("gem.tools.python_code_tool", "PythonCodeTool"),
    "search": ("gem.tools.search_tool", "SearchTool"),
    "mcp": ("gem.tools.mcp_tool", "MCPTool"),
}
"""Tool name of the ``tools`` option -> GEM's tool class (module, name); its options are the class's arguments."""


def _check_tools(tools: dict[str, dict[str, Any]]) -> None:
    unknown = sorted(set(tools) - set(TOOLS))
    if unknown:
        raise ValueError(f"tools: unknown {unknown}; GEM's tools are {', '.join(TOOLS)}")
    for name, options in tools.items():
        if not isinstance(options, dict):
            raise ValueError(
                f"tools.{name}: give its options as a mapping ({{}} for the defaults), got {options!r}"
            )


def _with_tools(gem_env: Any, tools: dict[str, dict[str, Any]], max_tool_uses: int) -> Any:
    """``gem_env`` inside GEM's ``ToolEnvWrapper`` with the named tools."""
    import importlib

    from gem.tools.tool_env_wrapper import ToolEnvWrapper

    built = []
    for name, options in tools.items():
        module, cls = TOOLS[name]
        built.append(getattr(importlib.import_module(module), cls)(**options))
    return ToolEnvWrapper(gem_env, tools=built, max_tool_uses=max_tool_uses)


class GemEnv(TextGymEnv):
    """GEM's offline environments, the GEM id chosen by the task id (see the module docstring).

    Args:
        env_ids: offer only these GEM ids (a subset of :data:`ENV_IDS`); the catalog shrinks to them.
        max_steps: replies per episode before it is truncated.
        tools: GEM tools to offer, name -> the tool class's options: ``{"python": {"timeout": 5}}``,
            ``{"search": {"search_url": "http://127.0.0.1:8000/retrieve"}}``, ``{"mcp": {...}}``.
        max_tool_uses: tool calls per episode GEM allows (then it asks for the final answer).
    """

    name = "gem"
    max_episode_steps = 40
    instruction_text = INSTRUCTION
    uses_global_random = True
    invalid_rule = staticmethod(_without_boxed_answer)
    # Not thread-safe: GEM's games seed and draw from Python's global random; calls serialise on the
    # process-wide lock of OwnGlobalRandom, and the server serialises the instances once the core reads this.
    thread_safe: ClassVar[bool] = False
    env_ids: ClassVar[tuple[str, ...]] = ENV_IDS
    reset_seed = staticmethod(lambda task_id, seed: task_id % 1000)

    def __init__(
        self,
        env_ids: list[str] | None = None,
        max_steps: int | None = 40,
        tools: dict[str, dict[str, Any]] | None = None,
        max_tool_uses: int = 10,
    ) -> None:
        if env_ids is not None:
            unknown = [e for e in env_ids if e not in ENV_IDS]
            if unknown or not env_ids:
                raise ValueError(
                    f"env_ids: unknown or empty {unknown or env_ids!r}; choose from ENV_IDS "
                    f"(e.g. {GAME_IDS[0]!r}, {RG_IDS[0]!r})"
                )
            self.env_ids = tuple(env_ids)  # type: ignore[misc]  # this instance's subset
        if max_steps is not None and max_steps < 1:
            raise ValueError(f"max_steps must be at least 1 or None, got {max_steps}")
        self.max_episode_steps = max_steps
        _check_tools(tools or {})
        if max_tool_uses < 1:
            raise ValueError(f"max_tool_uses must be at least 1, got {max_tool_uses}")
        self._tools, self._max_tool_uses = dict(tools or {}), max_tool_uses
        self._gyms: dict[str, _BoardInObservation] = {}
        self._gym: Any = None
        self._random = OwnGlobalRandom()
        self._known = {task for ids in _catalog(self.env_ids).splits.values() for task in ids}
        self._info: dict[str, Any] = {}
        self._steps, self._return, self._done, self._started = 0, 0.0, True, False

    @classmethod
    def configured(cls, **options: Any) -> type[GemEnv]:
        env_ids = options.get("env_ids")
        return type(cls.__name__, (cls,), {"env_ids": tuple(env_ids)}) if env_ids else cls

    @classmethod
    def tasks(cls) -> TaskCatalog:
        return _catalog(cls.env_ids)

    def reset(self, task_id: int, seed: int | None = None) -> ResetResult:
        if task_id not in self._known:
            raise InvalidTaskError(
                f"gem: task {task_id} is not offered here; ids are ENV_IDS index * 1000 + "
                f"instance (0-{INSTANCES - 1}), for {len(self.env_ids)} GEM ids"
            )
        env_id = ENV_IDS[task_id // 1000]
        if env_id not in self._gyms:
            import gem

            self._random.forget()
            with self._random.active():
                made = gem.make(env_id)
                if self._tools:
                    made = _with_tools(made, self._tools, self._max_tool_uses)
                self._gyms[env_id] = _BoardInObservation(made)
        self._gym = self._gyms[env_id]
        result = super().reset(task_id, seed)
        result.info["env_id"] = env_id
        return result

    def close(self) -> None:
        self._gyms.clear()
        self._gym = None
