"""``trainer.launcher: ray``: the learner ranks and the rollout workers as Ray actors.

The training loop (:func:`agentgym_core.rl.trainer.train`) runs in the driver, which holds no
model. :class:`RayRoles` gives it the two roles it drives, with the calls the local ones answer:

* :class:`RayLearnerGroup`: ``trainer.learners`` actors, each one rank of the existing
  :class:`~agentgym_core.rl.learner.Learner` (FSDP2 over a gloo/NCCL group the ranks open among
  themselves). Every call goes to every rank (their collectives must match) and rank 0 answers.
  ``policy_state_dict`` returns a reference to rank 0's weights (in the rollout engine's dtype) in
  Ray's object store, never the weights themselves: they go from there straight to the rollout workers.
* :class:`RayRolloutGroup`: ``trainer.ray.rollout_workers`` actors, each a
  :class:`~agentgym_core.rl.rollout_worker.RolloutWorker` (its backend, engines and environment
  clients) sampling one contiguous slice of each step's episodes; the slices come back in order,
  and a continuous backend seeds each episode by its index in the whole step, so M workers sample
  what one would.

All actors are placed together in one placement group: when the cluster cannot hold it within
``trainer.ray.placement_timeout_s`` the run fails naming the missing resources. Every remote call is
waited for at most ``trainer.ray.remote_timeout_s``. A rollout worker that dies is restarted by Ray
(``trainer.ray.rollout_worker_restarts`` times), given the newest weights and its batch again (the
batch is a pure function of step and weights); every step's metrics count the restarts
(``rollout_worker_restarts``: this step's, 0.0 on a step without one; ``rollout_worker_restarts_total``:
since this launch). A learner rank that dies fails the run with its error and the step. Ray is
imported lazily: the core works without it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentgym_core.evaluation.held_out import PanelShare
from agentgym_core.plugins import PluginManager
from agentgym_core.rl.config import ActorResources, TrainConfig
from agentgym_core.rl.curriculum import TaskCurriculum, curriculum_for
from agentgym_core.rl.distributed import DistContext
from agentgym_core.rl.envs import evaluation_record
from agentgym_core.rl.guards import SyncExpectation
from agentgym_core.rl.plugin_options import backend_capabilities
from agentgym_core.rl.roles import Unmeasured
from agentgym_core.rl.rollout_worker import RolloutResult, merge_slices
from agentgym_core.rollout.backend import merge_sampling_setups
from agentgym_core.training.memory import HeapTrimmer, prefer_expandable_cuda_segments

__all__ = ["RayLearnerGroup", "RayRoles", "RayRolloutGroup", "RemoteCallError", "import_ray"]

log = logging.getLogger(__name__)


class RemoteCallError(RuntimeError):
    """A call to a Ray actor failed, timed out, or its actor died; the message names the call and step."""


def import_ray() -> Any:
    """The ``ray`` module, or an error that says how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise ImportError("trainer.launcher=ray needs Ray: pip install './agentgym_core[ray]' "
                          "(or pip install ray), or set trainer.launcher=local") from exc
    return ray


# ---- the actors' code (plain classes; ray.remote wraps them at placement) ---------------------------------
def _set_threads(config: TrainConfig, resources: ActorResources) -> None:
    import torch

    torch.set_num_threads(config.runtime.threads or max(1, int(resources.num_cpus)))


