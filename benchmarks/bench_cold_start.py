"""Cold start: the first fit of each mechanism in a fresh process with an empty numba cache.

Run: python benchmarks/bench_cold_start.py [--names rr laplace ...] [--warm]

For every registered mechanism, a new Python process with its own empty
``NUMBA_CACHE_DIR`` (what a fresh install sees: numba has compiled nothing)
imports skdp_label, then times ``fit_transform`` of a public synthetic column
(the inputs of ``skdp-label warmup``: 20,000 labels, so the bulk sampling
paths run too). ``--warm`` adds a second process on the same, now filled,
cache directory (what every later process pays). Reports seconds per
mechanism; the import of skdp_label is timed separately.

Set ``PYTHONPATH`` to choose the code measured (e.g. an older checkout).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

_CHILD = r"""
import json, time, warnings
t0 = time.perf_counter()
import skdp_label
from skdp_label._warmup import _public_inputs
from skdp_label.mechanisms import get_mechanism_class
t1 = time.perf_counter()
name = {name!r}
kwargs, column = _public_inputs(name)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    mech = get_mechanism_class(name)(epsilon=1.0, **kwargs)
    t2 = time.perf_counter()
    mech.fit_transform(column)
    t3 = time.perf_counter()
print(json.dumps({{"import": t1 - t0, "first_fit": t3 - t2, "file": skdp_label.__file__}}))
"""


def run_child(name, cache_dir):
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir, NUMBA_NUM_THREADS="1")
    out = subprocess.run(
        [sys.executable, "-c", _CHILD.format(name=name)], env=env, capture_output=True, text=True,
        cwd=cache_dir,  # not the current directory: PYTHONPATH decides the code
    )
    if out.returncode != 0:
        tail = " | ".join(out.stderr.strip().splitlines()[-3:])
        return {"import": float("nan"), "first_fit": float("nan"), "file": "", "error": tail}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--names", nargs="*", help="mechanism names (default: all registered)")
    parser.add_argument("--warm", action="store_true", help="also time a second process, warm cache")
    args = parser.parse_args()
    if args.names:
        names = args.names
    else:
        from skdp_label.mechanisms import mechanism_names

        names = list(mechanism_names())
    print(f"{os.getloadavg()[0]:.2f} load average (1 min) at start; one numba thread per process")
    header = f"{'mechanism':<28}{'import (s)':>12}{'first fit, cold (s)':>22}"
    if args.warm:
        header += f"{'first fit, warm (s)':>22}"
    print(header)
    worst, code = 0.0, "?"
    for name in names:
        with tempfile.TemporaryDirectory(prefix="numba-cold-") as cache_dir:
            cold = run_child(name, cache_dir)
            line = f"{name:<28}{cold['import']:>12.2f}{cold['first_fit']:>22.2f}"
            if args.warm:
                warm = run_child(name, cache_dir)
                line += f"{warm['first_fit']:>22.2f}"
        if "error" in cold:
            line += f"  failed: {cold['error']}"
        else:
            worst = max(worst, cold["first_fit"])
            code = os.path.dirname(cold["file"])
        print(line, flush=True)
    print(f"slowest cold first fit: {worst:.2f} s; code from {code}")
    print(f"{os.getloadavg()[0]:.2f} load average (1 min) at end")


if __name__ == "__main__":
    main()
