"""runtime.optimizer_state_to_disk: AdamW's moments leave memory between updates and come back unchanged."""

from __future__ import annotations

import gc
import json
import threading

import pytest
import torch

from agentgym_core.training import optimizer_on_disk as on_disk_module
from agentgym_core.training.optimizer_on_disk import OptimizerStateOnDisk


def _train_lines(run_dir):
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return [x for x in lines if x["kind"] == "train"]


def _steps(model, optimizer, n, on_disk=None):
    for k in range(n):
        if on_disk is not None:
            on_disk.restore()
        loss = model(torch.full((2, 4), float(k + 1))).pow(2).sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if on_disk is not None:
            on_disk.changed()
            on_disk.store()


def test_stored_state_leaves_memory_and_training_continues_exactly_as_in_memory(tmp_path):
    torch.manual_seed(0)
    plain = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    stored = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    stored.load_state_dict(plain.state_dict())
    def groups(model):  # two groups, as the policy and a value head have
        return [{"params": model[0].parameters(), "lr": 0.1}, {"params": model[1].parameters(), "lr": 0.01}]

    opt_plain = torch.optim.AdamW(groups(plain))
    opt_stored = torch.optim.AdamW(groups(stored))
    on_disk = OptimizerStateOnDisk(opt_stored, tmp_path / "run" / "state.pt")

    on_disk.store()  # before any step: nothing to move, no file
    assert not on_disk.stored and not on_disk.path.exists()
    _steps(plain, opt_plain, 3)
    _steps(stored, opt_stored, 3, on_disk)
    assert on_disk.stored and len(opt_stored.state) == 0 and on_disk.path.exists()
    on_disk.restore()
    for a, b in zip(plain.parameters(), stored.parameters(), strict=True):
        assert torch.equal(a, b)
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(opt_plain.state[a][key], opt_stored.state[b][key])


def test_hooked_around_steps_the_state_is_in_memory_only_inside_each_step(tmp_path):
    """around_steps(): restored just before optimizer.step(), stored just after; backward runs without it."""
    torch.manual_seed(0)
    plain = torch.nn.Linear(4, 2)
    hooked = torch.nn.Linear(4, 2)
    hooked.load_state_dict(plain.state_dict())
    opt_plain, opt_hooked = torch.optim.AdamW(plain.parameters()), torch.optim.AdamW(hooked.parameters())
    on_disk = OptimizerStateOnDisk(opt_hooked, tmp_path / "state.pt").around_steps()
    in_memory_at_backward, in_memory_at_step = [], []
    opt_hooked.register_step_pre_hook(lambda o, a, k: in_memory_at_step.append(len(o.state)))  # after the restore
    _steps(plain, opt_plain, 3)
    for k in range(3):
        loss = hooked(torch.full((2, 4), float(k + 1))).pow(2).sum()
        loss.backward()
        in_memory_at_backward.append(len(opt_hooked.state))
        opt_hooked.step()
        opt_hooked.zero_grad(set_to_none=True)
        assert on_disk.stored and len(opt_hooked.state) == 0
    assert in_memory_at_backward == [0, 0, 0] and in_memory_at_step == [0, 2, 2]  # step 1 creates the state
    on_disk.restore()
    for a, b in zip(plain.parameters(), hooked.parameters(), strict=True):
        assert torch.equal(a, b)
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(opt_plain.state[a][key], opt_hooked.state[b][key])
    on_disk.store()  # the file still holds it
    with on_disk.paused():  # a checkpoint's loader may step inside: the state stays in memory
        assert len(opt_hooked.state) == 2
        opt_hooked.step()  # no gradients: nothing changes, and nothing is stored
        assert len(opt_hooked.state) == 2 and not on_disk.stored
    on_disk.close()
    assert not on_disk.path.exists()
    opt_hooked.zero_grad()
    hooked(torch.ones(1, 4)).sum().backward()
    opt_hooked.step()  # the hooks went with close(): nothing stored
    assert len(opt_hooked.state) == 2


