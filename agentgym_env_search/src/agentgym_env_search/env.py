"""The Search environment: answer a question by searching a corpus, Search-R1 style.

An episode is one question. Each turn the agent either searches (``<search>query</search>``,
answered with the top-k passages in ``<information>…</information>``) or answers
(``<answer>text</answer>``). The reward is 1.0 when the answer exactly matches a golden answer
after normalisation, else 0.0; token F1 is reported in ``info`` as a softer signal.

Departure from the anchor (AgentGym-RL's searchqa server): there, a wrong answer is told "try
again" and the episode goes on, so an agent can guess repeatedly and still score 1. Here a
wrong answer ends the episode with reward 0, unless ``retry_on_wrong=True`` asks for the anchor's
behaviour explicitly.
"""

from __future__ import annotations

import difflib
from functools import lru_cache
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentgym_core.env import (
    Env,
    EnvError,
    EpisodeEndedError,
    InvalidTaskError,
    ResetResult,
    StepResult,
    TaskCatalog,
)
from agentgym_core.http.compat_spec import AgentGymCompat
from agentgym_env_search.indexes import shared_retriever
from agentgym_env_search.protocol import format_information, parse_search_action
from agentgym_env_search.qa import (
    SEARCH_R1_DATASETS,
    SEARCH_R1_TRAIN_DATASETS,
    QAItem,
    categories_of,
    load_qa_dir,
)
from agentgym_env_search.retrievers import Retriever
from agentgym_env_search.scoring import best_f1, exact_match

__all__ = ["SearchEnv", "SearchEnvConfig"]

INSTRUCTION = """\
You answer a question by searching a collection of Wikipedia passages.
Think step by step inside <think> and </think> whenever you need to.
To search, write a query between <search> and </search>, then stop writing: the top results come \
back between <information> and </information>. You may search as many times as you need.
When you know the answer, write it between <answer> and </answer>, as a short phrase without \
explanation, for example <answer> Beijing </answer>. You get one answer: a wrong one ends the task.
Each of your turns must contain exactly one <search> or one <answer>."""

INSTRUCTION_RETRY = INSTRUCTION.replace("You get one answer: a wrong one ends the task.",
                                        "If your answer is wrong you are told so and may try again.")