class LearnerRank:
    """One learner rank in a Ray actor: the :class:`Learner` and its share of every collective."""

    def __init__(self, config: TrainConfig, rank: int, world_size: int) -> None:
        self.config, self.rank, self.world_size = config, rank, world_size
        self._rendezvous: Any = None  # rank 0: the process group's store, hosted here for the run
        _set_threads(config, config.trainer.ray.learner_resources)

    def pid(self) -> int:
        return os.getpid()

    def rendezvous_address(self) -> tuple[str, int]:
        """Host the process group's rendezvous store here (rank 0's actor, which keeps it for the run),
        and return its node address and port for every rank to join."""
        import ray

        from agentgym_core.rl.distributed import host_rendezvous

        address = ray.util.get_node_ip_address()
        self._rendezvous = host_rendezvous(address)
        return address, int(self._rendezvous.port)

    def setup(self, master_addr: str, master_port: int) -> None:
        """Join the process group and build the Learner from ``model.path`` (every rank the same weights)."""
        import torch

        from agentgym_core.rl.distributed import init_from_environment, rank_environment
        from agentgym_core.rl.learner import Learner
        from agentgym_core.rl.policy import load_policy_for_ranks, resolve_device

        if self.world_size > 1:  # each actor sees its own GPUs as cuda:0..; LOCAL_RANK 0 picks its first
            os.environ.update(rank_environment(self.rank, self.world_size, master_addr, master_port, local_rank=0))
        device = resolve_device(self.config.model.device)
        if device.type == "cuda":  # an actor's process is not the driver's: its allocator is set up here
            prefer_expandable_cuda_segments(backend_capabilities(self.config).expandable_segments)
        ctx = init_from_environment(device, timeout_s=self.config.trainer.collective_timeout_s)
        random.seed(self.config.trainer.seed)
        torch.manual_seed(self.config.trainer.seed)
        model, self.tokenizer = load_policy_for_ranks(self.config.model, ctx.device, rank=ctx.rank,
                                                      world_size=ctx.world_size, runtime=self.config.runtime)
        self.learner = Learner(self.config, model, tokenizer=self.tokenizer, ctx=ctx)
        self.trimmer = HeapTrimmer(self.config.runtime.heap_trim_interval_s).__enter__()  # as a local learner

    def score(self, batch: Any, temperature: float) -> Any:
        scored = self.learner.score(batch, temperature=temperature)
        return _to_cpu(scored) if self.rank == 0 else None

    def update(self, inputs: Any, temperature: float, generator_seed: int) -> dict[str, float]:
        import torch

        inputs = _map_tensors(inputs, lambda t: t.to(self.learner.device))
        generator = torch.Generator().manual_seed(generator_seed)
        return self.learner.update(inputs, temperature=temperature, generator=generator)

    def step_schedule(self) -> float:
        self.learner.step_schedule()
        return self.learner.lr

    def probe_logprobs(self, token_ids: list[int]) -> list[float]:
        return self.learner.probe_logprobs(token_ids)  # collective on several ranks

    def get_tokenizer(self) -> Any:
        return self.tokenizer

    def policy_state_dict(self, dtype: Any = None) -> tuple[Any, int]:
        """(rank 0's full weights in ``dtype`` or None, their bytes); called with num_returns=2, so the
        driver can wait for the size without fetching the weights."""
        from agentgym_core.rl.weight_sync import WeightSnapshot

        weights = self.learner.policy_state_dict(dtype)  # collective on several ranks
        if self.rank != 0:
            return None, 0
        # Only the engine's dtype goes into the object store (bfloat16 for vLLM: half the float32 masters).
        snapshot = WeightSnapshot((k, v.detach().cpu()) for k, v in weights.items())
        return snapshot, int(self.learner.weight_sync_bytes or 0)

    def save(self, run_dir: str, step: int, keep: int, extra_state: dict[str, Any],
             hf_weights: bool = True) -> None:
        self.learner.save(Path(run_dir), step, tokenizer=self.tokenizer, extra_state=extra_state, keep=keep,
                          hf_weights=hf_weights)

    def load(self, checkpoint: str) -> dict[str, Any]:
        state = self.learner.load(Path(checkpoint))
        return state if self.rank == 0 else {}

    def close(self) -> None:
        import torch.distributed as dist

        if getattr(self, "learner", None) is not None:
            self.learner.close()
        if getattr(self, "trimmer", None) is not None:
            self.trimmer.__exit__(None, None, None)
        if dist.is_initialized():
            dist.destroy_process_group()


