"""The README's Python snippet runs as printed (at the smoke scale, in a folder of its own) and prints what its
comments say."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_readme_snippet_runs_and_prints_what_it_says(tmp_path):
    """Issue 49: the front page's snippet was never run by a test."""
    snippet = re.search(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    assert "run_training(" in snippet and len(snippet.splitlines()) <= 14
    env = {**os.environ, "COEVOLVE_SCALE": "smoke", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", snippet], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    trl_logs = ("{'loss'", "{'train_runtime'")
    printed = [line for line in done.stdout.splitlines() if not line.startswith(("[coevolve]", *trl_logs))]
    assert printed[0] == "tiny 2 100"
    assert printed[1].endswith(" True")
    assert "'max_steps': 120" in printed[2] and "'feedback_every': 10" in printed[2]
    assert "accelerate launch" in printed[2]
    rounds = printed[3]
    assert rounds.startswith("[{'round': 1, 'step': 1,") and "'round': 2" not in rounds
    assert (tmp_path / "runs" / "snippet" / "final").is_dir()
