"""Does training make SmolLM2-135M better at reasoning-gym arithmetic on this CPU? Held-out success: SFT, then SFT+RL.

The BabyAI study (``bench/learn_babyai.py``, same arms and options) on a third-party environment
through its adapter (``agentgym_env_reasoning_gym``), with ``bench/reasoning_gym_grpo_cpu.yaml``: a
warm start on the gold-answer expert's replies to training questions, then GRPO, every evaluation
greedy on the same held-out test questions (items the training split never holds). Writes
bench/results/learn_reasoning_gym.json (top level: ``n_tasks``, ``sft_success``, ``rl_success``,
``diff_ci95``) and, with matplotlib, bench/results/learn_reasoning_gym.png.

    python bench/learn_reasoning_gym.py --recipe bench/reasoning_gym_grpo_cpu.yaml --arms scaling_inter \
        --eval-tasks 48 --override warm_start.eval_base=true --override trainer.tensorboard=false
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from learn_babyai import main  # noqa: E402

if __name__ == "__main__":
    main("reasoning_gym", __doc__)
