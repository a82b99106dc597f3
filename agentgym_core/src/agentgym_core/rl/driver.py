"""What the driving rank does besides the work every rank shares: :class:`Driver` and its stand-in.

Every rank runs the same loop (:func:`agentgym_core.rl.trainer.train`). One of them, rank 0, is the
driver: it writes the run directory (``config.yaml``, ``metrics.jsonl``, ``evaluation_panel.json``,
saved trajectories), tells the observer plugins what happened, logs the held-out evaluations and
shows the progress bar. The other ranks get a :class:`NullDriver` whose calls do nothing, so the
loop makes the same calls on every rank instead of asking which rank it runs on (the pattern of
nanochat's ``DummyWandb``). Evaluations are the exception that still does something: every rank's
engine plays its share of the panel (:meth:`agentgym_core.rl.colocated.RankRollouts.evaluate`), so a
:class:`NullDriver` evaluates too, and drops the record the driver logs.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

from agentgym_core.evaluation.panel import describe_panel, evaluation_panel, panel_record
from agentgym_core.plugins import PluginManager
from agentgym_core.rl.config import TrainConfig, save_config
from agentgym_core.rl.envs import eval_conditions
from agentgym_core.training.tracking import MetricsWriter

if TYPE_CHECKING:
    import torch

    from agentgym_core.rl.roles import PhaseMeter, RolloutRole
    from agentgym_core.rollout.trajectory import Trajectory

__all__ = ["Driver", "NullDriver", "wants_eval_before"]


def wants_eval_before(config: TrainConfig, start_step: int) -> bool:
    """Whether the run has an evaluation at step 0 (``trainer.eval_before``; a resumed run reads it back from its log)."""
    return bool(config.trainer.eval_before and config.trainer.eval_tasks and start_step == 0)


class Driver:
    """Rank 0's duties: the run directory and its metrics, the observer hooks, evaluations, the console."""

    warns = True  # console warnings come from this rank only

    def __init__(self, config: TrainConfig, pm: PluginManager) -> None:
        self.config, self.pm = config, pm
        self.run_dir = Path(config.trainer.run_dir)
        self.writer: MetricsWriter | None = None
        self.bar: Any = None
        self.setup: dict[str, str] = {}  # what sampling runs on, for the first training line

    def open(self, stack: contextlib.ExitStack, worker: RolloutRole, *, start_step: int, resume: bool) -> None:
        """Write ``config.yaml`` and the evaluation panel, open the metrics (closed by ``stack``), tell observers."""
        cfg = self.config
        self.run_dir.mkdir(parents=True, exist_ok=True)
        save_config(cfg, self.run_dir / "config.yaml")
        self.writer = MetricsWriter(self.run_dir, tensorboard=cfg.trainer.tensorboard,
                                    wandb_project=cfg.trainer.wandb_project, config=cfg.model_dump(mode="json"),
                                    resume_step=start_step if resume else None)
        stack.callback(self.writer.close)
        # The backend's start-up choices (device, attention kernel), where it says them; a Ray rollout group
        # asks each of its actors.
        self.setup = {f"rollout/{name}": value for name, value in (getattr(worker, "sampling_setup", None) or {}).items()}
        self.pm.hook.agentgym_observe_run_start(run_dir=str(self.run_dir), config=cfg.model_dump(mode="json"))

    def log_panel(self, worker: RolloutRole, horizon: int) -> None:
        """Write the evaluation panel (task ids, the conditions they are played under, and their hash) to
        ``evaluation_panel.json`` and say it on the console; every evaluation line of metrics.jsonl carries the
        hash too. A Ray rollout group holds no environments here, and writes none."""
        envs = getattr(worker, "envs", None)
        if envs is None or not self.config.trainer.eval_tasks:
            return
        panel = evaluation_panel(envs, self.config.trainer.eval_tasks)
        conditions = eval_conditions(self.config, horizon)
        (self.run_dir / "evaluation_panel.json").write_text(json.dumps(panel_record(panel, conditions)) + "\n",
                                                            encoding="utf-8")
        if self.config.trainer.progress:
            tqdm.write(describe_panel(panel, conditions))

    def steps(self, start_step: int, last_step: int) -> Iterable[int]:
        """The steps of this call, behind a progress bar (``trainer.progress``)."""
        self.bar = tqdm(range(start_step, last_step), initial=start_step, total=self.config.trainer.steps,
                        disable=not self.config.trainer.progress, desc="train", dynamic_ncols=True)
        return self.bar

    def evaluate_before(self, worker: RolloutRole, meter: PhaseMeter, *, start_step: int, horizon: int,
                        known: dict[str, Any] | None, resumed: bool = False) -> dict[str, Any]:
        """The held-out evaluation at step 0: read back on resume from a checkpoint, reused from a warm start, or
        run now (``resumed``: a run resumed before its first checkpoint, keeping the episodes it logged)."""
        cfg, writer = self.config, self._writer()
        if start_step > 0 and writer.path.exists():
            logged = [json.loads(x) for x in writer.path.read_text().splitlines() if x.strip()]
            before = [x for x in logged if x.get("kind") == "eval" and x.get("step") == 0]
            return {"eval_before": before[-1]} if before else {}
        if not wants_eval_before(cfg, start_step):
            return {}
        if known:  # after a warm start, RL starts from the model SFT just evaluated on the same tasks and horizon
            result = {**known, "step": 0}
            if resumed:
                writer.forget(0, kind="eval")
            writer.write(0, result, kind="eval")
            self.pm.hook.agentgym_observe_evaluation(step=0, results=result)
            return {"eval_before": result}
        return {"eval_before": self.evaluate(worker, meter, horizon=horizon, step=0, resumed=resumed)}

    def evaluate(self, worker: RolloutRole, meter: PhaseMeter, *, horizon: int, step: int,
                 resumed: bool = False) -> dict[str, Any]:
        """A held-out evaluation, logged and observed, with its peak memory where ``meter`` measures it.
        ``resumed``: the weights a resumed run loaded for ``step``; the episodes an interrupted evaluation there
        logged are kept, and its line (if it was written) is replaced."""
        with meter:
            result = worker.evaluate(horizon, step=step, resumed=resumed)
        result = {**result, **meter.as_metrics()}
        if resumed:
            self._writer().forget(step, kind="eval")
        self._writer().write(step, result, kind="eval")
        self.pm.hook.agentgym_observe_evaluation(step=step, results=result)
        return result

    def observe_rollout(self, step: int, trajectories: list[Trajectory]) -> None:
        self.pm.hook.agentgym_observe_rollout(step=step, trajectories=trajectories, metrics={})

    def observe_update(self, step: int, metrics: dict[str, float]) -> None:
        self.pm.hook.agentgym_observe_update(step=step, metrics=metrics)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        """One training step's line of ``metrics.jsonl`` (``step`` counts completed steps), and the bar's; the
        first line of this call of the run also says what sampling runs on (``rollout/attention_kernel``, ...)."""
        self._writer().write(step, {**metrics, **self.setup})
        self.setup = {}
        if self.bar is not None:
            self.bar.set_postfix(reward=f"{metrics['reward']:.3f}", success=f"{metrics['success']:.2f}",
                                 turns=f"{metrics['turns']:.1f}", horizon=int(metrics["horizon"]),
                                 **({"update": "skipped (groups tied)"} if metrics["skipped_update"] else {}))

    def save_trajectories(self, step: int, trajectories: list[Trajectory], trained: list[Trajectory],
                          advantages: torch.Tensor) -> None:
        """With ``trainer.save_trajectories``: each line is the Trajectory plus the per-token advantages it was
        trained with (0 off the loss mask), so the viewer shows what was reinforced and with what sign."""
        if not self.config.trainer.save_trajectories:
            return
        traj_dir = self.run_dir / "trajectories"
        traj_dir.mkdir(exist_ok=True)
        rows = advantages.cpu().tolist()  # one device-to-host copy, not one per token
        by_id = {id(t): rows[i][: len(t.token_ids)] for i, t in enumerate(trained)}
        with (traj_dir / f"step_{step + 1:06d}.jsonl").open("w") as f:
            for t in trajectories:
                record = t.model_dump(mode="json")
                if id(t) in by_id:
                    record["advantages"] = [round(a, 5) for a in by_id[id(t)]]
                f.write(json.dumps(record) + "\n")

    def end(self, metrics: dict[str, float], error: BaseException | None) -> None:
        """Tell observers the run ended (also when it failed: they learn why)."""
        if self.bar is not None:
            self.bar.close()
        self.pm.hook.agentgym_observe_run_end(run_dir=str(self.run_dir), metrics=metrics,
                                              error=None if error is None else f"{type(error).__name__}: {error}")

    def _writer(self) -> MetricsWriter:
        if self.writer is None:
            raise RuntimeError("Driver.open() first: the metrics file is not open")
        return self.writer


