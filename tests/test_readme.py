"""Every ``python`` code block of README.md runs as pasted (each in a fresh process)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
# Each block must finish in under a minute on the 2-core machine; the limit
# here leaves room for a cold numba cache on a loaded CI machine.
BLOCK_TIMEOUT_S = 300


def test_readme_has_code_blocks():
    assert len(BLOCKS) >= 1


@pytest.mark.parametrize("number", range(len(BLOCKS)))
def test_readme_block_runs(number, tmp_path):
    code = BLOCKS[number]
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S
    )
    assert proc.returncode == 0, f"README block {number} failed:\n{code}\n--- stderr ---\n{proc.stderr[-3000:]}"
