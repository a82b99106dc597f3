"""``check_env``: the conformance checker of the environment extension point."""

from __future__ import annotations

import json
import math
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentgym_core.env import Env, EpisodeEndedError, ResetResult, StepResult, TaskCatalog

__all__ = ["EnvCheckReport", "EpisodeRecord", "check_env", "check_env_http"]

INVALID_ACTION = "this is not a valid action %%% 42"

Policy = Callable[[Env, int, str], str]
"""(env, step index, last observation) -> action text."""


class EnvContractError(AssertionError):
    """An environment broke the contract of :class:`agentgym_core.env.Env`."""


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise EnvContractError(message)


@dataclass
class EpisodeRecord:
    """What one checked episode looked like, to compare two implementations."""

    task_id: int
    seed: int | None
    first_observation: str
    steps: list[tuple[str, str, float, bool, bool, bool | None, bool | None]] = field(default_factory=list)
    """(action, observation, reward, terminated, truncated, success, invalid_action) per step."""

    @property
    def reports_invalid_actions(self) -> bool:
        """True when the environment said on some step whether it refused the action."""
        return any(step[6] is not None for step in self.steps)

    @property
    def ended(self) -> bool:
        return bool(self.steps) and (self.steps[-1][3] or self.steps[-1][4])


@dataclass
class EnvCheckReport:
    catalog: TaskCatalog
    instruction: str
    episodes: list[EpisodeRecord]
    tools: list[dict[str, Any]] | None = None


def _check_tools(tools: Any) -> None:
    """``Env.tools``: None, or function schemas in the ``tools`` shape chat templates take, JSON-serialisable."""
    if tools is None:
        return
    _require(isinstance(tools, list) and bool(tools), "tools must be None or a non-empty list of tool schemas")
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        _require(isinstance(function, dict) and tool.get("type") == "function"
                 and isinstance(function.get("name"), str) and isinstance(function.get("parameters", {}), dict),
                 f'each tool must be {{"type": "function", "function": {{"name": str, "parameters": {{...}}}}}}; '
                 f"got {tool!r}")
        try:
            json.dumps(tool)
        except (TypeError, ValueError) as exc:
            raise EnvContractError(f"tool {function['name']!r} is not JSON-serialisable ({exc})") from None


_BACKTICKED = re.compile(r"`([^`\n]{1,60})`")
_BRACKETED = re.compile(r"\[[^\[\]\n]{1,20}\]")
_ACTION_PREFIX = re.compile(r"^\s*action\s*:\s*", re.IGNORECASE)
_PLACEHOLDER_NUMBER = re.compile(r"\b[NK]\b")
_TAGGED = re.compile(r"<(\w+)>[^<>\n]{1,60}</\1>")
_BOXED = re.compile(r"\\boxed\{[^{}\n]{1,30}\}")
_EXAMPLE = re.compile(r"\be\.g\.,?\s+([a-z][^\n\"'`]{1,60}?)\s*$", re.MULTILINE)


def suggested_actions(text: str) -> list[str]:
    """Moves an instruction or observation spells out: `` `Action: go north` `` spans (a placeholder
    ``N`` becomes 1; spans with ``<...>`` are skipped), TextArena-style ``[move]`` brackets,
    ``<answer> Paris </answer>`` tag examples, ``\\boxed{up}`` answers and ``e.g. get 1 oak logs`` at a
    line's end, in order."""
    found: list[str] = []
    for span in _BACKTICKED.findall(text):
        action = _ACTION_PREFIX.sub("", span).strip()
        if action and "<" not in action and "..." not in action:
            found.append(_PLACEHOLDER_NUMBER.sub("1", action))
    found.extend(_BRACKETED.findall(text))
    found.extend(match.group(0) for match in _TAGGED.finditer(text))
    found.extend(boxed for boxed in _BOXED.findall(text) if "..." not in boxed)
    found.extend(example.rstrip(".") for example in _EXAMPLE.findall(text))
    return list(dict.fromkeys(found))


