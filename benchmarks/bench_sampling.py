"""Throughput and peak memory of every registered mechanism's sampler.

Run: python benchmarks/bench_sampling.py [--n 10000000] [--repeats 3] [--names rr laplace ...]

For each registered mechanism, randomizes ``n`` labels with ``transform`` on
one core (label validation and encoding included: the full call a user
makes) and reports the best time of ``repeats``, its ratio to the best of
``Generator.random(n)`` timed in alternation with it (the reference of the
performance issue: within 3x), and the peak memory beyond the input and the
output, in bytes per label (resident-set high-water mark reset before the
call, Linux only). Fitting and the numba compilation happen before the
timing. ``--cpu`` times by the thread's CPU time instead of the wall clock
(steadier ratios on a shared, oversubscribed machine). Set ``PYTHONPATH`` to
measure another checkout.

``--floors`` adds, timed the same way, what any sampler of the library's
exactness pays before its own work: a compiled loop that reads one (or two)
53-bit digits per label from the release's Generator (through its inlined
PCG64, as the samplers do) and writes one float64 per label into a new
array, and the label validation ``transform`` runs first (finite values,
bounds: two reductions over the labels). A mechanism that needs two digits a
label (a continuous grid's cell and offset) cannot go below the two-digit
floor plus the validation; randomized rounding then an alias draw reads one
word a label (the rounding coin from its low 11 bits: the one-digit floor).

Every mechanism is fitted at epsilon = 1 on public synthetic labels: 100
classes (a skewed public prior for the prior-based ones), integers
0..400 for the integer mechanisms, reals in [0, 400] otherwise, with
``resolution=1`` (a 401-point grid) wherever the mechanism takes one.
"""

import argparse
import functools
import os
import time
import warnings

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from skdp_label.mechanisms import get_mechanism_class, mechanism_names  # noqa: E402

_INTEGER = {"discrete-laplace", "discrete-staircase"}


_clock = time.perf_counter  # --cpu: time.thread_time


def best_time(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = _clock()
        fn()
        times.append(_clock() - t0)
    return min(times)


def _status_kb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def peak_extra_bytes(fn):
    """Peak resident memory of ``fn()`` beyond what was resident before and
    beyond its result: the temporaries it allocates (Linux: VmHWM reset)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the high-water mark to the current RSS
    except OSError:
        return float("nan")
    before = _status_kb("VmRSS")
    out = fn()
    peak = _status_kb("VmHWM")
    return (peak - before) * 1024.0 - np.asarray(out).nbytes


def make_case(name, n, rng):
    cls = get_mechanism_class(name)
    params = cls().get_params()
    kwargs = {}
    if name in mechanism_names("classification"):
        prior = np.ones(100)
        prior[:10] = 10.0
        prior /= prior.sum()
        kwargs["classes"] = np.arange(100)
        if "prior" in params:
            kwargs["prior"] = prior
        if "k" in params:
            kwargs["k"] = 10
        y = rng.choice(100, size=n, p=prior)
    else:
        kwargs["bounds"] = (0, 400)
        if "resolution" in params:
            kwargs["resolution"] = 1.0
        if name == "mvu":
            kwargs["outputs"] = 4
        if name in _INTEGER:
            y = rng.integers(0, 401, size=n).astype(np.float64)
        else:
            y = rng.uniform(0, 400, size=n)
    return cls(epsilon=1.0, **kwargs), y


def _floor_kernels():
    import numba

    @numba.njit(nogil=True)
    def one_digit(rng, out):
        for i in range(out.shape[0]):
            out[i] = rng.random() * 9007199254740992.0

    @numba.njit(nogil=True)
    def two_digits(rng, out):
        for i in range(out.shape[0]):
            out[i] = rng.random() * 9007199254740992.0 + rng.random()

    return one_digit, two_digits


def floors(n, gen, repeats):
    """(name, seconds) of the floors described in the module docstring."""
    from skdp_label._kernels._pcg64 import call_with_stream

    # The samplers' kernels draw through an inlined copy of the Generator's
    # PCG64 (skdp_label._kernels._pcg64); so do the floors.
    one_digit, two_digits = (functools.partial(call_with_stream, k, gen) for k in _floor_kernels())
    out = np.empty(n)
    one_digit(gen, out[:10])
    two_digits(gen, out[:10])
    y = np.random.default_rng(2).uniform(0, 400, n)
    mech, _ = make_case("laplace", 10, np.random.default_rng(3))
    mech.fit(y[:1000])
    return [
        # A fresh output each time, as Generator.random(n) allocates its own.
        ("floor: 1 digit a label", lambda: one_digit(gen, np.empty(n))),
        ("floor: 2 digits a label", lambda: two_digits(gen, np.empty(n))),
        ("floor: label validation", lambda: mech._validate_labels(y, reset=False)),
    ]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--names", nargs="*")
    parser.add_argument("--floors", action="store_true",
                        help="also time the floors of any exact sampler (see the docstring)")
    parser.add_argument("--cpu", action="store_true",
                        help="time by the thread's CPU time, not the wall clock: on a shared "
                             "machine with more runnable processes than cores, the wall clock "
                             "also counts the time spent waiting for a core")
    args = parser.parse_args()
    if args.cpu:
        global _clock
        _clock = time.thread_time
    n = args.n
    names = args.names or list(mechanism_names())
    warnings.simplefilter("ignore")  # seeded-release warnings: synthetic data
    rng = np.random.default_rng(0)
    gen = np.random.default_rng(1)
    print(f"n = {n:,} labels, best of {args.repeats}, one thread; "
          f"load average {os.getloadavg()[0]:.2f} at start")
    base = best_time(lambda: gen.random(n), args.repeats)
    base_mem = peak_extra_bytes(lambda: gen.random(n)) / n
    print(f"{'mechanism':<26}{'seconds':>9}{'x uniforms':>12}{'extra B/label':>15}{'reference s':>13}")
    print(f"{'Generator.random(n)':<26}{base:>9.3f}{1.0:>12.2f}{base_mem:>15.1f}")
    for label, fn in floors(n, gen, args.repeats) if args.floors else []:
        base, t = float("inf"), float("inf")
        for _ in range(args.repeats):
            base = min(base, best_time(lambda: gen.random(n), 1))
            t = min(t, best_time(fn, 1))
        print(f"{label:<26}{t:>9.3f}{t / base:>12.2f}{'':>15}{base:>13.3f}", flush=True)
    worst = 1.0
    for name in names:
        mech, y = make_case(name, n, rng)
        mech.fit(y)
        mech.transform(y[:20_000])  # compile, and build any sampling tables
        # The reference timed in alternation with the mechanism (best of each):
        # the load of a shared machine drifts over a run, and within it.
        base, t = float("inf"), float("inf")
        for _ in range(args.repeats):
            base = min(base, best_time(lambda: gen.random(n), 1))
            t = min(t, best_time(lambda: mech.transform(y), 1))
        mem = peak_extra_bytes(lambda: mech.transform(y)) / n
        worst = max(worst, t / base)
        print(f"{name:<26}{t:>9.3f}{t / base:>12.2f}{mem:>15.1f}{base:>13.3f}", flush=True)
        del mech, y
    print(f"worst ratio {worst:.2f} (each against Generator.random(n) timed in alternation "
          f"with it); "
          f"load average {os.getloadavg()[0]:.2f} at end")


if __name__ == "__main__":
    main()
