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


def force_kernels(monkeypatch, use_twin):
    """Make every module that picks sampling kernels with ``kernel_for`` run
    the Python twins (or the compiled kernels) whatever the call's size;
    returns the list of the kernels' names as they are picked."""
    from skdp_label._kernels import _twin

    used = []

    def forced(kernel, *args):
        used.append(kernel.py_func.__name__)
        return _twin.twin(kernel) if use_twin else kernel

    for module in list(sys.modules.values()):
        if getattr(module, "kernel_for", None) is _twin.kernel_for and module is not _twin:
            monkeypatch.setattr(module, "kernel_for", forced)
    return used


@pytest.fixture
def compiled_kernels(monkeypatch):
    """Sampling through the compiled kernels only: tests of the compiled code
    (small calls would otherwise run the bit-identical Python twins)."""
    force_kernels(monkeypatch, False)