class SearchEnvConfig(BaseModel):
    """Everything that makes one Search environment; the keyword arguments of :class:`SearchEnv`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    corpus: str = Field("demo", description="'demo' (offline Wikipedia summaries) or the path of a Search-R1/FlashRAG "
                                            "JSONL corpus ({id, contents: 'title\\ntext'} per line).")
    qa: str = Field("demo", description="'demo' (FanOutQA sub-questions) or a directory of QA files: Search-R1's merged "
                                        "train/test.parquet, or FlashRAG's <dataset>/<split>.jsonl.")
    test_datasets: tuple[str, ...] = Field(SEARCH_R1_DATASETS, description="Datasets of the test split (non-demo qa).")
    train_datasets: tuple[str, ...] = Field(SEARCH_R1_TRAIN_DATASETS,
                                            description="Datasets of the train split (non-demo qa).")
    retriever: str = Field("bm25", description="Registered retriever name ('bm25', 'dense', or a plugin's).")
    retriever_options: dict[str, Any] = Field(default_factory=dict, description="Options passed to the retriever.")
    retriever_url: str | None = Field(None, description="A running retrieval service to query instead of searching "
                                                        "in-process (this package's or Search-R1's /retrieve).")
    topk: int = Field(3, ge=1, le=50, description="Passages returned per search (Search-R1 uses 3).")
    max_turns: int = Field(10, ge=1, description="Turns before the episode is truncated.")
    retry_on_wrong: bool = Field(False, description="The anchor's behaviour: a wrong answer does not end the episode.")
    show_progress: bool = Field(True, description="Show progress bars while an index is built or loaded.")

    @model_validator(mode="before")
    @classmethod
    def _reject_unknown_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key in data:
                if key not in cls.model_fields:
                    close = difflib.get_close_matches(key, list(cls.model_fields), n=1)
                    hint = f" Did you mean {close[0]!r}?" if close else ""
                    raise ValueError(f"unknown search env option {key!r}.{hint} Options: {', '.join(cls.model_fields)}")
        return data


@lru_cache(maxsize=8)
def _questions(qa: str, test_datasets: tuple[str, ...], train_datasets: tuple[str, ...]) -> tuple[
        tuple[tuple[str, QAItem], ...], TaskCatalog]:
    if qa == "demo":
        from agentgym_env_search.demo import demo_qa

        qa_set = demo_qa()
    else:
        qa_set = load_qa_dir(qa, test_datasets=test_datasets, train_datasets=train_datasets)
    ordered = tuple(qa_set.ordered())
    splits: dict[str, list[int]] = {name: [] for name in qa_set.splits}
    for task_id, (split, _) in enumerate(ordered):
        splits[split].append(task_id)
    return ordered, TaskCatalog(splits=splits, categories=categories_of(ordered))


class SearchEnv(Env):
    """Search-R1-style retrieval QA. Keyword arguments are :class:`SearchEnvConfig` fields.

    ``SearchEnv.tasks()`` describes the class's default data (the offline demo); use
    :meth:`configure` to make a class whose default data are yours, so that servers and
    evaluators that call ``tasks()`` on the class see your questions.
    """

    name: ClassVar[str] = "search"
    max_episode_steps: ClassVar[int | None] = 10
    default_config: ClassVar[SearchEnvConfig] = SearchEnvConfig()
    # AgentGym's searchqa server names the instance "env_idx" and the task "id"; with a merged
    # Search-R1 test/train parquet our task ids equal its indices (test 0..51712, then train).
    agentgym_compat: ClassVar[AgentGymCompat | None] = AgentGymCompat(
        id_field="env_idx", task_field="id", include_score=False, create_answer="bare_id", reset_answer="text",
        close_answer="bool", step_extra_fields=("info",))

    def __init__(self, **options: Any) -> None:
        self.config = SearchEnvConfig(**{**self.default_config.model_dump(exclude_unset=True), **options})
        self._items, self._catalog = _questions(self.config.qa, tuple(self.config.test_datasets),
                                                tuple(self.config.train_datasets))
        self._retriever = self._open_retriever()
        self._item: QAItem | None = None
        self._turns = 0
        self._searches = 0
        self._ended = False

    @classmethod
    def configured(cls, **options: Any) -> type[SearchEnv]:
        """A subclass whose defaults (and so ``tasks()``) come from ``options`` (see ``Env.configured``)."""
        config = SearchEnvConfig(**{**cls.default_config.model_dump(exclude_unset=True), **options})
        return type(cls.__name__, (cls,), {"default_config": config, "max_episode_steps": config.max_turns,
                                           "__module__": cls.__module__})

    def _open_retriever(self) -> Retriever:
        if self.config.retriever_url:
            from agentgym_env_search.service import RemoteRetriever

            return RemoteRetriever(self.config.retriever_url)
        return shared_retriever(self.config.corpus, self.config.retriever, self.config.retriever_options,
                                show_progress=self.config.show_progress)

    # -- what the agent is told ------------------------------------------------------------------
    @property
    def instruction(self) -> str:
        return INSTRUCTION_RETRY if self.config.retry_on_wrong else INSTRUCTION

    def parse_action(self, text: str) -> str:
        return parse_search_action(text).render()

    # -- tasks -------------------------------------------------------------------------------------
    @classmethod
    def tasks(cls) -> TaskCatalog:
        config = cls.default_config
        return _questions(config.qa, tuple(config.test_datasets), tuple(config.train_datasets))[1]

    def task_catalog(self) -> TaskCatalog:
        """The tasks of this instance's data (equal to ``tasks()`` unless options changed ``qa``)."""
        return self._catalog

    def question(self, task_id: int) -> QAItem:
        """The question (with golden answers) behind a task id."""
        if not isinstance(task_id, int) or isinstance(task_id, bool) or not 0 <= task_id < len(self._items):
            raise InvalidTaskError(f"task id {task_id!r} does not exist; this search env has task ids "
                                   f"0..{len(self._items) - 1} ({', '.join(f'{k}: {v}' for k, v in self._catalog.sizes().items())})")
        return self._items[task_id][1]

    # -- the episode ---------------------------------------------------------------------------------
    def reset(self, task_id: int, seed: int | None = None) -> ResetResult:
        self._item = self.question(task_id)
        self._turns = self._searches = 0
        self._ended = False
        info = {"task_id": task_id, "dataset": self._item.dataset, "split": self._items[task_id][0],
                "category": self._item.category or self._item.dataset}
        return ResetResult(observation=f"Question: {self._item.question}", info=info)

    def step(self, action: str) -> StepResult:
        if self._item is None:
            raise EnvError("step() before reset(): call reset(task_id) to pick a question first")
        if self._ended:
            raise EpisodeEndedError("the episode has ended (answered or out of turns); call reset() to start another")
        self._turns += 1
        parsed = parse_search_action(action)
        info: dict[str, Any] = {"action": parsed.kind, "turn": self._turns}
        reward, terminated, success = 0.0, False, None
        if parsed.kind == "search":
            self._searches += 1
            hits = self._retriever.search([parsed.content], self.config.topk)[0]
            observation = format_information(hits)
            info.update(query=parsed.content, doc_ids=[h.id for h in hits], titles=[h.title for h in hits])
        elif parsed.kind == "answer":
            correct = exact_match(parsed.content, self._item.golden_answers)
            info.update(answer=parsed.content, em=correct, f1=best_f1(parsed.content, self._item.golden_answers))
            if correct:
                reward, terminated, success = 1.0, True, True
                observation = "Your answer is correct."
            elif self.config.retry_on_wrong:
                observation = "Your answer is incorrect. Please try again."
            else:
                terminated, success = True, False
                observation = "Your answer is incorrect. The task is over."
        else:
            observation = ("Invalid action. To search, put a query between <search> and </search>. To answer, put "
                           "the answer between <answer> and </answer>.")
        truncated = not terminated and self._turns >= self.config.max_turns
        if truncated:
            success = False
            observation += f"\nYou have used all {self.config.max_turns} turns; the task is over."
        self._ended = terminated or truncated
        info["searches"] = self._searches
        if self._ended:  # revealed only once no further answer can use it
            info["golden_answers"] = list(self._item.golden_answers)
        return StepResult(observation=observation, reward=reward, terminated=terminated, truncated=truncated,
                          success=success, invalid_action=parsed.kind == "invalid", info=info)

    def close(self) -> None:
        # The retriever is shared by the process (or is a thin HTTP client); only drop our handle.
        self._item = None
