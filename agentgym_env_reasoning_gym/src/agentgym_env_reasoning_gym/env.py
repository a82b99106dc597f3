"""reasoning-gym's procedural generators as an agentgym environment, scored by each generator's own scorer.

Task ids: generator ``d`` (its index in :data:`LEVELS`, sorted by name), difficulty level ``l`` and item
``k`` make task ``d * 10_000 + l * 1000 + k``. Items 0-99 of every (generator, level) are the train
split, items 100-119 the test split. Level ``l`` is the generator's configuration at reasoning-gym's
own curriculum level ``l`` (0 the easiest; generators without a curriculum have level 0 only), and
the category of a task is ``<generator>/L<l>``: the trainer's pass-rate curriculum
(``rollout.curriculum``) then moves from a generator's easy levels to its hard ones as they get solved.

Any dataset, with its own configuration, size and seed: ``datasets=[{"name": "maze", "config": {"min_dist": 8},
"size": 500, "seed": 7, "test_size": 50}]`` replaces that catalog with these entries (any of reasoning-gym's
registered datasets, those left out of :data:`LEVELS` included). Entry ``i``'s item ``k`` is task
``i * 100_000 + k``; its last ``test_size`` items are the test split, the rest train; its category is
its ``label`` (default its name). The configuration is checked when the environment is configured.

An episode is one question and one answer (``attempts=1``); with ``attempts=n`` a wrong answer is
told its score and may be corrected up to ``n - 1`` times. The reward is the generator's
``score_answer`` of the last answer, in [0, 1]; ``success`` means a score of 1.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
import warnings
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agentgym_core.env import (
    Env,
    EpisodeEndedError,
    InvalidTaskError,
    ResetResult,
    StepResult,
    TaskCatalog,
    parse_react_action,
)

__all__ = [
    "CUSTOM_STRIDE",
    "LEVELS",
    "TEST_ITEMS",
    "TRAIN_ITEMS",
    "DatasetSpec",
    "ReasoningGymEnv",
    "entry",
    "gold_answer",
    "task_id_of",
]

LEVELS: dict[str, int] = {
    "ab": 3,
    "acre": 1,
    "advanced_geometry": 3,
    "aiw": 3,
    "arc_1d": 3,
    "arc_agi": 3,
    "base_conversion": 3,
    "basic_arithmetic": 3,
    "bf": 3,
    "binary_alternation": 3,
    "binary_matrix": 3,
    "bitwise_arithmetic": 3,
    "caesar_cipher": 2,
    "calendar_arithmetic": 3,
    "chain_sum": 3,
    "circuit_logic": 3,
    "codeio": 3,
    "coin_flip": 3,
    "color_cube_rotation": 3,
    "complex_arithmetic": 3,
    "count_bits": 3,
    "count_primes": 3,
    "countdown": 3,
    "course_schedule": 3,
    "cryptarithm": 3,
    "decimal_arithmetic": 3,
    "decimal_chain_sum": 3,
    "dice": 3,
    "emoji_mystery": 3,
    "family_relationships": 3,
    "figlet_font": 3,
    "fraction_simplification": 3,
    "futoshiki": 3,
    "game_of_life": 3,
    "game_of_life_halting": 3,
    "gcd": 3,
    "group_anagrams": 3,
    "gsm_symbolic": 1,
    "intermediate_integration": 3,
    "isomorphic_strings": 3,
    "jugs": 1,
    "kakurasu": 3,
    "knights_knaves": 3,
    "largest_island": 3,
    "lcm": 3,
    "leg_counting": 3,
    "letter_counting": 3,
    "letter_jumble": 3,
    "list_functions": 1,
    "mahjong_puzzle": 3,
    "manipulate_matrix": 3,
    "maze": 3,
    "mini_sudoku": 3,
    "modulo_grid": 1,
    "n_queens": 3,
    "needle_haystack": 3,
    "number_filtering": 3,
    "number_format": 3,
    "number_sequence": 3,
    "number_sorting": 3,
    "palindrome_generation": 3,
    "palindrome_partitioning": 3,
    "path_star": 3,
    "polynomial_equations": 3,
    "polynomial_multiplication": 3,
    "pool_matrix": 3,
    "power_function": 3,
    "prime_factorization": 3,
    "products": 3,
    "puzzle24": 3,
    "quantum_lock": 3,
    "ransom_note": 3,
    "rearc": 3,
    "rectangle_count": 3,
    "rotate_matrix": 3,
    "rotten_oranges": 3,
    "self_reference": 3,
    "sentence_reordering": 3,
    "shortest_path": 3,
    "simple_equations": 3,
    "simple_geometry": 3,
    "simple_integration": 3,
    "spell_backward": 3,
    "spiral_matrix": 3,
    "string_insertion": 3,
    "string_manipulation": 3,
    "string_splitting": 3,
    "string_synthesis": 3,
    "sudoku": 3,
    "survo": 2,
    "syllogism": 3,
    "time_intervals": 3,
    "tower_of_hanoi": 3,
    "tsumego": 3,
    "word_ladder": 3,
    "word_sequence_reversal": 3,
    "word_sorting": 3,
    "zebra_puzzles": 3,
}
"""Generator -> how many curriculum levels it offers here: those whose items generate offline, are the same
from the same seed, and score their own gold answer 1.0 (checked for reasoning-gym 0.1.25). Left out:
boxnet, graph_color, propositional_logic, rubiks_cube and rush_hour (their gold answer does not score 1:
they accept any valid solution and store none), composite (a mixer of the others), knight_swap (its
default configuration is rejected) and sokoban (minutes per item); higher levels of caesar_cipher,
jugs, modulo_grid and survo fail or hang."""

GENERATORS: tuple[str, ...] = tuple(sorted(LEVELS))
TRAIN_ITEMS = range(0, 100)
TEST_ITEMS = range(100, 120)
_SEED = 20_251  # the generators' seed; level l uses _SEED + l

INSTRUCTION = (
    "Solve the problem in the observation. Think it through, then give only the final answer between "
    "<answer> and </answer>, in the format the problem asks for, for example <answer> 42 </answer>."
)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S | re.I)


def task_id_of(generator: str, level: int, item: int) -> int:
    """The task id of ``item`` of ``generator`` at curriculum ``level``."""
    if generator not in LEVELS:
        raise InvalidTaskError(
            f"unknown reasoning-gym generator {generator!r}; see LEVELS for the {len(LEVELS)} offered"
        )
    if not 0 <= level < LEVELS[generator] or not 0 <= item < TEST_ITEMS.stop:
        raise InvalidTaskError(
            f"{generator}: level must be in 0..{LEVELS[generator] - 1} and item in "
            f"0..{TEST_ITEMS.stop - 1}, got level={level}, item={item}"
        )
    return GENERATORS.index(generator) * 10_000 + level * 1000 + item


def _decode(task_id: int) -> tuple[str, int, int]:
    index, rest = divmod(task_id, 10_000)
    level, item = divmod(rest, 1000)
    if not (0 <= index < len(GENERATORS) and task_id >= 0):
        raise InvalidTaskError(
            f"reasoning_gym: no task {task_id}; ids are generator*10000 + level*1000 + item"
        )
    generator = GENERATORS[index]
    task_id_of(generator, level, item)  # validates the level and the item
    return generator, level, item


@functools.lru_cache(maxsize=64)
def _dataset(generator: str, level: int) -> Any:
    import reasoning_gym.factory as factory

    dataset_cls, config_cls = factory.DATASETS[generator]
    seed, size = _SEED + level, TEST_ITEMS.stop
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if factory.has_curriculum(generator):
            curriculum = factory.create_curriculum(generator)
            if level:
                curriculum.set_global_level(level)
            config = curriculum.generate_configuration({"seed": seed, "size": size})
        else:
            config = config_cls(seed=seed, size=size)
        return dataset_cls(config=config)


CUSTOM_STRIDE = 100_000
"""Task ``i * CUSTOM_STRIDE + k`` of a ``datasets=[...]`` catalog is item ``k`` of its ``i``-th entry."""


class DatasetSpec(BaseModel):
    """One entry of ``datasets=[...]``: a reasoning-gym dataset with its configuration, size and seed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="A reasoning-gym dataset name (reasoning_gym.factory.DATASETS).")
    config: dict[str, Any] = Field(
        default_factory=dict, description="Its configuration's fields, e.g. min_dist."
    )
    size: int = Field(
        120, ge=2, le=CUSTOM_STRIDE, description="Items generated; the last test_size are test."
    )
    seed: int = Field(0, description="The dataset's seed.")
    test_size: int = Field(20, ge=1, description="Items at the end that form the test split.")
    label: str | None = Field(None, description="The category of its tasks; default its name.")

    @model_validator(mode="after")
    def _check(self) -> DatasetSpec:
        import reasoning_gym.factory as factory

        if self.name not in factory.DATASETS:
            close = difflib.get_close_matches(self.name, factory.DATASETS, n=3)
            hint = f"did you mean {', '.join(close)}? " if close else ""
            raise ValueError(
                f"unknown reasoning-gym dataset {self.name!r}; {hint}({len(factory.DATASETS)} exist)"
            )
        if self.test_size >= self.size:
            raise ValueError(f"{self.name}: test_size ({self.test_size}) must be below size ({self.size})")
        _, config_cls = factory.DATASETS[self.name]
        try:
            config = config_cls(**{**self.config, "seed": self.seed, "size": self.size})
            if hasattr(config, "validate"):
                config.validate()
        except (TypeError, ValueError, AssertionError) as exc:
            raise ValueError(
                f"{self.name}: configuration {self.config} is refused by {config_cls.__name__}: {exc}"
            ) from None
        return self

    @property
    def category(self) -> str:
        return self.label or self.name