def default_policy(env: Env, step: int, observation: str) -> str:
    """Cycle through the available actions (and try one invalid action at step 1).

    An environment that lists no actions gets the moves its instruction and latest observation spell
    out (:func:`suggested_actions`); with none there, only the invalid action is sent and
    ``check_env`` warns, asking for ``policy=``, because a check that plays no valid move proves little.
    """
    if step == 1:
        return INVALID_ACTION
    actions = env.available_actions() or suggested_actions(f"{observation}\n{env.instruction}")
    if actions:
        return actions[step % len(actions)]
    return INVALID_ACTION


def _check_catalog(catalog: Any) -> TaskCatalog:
    _require(isinstance(catalog, TaskCatalog), f"tasks() must return a TaskCatalog, got {type(catalog).__name__}")
    _require(bool(catalog.splits), "tasks() offers no split")
    seen: dict[int, str] = {}
    for split, ids in catalog.splits.items():
        _require(len(ids) > 0, f"split {split!r} is empty")
        _require(len(set(ids)) == len(ids), f"split {split!r} repeats task ids")
        for task in ids:
            _require(task not in seen, f"task {task} is in both {seen.get(task)!r} and {split!r}: splits must be disjoint")
            seen[task] = split
    for category, ids in catalog.categories.items():
        unknown = [t for t in ids if t not in seen]
        _require(not unknown, f"category {category!r} names task ids in no split: {unknown[:5]}")
    return catalog


def _check_step_result(result: Any, where: str) -> StepResult:
    _require(isinstance(result, StepResult), f"{where}: step() must return StepResult, got {type(result).__name__}")
    _require(isinstance(result.observation, str), f"{where}: observation must be str")
    _require(isinstance(result.reward, float) and math.isfinite(result.reward), f"{where}: reward must be a finite float")
    _require(result.success is None or isinstance(result.success, bool), f"{where}: success must be bool or None")
    _require(result.invalid_action is None or isinstance(result.invalid_action, bool),
             f"{where}: invalid_action must be bool or None")
    return result


def _play(env: Env, task_id: int, seed: int | None, policy: Policy, max_steps: int) -> EpisodeRecord:
    first = env.reset(task_id, seed)
    _require(isinstance(first, ResetResult), f"reset() must return ResetResult, got {type(first).__name__}")
    _require(isinstance(first.observation, str) and first.observation.strip() != "",
             f"reset({task_id}) returned an empty observation")
    record = EpisodeRecord(task_id, seed, first.observation)
    observation = first.observation
    for index in range(max_steps):
        action = policy(env, index, observation)
        result = _check_step_result(env.step(action), f"task {task_id} step {index} ({action!r})")
        record.steps.append((action, result.observation, result.reward, result.terminated, result.truncated,
                             result.success, result.invalid_action))
        observation = result.observation
        if result.done:
            try:
                env.step(action)
            except EpisodeEndedError:
                pass
            else:
                raise EnvContractError(f"task {task_id}: step() after the episode ended must raise EpisodeEndedError")
            break
    return record


def _check_invalid_action_flags(record: EpisodeRecord) -> None:
    """The deliberately invalid action must not be reported accepted; an environment that reports verdicts
    on some steps must report it refused."""
    for action, *_, invalid in record.steps:
        if action != INVALID_ACTION:
            continue
        _require(invalid is not False, f"task {record.task_id}: the action {INVALID_ACTION!r} was answered with "
                 "invalid_action=False; an action the environment cannot apply must set invalid_action=True")
        _require(invalid is True or not record.reports_invalid_actions,
                 f"task {record.task_id}: step results set invalid_action on some steps but left it None for "
                 f"{INVALID_ACTION!r}; set it on every step (True when the action is refused)")