class RolloutActor:
    """One rollout worker in a Ray actor: its own backend (loaded from ``model.path``), engines and env
    clients (an env without a URL gets a server on this actor's loopback)."""

    def __init__(self, config: TrainConfig, index: int, count: int) -> None:
        import torch

        from agentgym_core.plugins import get_plugin_manager
        from agentgym_core.rl.plugin_options import bind_plugin_options
        from agentgym_core.rl.rollout_worker import build_rollout_worker

        _set_threads(config, config.trainer.ray.rollout_resources)
        pm = get_plugin_manager()
        config = bind_plugin_options(config, pm)
        self.scheduler = pm.get("round_scheduler", config.algorithm.rounds_ctrl.type)(config.algorithm.rounds_ctrl)
        self.curriculum = curriculum_for(config.rollout)  # its counts come from the driver with each collect
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(HeapTrimmer(config.runtime.heap_trim_interval_s))  # as a local rollout worker
        if torch.cuda.is_available():  # before the backend starts CUDA in this actor's process
            prefer_expandable_cuda_segments(backend_capabilities(config, pm).expandable_segments)
        self.worker = build_rollout_worker(self._stack, pm, config, scheduler=self.scheduler,
                                           curriculum=self.curriculum, shard=(index, count))
        self.collecting = False

    def pid(self) -> int:
        return os.getpid()

    def is_collecting(self) -> bool:
        return self.collecting

    def collect(self, step: int, scheduler_state: dict[str, Any], sampling_round: int = 0,
                curriculum_state: dict[str, Any] | None = None) -> RolloutResult:
        """This worker's slice of step ``step`` (round ``sampling_round``) under the driver's round-scheduler
        state and curriculum counts (every worker then draws the step's whole task list, and keeps its slice)."""
        self.scheduler.load_state_dict(scheduler_state)
        if self.curriculum is not None and curriculum_state is not None:
            self.curriculum.load_state_dict(curriculum_state)
        self.collecting = True
        try:
            return self.worker.collect(step, sampling_round)
        finally:
            self.collecting = False

    def load_weights(self, weights: dict[str, Any], probe: SyncExpectation | None = None) -> float | None:
        """Load ``weights``; with ``probe``, check them as a local worker does and return the gap found."""
        self.worker.load_weights(weights, probe)
        return None if probe is None else probe.gap

    def check_weights(self, probe: SyncExpectation) -> float | None:
        self.worker.check_weights(probe)
        return probe.gap

    def evaluate(self, horizon: int, step: int, resumed: bool = False) -> dict[str, Any]:
        return self.worker.evaluate(horizon, step, resumed=resumed)

    def sampling_setup(self) -> dict[str, str]:
        """What this actor's backend samples on (RolloutWorker.sampling_setup)."""
        return self.worker.sampling_setup

    def evaluate_share(self, horizon: int, step: int, share: tuple[int, int], resumed: bool = False) -> PanelShare:
        """This worker's share of a held-out evaluation the group plays together (RolloutWorker.evaluate_share)."""
        return self.worker.evaluate_share(horizon, step, share, resumed)

    def close(self) -> None:
        self._stack.close()