def parse_datasets(datasets: list[Any]) -> tuple[DatasetSpec, ...]:
    """``datasets=[...]`` checked: each entry a :class:`DatasetSpec` (or its dict), at least one."""
    if not datasets:
        raise ValueError(
            "datasets: empty; give at least one {'name': ..., 'config': {...}, 'size': ..., 'seed': ...}"
        )
    try:
        return tuple(d if isinstance(d, DatasetSpec) else DatasetSpec.model_validate(d) for d in datasets)
    except ValidationError as exc:
        raise ValueError(f"datasets: {exc}") from None


@functools.lru_cache(maxsize=64)
def _custom_dataset(spec_json: str) -> Any:
    import reasoning_gym

    spec = DatasetSpec.model_validate_json(spec_json)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return reasoning_gym.create_dataset(
            spec.name, **{**spec.config, "seed": spec.seed, "size": spec.size}
        )


def _custom_source(datasets: tuple[DatasetSpec, ...], task_id: int) -> tuple[DatasetSpec, Any, int]:
    index, item = divmod(task_id, CUSTOM_STRIDE)
    if not (0 <= index < len(datasets) and task_id >= 0 and item < datasets[index].size):
        raise InvalidTaskError(
            f"reasoning_gym: no task {task_id} in datasets={[d.name for d in datasets]}; "
            f"ids are entry * {CUSTOM_STRIDE} + item"
        )
    spec = datasets[index]
    return spec, _custom_dataset(json.dumps(spec.model_dump(), sort_keys=True)), item