class NullDriver:
    """The stand-in on ranks that do not drive: every call of :class:`Driver` does nothing, but for evaluations,
    where this rank plays its share of the panel and returns nothing (the driver logs the record)."""

    warns = False

    def __init__(self, config: TrainConfig) -> None:
        self.config = config

    def open(self, stack: contextlib.ExitStack, worker: RolloutRole, *, start_step: int, resume: bool) -> None:
        """Nothing to write."""

    def log_panel(self, worker: RolloutRole, horizon: int) -> None:
        """The driver writes it."""

    def steps(self, start_step: int, last_step: int) -> Iterable[int]:
        return range(start_step, last_step)

    def evaluate_before(self, worker: RolloutRole, meter: PhaseMeter, *, start_step: int, horizon: int,
                        known: dict[str, Any] | None, resumed: bool = False) -> dict[str, Any]:
        """This rank's share of the step-0 evaluation, when the driver runs one now (not read back, not reused)."""
        if wants_eval_before(self.config, start_step) and not known:
            self.evaluate(worker, meter, horizon=horizon, step=0, resumed=resumed)
        return {}

    def evaluate(self, worker: RolloutRole, meter: PhaseMeter, *, horizon: int, step: int,
                 resumed: bool = False) -> dict[str, Any]:
        """This rank's share of the evaluation (collective with the driver's); the driver logs the record."""
        worker.evaluate(horizon, step=step, resumed=resumed)
        return {}

    def observe_rollout(self, step: int, trajectories: list[Trajectory]) -> None:
        """Observers hear from the driver only."""

    def observe_update(self, step: int, metrics: dict[str, float]) -> None:
        """Observers hear from the driver only."""

    def log(self, step: int, metrics: dict[str, float]) -> None:
        """The driver logs."""

    def save_trajectories(self, step: int, trajectories: list[Trajectory], trained: list[Trajectory],
                          advantages: torch.Tensor) -> None:
        """The driver saves them."""

    def end(self, metrics: dict[str, float], error: BaseException | None) -> None:
        """Observers hear from the driver only."""