def _to_cpu(scored: Any) -> Any:
    """A ScoredBatch (and its TokenStats) with every tensor on the CPU, to travel to the driver."""
    import dataclasses

    import torch

    def move(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.cpu()
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return dataclasses.replace(value, **{f.name: move(getattr(value, f.name))
                                                 for f in dataclasses.fields(value)})
        return value

    return move(scored)


def _map_tensors(inputs: Any, fn: Callable[[Any], Any]) -> Any:
    import torch

    from agentgym_core.rl.update import UpdateInputs

    return UpdateInputs(**{k: fn(v) if isinstance(v, torch.Tensor) else v for k, v in vars(inputs).items()})


# ---- the driver's side ----------------------------------------------------------------------------------
def _bundle(resources: ActorResources) -> dict[str, float]:
    bundle = {"CPU": resources.num_cpus, "GPU": resources.num_gpus, **resources.resources}
    return {k: float(v) for k, v in bundle.items() if v > 0}


def missing_resources(needed: list[dict[str, float]], cluster: dict[str, float]) -> dict[str, float]:
    """Per resource, how much more the bundles ``needed`` ask for than the whole ``cluster`` has."""
    total: dict[str, float] = {}
    for bundle in needed:
        for k, v in bundle.items():
            total[k] = total.get(k, 0.0) + v
    return {k: v - cluster.get(k, 0.0) for k, v in sorted(total.items()) if v > cluster.get(k, 0.0) + 1e-9}


class _Remote:
    """Waits for actor calls with a deadline and turns Ray's errors into ones naming the call and step."""

    def __init__(self, ray: Any, timeout_s: float) -> None:
        self.ray, self.timeout_s = ray, timeout_s
        self.step = 0  # the step its calls belong to, counted from 1 as metrics.jsonl counts (0: before any)

    def get(self, refs: Any, what: str, timeout_s: float | None = None) -> Any:
        """``ray.get(refs)`` within the timeout. A list is taken as its calls finish, so a call that failed is
        reported at once, not after its peers (a learner rank waiting in a collective for a dead one would
        otherwise hold the error back until the timeout)."""
        ray = self.ray
        timeout = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout
        single = not isinstance(refs, list)
        pending = [refs] if single else list(refs)
        index = {ref: i for i, ref in enumerate(pending)}
        answers: list[Any] = [None] * len(pending)
        try:
            while pending:
                ready, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
                if not ready:
                    raise ray.exceptions.GetTimeoutError()
                answers[index[ready[0]]] = ray.get(ready[0])
        except ray.exceptions.GetTimeoutError:
            raise RemoteCallError(f"{what} at step {self.step}: no answer within {timeout:.0f} s "
                                  "(trainer.ray.remote_timeout_s)") from None
        except ray.exceptions.RayActorError as exc:
            raise RemoteCallError(f"{what} at step {self.step}: its actor died: {exc}") from exc
        except ray.exceptions.RayTaskError as exc:
            raise RemoteCallError(f"{what} at step {self.step} raised:\n{exc}") from exc
        return answers[0] if single else answers


class RayLearnerGroup:
    """The learner ranks behind the calls of a :class:`~agentgym_core.rl.learner.Learner`; rank 0 answers."""

    def __init__(self, ranks: list[Any], remote: _Remote) -> None:
        self.ranks, self.remote = ranks, remote
        self.steps_done = 0
        self.lr = 0.0
        self.weight_sync_bytes: int | None = None  # of the last policy_state_dict

    def _all(self, method: str, *args: Any) -> Any:
        refs = [getattr(rank, method).remote(*args) for rank in self.ranks]
        return self.remote.get(refs, f"learner.{method}")[0]

    def score(self, batch: Any, *, temperature: float) -> Any:
        self.remote.step = self.steps_done + 1
        return self._all("score", self.remote.ray.put(batch), temperature)

    def update(self, inputs: Any, *, temperature: float, generator: Any) -> dict[str, float]:
        self.remote.step = self.steps_done + 1
        return self._all("update", self.remote.ray.put(inputs), temperature, generator.initial_seed())

    def step_schedule(self) -> None:
        self.lr = self._all("step_schedule")
        self.steps_done += 1  # the step's later calls (weights, save) still name it
        self.remote.step = self.steps_done

    def probe_logprobs(self, token_ids: list[int]) -> list[float]:
        """The learner's side of the weight-sync check (rl/guards.py), from rank 0."""
        return self._all("probe_logprobs", token_ids)

    def rollout_weights(self, dtype: Any = None) -> Any:
        """The weights for the rollout workers, which are remote: :meth:`policy_state_dict`'s reference."""
        return self.policy_state_dict(dtype)

    def policy_state_dict(self, dtype: Any = None) -> Any:
        """A reference to rank 0's full weights in ``dtype`` in the object store (the weights stay out of
        the driver); ``weight_sync_bytes`` is set to their size."""
        calls = [rank.policy_state_dict.options(num_returns=2).remote(dtype) for rank in self.ranks]
        # a rank's error, or a timeout, surfaces here
        sizes = self.remote.get([size for _, size in calls], "learner.policy_state_dict")
        self.weight_sync_bytes = sizes[0]
        return calls[0][0]

    def save(self, run_dir: Path, step: int, *, tokenizer: Any, extra_state: dict[str, Any], keep: int,
             hf_weights: bool = True) -> None:
        self._all("save", str(run_dir), step, keep, extra_state, hf_weights)  # rank 0 commits, with its tokenizer

    def load(self, checkpoint: Path) -> dict[str, Any]:
        state = self._all("load", str(checkpoint))
        self.steps_done = self.remote.step = int(state["step"])
        return state

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.remote.get([rank.close.remote() for rank in self.ranks], "learner.close", timeout_s=10)


class RayRolloutGroup:
    """The rollout workers behind the calls of a :class:`~agentgym_core.rl.rollout_worker.RolloutWorker`."""

    receives_weights = True

    def __init__(self, workers: list[Any], remote: _Remote, *, scheduler: Any, env_order: list[str],
                 restarts: int, curriculum: TaskCurriculum | None = None) -> None:
        self.workers, self.remote, self.scheduler = workers, remote, scheduler
        self.curriculum = curriculum  # the driver's TaskCurriculum (None: off); its counts go with each collect
        self.env_order, self.restarts = env_order, restarts
        self.restarts_used = [0] * len(workers)
        self.restarts_reported = 0  # restarts already counted in a step's metrics
        self.weights: Any = None  # the newest weights' reference: a restarted worker gets them first

    def _on_each(self, what: str, call: Callable[[Any], Any]) -> list[Any]:
        """``call(worker)`` on every worker at once; a worker that died is restarted (by Ray) and asked again."""
        ray = self.remote.ray
        refs = [call(w) for w in self.workers]
        answers = []
        for i, worker in enumerate(self.workers):
            while True:
                try:
                    answers.append(self.remote.get(refs[i], f"rollout worker {i}: {what}"))
                    break
                except RemoteCallError as exc:
                    restarting = isinstance(exc.__cause__, ray.exceptions.ActorUnavailableError)
                    if not restarting or self.restarts_used[i] >= self.restarts:
                        raise
                    self.restarts_used[i] += 1
                    log.warning("%s; Ray restarts it (%d of trainer.ray.rollout_worker_restarts=%d), then it is asked "
                                "again", exc, self.restarts_used[i], self.restarts)
                    self._revive(i, worker)
                    refs[i] = call(worker)
        return answers

    def _revive(self, i: int, worker: Any) -> None:
        """Wait until the restarted actor answers (its backend and envs are new), then give it the newest weights."""
        ray = self.remote.ray
        deadline = time.monotonic() + self.remote.timeout_s
        while True:
            try:
                ray.get(worker.pid.remote(), timeout=max(1.0, deadline - time.monotonic()))
                break
            except ray.exceptions.ActorUnavailableError:
                if time.monotonic() > deadline:
                    raise RemoteCallError(f"rollout worker {i} at step {self.remote.step}: not back within "
                                          f"{self.remote.timeout_s:.0f} s of its restart") from None
                time.sleep(0.2)
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError) as exc:
                raise RemoteCallError(f"rollout worker {i} at step {self.remote.step}: its restart failed: "
                                      f"{exc}") from exc
        if self.weights is not None:  # the restarted actor holds model.path's weights
            self.remote.get(worker.load_weights.remote(self.weights), f"rollout worker {i}: weights")

    @property
    def sampling_setup(self) -> dict[str, str]:
        """What the workers' backends sample on, asked of each (a value they differ on names every worker's)."""
        return merge_sampling_setups(self._on_each("sampling_setup", lambda w: w.sampling_setup.remote()))

    def restart_metrics(self) -> dict[str, float]:
        """Restarts since the last call (those while weights were loaded count with the next batch) and in all."""
        total = sum(self.restarts_used)
        new, self.restarts_reported = total - self.restarts_reported, total
        return {"rollout_worker_restarts": float(new), "rollout_worker_restarts_total": float(total)}

    def collect(self, step: int, sampling_round: int = 0) -> RolloutResult:
        """Step ``step``'s trajectories: every worker's slices, in the order one worker returns them; its
        metrics add :meth:`restart_metrics` to the workers' own."""
        start = time.perf_counter()
        self.remote.step = step + 1  # ``step`` counts from 0; errors name it as metrics.jsonl does
        state = self.scheduler.state_dict()
        counts = self.curriculum.state_dict() if self.curriculum is not None else None
        parts: list[RolloutResult] = self._on_each(
            "collect", lambda w: w.collect.remote(step, state, sampling_round, curriculum_state=counts))
        result = merge_slices(parts, self.env_order, time.perf_counter() - start)
        result.metrics.update(self.restart_metrics())
        return result

    def load_weights(self, weights: Any, probe: SyncExpectation | None = None) -> None:
        """Every worker loads ``weights`` (an object-store reference); with ``probe`` each then checks them, as
        a local worker does, and ``probe.gap`` is the largest gap any found."""
        self.weights = weights
        self._record_gap(probe, self._on_each("load_weights", lambda w: w.load_weights.remote(weights, probe)))

    def check_weights(self, probe: SyncExpectation) -> None:
        """Every worker checks the weights it holds against ``probe`` (the check at the start of a run)."""
        self._record_gap(probe, self._on_each("check_weights", lambda w: w.check_weights.remote(probe)))

    @staticmethod
    def _record_gap(probe: SyncExpectation | None, gaps: list[float | None]) -> None:
        if probe is not None:
            probe.gap = max((g for g in gaps if g is not None), default=None)

    def evaluate(self, horizon: int, step: int, *, resumed: bool = False) -> dict[str, Any]:
        """Held-out evaluation on every worker, worker i playing panel episodes i, i+M, ... (as local ranks do);
        the record one worker would make, in the panel's order."""
        start, count = time.perf_counter(), len(self.workers)
        index = {id(w): i for i, w in enumerate(self.workers)}
        shares = self._on_each("evaluate", lambda w: w.evaluate_share.remote(horizon, step, (index[id(w)], count),
                                                                             resumed))
        return evaluation_record(shares, horizon, step, wall_seconds=time.perf_counter() - start)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.remote.get([w.close.remote() for w in self.workers], "rollout workers: close", timeout_s=30)