def entry(task_id: int, datasets: tuple[DatasetSpec, ...] | None = None) -> dict[str, Any]:
    """reasoning-gym's item of ``task_id``: ``{"question", "answer", "metadata"}`` (of ``datasets``' catalog when given)."""
    if datasets:
        _, source, item = _custom_source(datasets, task_id)
        return source[item]
    generator, level, item = _decode(task_id)
    return _dataset(generator, level)[item]


def gold_answer(task_id: int, datasets: tuple[DatasetSpec, ...] | None = None) -> str:
    """The generator's own answer to ``task_id`` (what the expert replies)."""
    return str(entry(task_id, datasets)["answer"])


def _catalog(generators: tuple[str, ...]) -> TaskCatalog:
    train: list[int] = []
    test: list[int] = []
    categories: dict[str, list[int]] = {}
    for generator in generators:
        for level in range(LEVELS[generator]):
            base = task_id_of(generator, level, 0)
            train.extend(base + k for k in TRAIN_ITEMS)
            test.extend(base + k for k in TEST_ITEMS)
            categories[f"{generator}/L{level}"] = [base + k for k in (*TRAIN_ITEMS, *TEST_ITEMS)]
    return TaskCatalog(splits={"train": train, "test": test}, categories=categories)


def _custom_catalog(datasets: tuple[DatasetSpec, ...]) -> TaskCatalog:
    train: list[int] = []
    test: list[int] = []
    categories: dict[str, list[int]] = {}
    for index, spec in enumerate(datasets):
        base = index * CUSTOM_STRIDE
        cut = spec.size - spec.test_size
        train.extend(range(base, base + cut))
        test.extend(range(base + cut, base + spec.size))
        categories.setdefault(spec.category, []).extend(range(base, base + spec.size))
    return TaskCatalog(splits={"train": train, "test": test}, categories=categories)


