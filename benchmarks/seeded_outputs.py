"""Fixed-seed outputs of every mechanism, compared across checkouts.

Run: python benchmarks/seeded_outputs.py --repo /work/main /path/to/branch [--names rr laplace ...]
     [--labels 300000]  (with SKDP_LABEL_BACKGROUND_COMPILE=0: the compiled kernels)

For each checkout (put first on ``PYTHONPATH`` of a fresh process), fits
every registered mechanism with ``random_state=0`` on the public synthetic
inputs of ``skdp-label warmup`` (20,000 labels: the bulk sampling paths run)
and on their first 10 labels (the small-batch paths), and prints a SHA-256 of the output bytes. A change in a sampler that claims to
draw the same values must leave every digest unchanged; the script exits
with status 1 if the checkouts disagree on any mechanism.
"""

import argparse
import json
import os
import subprocess
import sys

_CHILD = r"""
import hashlib, json, warnings
import numpy as np
from skdp_label._warmup import _public_inputs
from skdp_label.mechanisms import get_mechanism_class, mechanism_names
names = {names!r} or list(mechanism_names())
n_labels = {n_labels!r}
digests = {{}}
warnings.simplefilter("ignore")
for name in names:
    kwargs, column = _public_inputs(name)
    if n_labels:
        column = np.resize(np.asarray(column), n_labels)
    h = hashlib.sha256()
    for y in (column, column[:10]):
        out = get_mechanism_class(name)(epsilon=1.0, random_state=0, **kwargs).fit_transform(y)
        h.update(np.ascontiguousarray(out).tobytes())
    digests[name] = h.hexdigest()[:16]
print(json.dumps(digests))
"""


def digests(repo, names, n_labels=None):
    env = dict(os.environ, NUMBA_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in [os.path.abspath(repo), env.get("PYTHONPATH", "")] if p)
    out = subprocess.run(
        [sys.executable, "-c", _CHILD.format(names=names or [], n_labels=n_labels)], env=env,
        capture_output=True,
        text=True, cwd=os.path.abspath(repo),
    )
    if out.returncode != 0:
        raise RuntimeError(f"{repo}: {out.stderr.strip().splitlines()[-1]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", nargs="+", required=True, help="checkouts to compare")
    parser.add_argument("--names", nargs="*", help="mechanism names (default: all registered)")
    parser.add_argument("--labels", type=int, default=None,
                        help="repeat the column to this many labels (e.g. 300000 with "
                             "SKDP_LABEL_BACKGROUND_COMPILE=0: the compiled kernels, not the twins)")
    args = parser.parse_args()
    results = [digests(repo, args.names, args.labels) for repo in args.repo]
    labels = [os.path.basename(os.path.abspath(r)) for r in args.repo]
    print(f"{'mechanism':<26}" + "".join(f"{label:>20}" for label in labels) + "  same")
    differ = 0
    for name in results[0]:
        row = [res.get(name, "-") for res in results]
        same = len(set(row)) == 1
        differ += not same
        print(f"{name:<26}" + "".join(f"{d:>20}" for d in row) + ("  yes" if same else "  NO"))
    print(f"{differ} mechanism(s) differ")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