def check_env(
    make_env: Callable[[], Env],
    task_ids: Sequence[int] | None = None,
    *,
    seed: int | None = 0,
    policy: Policy = default_policy,
    max_steps: int = 40,
) -> EnvCheckReport:
    """Check that an environment honours the ``Env`` contract; raise ``EnvContractError`` if not.

    Checks: the task catalog (non-empty, disjoint splits, categories name real tasks); the
    instruction, ``tools`` (None or function schemas) and ``parse_action`` types; reset with the same (task, seed) is deterministic and
    so is an episode replayed with the same actions; step results are well typed; an invalid
    action is answered, not raised, and not reported accepted (``invalid_action``: True where the
    environment reports verdicts, else None); stepping after the end raises ``EpisodeEndedError``;
    ``close`` is idempotent.

    Args:
        make_env: builds a fresh instance (a class works).
        task_ids: tasks to play; default the first two of the test split (else of any split).
        policy: ``policy(env, step_index, last_observation) -> action``; the default cycles through
            ``available_actions()`` or, when the env lists none, the moves its instruction and
            observations spell out (see :func:`default_policy`), sending one invalid action at step 1.
        max_steps: step cap per checked episode.
    """
    env = make_env()
    try:
        _require(isinstance(env, Env), f"make_env() must build an agentgym Env, got {type(env).__name__}")
        catalog = _check_catalog(env.tasks())
        instruction = env.instruction
        _require(isinstance(instruction, str) and instruction.strip() != "", "instruction must be a non-empty str")
        tools = env.tools
        _check_tools(tools)
        _require(isinstance(env.parse_action("Thought: hm\nAction: x"), str), "parse_action must return str")
        if task_ids is None:
            split = catalog.splits.get("test") or next(iter(catalog.splits.values()))
            task_ids = list(split[:2])
        episodes = []
        for task_id in task_ids:
            first = _play(env, task_id, seed, policy, max_steps)
            again = env.reset(task_id, seed)
            _require(again.observation == first.first_observation,
                     f"reset({task_id}, seed={seed}) is not deterministic:\n{first.first_observation!r}\n"
                     f"!=\n{again.observation!r}")
            replay = _play(env, task_id, seed, lambda e, i, o, steps=first.steps: steps[i][0], len(first.steps))
            _require(replay.steps == first.steps,
                     f"task {task_id}: replaying the same actions after the same reset gave a different episode")
            _check_invalid_action_flags(first)
            episodes.append(first)
        if policy is default_policy and {step[0] for episode in episodes for step in episode.steps} == {INVALID_ACTION}:
            warnings.warn(
                "check_env's default policy found no valid move to play, so the check exercised only invalid "
                "actions: the environment lists no available_actions() and its instruction and observations spell "
                "out no `Action: ...`, [move], <tag> ... </tag>, \\boxed{...} or 'e.g. <action>' example. Pass "
                "policy=lambda env, step, observation: <a valid action> (and task_ids=[...] to choose the tasks), "
                "or list the valid actions in available_actions()",
                UserWarning,
                stacklevel=2,
            )
        actions = env.available_actions()
        _require(actions is None or (isinstance(actions, list) and all(isinstance(a, str) for a in actions)),
                 "available_actions() must return list[str] or None")
    finally:
        env.close()
    env.close()  # idempotent: a second close must not raise
    return EnvCheckReport(catalog, instruction, episodes, tools)


def check_env_http(
    env_cls: type[Env],
    env_kwargs: dict[str, Any] | None = None,
    task_ids: Sequence[int] | None = None,
    **check_options: Any,
) -> EnvCheckReport:
    """Run ``check_env`` in-process and through a loopback server; the episodes must be identical."""
    from agentgym_core.http.client import HTTPEnv
    from agentgym_core.testing.serving import serve_env

    kwargs = dict(env_kwargs or {})
    local = check_env(lambda: env_cls(**kwargs), task_ids, **check_options)
    with serve_env(env_cls, kwargs) as url:
        remote = check_env(lambda: HTTPEnv(url), [e.task_id for e in local.episodes], **check_options)
    _require(remote.catalog == local.catalog, "the served task catalog differs from the class's")
    _require(remote.instruction == local.instruction, "the served instruction differs from the class's")
    _require(remote.tools == local.tools, "the served tools (GET /v1/info) differ from the class's")
    for here, there in zip(local.episodes, remote.episodes, strict=True):
        _require(here.first_observation == there.first_observation,
                 f"task {here.task_id}: first observation differs over HTTP")
        _require(here.steps == there.steps, f"task {here.task_id}: the episode differs over HTTP")
    return remote
