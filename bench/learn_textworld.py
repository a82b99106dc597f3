"""Does training make SmolLM2-135M better at TextWorld on this CPU? Held-out success: SFT, then SFT+RL.

The BabyAI study (``bench/learn_babyai.py``, same arms and options) on a third-party environment
through its adapter (``agentgym_env_textworld``), with ``bench/textworld_grpo_cpu.yaml``: a warm
start on the walkthrough expert's episodes, then GRPO, every evaluation greedy on the same held-out
test games (generated at first use). Writes bench/results/learn_textworld.json (top level:
``n_tasks``, ``sft_success``, ``rl_success``, ``diff_ci95``) and, with matplotlib,
bench/results/learn_textworld.png.

    python bench/learn_textworld.py --recipe bench/textworld_grpo_cpu.yaml --arms scaling_inter --eval-tasks 30
    python bench/learn_textworld.py --recipe bench/textworld_short_grpo_cpu.yaml --arms scaling_inter --steps 16 \
        --eval-tasks 50 --out bench/results/learn_textworld_short.json   # short quests: the run that learns
    python bench/learn_textworld.py --recipe bench/textworld_grpo_cpu.yaml --arms scaling_inter --steps 3 \
        --eval-tasks 16 --expert-tasks 32 --override warm_start.eval_base=true \
        --override trainer.tensorboard=false            # the small run in bench/README.md, with the base model
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from learn_babyai import main  # noqa: E402

if __name__ == "__main__":
    main("textworld", __doc__)
