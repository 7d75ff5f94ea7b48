"""skdp_label.dask on a 2-worker LocalCluster: one charge, identical to the CLI and in memory,
and a task retried mid-release changes nothing."""

import os

import numpy as np
import pytest

dd = pytest.importorskip("dask.dataframe")
da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
pd = pytest.importorskip("pandas")

from skdp_label import BudgetAccountant
from skdp_label.dask import privatize as dask_privatize
from skdp_label.mechanisms import RROnBins, make_mechanism
from skdp_label.release import generate_key_file, id_row_keys, load_key, privatize

N = 5000


class FlakyRROnBins(RROnBins):
    """RROnBins whose first randomization anywhere in the cluster dies after drawing
    its noise (a worker lost mid-task); a marker file makes it fail only once.
    (RROnBins like the other test: the workers compile its kernels once.)"""

    def __init__(self, epsilon=1.0, *, loss="squared", prior=None, domain=None, bounds=None,
                 resolution=None, prior_epsilon="auto", marker=None, accountant=None,
                 random_state=None):
        super().__init__(epsilon, loss=loss, prior=prior, domain=domain, bounds=bounds,
                         resolution=resolution, prior_epsilon=prior_epsilon,
                         accountant=accountant, random_state=random_state)
        self.marker = marker

    def _randomize_column(self, y, rng):
        out = super()._randomize_column(y, rng)
        if self.marker is not None and y.shape[0] > 0:
            try:
                os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                return out
            raise RuntimeError("worker lost mid-release")
        return out


@pytest.fixture(scope="module")
def client():
    import cloudpickle
    import test_dask

    # The worker processes unpickle FlakyRROnBins by value (the tests are not a package).
    cloudpickle.register_pickle_by_value(test_dask)
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                 dashboard_address=None) as cluster,
        distributed.Client(cluster) as c,
    ):
        yield c
    cloudpickle.unregister_pickle_by_value(test_dask)


@pytest.fixture
def key_file(tmp_path):
    path = tmp_path / "label.key"
    generate_key_file(path)
    return str(path)


@pytest.fixture(scope="module")
def frame():
    rng = np.random.default_rng(1)
    ids = rng.permutation(10 * N)[:N].astype(np.int64)  # unique, unsorted
    return pd.DataFrame({"uid": ids, "v": np.round(rng.uniform(0, 100, N), 1)})


def _mech(name="rr-on-bins"):
    return make_mechanism(name, epsilon=1.0, bounds=(0.0, 100.0), resolution=1.0)


def test_identical_to_in_memory_and_cli_whatever_the_partitions(client, frame, key_file, tmp_path):
    # rr-on-bins: a private prior from counts summed over partitions (the retry test covers
    # additive noise; each mechanism costs a numba compilation in every worker).
    name = "rr-on-bins"
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from skdp_label.__main__ import main

    key = load_key(key_file)
    y, ids = frame["v"].to_numpy(), frame["uid"].to_numpy()
    by_id, _ = privatize(y, _mech(name), key, "r", row_keys=id_row_keys(key, ids))
    by_position, _ = privatize(y, _mech(name), key, "r")
    for parts in (3, 7):
        ddf = dd.from_pandas(frame, npartitions=parts)
        noisy, release = dask_privatize(ddf, _mech(name), key_file=key_file, release_id="r",
                                        label="v", id="uid")
        np.testing.assert_array_equal(noisy.compute().to_numpy(), by_id)
        noisy, _ = dask_privatize(ddf, _mech(name), key_file=key_file, release_id="r", label="v")
        np.testing.assert_array_equal(noisy.compute().to_numpy(), by_position)
    noisy, _ = dask_privatize(da.from_array(y, chunks=1300), _mech(name), key_file=key_file,
                              release_id="r")
    np.testing.assert_array_equal(noisy.compute(), by_position)
    # The CLI on the same rows.
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), tmp_path / "t.parquet")
    assert main(["privatize", str(tmp_path / "t.parquet"), "--label", "v", "--id", "uid",
                 "--mechanism", name, "--epsilon", "1", "--bounds", "0", "100",
                 "--grid-step", "1",
                 "--key-file", key_file, "--release-id", "r", "--no-ledger", "--batch-size", "900",
                 "--output", str(tmp_path / "o.parquet")]) == 0
    np.testing.assert_array_equal(pq.read_table(tmp_path / "o.parquet")["v"].to_numpy(), by_id)
    assert release.epsilon_split_["prior"] > 0  # the prior was noised once from the summed counts
    assert release.manifest()["params"]["prior"] is not None


