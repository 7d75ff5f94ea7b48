"""Scaling of the optimal unbiased solver in |Y| (issue 13), one core.

For each prior shape and |Y| = k it times ``optimal_unbiased_continuous``
(interior point + polish + certified lower bound) and checks the result
(exact mechanism, relative gap between loss and certified bound), next to
references measured in the same run:

* the compact grid LP of paper 001 (Alg. 1 on the Alg. 2 grid of 4k
  points) solved by scipy's HiGHS, on k up to ``--lp-max`` only;
* optionally the solver of another checkout (``--old /work/main``), loaded
  from that path in a subprocess, on k up to ``--old-max``.

It also runs a sweep of random irregular priors (near-tied labels, zero
masses, heavy tails, clustered labels; k log-uniform in 20 to 900 by
default, epsilon 0.05 to 30) and reports how many certify to 1e-9 and 1e-6,
how many need the LP fallback, the times and the slowest cases. Each prior
of the sweep has its own generator, so ``--cases 17 42`` re-runs those two
alone (with ``--old``, next to the other checkout's solver; with
``--all-patterns`` that solver runs over all patterns at any k, as before
the working set). The machine's
load average is printed: on a shared machine compare ratios, not seconds.

Times: wall clock and CPU (``time.process_time``, the figure to compare on a
shared machine); the growth exponent is fitted to the CPU times. Columns
"LP fb" and "merge": CPU time of the solver's LP fallback and merge ladder
(``-``: not run); the sweep's summary gives the largest ratio of a case's
total time to its time outside them (the "no slow fallback" target).
``--sweep-eps 15`` draws every sweep prior's epsilon from that list.
``--reproducible`` solves as seeded and keyed fits do (``time_budgets=False``:
no wall-clock budget, the fallbacks' deterministic budgets only).

Run: ``OMP_NUM_THREADS=1 python benchmarks/bench_unbiased_scaling.py``
(``--sizes 50 200 1000`` to choose k, ``--sizes`` alone to skip them, ``--sweep 0``
to skip the sweep).
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from skdp_label.mechanisms.unbiased import feasible_output_set  # noqa: E402
from skdp_label.mechanisms.unbiased import _solver  # noqa: E402
from skdp_label.mechanisms.unbiased._grid import _grid_lp  # noqa: E402
from skdp_label.mechanisms.unbiased._solver import (  # noqa: E402
    check_exact_mechanism,
    mechanism_loss,
    optimal_unbiased_continuous,
)


def census_like(k):
    """Weeks-worked shape (bench_unbiased.census_prior) stretched to k values."""
    y = np.arange(k, dtype=float)
    x = y / (k - 1) * 51 + 1
    p = np.exp(-(((x - 30) / 18) ** 2)) * 0.3 + 0.1
    p = p / p.sum() * 0.35
    for week, mass in {52: 0.40, 50: 0.05, 48: 0.05, 40: 0.06, 26: 0.03, 12: 0.02}.items():
        p[int(round((week - 1) / 51 * (k - 1)))] += mass
    return y, p / p.sum()


def uniform(k):
    return np.arange(k, dtype=float), np.full(k, 1.0 / k)


def near_ties(k, seed=0):
    """Irregular labels, a quarter of them a relative 1e-6 from a neighbour,
    30 % zero masses."""
    rng = np.random.default_rng(seed)
    y = np.sort(rng.uniform(0, 1, size=k))
    idx = rng.choice(k - 1, size=k // 4, replace=False)
    y[idx + 1] = y[idx] + rng.uniform(1, 5, size=idx.size) * 1e-6
    y = np.unique(y)
    p = rng.gamma(0.5, size=y.size)
    p[rng.random(y.size) < 0.3] = 0.0
    p[0] += 1e-3
    return y, p / p.sum()


PRIORS = {"census-like": census_like, "uniform": uniform, "near-ties": near_ties}


KINDS = ("near-ties", "heavy-tail", "integers", "clustered")


def irregular_prior(rng, k, kind=None):
    kind = int(rng.integers(4)) if kind is None else kind
    if kind == 0:
        return near_ties(k, int(rng.integers(1 << 30)))
    if kind == 1:
        y = np.unique(np.cumsum(rng.pareto(1.0, size=k) + 1e-3))
    elif kind == 2:
        y = np.arange(k, dtype=float)
    else:
        c = rng.uniform(-1e3, 1e3, size=3)
        y = np.unique(c[rng.integers(3, size=k)] + rng.normal(size=k) * 10.0 ** rng.integers(-4, 1))
    p = rng.gamma(rng.choice([0.1, 0.5, 2.0]), size=y.size)
    p[rng.random(y.size) < rng.choice([0.0, 0.3, 0.7])] = 0.0
    p[rng.integers(y.size)] += p.sum() * 0.5 + 1e-3
    return y, p / p.sum()


class _StageTimer:
    """CPU time spent in the solver's LP fallback (``_fallback_rays``) and in
    its merge ladder (``_merged_labels_solution``), outermost calls only:
    the benchmark wraps those two module functions (the solver calls them
    through its module), so a case shows whether and how long it fell back."""

    def __init__(self):
        self.depth = 0
        self.times = {}

    def wrap(self, name):
        inner = getattr(_solver, name)

        def timed(*args, **kwargs):
            self.depth += 1
            c0 = time.process_time()
            try:
                return inner(*args, **kwargs)
            finally:
                self.depth -= 1
                if self.depth == 0:
                    self.times[name] = self.times.get(name, 0.0) + time.process_time() - c0

        setattr(_solver, name, timed)


STAGES = _StageTimer()
STAGES.wrap("_fallback_rays")
STAGES.wrap("_merged_labels_solution")


def _stage_columns():
    """CPU seconds of the LP fallback and the merge ladder in the last solve."""
    times = (STAGES.times.get(name) for name in ("_fallback_rays", "_merged_labels_solution"))
    return "".join(f"{x:>8.2f}" if x is not None else f"{'-':>8}" for x in times)


TIME_BUDGETS = [True]  # --reproducible: False


def solve(y, p, eps):
    """Wall time, CPU time (``time.process_time``), loss and relative gap;
    ``STAGES.times`` holds the CPU time of the fallback stages of this solve."""
    STAGES.times = {}
    t0, c0 = time.perf_counter(), time.process_time()
    outputs, matrix, lower = optimal_unbiased_continuous(y, p, eps,
                                                         time_budgets=TIME_BUDGETS[0])
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    check_exact_mechanism(y, outputs, matrix, eps)
    loss = mechanism_loss(y, p, outputs, matrix)
    return elapsed, cpu, loss, (loss - lower) / loss


def grid_lp(y, p, eps, n):
    grid = feasible_output_set(y, eps, n)
    center, half = 0.5 * (y[0] + y[-1]), 0.5 * (y[-1] - y[0])
    t0 = time.perf_counter()
    matrix = _grid_lp((y - center) / half, p, (grid - center) / half, math.expm1(eps))
    return time.perf_counter() - t0, mechanism_loss(y, p, grid, matrix)


_OLD_SNIPPET = """
import json, sys, time, numpy as np
sys.path.insert(0, sys.argv[1])  # the other checkout's package, nothing of this one
import skdp_label
assert skdp_label.__file__.startswith(sys.argv[1]), skdp_label.__file__
from skdp_label.mechanisms.unbiased import _solver
from skdp_label.mechanisms.unbiased._solver import mechanism_loss, optimal_unbiased_continuous
if sys.argv[3] == "all":  # all k (k + 1) / 2 patterns at any k (no working set)
    _solver._FULL_PATTERNS_MAX = 10**9
