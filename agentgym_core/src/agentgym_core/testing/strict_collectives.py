"""Strict collectives: gloo ranks on the CPU that refuse what an NCCL group would refuse.

The CPU tests run learner ranks over gloo, which accepts a tensor on any device. A run on GPUs
opens its groups with NCCL, which refuses CPU tensors (``No backend type associated with device
type cpu``), and whose watchdog ends a rank that waits in a collective for longer than the
group's timeout. Code that passes on gloo can therefore crash at the first collective on CUDA.
:func:`install` wraps ``torch.distributed``'s collectives in this process so that, on a group
that *stands for* a device backend, they fail the way that backend would, with the same message:

* a **device group** is the default group (whatever backend the code asked for: on a GPU run it is
  NCCL) and every group opened without ``backend="gloo"``; a **host group** is one opened with
  ``new_group(backend="gloo")``, or a default group opened with a ``"cpu:gloo,cuda:nccl"`` pair
  (its CPU tensors go to gloo);
* on a device group, a tensor must sit on the pretend ``device`` (``"cuda"`` by default). Calls
  made by torch's own sharding code (FSDP2, DTensor, distributed checkpoints) are not checked:
  their tensors follow the sharded module, which sits on the GPU in a GPU run;
* on a device group, agentgym's code may not run object collectives (``broadcast_object_list``,
  ``all_gather_object``...) or barriers either: pickled trajectories and statistics, and ranks
  waiting for each other, belong on the host group, where no NCCL watchdog is counting.

Turn it on in every rank, before the process group opens: call :func:`install`, or set
``AGENTGYM_STRICT_COLLECTIVES=cuda`` in the environment the ranks inherit
(:func:`agentgym_core.rl.distributed.init_from_environment` installs it then, in spawned ranks,
under torchrun and in Ray actors alike).
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["ENV_VAR", "StrictCollectiveError", "install", "installed", "install_from_environment"]

ENV_VAR = "AGENTGYM_STRICT_COLLECTIVES"
"""Set to the pretend device (``cuda``) to turn strict collectives on in every rank that inherits it."""

_TENSOR_COLLECTIVES = (
    "all_reduce",
    "broadcast",
    "reduce",
    "all_gather",
    "all_gather_into_tensor",
    "gather",
    "scatter",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "all_to_all",
    "all_to_all_single",
    "send",
    "recv",
    "isend",
    "irecv",
)
_OBJECT_COLLECTIVES = (
    "broadcast_object_list",
    "all_gather_object",
    "gather_object",
    "scatter_object_list",
    "send_object_list",
    "recv_object_list",
    "barrier",
    "monitored_barrier",
)
# Frames of these modules are the collectives' own plumbing: the caller is the first frame outside them.
_PLUMBING = ("torch.distributed.distributed_c10d", "torch.distributed.c10d_logger", __name__)

_state: dict[str, Any] = {"device": None, "host_groups": set(), "default_is_host": False}
_inside = threading.local()  # set while an object collective runs its own tensor collectives


class StrictCollectiveError(RuntimeError):
    """A collective that a device (NCCL) group would refuse, or that should run on the host group."""


def installed() -> str | None:
    """The pretend device of the device groups when strict collectives are on in this process, else None."""
    return _state["device"]


def install_from_environment() -> None:
    """:func:`install` when ``AGENTGYM_STRICT_COLLECTIVES`` names a device (and it is not installed yet)."""
    device = os.environ.get(ENV_VAR, "").strip()
    if device and installed() is None:
        install(device)


def install(device: str = "cuda") -> None:
    """Wrap this process's ``torch.distributed`` collectives (see the module docstring); idempotent.

    ``device``: the device type the device groups stand for (NCCL's: ``cuda``).
    """
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    if installed() is not None:
        _state["device"] = device
        return
    _state["device"] = device
    for name in _TENSOR_COLLECTIVES + _OBJECT_COLLECTIVES:
        original = getattr(c10d, name, None)
        if original is None:
            continue
        checked = _wrap(name, original, objects=name in _OBJECT_COLLECTIVES)
        setattr(c10d, name, checked)  # the object collectives call the tensor ones through this module
        if getattr(dist, name, None) is original:
            setattr(dist, name, checked)
    _wrap_group_openers(dist, c10d)


def _wrap_group_openers(dist: Any, c10d: Any) -> None:
    """Remember which groups are host groups: gloo ones opened by ``new_group``, a ``cpu:gloo`` default."""
    init, new = c10d.init_process_group, c10d.new_group

    @functools.wraps(init)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        backend = _argument(init, args, kwargs, "backend")
        _state["default_is_host"] = isinstance(backend, str) and "cpu:gloo" in backend.replace(" ", "")
        return init(*args, **kwargs)

    @functools.wraps(new)
    def new_group(*args: Any, **kwargs: Any) -> Any:
        group = new(*args, **kwargs)
        backend = _argument(new, args, kwargs, "backend")
        if isinstance(backend, str) and (backend == "gloo" or "cpu:gloo" in backend.replace(" ", "")):
            _state["host_groups"].add(group)
        return group

    for module in (c10d, dist):
        module.init_process_group, module.new_group = init_process_group, new_group


def _argument(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], name: str) -> Any:
    try:
        return inspect.signature(fn).bind_partial(*args, **kwargs).arguments.get(name)
    except TypeError:
        return kwargs.get(name)


def _caller_module() -> str:
    """The module of the first frame outside the collectives' plumbing (who asked for this collective)."""
    frame = sys._getframe(2)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if not module.startswith(_PLUMBING):
            return module
        frame = frame.f_back
    return ""


def _is_host_group(group: Any) -> bool:
    import torch.distributed.distributed_c10d as c10d

    if group is None or group is c10d.GroupMember.WORLD:
        return bool(_state["default_is_host"])
    return group in _state["host_groups"]


def _tensors(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, list | tuple):
        return [t for v in value for t in _tensors(v)]
    return []


def _wrap(name: str, original: Callable[..., Any], *, objects: bool) -> Callable[..., Any]:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def checked(*args: Any, **kwargs: Any) -> Any:
        if getattr(_inside, "depth", 0):  # an object collective's own steps: judged as that call
            return original(*args, **kwargs)
        bound = signature.bind_partial(*args, **kwargs).arguments
        group = bound.get("group")
        caller = _caller_module()
        if not _is_host_group(group) and not caller.startswith("torch."):
            device = _state["device"]
            if objects:
                raise StrictCollectiveError(
                    f"strict collectives: {caller} calls {name} on a device group (NCCL on a GPU run). Pickled "
                    "objects and barriers belong on the host (gloo) group, where a rank may wait while another "
                    "rolls out without tripping NCCL's watchdog: pass group=<the host group>."
                )
            for tensor in (t for key, v in bound.items() if key != "group" for t in _tensors(v)):
                if tensor.device.type != device:
                    raise StrictCollectiveError(
                        f"strict collectives: {caller} calls {name} with a {tensor.device.type} {tensor.dtype} "
                        f"tensor on a device group standing for {device} (NCCL): NCCL raises 'No backend type "
                        f"associated with device type {tensor.device.type}'. Put the tensor on the group's device, "
                        "or send host-side numbers over the host (gloo) group."
                    )
        if not objects:
            return original(*args, **kwargs)
        _inside.depth = getattr(_inside, "depth", 0) + 1
        try:
            return original(*args, **kwargs)
        finally:
            _inside.depth -= 1

    return checked
