"""Self-play: two GRPO steps on a two-player TextArena game against a frozen copy of the policy.

The partner is the policy's own starting weights loaded from a folder (what an earlier checkpoint is).
It plays inside the environment, so its turns reach the trainer as observation text: inside the
context spans, where the loss mask is 0, never in a sampled span.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("textarena")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("agentgym_estimators")
pytest.importorskip("agentgym_backend_transformers")

from agentgym_core.plugins import PluginManager  # noqa: E402
from agentgym_core.rl.config import load_config  # noqa: E402
from agentgym_core.rl.trainer import train  # noqa: E402
from agentgym_env_textarena import task_id_of  # noqa: E402

GAME = "SimpleNegotiation-v0"  # free text is a legal move (a message without an offer), so every turn goes on


def test_self_play_trains_two_steps_and_the_partners_turns_are_never_trained(tmp_path, tiny_model_dir, one_rl_step):
    torch.set_num_threads(1)
    manager = PluginManager(autoload=True, allow=["estimators", "transformers", "textarena"])
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_model_dir)
    env_kwargs = {"games": [GAME], "max_steps": 3, "partner": {"model": str(tiny_model_dir), "max_new_tokens": 8}}
    tasks = [task_id_of(GAME, 0), task_id_of(GAME, 1)]  # seat 0 and seat 1: the partner opens the second
    config = load_config(
        None,
        [
            f"envs=[{{name: textarena, env_kwargs: {json.dumps(env_kwargs)}, train_tasks: {tasks}, test_tasks: {tasks}}}]",
            *one_rl_step(steps=2, tasks_per_step=2, max_total_tokens=4096),
        ],
    )
    train(config, plugin_manager=manager, model=model, tokenizer=tokenizer)

    run = tmp_path / "run"
    steps = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in steps if x["kind"] == "train"] == [1, 2]
    saved = [
        json.loads(line)
        for name in ("step_000001.jsonl", "step_000002.jsonl")
        for line in (run / "trajectories" / name).read_text().splitlines()
    ]
    partner_turns = 0
    for record in saved:
        ids, mask, turns = record["token_ids"], record["loss_mask"], record["turns"]
        partner = 1 - (record["task_id"] % 2)  # the policy sits at instance % 2
        for index, turn in enumerate(turns):
            start, end = turn["context_span"]["start"], turn["context_span"]["end"]
            assert set(mask[start:end]) == {0}  # environment text, the partner's turns within it: not trained
            action = turn["action_span"]
            assert set(mask[action["start"] : action["end"]]) == {1}
            partner_moved = partner == 0 if index == 0 else bool(turns[index - 1]["info"].get("partner_moves"))
            if partner_moved:
                assert f"Player {partner} made no new trade offer" in tokenizer.decode(ids[start:end])
                partner_turns += 1
    assert partner_turns >= 4  # the partner's opening and its answers, in both steps