data = np.load(sys.argv[2])
y, p, eps = data["y"], data["p"], float(data["eps"])
t0, c0 = time.perf_counter(), time.process_time()
try:
    outputs, matrix, lower = optimal_unbiased_continuous(y, p, eps)
    loss = mechanism_loss(y, p, outputs, matrix)
except RuntimeError:
    loss = None
print(json.dumps([time.perf_counter() - t0, time.process_time() - c0, loss]))
"""


def old_solver_time(old_root, y, p, eps, timeout, all_patterns=False):
    """CPU time and loss of the solver in another checkout, in a fresh
    one-thread process that imports only that checkout (the prior is
    passed in a file)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env.pop("PYTHONPATH", None)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "prior.npz")
        np.savez(path, y=y, p=p, eps=eps)
        args = [sys.executable, "-c", _OLD_SNIPPET, old_root, path,
                "all" if all_patterns else "default"]
        return _run_old(args, env, timeout)


def _run_old(args, env, timeout):
    try:
        out = subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout)
        _, cpu, loss = json.loads(out.stdout.strip().splitlines()[-1])
        return cpu, loss
    except subprocess.TimeoutExpired:
        return f">{timeout:.0f}", None
    except (IndexError, ValueError):
        return "error", None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[50, 200, 1000, 2000, 5000])
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--lp-max", type=int, default=100, help="largest k for the grid LP")
    parser.add_argument("--old", default=None, help="checkout with the solver to compare")
    parser.add_argument("--old-max", type=int, default=1000)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--sweep", type=int, default=200, help="random irregular priors")
    parser.add_argument("--sweep-k", type=int, nargs=2, default=[20, 900], metavar=("MIN", "MAX"))
    parser.add_argument("--sweep-eps", type=float, nargs="+", default=list(SWEEP_EPSILONS),
                        help="epsilons a sweep prior draws from")
    parser.add_argument("--cases", type=int, nargs="+", default=None,
                        help="re-run these sweep priors only (their numbers in the sweep)")
    parser.add_argument("--sweep-lp-max", type=int, default=0,
                        help="largest k of a sweep prior also solved by the grid LP (4k points)")
    parser.add_argument("--all-patterns", action="store_true",
                        help="run the --old checkout's solver over all patterns at any k")
    parser.add_argument("--priors", nargs="+", default=list(PRIORS), choices=list(PRIORS))
    parser.add_argument("--reproducible", action="store_true",
                        help="solve as seeded/keyed fits do: no wall-clock budgets")
    args = parser.parse_args()
    TIME_BUDGETS[0] = not args.reproducible
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"load average {load} on {os.cpu_count()} cores (shared machine: compare ratios)")
    with threadpool_limits(limits=1):
        solve(*uniform(5), 1.0)  # warm-up
        eps = args.epsilon
        if args.sizes:
            print(f"\nepsilon = {eps}; times in s; gap = (loss - certified bound) / loss")
        head = f"{'prior':<12}{'k':>6}{'wall':>9}{'cpu':>9}{'loss':>14}{'gap':>10}"
        head += f"{'LP fb':>8}{'merge':>8}"
        head += f"{'grid LP 4k':>12}{'LP loss/ours':>14}"
        head += f"{'old cpu':>10}{'old loss/ours':>15}" if args.old else ""
        if args.sizes:
            print(head)
        fits = {}
        for name in args.priors:
            make = PRIORS[name]
            for k in args.sizes:
                y, p = make(k)
                try:
                    elapsed, cpu, loss, gap = solve(y, p, eps)
                    row = f"{name:<12}{y.size:>6}{elapsed:>9.2f}{cpu:>9.2f}"
                    row += f"{loss:>14.8g}{gap:>10.1e}" + _stage_columns()
                    fits.setdefault(name, []).append((y.size, cpu))
                except (RuntimeError, MemoryError) as exc:
                    row = f"{name:<12}{y.size:>6}{'failed':>18}{'':>14}{type(exc).__name__:>10}"
                    row += f"{'':>16}"
                    loss = float("nan")
                if k <= args.lp_max:
                    t_lp, lp_loss = grid_lp(y, p, eps, 4 * y.size)
                    row += f"{t_lp:>12.2f}{lp_loss / loss:>14.6f}"
                else:
                    row += f"{'':>12}{'':>14}"
                if args.old and k <= args.old_max:
                    old_cpu, old_loss = old_solver_time(args.old, y, p, eps, args.timeout)
                    old_cpu = f"{old_cpu:.2f}" if isinstance(old_cpu, float) else old_cpu
                    ratio = f"{old_loss / loss:.10f}" if old_loss else "-"
                    row += f"{old_cpu:>10}{ratio:>15}"
                print(row, flush=True)
        if len(args.sizes) > 1:
            print("\ngrowth exponent of the CPU time in k (least squares on log-log, k >= 200):")
        for name, pts in fits.items():
            pts = [(k, t) for k, t in pts if k >= 200]
            if len(pts) >= 2:
                slope = np.polyfit(np.log([k for k, _ in pts]), np.log([t for _, t in pts]), 1)[0]
                print(f"  {name:<12} {slope:.2f}")

        if args.sweep or args.cases:
            sweep(args)


