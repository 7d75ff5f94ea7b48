"""The labels party: privatize a label column once, hand it over, train elsewhere.

A common label-DP setting (feature-oblivious label DP): one party (say, an
advertiser) holds a sensitive label per user (a purchase amount), another
party (the platform) holds the features and trains the models.

The labels party runs ``skdp-label`` (here through its Python entry point, the
same arguments as on a shell):

1. ``skdp-label keygen`` creates a secret key file (mode 0600) that never
   leaves the labels party;
2. ``skdp-label privatize`` streams the table, checks every label, charges the
   persistent ledger once for this release id, and writes the user id and the
   noisy label plus a manifest (``released.parquet.manifest.json``): the
   mechanism's public parameters, epsilon, the ledger entry and the SHA-256
   of the output. Rerunning the command reproduces the same file and charges
   nothing.

The platform receives the noisy file and the manifest -- not a pickle: a
pickle is an object graph the receiver must trust, and the manifest is a
plain, auditable record of exactly what was released. From the manifest
alone it rebuilds the public mechanism (no budget: every input is public)
and tunes on the noisy labels with ``unbiased_mse_scorer``.

Run from the repository root (``PYTHONPATH=.`` if the package is not
installed; needs ``pip install skdp_label[cli]``)::

    python examples/labels_party.py
"""

import hashlib
import json
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.model_selection import GridSearchCV

from skdp_label.__main__ import main as skdp_label
from skdp_label.estimators import unbiased_mse_scorer
from skdp_label.release import mechanism_from_manifest

workdir = Path(tempfile.mkdtemp(prefix="labels_party_"))
rng = np.random.default_rng(0)
n = 30_000
user_id = rng.permutation(10 * n)[:n]  # the join key both parties know
X = rng.normal(size=(n, 6))  # the platform's features
purchase = np.clip(20 + 8 * X[:, 0] + 5 * np.sin(2 * X[:, 1]) + rng.normal(0, 3, n), 0, 50)

# -- The labels party -------------------------------------------------------------------------
pq.write_table(pa.table({"user_id": user_id, "purchase": purchase}), workdir / "purchases.parquet")
skdp_label(["keygen", str(workdir / "label.key")])
release = [
    "privatize", str(workdir / "purchases.parquet"), "--label", "purchase", "--id", "user_id",
    "--mechanism", "unbiased", "--epsilon", "4", "--bounds", "0", "50", "--grid-step", "1",
    "--key-file", str(workdir / "label.key"), "--release-id", "purchases-2026-q4",
    "--ledger", str(workdir / "budget.jsonl"), "--budget", "8",
    "--output", str(workdir / "released.parquet"),
]
assert skdp_label(release) == 0
assert skdp_label([*release, "--output", str(workdir / "again.parquet")]) == 0  # a rerun: free
assert (workdir / "released.parquet").read_bytes() == (workdir / "again.parquet").read_bytes()
print("labels party: ledger", (workdir / "budget.jsonl").read_text().count('"release"'), "entry")

# -- The platform: the noisy file and the manifest, nothing else ------------------------------
manifest = json.loads((workdir / "released.parquet.manifest.json").read_text())
data = (workdir / "released.parquet").read_bytes()
assert hashlib.sha256(data).hexdigest() == manifest["output"]["sha256"]  # the file it describes
released = pq.read_table(workdir / "released.parquet")
noisy_by_id = dict(zip(released["user_id"].to_pylist(), released["purchase"].to_pylist()))
y_noisy = np.array([noisy_by_id[u] for u in user_id])  # align with the platform's rows
print(f"platform: {manifest['mechanism']} at epsilon={manifest['epsilon']} "
      f"(split {manifest['epsilon_split']}), {manifest['n_rows']} rows")

mech = mechanism_from_manifest(manifest)  # public parameters only; spends nothing
search = GridSearchCV(
    HistGradientBoostingRegressor(),
    {"max_depth": [2, 4, None], "learning_rate": [0.03, 0.1], "max_iter": [100]},
    scoring=unbiased_mse_scorer(mech), cv=3,
).fit(X, y_noisy)
best = search.best_index_
print(f"platform: best parameters {search.best_params_}, estimated true MSE "
      f"{-search.best_score_:.1f} (fold-to-fold std {search.cv_results_['std_test_score'][best]:.1f})")

# Only the simulation knows the truth; the platform never sees it.
X_new = rng.normal(size=(5000, 6))
truth = np.clip(20 + 8 * X_new[:, 0] + 5 * np.sin(2 * X_new[:, 1]) + rng.normal(0, 3, 5000), 0, 50)
print(f"true MSE on fresh users: {np.mean((search.predict(X_new) - truth) ** 2):.2f} "
      "(noise-free optimum about 9)")