def test_retried_task_gives_the_undisturbed_output_and_one_charge(client, frame, key_file, tmp_path):
    acc = BudgetAccountant(5.0, ledger=tmp_path / "budget.jsonl")
    ddf = dd.from_pandas(frame, npartitions=4)
    marker = str(tmp_path / "failed-once")
    flaky, _ = dask_privatize(ddf, FlakyRROnBins(1.0, bounds=(0, 100), resolution=1, marker=marker),
                              key_file=key_file, release_id="q", label="v", id="uid",
                              accountant=acc)
    retried = client.compute(flaky, retries=1).result()
    assert os.path.exists(marker)  # a task did fail mid-release (after drawing), and was retried
    clean, _ = dask_privatize(ddf, RROnBins(1.0, bounds=(0, 100), resolution=1), key_file=key_file,
                              release_id="q", label="v", id="uid")
    pd.testing.assert_series_equal(retried, clean.compute())
    assert len(acc.ledger) == 1 and acc.spent_epsilon == pytest.approx(1.0)
    # Rerunning the whole release under its id is free as well.
    dask_privatize(ddf, FlakyRROnBins(1.0, bounds=(0, 100), resolution=1, marker=marker), key_file=key_file,
                   release_id="q", label="v", id="uid", accountant=acc)
    assert len(acc.ledger) == 1


def test_errors_before_the_charge(client, frame, key_file, tmp_path):
    acc = BudgetAccountant(5.0)
    bad = frame.copy()
    bad.loc[N - 3, "v"] = 987.654321  # in the last partition
    with pytest.raises(ValueError, match="outside") as err:
        dask_privatize(dd.from_pandas(bad, npartitions=4), make_mechanism("laplace", epsilon=1.0, bounds=(0, 100)),
                       key_file=key_file, release_id="b", label="v", accountant=acc)
    assert "987" not in str(err.value)
    dup = frame.copy()
    dup.loc[10, "uid"] = dup.loc[N - 10, "uid"]
    with pytest.raises(ValueError, match="duplicate ids"):
        dask_privatize(dd.from_pandas(dup, npartitions=4), _mech(), key_file=key_file,
                       release_id="b", label="v", id="uid", accountant=acc)
    with pytest.raises(ValueError, match="does not exist"):
        dask_privatize(dd.from_pandas(frame, npartitions=2), _mech(),
                       key_file=tmp_path / "missing.key", release_id="b", label="v", accountant=acc)
    with pytest.raises(ValueError, match="not in the DataFrame"):
        dask_privatize(dd.from_pandas(frame, npartitions=2), _mech(), key_file=key_file,
                       release_id="b", label="nope", accountant=acc)
    assert acc.ledger == []


def test_empty_partitions_add_nothing(frame, key_file):
    # A filter leaves partitions empty: pass 1 and pass 2 skip them (the default
    # scheduler: no worker compiles anything new). Failed with "0 sample(s)".
    key = load_key(key_file)
    ddf = dd.from_pandas(frame, npartitions=5)
    kept = ddf.map_partitions(lambda p: p[p.index >= N // 5])  # the first partition is empty
    rest = frame.iloc[N // 5:]
    for name in ("rr-on-bins", "laplace"):
        by_id, _ = privatize(rest["v"].to_numpy(), _mech(name), key, "e",
                             row_keys=id_row_keys(key, rest["uid"].to_numpy()))
        noisy, release = dask_privatize(kept, _mech(name), key_file=key_file, release_id="e",
                                        label="v", id="uid")
        np.testing.assert_array_equal(noisy.compute().to_numpy(), by_id)
        assert release.n_rows_ == N - N // 5
    y = frame["v"].to_numpy()
    by_position, _ = privatize(y, _mech(), key, "e")
    noisy, _ = dask_privatize(da.from_array(y, chunks=((2000, 0, N - 2000),)), _mech(),
                              key_file=key_file, release_id="e")
    np.testing.assert_array_equal(noisy.compute(), by_position)


def test_sorted_ids_skip_the_shuffle_only_when_unique_across_partitions():
    from skdp_label.dask import _ids_sorted_and_unique, _sorted_range

    parts = [np.array([1, 2, 5]), np.array([], dtype=np.int64), np.array([6, 9])]
    assert _ids_sorted_and_unique([_sorted_range(p) for p in parts])
    overlap = [np.array([1, 2, 5]), np.array([5, 9])]  # the same id in two partitions
    assert not _ids_sorted_and_unique([_sorted_range(p) for p in overlap])
    assert _sorted_range(np.array([1, 1, 2])) is None  # a repeat inside a partition
    assert _sorted_range(np.array(["a", "b"])) is None  # not integers: the exact check runs
