"""Cold start: the first fit of each mechanism in a fresh process with an empty numba cache.

Run: python benchmarks/bench_cold_start.py [--names rr laplace ...] [--warm]
     [--repo /path/to/checkout ...] [--repeats 3] [--labels 5000] [--compiles]

For every registered mechanism, a new Python process with its own empty
``NUMBA_CACHE_DIR`` (what a fresh install sees: numba has compiled nothing)
imports skdp_label, then times ``fit_transform`` of a public synthetic column
(the inputs of ``skdp-label warmup``: 20,000 labels, so the bulk sampling
paths run too). ``--warm`` adds a second process on the same, now filled,
cache directory (what every later process pays), and checks that both
fits (``random_state=0``) return the same bytes. Reports CPU seconds per
mechanism (the machine may be shared: CPU time is what the compilation
costs; the first fit's wall time is printed too): ``package``, ``import
skdp_label`` alone; ``import``, that plus the mechanisms; the first fit;
``compilers``, the CPU time of the processes that compiled kernels in the
background (``skdp_label._kernels._background``; waited for after the fit,
not counted in it); ``import+fit``. ``--labels`` fits that many labels
(the column repeated past 20,000; small fits run the kernels' Python twins:
no compilation). ``--compiles`` lists the kernels the cold fit compiled in its
own process (CPU seconds of each top-level compilation, its callees included,
from numba's compile events) and the time spent in LLVM.

``--repo`` measures one or more checkouts side by side (each put first on
``PYTHONPATH``; by default the ``PYTHONPATH`` of this process decides the
code), alternating between them, and ``--repeats`` reports the median of
several fresh processes per mechanism and checkout.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

_CHILD = r"""
import hashlib, json, resource, time, warnings
import numpy as np
t0 = time.process_time()
import skdp_label
t_package = time.process_time()
from skdp_label._warmup import _public_inputs
from skdp_label.mechanisms import get_mechanism_class
t1 = time.process_time()
name = {name!r}
compiles, llvm = {{}}, [0.0]
if {compiles}:  # CPU seconds of each top-level numba compilation (callees included)
    from numba.core import event

    class _Timer(event.Listener):
        def __init__(self):
            self.stack = []

        def on_start(self, ev):
            self.stack.append(time.process_time())

        def on_end(self, ev):
            spent = time.process_time() - self.stack.pop()
            if self.stack:  # nested: counted in the outer one
                return
            if ev.kind == "numba:llvm_lock":
                llvm[0] += spent
            else:
                kernel = ev.data["dispatcher"].py_func.__name__
                compiles[kernel] = compiles.get(kernel, 0.0) + spent

    event.register("numba:compile", _Timer())
    event.register("numba:llvm_lock", _Timer())
kwargs, column = _public_inputs(name)
if {labels} is not None:
    column = np.resize(column, {labels})  # the first LABELS labels, repeated past 20,000
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    mech = get_mechanism_class(name)(epsilon=1.0, random_state=0, **kwargs)
    t2, w2 = time.process_time(), time.perf_counter()
    noisy = mech.fit_transform(column)
    t3, w3 = time.process_time(), time.perf_counter()
try:  # compilations run in other processes: wait for them, count their CPU time
    from skdp_label._kernels._background import wait_for_compilers
except ImportError:
    wait_for_compilers = lambda: None
