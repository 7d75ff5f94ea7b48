"""The README's Python snippets run, in order, in one namespace."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.mark.filterwarnings("ignore::skdp_label.PrivacyLeakWarning")
def test_readme_snippets_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert len(blocks) >= 3
    namespace = {}
    for i, block in enumerate(blocks):
        exec(compile(block, f"README.md snippet {i + 1}", "exec"), namespace)
    assert namespace["acc"].spent_epsilon == pytest.approx(2.0)  # the tuning spent nothing