class ReasoningGymEnv(Env):
    """reasoning-gym questions, one per episode, scored by their generator.

    Args:
        generators: offer only these generators (names from :data:`LEVELS`); the catalog shrinks to them.
        attempts: answers allowed per episode; a wrong one is told its score while attempts remain.
        datasets: instead of the generators' levels, these datasets with their own configuration, size
            and seed (:class:`DatasetSpec` or its dict); see the module docstring for their task ids.
    """

    name = "reasoning_gym"
    max_episode_steps = 1
    generators: ClassVar[tuple[str, ...]] = GENERATORS
    datasets: ClassVar[tuple[DatasetSpec, ...]] = ()

    def __init__(
        self, generators: list[str] | None = None, attempts: int = 1, datasets: list[Any] | None = None
    ) -> None:
        if generators is not None and datasets is not None:
            raise ValueError(
                "give generators= (the built-in levels) or datasets= (your own entries), not both"
            )
        if datasets is not None:
            parsed = parse_datasets(datasets)
            if parsed != type(self).datasets:
                self.datasets = parsed  # type: ignore[misc]  # this instance's catalog
        if generators is not None:
            unknown = [g for g in generators if g not in LEVELS]
            if unknown or not generators:
                raise ValueError(
                    f"generators: unknown or empty {unknown or generators!r}; choose from LEVELS "
                    f"(e.g. {', '.join(GENERATORS[:4])}, ...)"
                )
            self.generators = tuple(sorted(generators))  # type: ignore[misc]  # this instance's subset
        if attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {attempts}")
        self.max_episode_steps = attempts
        self._entry: dict[str, Any] | None = None
        self._source: Any = None
        self._steps = 0
        self._done = True

    @classmethod
    def configured(cls, **options: Any) -> type[Env]:
        if options.get("datasets"):
            return type(cls.__name__, (cls,), {"datasets": parse_datasets(options["datasets"])})
        generators = options.get("generators")
        if not generators:
            return cls
        return type(cls.__name__, (cls,), {"generators": tuple(sorted(generators))})

    @property
    def instruction(self) -> str:
        return INSTRUCTION

    def parse_action(self, text: str) -> str:
        """The last ``<answer>...</answer>`` of the reply, tags kept (multi-line answers stay whole), else its ReAct action.

        The tags stay on so that :meth:`step`, which the rollout hands this result rather than the reply, can
        still tell a reply in the asked format from one without it.
        """
        answers = _ANSWER.findall(text)
        return f"<answer>{answers[-1].strip()}</answer>" if answers else parse_react_action(text)

    @classmethod
    def tasks(cls) -> TaskCatalog:
        return _custom_catalog(cls.datasets) if cls.datasets else _catalog(cls.generators)

    def reset(self, task_id: int, seed: int | None = None) -> ResetResult:
        if self.datasets:
            spec, self._source, item = _custom_source(self.datasets, task_id)
            self._entry = self._source[item]
            self._steps, self._done = 0, False
            info = {"dataset": spec.name, "category": spec.category}
            return ResetResult(observation=str(self._entry["question"]), info=info)
        generator, level, _ = _decode(task_id)
        if generator not in self.generators:
            raise InvalidTaskError(
                f"reasoning_gym: task {task_id} is a {generator} task, not offered here "
                f"(generators={list(self.generators)})"
            )
        self._entry, self._source = entry(task_id), _dataset(generator, level)
        self._steps, self._done = 0, False
        return ResetResult(
            observation=str(self._entry["question"]), info={"generator": generator, "level": level}
        )

    def step(self, action: str) -> StepResult:
        if self._entry is None:
            raise InvalidTaskError("reasoning_gym: reset() onto a task before step()")
        if self._done:
            raise EpisodeEndedError("the episode has ended; reset() to play again")
        self._steps += 1
        tagged = _ANSWER.findall(action)
        answer = tagged[-1].strip() if tagged else action.strip()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                score = float(self._source.score_answer(answer, self._entry))
            except Exception:  # a scorer that chokes on a malformed answer scores it 0
                score = 0.0
        solved = score >= 1.0
        last = solved or self._steps >= self.max_episode_steps
        self._done = last
        if last:
            observation = "Correct." if solved else f"Incorrect (score {score:.2f})."
        else:
            observation = (
                f"Incorrect (score {score:.2f}). Try again: {self.max_episode_steps - self._steps} left."
            )
        return StepResult(
            observation=observation,
            reward=score if last else 0.0,
            terminated=last,
            success=solved if last else None,
            # Scored either way, but a reply without the <answer> tags the instruction asks for breaks the format.
            invalid_action=not tagged,
            info={"score": score},
        )