wait_for_compilers()
children = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({{
    "import": t1 - t0, "package": t_package - t0, "first_fit": t3 - t2, "wall": w3 - w2,
    "file": skdp_label.__file__,
    "children": children.ru_utime + children.ru_stime, "compiles": compiles, "llvm": llvm[0],
    "digest": hashlib.sha256(np.ascontiguousarray(noisy).tobytes()).hexdigest(),
}}))
"""


def run_child(name, cache_dir, repo=None, labels=None, compiles=False):
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir, NUMBA_NUM_THREADS="1")
    if repo is not None:
        paths = [os.path.abspath(repo)] + env.get("PYTHONPATH", "").split(os.pathsep)
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    out = subprocess.run(
        [sys.executable, "-c", _CHILD.format(name=name, labels=labels, compiles=compiles)],
        env=env,
        capture_output=True, text=True,
        cwd=cache_dir,  # not the current directory: PYTHONPATH decides the code
    )
    if out.returncode != 0:
        tail = " | ".join(out.stderr.strip().splitlines()[-3:])
        return {"import": float("nan"), "first_fit": float("nan"), "wall": float("nan"), "file": "",
                "children": float("nan"), "package": float("nan"), "digest": "", "error": tail,
                "compiles": {}, "llvm": float("nan")}
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(name, repo, warm, labels=None, compiles=False):
    """(cold, warm or None): each a fresh process, the cold one on an empty cache."""
    with tempfile.TemporaryDirectory(prefix="numba-cold-") as cache_dir:
        cold = run_child(name, cache_dir, repo, labels, compiles)
        return cold, (run_child(name, cache_dir, repo, labels) if warm else None)


def _median(runs, key):
    return float(statistics.median(r[key] for r in runs))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--names", nargs="*", help="mechanism names (default: all registered)")
    parser.add_argument("--warm", action="store_true", help="also time a second process, warm cache")
    parser.add_argument("--repo", nargs="*", default=[None],
                        help="checkouts to measure side by side")
    parser.add_argument("--repeats", type=int, default=1,
                        help="fresh processes per measurement (median)")
    parser.add_argument("--labels", type=int, default=None,
                        help="fit only the first LABELS labels (default: all 20,000)")
    parser.add_argument("--compiles", action="store_true",
                        help="list the kernels the cold fit compiled in its own process "
                             "(CPU s each, callees included; 'llvm': time in LLVM)")
    args = parser.parse_args()
    if args.names:
        names = args.names
    else:
        from skdp_label.mechanisms import mechanism_names

        names = list(mechanism_names())
    repos = args.repo or [None]
    print(f"{os.getloadavg()[0]:.2f} load average (1 min) at start; one numba thread per process; "
          f"median of {args.repeats}; CPU seconds (wall in brackets); "
          f"{args.labels or 'all 20,000'} labels")
    labels = [os.path.basename(os.path.abspath(r)) if r else "PYTHONPATH" for r in repos]
    header = (f"{'mechanism':<26}{'checkout':<14}{'package':>8}{'import':>8}{'first fit, cold':>24}"
              f"{'compilers':>10}{'import+fit':>11}")
    if args.warm:
        header += f"{'first fit, warm':>18}"
    print(header)
    worst = dict.fromkeys(labels, 0.0)
    mismatches = 0
    for name in names:
        runs = {label: ([], []) for label in labels}
        for _ in range(args.repeats):
            for repo, label in zip(repos, labels):  # alternate: the load drifts
                cold, warm = measure(name, repo, args.warm, args.labels, args.compiles)
                runs[label][0].append(cold)
                if warm is not None:
                    runs[label][1].append(warm)
        for label in labels:
            colds, warms = runs[label]
            errors = [r["error"] for r in colds if "error" in r]
            line = (f"{name:<26}{label:<14}{_median(colds, 'package'):>8.2f}"
                    f"{_median(colds, 'import'):>8.2f}"
                    f"{_median(colds, 'first_fit'):>14.2f} ({_median(colds, 'wall'):>6.2f})"
                    f"{_median(colds, 'children'):>10.2f}"
                    f"{_median(colds, 'import') + _median(colds, 'first_fit'):>11.2f}")
            if args.warm:
                line += f"{_median(warms, 'first_fit'):>18.2f}"
            if warms and any(w["digest"] != c["digest"] for w, c in zip(warms, colds)):
                line += "  OUTPUTS DIFFER (cold vs warm)"
                mismatches += 1
            if errors:
                line += f"  failed: {errors[0]}"
            else:
                worst[label] = max(worst[label], _median(colds, "first_fit"))
            print(line, flush=True)
            if args.compiles and not errors:
                kernels = {k for r in colds for k in r["compiles"]}
                spent = sorted(((statistics.median(r["compiles"].get(k, 0.0) for r in colds), k)
                                for k in kernels), reverse=True)
                listed = ", ".join(f"{k} {t:.2f}" for t, k in spent if t >= 0.05)
                print(f"{'':<26}compiled here: {listed or 'nothing'}; "
                      f"in LLVM {_median(colds, 'llvm'):.2f}", flush=True)
    for label in labels:
        print(f"slowest cold first fit ({label}): {worst[label]:.2f} s CPU")
    if args.warm:
        print(f"seeded outputs, cold (twins, background compilers) vs warm (compiled): "
              f"{'identical' if not mismatches else f'{mismatches} differ'}")
    print(f"{os.getloadavg()[0]:.2f} load average (1 min) at end")


if __name__ == "__main__":
    main()