SWEEP_EPSILONS = (0.05, 0.3, 1.0, 3.0, 8.0, 15.0, 22.0, 30.0)


def sweep_case(index, k_range=(20, 900), epsilons=SWEEP_EPSILONS):
    """Irregular prior number ``index`` of the sweep (its own generator, so a
    case re-runs alone: ``--cases``): k log-uniform in ``k_range``, epsilon
    drawn from ``epsilons`` (another list keeps the prior, changes epsilon)."""
    rng = np.random.default_rng([13, index])
    k = int(round(math.exp(rng.uniform(math.log(k_range[0]), math.log(k_range[1])))))
    kind = int(rng.integers(4))
    y, p = irregular_prior(rng, k, kind=kind)
    eps = float(epsilons[int(rng.integers(len(epsilons)))])
    return KINDS[kind], y, p, eps


def sweep(args):
    """Random irregular priors (or the listed ``--cases``): certified gap,
    CPU time, fallbacks; with ``--old`` the other checkout on the same case."""
    cases = args.cases if args.cases else range(args.sweep)
    print(f"\nirregular priors (k log-uniform in {args.sweep_k}, epsilon 0.05-30); CPU s")
    head = f"{'case':>6}{'kind':>11}{'k':>5}{'eps':>6}{'cpu':>8}{'gap':>10}"
    head += f"{'LP fb':>8}{'merge':>8}"
    head += f"{'old cpu':>10}{'old loss/ours':>15}" if args.old else ""
    print(head + (f"{'grid LP loss/ours':>19}" if args.sweep_lp_max else ""))
    rows, fails, old_times = [], 0, []
    for index in cases:
        kind, y, p, eps = sweep_case(index, tuple(args.sweep_k), args.sweep_eps)
        try:
            _, cpu, loss, gap = solve(y, p, eps)
        except RuntimeError as exc:
            fails += 1
            print(f"{index:>6}{kind:>11}{y.size:>5}{eps:>6g}  raised {type(exc).__name__}")
            continue
        fb = STAGES.times.get("_fallback_rays")
        merge = STAGES.times.get("_merged_labels_solution")
        rows.append((index, cpu, gap, fb, merge))
        row = f"{index:>6}{kind:>11}{y.size:>5}{eps:>6g}{cpu:>8.2f}{gap:>10.1e}" + _stage_columns()
        if args.old:
            old_cpu, old_loss = old_solver_time(args.old, y, p, eps, args.timeout,
                                                args.all_patterns)
            if isinstance(old_cpu, float):
                old_times.append((cpu, old_cpu))  # a list: --cases may repeat a case
                old_cpu = f"{old_cpu:.2f}"
            row += f"{old_cpu:>10}{(f'{old_loss / loss:.10f}' if old_loss else '-'):>15}"
        if y.size <= args.sweep_lp_max:
            row += f"{grid_lp(y, p, eps, 4 * y.size)[1] / loss:>19.6g}"
        print(row, flush=True)
    if not rows:
        return
    idx, times, gaps = (np.array(x) for x in list(zip(*rows))[:3])
    fb = np.array([r[3] is not None for r in rows])
    merged = np.array([r[4] is not None for r in rows])
    # Time outside the fallback stages: what the main path took.
    main = times - np.array([(r[3] or 0.0) + (r[4] or 0.0) for r in rows])
    slow = idx[np.argsort(times)[::-1][:5]]
    print(f"\n{len(rows) + fails} priors: {fails} raised, "
          f"{(gaps <= 1e-9).sum()} certified to 1e-9, {(gaps <= 1e-6).sum()} to 1e-6, "
          f"{(gaps <= 1e-2).sum()} to 1e-2; not to 1e-6: cases "
          f"{' '.join(map(str, idx[gaps > 1e-6]))} (valid bound, larger gap); CPU time median "
          f"{np.median(times):.3f} s, 95 % {np.quantile(times, 0.95):.2f} s, "
          f"max {times.max():.2f} s (max / median {times.max() / np.median(times):.0f}); "
          f"slowest cases: {' '.join(map(str, slow))}")
    quantiles = ", ".join(f"{q:.0%} {np.quantile(gaps, q):.1e}" for q in (0.5, 0.75, 0.9, 1.0))
    print(f"relative gap (loss - certified bound) / loss: {quantiles}; "
          f"{(gaps <= 1e-4).sum()} within 1e-4")
    extra = times / np.maximum(main, 1e-3)
    some = fb | merged
    print(f"LP fallback on {fb.sum()} (cases {' '.join(map(str, idx[fb]))}), merge ladder on "
          f"{merged.sum()}; total / main-path CPU time: max {extra.max():.1f} "
          f"(case {idx[np.argmax(extra)]}), median over those cases "
          f"{np.median(extra[some]) if some.any() else float('nan'):.1f}")
    if old_times:
        ours, old = (np.array(x) for x in zip(*old_times))
        print(f"--old on {old.size} of them: total CPU {old.sum():.1f} s "
              f"(ours {ours.sum():.1f} s), max {old.max():.2f} s; ours slower by > 20 % and 0.5 s on "
              f"{int(((ours > 1.2 * old) & (ours > old + 0.5)).sum())}")

if __name__ == "__main__":
    main()
