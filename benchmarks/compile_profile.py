"""Where a cold first fit's compilation goes: numba's self time per function.

Run: NUMBA_CACHE_DIR=$(mktemp -d) python benchmarks/compile_profile.py unbiased [--labels 1000000]

Fits one registered mechanism on the public synthetic column of
``skdp-label warmup`` (repeated to ``--labels``; from 500,000 labels the
kernels compile in this process) and prints, for the functions numba
compiled, the CPU seconds spent in each one's own typing and lowering
(its callees' compilations excluded) and the total in LLVM. Use an empty
``NUMBA_CACHE_DIR`` to see a fresh environment; benchmarks/bench_cold_start.py
gives the end-to-end figures.
"""

import argparse
import time
import warnings

import numpy as np
from numba.core import event


class _SelfTime(event.Listener):
    """CPU seconds of each compile event, minus its nested events."""

    def __init__(self):
        self.stack, self.totals = [], {}

    def on_start(self, ev):
        self.stack.append([time.process_time(), 0.0])

    def on_end(self, ev):
        started, nested = self.stack.pop()
        spent = time.process_time() - started
        if self.stack:
            self.stack[-1][1] += spent
        name = ev.data["dispatcher"].py_func.__name__ if ev.kind == "numba:compile" else "(LLVM)"
        self.totals[name] = self.totals.get(name, 0.0) + spent - nested


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("name")
    parser.add_argument("--labels", type=int, default=1_000_000)
    args = parser.parse_args()
    listener = _SelfTime()
    event.register("numba:compile", listener)
    event.register("numba:llvm_lock", listener)
    from skdp_label._warmup import _public_inputs
    from skdp_label.mechanisms import get_mechanism_class

    kwargs, column = _public_inputs(args.name)
    column = np.resize(column, args.labels)
    warnings.simplefilter("ignore")
    mech = get_mechanism_class(args.name)(epsilon=1.0, random_state=0, **kwargs)
    started = time.process_time()
    mech.fit_transform(column)
    print(f"first fit of {args.name} on {args.labels:,} labels: {time.process_time() - started:.2f} s CPU")
    for name, spent in sorted(listener.totals.items(), key=lambda kv: -kv[1])[:15]:
        print(f"  {name:32s} {spent:6.2f} s")


if __name__ == "__main__":
    main()