def test_a_second_store_without_a_step_writes_nothing_and_the_file_goes_with_the_object(tmp_path, monkeypatch):
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    on_disk = OptimizerStateOnDisk(optimizer, tmp_path / "state.pt")
    _steps(model, optimizer, 1, on_disk)
    on_disk.restore()  # waits for the background write
    on_disk.store()
    path = on_disk.path
    writes = []
    monkeypatch.setattr(on_disk_module, "_write_raw", lambda *a: writes.append(a))
    on_disk.restore()  # a checkpoint reads the state, then it goes back out: the file already holds it
    on_disk.store()
    assert writes == [] and on_disk.stored and len(optimizer.state) == 0
    on_disk.restore()
    assert set(optimizer.state[model.weight]) == {"step", "exp_avg", "exp_avg_sq"}
    del on_disk
    gc.collect()
    assert not path.exists()


def test_storing_frees_the_moments_once_written_and_a_restore_during_the_write_reads_nothing(tmp_path, monkeypatch):
    import weakref

    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    on_disk = OptimizerStateOnDisk(optimizer, tmp_path / "state.pt")
    _steps(model, optimizer, 1)
    moment = weakref.ref(optimizer.state[model.weight]["exp_avg"])
    on_disk.changed()
    on_disk.store()
    on_disk._wait()
    gc.collect()
    assert moment() is None  # written and freed: nothing in memory holds it

    # A checkpoint right after an update restores while the write still runs: it takes the tensors being
    # written instead of reading the file back (the write is held up here until the restore has begun).
    release = threading.Event()
    save = on_disk_module._write_raw
    monkeypatch.setattr(on_disk_module, "_write_raw", lambda *a: (release.wait(10), save(*a))[1])
    loads = []
    load = on_disk_module._read_raw
    monkeypatch.setattr(on_disk_module, "_read_raw", lambda *a: (loads.append(a), load(*a))[1])
    on_disk.restore()  # from the file (the first write ended long ago)
    assert len(loads) == 1
    loads.clear()
    _steps(model, optimizer, 1)
    on_disk.changed()
    on_disk.store()  # the write starts and waits
    threading.Timer(0.2, release.set).start()
    on_disk.restore()
    assert loads == [] and set(optimizer.state[model.weight]) == {"step", "exp_avg", "exp_avg_sq"}
    on_disk.close()  # state in memory: it stays
    assert not on_disk.path.exists() and model.weight in optimizer.state


def test_closing_drops_a_stored_state_without_reading_it_back(tmp_path, monkeypatch):
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    on_disk = OptimizerStateOnDisk(optimizer, tmp_path / "state.pt")
    _steps(model, optimizer, 2, on_disk)  # ends stored (a write may still run)
    monkeypatch.setattr(on_disk_module, "_read_raw", lambda *a: pytest.fail("close() read the state back"))
    on_disk.close()
    assert not on_disk.path.exists() and len(optimizer.state) == 0
    with pytest.raises(RuntimeError, match="load a checkpoint"):
        on_disk.restore()


def test_a_failed_write_keeps_the_state_in_memory_and_says_so(tmp_path):
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    (tmp_path / "not_a_folder").write_text("")
    on_disk = OptimizerStateOnDisk(optimizer, tmp_path / "not_a_folder" / "state.pt")
    _steps(model, optimizer, 1)
    expected = {k: v.clone() for k, v in optimizer.state[model.weight].items()}
    on_disk.changed()
    with pytest.warns(RuntimeWarning, match="stays in memory"):
        on_disk.store()
        on_disk.restore()
    assert on_disk.failed and all(torch.equal(optimizer.state[model.weight][k], v) for k, v in expected.items())
    on_disk.store()  # from now on a no-op: the state stays where it is
    assert not on_disk.stored and model.weight in optimizer.state


