"""scripts/profile-awq-block.py: one block's AWQ time, by part, at a real model's shape."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "profile-awq-block.py"


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_every_part_is_timed_and_they_add_up(precision):
    proc = subprocess.run([sys.executable, str(SCRIPT), "qwen2.5-0.5b", "--precision", precision, "--samples", "2",
                           "--tokens", "64"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    total = float(re.search(rf"{precision} products, \d+ threads: ([\d.]+) s", proc.stdout).group(1))
    rows = re.findall(r"^  (\S+(?: \S+)?)\s+(-?[\d.]+) s   peak RSS\s+([\d.]+) GiB$", proc.stdout, re.M)
    parts = {p: float(s) for p, s, _ in rows}
    assert set(parts) == {"capture", "search", "compensate", "block checks", "next input", "other"}, proc.stdout
    assert all(s > 0 for p, s in parts.items() if p != "other")
    assert sum(parts.values()) == pytest.approx(total, abs=0.05)
    # torch and one block of 0.5B (about 60 MB in FP32) are resident whichever part runs
    assert all(0.2 < float(gib) < 8 for _, _, gib in rows), proc.stdout
