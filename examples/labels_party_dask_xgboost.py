"""The labels party on Dask, the platform on XGBoost-Dask.

The labels party privatizes a label column of a ``dask.dataframe`` with
:func:`skdp_label.dask.privatize` (counts summed per partition and noised
once, one charge, keyed per-row noise: a retried task changes nothing), and
writes the user id and the noisy label. The platform joins them to its
features and trains ``xgboost.dask.DaskXGBRegressor`` on the released column.

Needs ``pip install skdp_label[dask] xgboost-cpu``; exits quietly otherwise.
Run from the repository root (``PYTHONPATH=.`` if not installed)::

    python examples/labels_party_dask_xgboost.py
"""

import os
import sys
import tempfile

import numpy as np

try:
    import dask.dataframe as dd
    import pandas as pd
    import xgboost.dask as dxgb
    from distributed import Client, LocalCluster
except ImportError as exc:  # optional dependencies
    print(f"skipped: {exc.name} is not installed")
    sys.exit(0)

from skdp_label import BudgetAccountant
from skdp_label.dask import privatize
from skdp_label.mechanisms import make_mechanism
from skdp_label.release import generate_key_file

if __name__ == "__main__":
    workdir = tempfile.mkdtemp(prefix="labels_party_dask_")
    key_file = os.path.join(workdir, "label.key")
    generate_key_file(key_file)
    rng = np.random.default_rng(0)
    n = 200_000
    X = rng.normal(size=(n, 4))
    labels = pd.DataFrame({
        "user_id": np.arange(n),
        "purchase": np.clip(20 + 8 * X[:, 0] + 5 * np.sin(2 * X[:, 1]) + rng.normal(0, 3, n), 0, 50),
    })

    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        # -- The labels party ---------------------------------------------------------------
        table = dd.from_pandas(labels, npartitions=8)
        accountant = BudgetAccountant(8.0, ledger=os.path.join(workdir, "budget.jsonl"))
        mech = make_mechanism("unbiased", epsilon=4.0, bounds=(0.0, 50.0), resolution=1.0)
        noisy, release = privatize(table, mech, key_file=key_file, release_id="purchases-q4",
                                   label="purchase", id="user_id", accountant=accountant)
        released = table[["user_id"]].assign(purchase=noisy)
        released.to_parquet(os.path.join(workdir, "released"), write_index=False)
        manifest = release.manifest()  # the hand-off, with the released files
        print(f"labels party: charged {accountant.spent_epsilon:g} of {accountant.epsilon:g}")

        # -- The platform: features + released column ----------------------------------------
        features = dd.from_pandas(
            pd.DataFrame(X, columns=[f"x{i}" for i in range(4)]).assign(user_id=np.arange(n)),
            npartitions=8)
        train = features.merge(dd.read_parquet(os.path.join(workdir, "released")), on="user_id")
        model = dxgb.DaskXGBRegressor(n_estimators=200, max_depth=4, learning_rate=0.1)
        model.client = client
        model.fit(train[[f"x{i}" for i in range(4)]], train["purchase"])

        X_new = rng.normal(size=(20_000, 4))
        truth = np.clip(20 + 8 * X_new[:, 0] + 5 * np.sin(2 * X_new[:, 1]), 0, 50)
        pred = model.predict(dd.from_pandas(pd.DataFrame(X_new, columns=[f"x{i}" for i in range(4)]),
                                            npartitions=2)).compute()
        print(f"platform: {manifest['mechanism']} at epsilon={manifest['epsilon']}; "
              f"MSE against the noise-free truth on fresh users {np.mean((pred - truth) ** 2):.2f}")