def test_a_run_with_the_state_on_disk_trains_the_same_weights_and_checkpoints_the_state(tmp_path, pm, tiny_config,
                                                                                        monkeypatch):
    from agentgym_core.rl.trainer import train
    from agentgym_core.testing.tiny_model import tiny_chat_model
    from agentgym_core.training.checkpoint import latest_checkpoint, load_trainer_state

    calls = []
    instances = []
    around_steps = OptimizerStateOnDisk.around_steps
    monkeypatch.setattr(OptimizerStateOnDisk, "around_steps", lambda self: (instances.append(self), around_steps(self))[1])
    for name in ("store", "restore"):
        original = getattr(OptimizerStateOnDisk, name)
        monkeypatch.setattr(OptimizerStateOnDisk, name,
                            lambda self, _o=original, _n=name: (calls.append((_n, self.stored)), _o(self))[1])
    weights = {}
    for setting in ("false", "true"):
        model, tokenizer = tiny_chat_model(seed=0)
        training_forwards = []  # (moments in memory, a step's state already written) at each forward with a graph
        model.register_forward_pre_hook(lambda module, args, seen=training_forwards: seen.append(
            (len(instances[-1].optimizer.state), instances[-1].path.exists()))
            if instances and torch.is_grad_enabled() else None)
        run_dir = tmp_path / setting
        config = tiny_config(run_dir, **{"runtime.optimizer_state_to_disk": setting, "trainer.eval_tasks": 0})
        train(config, plugin_manager=pm, model=model, tokenizer=tokenizer)
        weights[setting] = {k: v.clone() for k, v in model.state_dict().items()}
        state = load_trainer_state(latest_checkpoint(run_dir))["optimizer_by_name"]["state"]
        assert any("exp_avg" in entry for entry in state.values())  # the checkpoint has the moments
        assert not list(run_dir.glob("optimizer_state_on_disk*"))  # deleted with the learner
    # The run with the option moved the state out after its updates and back before the next one.
    trained_steps = sum(1 for x in _train_lines(tmp_path / "true") if x.get("trained_trajectories"))
    assert trained_steps >= 1
    assert sum(1 for name, stored in calls if name == "store" and not stored) >= trained_steps
    assert sum(1 for name, stored in calls if name == "restore" and stored) >= trained_steps
    assert all(torch.equal(weights["false"][k], weights["true"][k]) for k in weights["false"])
    # The update's forwards (and so its backwards) ran with the moments out of memory, after steps had made them.
    assert any(written for _, written in training_forwards)
    assert all(in_memory == 0 for in_memory, _ in training_forwards)

    # Interrupted after step 2 and resumed (a fresh process): the moments go from the checkpoint to the
    # file, back for step 3's update, and the weights end where the uninterrupted run's did.
    config = tiny_config(tmp_path / "cut", **{"runtime.optimizer_state_to_disk": "true", "trainer.eval_tasks": 0})
    model, tokenizer = tiny_chat_model(seed=0)
    train(config, plugin_manager=pm, model=model, tokenizer=tokenizer, stop_after=2)
    model, tokenizer = tiny_chat_model(seed=0)
    train(config, resume=True, plugin_manager=pm, model=model, tokenizer=tokenizer)
    assert all(torch.allclose(weights["false"][k], v, atol=1e-6) for k, v in model.state_dict().items())


def test_several_learner_ranks_refuse_the_state_on_disk_when_the_recipe_loads():
    from agentgym_core.recipes import ConfigError
    from agentgym_core.rl.config import load_config

    with pytest.raises(ConfigError, match="trainer.learners=1"):
        load_config(None, ["envs=[{name: x}]", "trainer.learners=2", "runtime.optimizer_state_to_disk=true"])


def test_the_raw_file_gives_back_every_tensor_and_value_exactly(tmp_path):
    state = {0: {"step": torch.tensor(3.0), "exp_avg": torch.randn(3, 5), "exp_avg_sq": torch.rand(3, 5)},
             2: {"momentum_buffer": torch.randn(7).to(torch.bfloat16), "count": 4, "note": None}}
    layout = on_disk_module._write_raw(state, tmp_path / "state.bin")
    assert (tmp_path / "state.bin").stat().st_size == 4 + 2 * 15 * 4 + 7 * 2  # the tensors' bytes, nothing else
    back = on_disk_module._read_raw(tmp_path / "state.bin", layout)
    assert back.keys() == state.keys() and all(back[i].keys() == state[i].keys() for i in state)
    for i, entry in state.items():
        for key, value in entry.items():
            if isinstance(value, torch.Tensor):
                assert back[i][key].dtype == value.dtype and torch.equal(back[i][key], value)
            else:
                assert back[i][key] == value
    (tmp_path / "state.bin").write_bytes((tmp_path / "state.bin").read_bytes()[:-1])
    with pytest.raises(OSError, match="ends before"):
        on_disk_module._read_raw(tmp_path / "state.bin", layout)