def _absolute(config: TrainConfig) -> TrainConfig:
    """The config with the run directory (and a model directory given as a path) absolute: actors do not
    share the driver's working directory."""
    model_path = config.model.path
    if Path(model_path).exists():
        model_path = str(Path(model_path).resolve())
    return config.model_copy(update={
        "trainer": config.trainer.model_copy(update={"run_dir": str(Path(config.trainer.run_dir).resolve())}),
        "model": config.model.model_copy(update={"path": model_path})})


class RayRoles:
    """Places the roles as Ray actors (see the module docstring); ``trainer.train`` calls it."""

    pipelined = True  # rollouts always go through AsyncRollouts (max_staleness 0: the synchronous schedule)
    tokenizer: Any = None  # rank 0's, once the learner ranks are up (checkpoints: each rank saves its own)

    def __init__(self, config: TrainConfig, pm: PluginManager, ctx: DistContext) -> None:
        self.ray = import_ray()
        self.config = _absolute(config)
        self.remote = _Remote(self.ray, config.trainer.ray.remote_timeout_s)
        self.tag = f"agentgym-{os.getpid()}-{int(time.time())}"
        self.pg: Any = None

    # ---- placement --------------------------------------------------------------------------------------
    def _connect(self, stack: contextlib.ExitStack) -> None:
        ray, t = self.ray, self.config.trainer
        if ray.is_initialized():
            return  # the caller's Ray (tests, notebooks): left running
        ray.init(address=t.ray.address, include_dashboard=False, log_to_driver=True)
        stack.callback(ray.shutdown)

    def _place(self, stack: contextlib.ExitStack) -> None:
        """One placement group for every actor; fail within placement_timeout_s naming what is missing."""
        from ray.util import placement_group, remove_placement_group

        ray, t = self.ray, self.config.trainer
        bundles = [_bundle(t.ray.learner_resources)] * t.learners + [_bundle(t.ray.rollout_resources)] * t.ray.rollout_workers
        self.pg = placement_group(bundles, strategy="PACK", name=f"{self.tag}-actors")
        stack.callback(lambda: remove_placement_group(self.pg))
        try:
            ray.get(self.pg.ready(), timeout=t.ray.placement_timeout_s)
        except ray.exceptions.GetTimeoutError:
            cluster = ray.cluster_resources()
            missing = missing_resources(bundles, cluster)
            lacking = ", ".join(f"{k} {v:g}" for k, v in missing.items()) or \
                "none in total, but no node has room for one actor's bundle, or other jobs hold them"
            raise RemoteCallError(
                f"Ray could not place the run's actors within {t.ray.placement_timeout_s:g} s "
                f"(trainer.ray.placement_timeout_s): {t.learners} learner ranks x {_bundle(t.ray.learner_resources)} + "
                f"{t.ray.rollout_workers} rollout workers x {_bundle(t.ray.rollout_resources)}; the cluster has "
                f"{ {k: cluster[k] for k in sorted(cluster) if not k.startswith('node:')} }. Missing: {lacking}. "
                "Add nodes, or lower trainer.learners / trainer.ray.rollout_workers / "
                "trainer.ray.learner_resources / trainer.ray.rollout_resources.") from None

    def _options(self, bundle_index: int, resources: ActorResources, **extra: Any) -> dict[str, Any]:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        env_vars = {k: v for k, v in os.environ.items() if k.startswith("AGENTGYM_")}  # plugin selection
        return {"num_cpus": resources.num_cpus, "num_gpus": resources.num_gpus, "resources": resources.resources,
                "scheduling_strategy": PlacementGroupSchedulingStrategy(self.pg, placement_group_bundle_index=bundle_index),
                "runtime_env": {"env_vars": env_vars}, **extra}

    # ---- the roles --------------------------------------------------------------------------------------
    def learner(self, stack: contextlib.ExitStack) -> RayLearnerGroup:
        ray, t = self.ray, self.config.trainer
        self._connect(stack)
        self._place(stack)
        actor = ray.remote(LearnerRank)
        ranks = [actor.options(**self._options(r, t.ray.learner_resources, name=f"{self.tag}-learner-{r}"))
                 .remote(self.config, r, t.learners) for r in range(t.learners)]
        stack.callback(lambda: [ray.kill(a) for a in ranks])
        group = RayLearnerGroup(ranks, self.remote)
        stack.callback(group.close)
        address, port = self.remote.get(ranks[0].rendezvous_address.remote(), "learner rank 0: start")
        self.remote.get([a.setup.remote(address, port) for a in ranks], "learner ranks: load the model")
        # the driver's copy of the tokenizer: the weight-sync probe's tokens (the ranks save their own)
        self.tokenizer = self.remote.get(ranks[0].get_tokenizer.remote(), "learner rank 0: tokenizer")
        return group

    def phase_meter(self) -> Unmeasured:
        """The driver holds neither role: its own memory says nothing of the phases."""
        return Unmeasured()

    def rollout_worker(self, stack: contextlib.ExitStack, scheduler: Any,
                       curriculum: TaskCurriculum | None = None) -> RayRolloutGroup:
        ray, t = self.ray, self.config.trainer
        actor = ray.remote(RolloutActor)
        workers = [
            actor.options(**self._options(t.learners + i, t.ray.rollout_resources, name=f"{self.tag}-rollout-{i}",
                                          max_restarts=t.ray.rollout_worker_restarts, max_concurrency=2))
            .remote(self.config, i, t.ray.rollout_workers) for i in range(t.ray.rollout_workers)]
        stack.callback(lambda: [ray.kill(a, no_restart=True) for a in workers])
        # Its own step count: with asynchronous rollouts the workers sample ahead of the learner's step.
        group = RayRolloutGroup(workers, _Remote(ray, t.ray.remote_timeout_s), scheduler=scheduler, env_order=[e.name for e in self.config.envs],
                                restarts=t.ray.rollout_worker_restarts, curriculum=curriculum)
        stack.callback(group.close)
        self.remote.get([w.pid.remote() for w in workers], "rollout workers: load the backend and open the envs")
        return group
