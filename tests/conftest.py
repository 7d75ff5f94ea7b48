import os
import sys

import pytest

# Tests import the shared audit helpers as a plain module.
sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture
def key(tmp_path):
    """A fresh release key (its file in the test's own temporary directory)."""
    from skdp_label.release import generate_key_file, load_key

    path = tmp_path / "label.key"
    generate_key_file(path)
    return load_key(path)
