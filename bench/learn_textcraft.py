"""Does training make SmolLM2-135M better at TextCraft on this CPU? Held-out success: SFT, then SFT+RL.

The BabyAI study (``bench/learn_babyai.py``, same arms and options) on TextCraft's own recipe,
``examples/textcraft_grpo_cpu.yaml``: a warm start on the TextCraft expert's episodes, then RL, every
evaluation greedy on the same held-out test tasks. Writes bench/results/learn_textcraft.json (top
level: ``n_tasks``, ``sft_success``, ``rl_success``, ``diff_ci95``) and, with matplotlib,
bench/results/learn_textcraft.png.

    python bench/learn_textcraft.py --arms scaling_inter --eval-tasks 100
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from learn_babyai import main  # noqa: E402

if __name__ == "__main__":
    main("textcraft", __doc__)
