"""Keyed label-DP releases of a Dask column (``pip install skdp_label[dask]``).

:func:`privatize` releases one label column of a ``dask.dataframe`` (or a
1-D ``dask.array``) with the keyed, idempotent noise of
:mod:`skdp_label.release`:

* pass 1 (computed eagerly): every partition validates its labels and, for a
  prior-based mechanism, returns its exact counts over the public domain; the
  client sums them (the exact counts never leave the cluster) and the release
  noises the sum once; for a noisy mean (``mean_epsilon`` of
  ``mechanism='auto'``) each partition also returns its rounded label sum
  (keyed per-row rounding: a retried partition gives the same sum), noised
  once on the client after the charge;
* the release is charged once (once per release id in a persistent ledger)
  and the mechanism is fitted once on the client, then broadcast to the
  workers as a single task, with the digest of the law it samples (the one
  the ledger records, :func:`skdp_label.release.law_digest`): a worker whose
  received mechanism hashes to another law refuses to randomize;
* pass 2 (lazy): ``map_partitions`` randomizes each partition, its rows keyed
  by the id column or by their global position (partition offsets).

A row's noise is a pure function of (key, release id, row key), so a retried
task, a recomputed partition or a rerun on other partitions reproduces the
same noisy labels: identical to ``skdp-label privatize`` and to
:func:`skdp_label.release.privatize` for the same key, release id and rows.

The workers read the key from ``key_file`` themselves (the same path on every
worker: a shared mount or a copy, inside the labels party's trust boundary):
the key is never put into the task graph, the scheduler or a result.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ._accountant import BudgetAccountant
from .mechanisms._base import BaseLabelMechanism
from .release import KeyedRelease, id_row_keys, load_key

__all__ = ["privatize"]


def _positions(n, offset):
    return np.arange(offset, offset + n, dtype=np.int64)


def _row_keys(key, n, ids, offset):
    if ids is not None:
        return id_row_keys(key, np.asarray(ids))
    return _positions(n, offset)


def _partition_release(mechanism, key_file, release_id):
    # A worker's view of the release: its own key, read from the key file.
    key = load_key(key_file)
    return KeyedRelease(mechanism, key, release_id), key


def _sorted_range(ids):
    """(first, last) of strictly increasing integer ids, else None."""
    if ids is None:
        return None
    ids = np.asarray(ids)
    if ids.dtype.kind not in "iu" or not np.all(ids[1:] > ids[:-1]):
        return None
    return (ids[0].item(), ids[-1].item()) if ids.size else ()


def _pass1(y, ids, offset, mechanism, key_file, release_id):
    """Validate one partition: (its exact counts for a private prior, its rounded
    label sum for a noisy mean, rows, id range)."""
    y = np.asarray(y)
    release, key = _partition_release(mechanism, key_file, release_id)
    label_sum = None
    if y.shape[0] == 0:  # an empty partition (e.g. after a filter) adds nothing
        counts = np.zeros(release._count_values().size, np.int64) if release.needs_counts else None
        return counts, 0 if release.needs_sum else None, 0, _sorted_range(ids)
    if release.needs_counts:
        keys = _row_keys(key, y.shape[0], ids, offset)
        counts = release.batch_counts(y, keys)
        if release.needs_sum:  # the noisy mean's exact sum, noised once on the client
            label_sum = release.batch_sum(y, keys)
    else:
        release.check_batch(y)
        counts = None
    return counts, label_sum, y.shape[0], _sorted_range(ids)


def _ids_sorted_and_unique(ranges):
    """Whether per-partition sorted ranges are increasing across partitions too."""
    last = None
    for r in ranges:
        if r is None:
            return False
        if r == ():
            continue
        if last is not None and r[0] <= last:
            return False
        last = r[1]
    return True


def _randomize(y, ids, offset, fitted, law, key_file, release_id, dtype):
    key = load_key(key_file)
    # Refuses a received mechanism that samples another law than the driver recorded.
    release = KeyedRelease.for_workers(fitted, key, release_id, law=law)
    y = np.asarray(y)
    if y.shape[0] == 0:
        return np.empty(0, dtype=dtype)
    noisy = release.randomize(y, _row_keys(key, y.shape[0], ids, offset))
    return np.asarray(noisy).astype(dtype, copy=False)


def _randomize_series(y, *rest, offsets, fitted, law, key_file, release_id, dtype,
                      partition_info=None):
    import pandas as pd

    ids = rest[0] if rest else None
    offset = offsets[partition_info["number"]] if ids is None else 0
    values = _randomize(y.to_numpy(), None if ids is None else ids.to_numpy(), offset, fitted,
                        law, key_file, release_id, dtype)
    return pd.Series(values, index=y.index, name=y.name)


def _randomize_block(y, fitted, law, key_file, release_id, dtype, block_info=None):
    offset = block_info[0]["array-location"][0][0]
    return _randomize(y, None, offset, fitted, law, key_file, release_id, dtype)


def _output_dtype(mechanism):
    classes = getattr(mechanism, "classes", None)
    if classes is None:
        return np.dtype(np.float64)
    return np.asarray(classes).dtype


def privatize(
    data: Any, mechanism: BaseLabelMechanism, *, key_file: str | os.PathLike[str],
    release_id: str, label: str | None = None, id: str | None = None,
    accountant: BudgetAccountant | None = None, check_unique_ids: bool = True,
) -> tuple[Any, KeyedRelease]:
    """Release a label column of a Dask collection with keyed noise.

    Parameters
    ----------
    data : dask.dataframe.DataFrame, dask.dataframe.Series or dask.array.Array
        The labels party's table (with ``label``), its label column, or a
        1-D array of labels.
    mechanism : label mechanism
        Unfitted, configured from public inputs (epsilon, bounds, classes...).
    key_file : str or path-like
        Key file from ``skdp-label keygen``, readable at this path on the
        client and on every worker.
    release_id : str
        Names the release: a rerun with the same id reproduces it for free.
    label : str, optional
        The label column, when ``data`` is a DataFrame.
    id : str, optional
        Id column keying each row's noise (DataFrames only). Default: the
        row's global position.
    accountant : BudgetAccountant, optional
        Charged once, before any noisy label exists (a rerun of the same
        release id is free).
    check_unique_ids : bool, default=True
        Refuse duplicate ids (rows sharing an id would share their noise).

    Returns
    -------
    noisy : dask.dataframe.Series or dask.array.Array
        Lazy noisy labels, partitioned (and indexed) like the input.
    release : KeyedRelease
        Fitted; ``release.manifest()`` is the hand-off to the platform.

    Examples
    --------
    >>> import os, tempfile, numpy as np, dask.array as da
    >>> from skdp_label.mechanisms import Laplace
    >>> from skdp_label.release import generate_key_file, load_key, privatize as in_memory
    >>> from skdp_label.dask import privatize
    >>> path = os.path.join(tempfile.mkdtemp(), "label.key")
    >>> generate_key_file(path)
    >>> y = np.arange(1000) % 50.0
    >>> noisy, release = privatize(da.from_array(y, chunks=300), Laplace(1.0, bounds=(0, 50)),
    ...                            key_file=path, release_id="r1")
    >>> expected, _ = in_memory(y, Laplace(1.0, bounds=(0, 50)), load_key(path), "r1")
    >>> bool(np.array_equal(noisy.compute(), expected))   # chunking does not matter
    True
    """
    import dask
    import dask.array as da
    import dask.dataframe as dd

    key_file = str(key_file)
    key = load_key(key_file)  # a missing or unsafe key file fails here, before anything else
    release = KeyedRelease(mechanism, key, release_id, accountant=accountant)
    mech = release.mechanism

    is_array = isinstance(data, da.Array)
    if is_array:
        if data.ndim != 1:
            raise ValueError(f"a dask array of labels must be 1-D, got {data.ndim} dimensions.")
        if id is not None:
            raise ValueError("id= needs a DataFrame; an array's rows are keyed by position.")
        if any(np.isnan(c) for c in data.chunks[0]):
            raise ValueError("the array's chunk sizes must be known (call compute_chunk_sizes()).")
        labels = data
        ids = None
        offsets = np.concatenate([[0], np.cumsum(data.chunks[0])[:-1]]).astype(int).tolist()
    else:
        if isinstance(data, dd.DataFrame):
            if label is None or label not in data.columns:
                raise ValueError(f"label column {label!r} is not in the DataFrame.")
            if id is not None and id not in data.columns:
                raise ValueError(f"id column {id!r} is not in the DataFrame.")
            labels = data[label]
            ids = data[id] if id is not None else None
        elif isinstance(data, dd.Series):
            if id is not None:
                raise ValueError("id= needs a DataFrame holding the id column.")
            labels, ids = data, None
        else:
            raise ValueError(
                f"data must be a dask DataFrame, Series or Array, got {type(data).__name__}."
            )
        offsets = None
        if ids is None:
            lengths = labels.map_partitions(len).compute()
            offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(int).tolist()

    # Pass 1: validation and exact counts per partition, summed on the client.
    y_parts = labels.to_delayed().ravel().tolist() if is_array else labels.to_delayed()
    id_parts = ids.to_delayed() if ids is not None else [None] * len(y_parts)
    p1 = dask.delayed(_pass1)
    tasks = [
        p1(y, i, 0 if offsets is None else offsets[j], mech, key_file, release_id)
        for j, (y, i) in enumerate(zip(y_parts, id_parts))
    ]
    (results,) = dask.compute(tasks)
    n_rows = sum(n for _, _, n, _ in results)
    uniq = []
    if ids is not None and check_unique_ids and not _ids_sorted_and_unique([r for *_, r in results]):
        # Unsorted ids: exact and scalable (a shuffle), computed on its own (an expression).
        uniq = [ids.nunique().compute()]
    if n_rows == 0:
        raise ValueError("the collection has no rows.")
    if uniq and int(uniq[0]) != n_rows:
        raise ValueError(
            f"id column {id!r} has {n_rows - int(uniq[0])} duplicate ids: rows sharing an id "
            "would share their noise. Ids must be unique (or omit id= to key rows by position)."
        )
    if release.needs_counts:
        counts = sum(c for c, *_ in results)
        label_sum = sum(t for _, t, *_ in results) if release.needs_sum else None
        release.merge_counts(counts, n_rows, label_sum)

    # The charge and the fit, once, on the client.
    release.fit(n_rows)
    fitted = dask.delayed(release.fitted_, pure=True)  # one task: broadcast, not copied per partition
    law = release.law_digest_  # what the ledger recorded: every worker checks what it received
    dtype = _output_dtype(release.fitted_)

    # Pass 2: lazy randomization.
    if is_array:
        noisy = labels.map_blocks(_randomize_block, fitted, law, key_file, release_id, dtype,
                                  dtype=dtype)
    else:
        import pandas as pd

        meta = pd.Series(np.empty(0, dtype=dtype), name=labels.name)
        args = (labels,) if ids is None else (labels, ids)
        noisy = dd.map_partitions(
            _randomize_series, *args, offsets=offsets, fitted=fitted, law=law, key_file=key_file,
            release_id=release_id, dtype=dtype, meta=meta, align_dataframes=False,
        )
    return noisy, release
