"""skdp_label refuses to import with numba's JIT disabled (a fit would fail
after the charge: the kernels' intrinsics only exist compiled)."""

import os
import subprocess
import sys


def test_import_refuses_a_disabled_jit():
    env = {**os.environ, "NUMBA_DISABLE_JIT": "1"}
    run = subprocess.run([sys.executable, "-c", "import skdp_label"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode != 0
    assert "NUMBA_DISABLE_JIT" in run.stderr and "ImportError" in run.stderr
