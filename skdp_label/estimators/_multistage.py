"""Pieces of multi-stage training LP-MST (004, App. B, D, E): pure functions."""

import numpy as np

__all__ = ["stage_fractions", "partition_stages", "in_top_k"]


def stage_fractions(n_stages, stage_split):
    """Fraction of the examples each stage randomizes.

    ``None``: equal parts. A float: the first stage's share, the rest split
    equally among later stages. A sequence: one positive share per stage
    (normalised).
    """
    if stage_split is None:
        return np.full(n_stages, 1.0 / n_stages)
    if np.ndim(stage_split) == 0:
        first = float(stage_split)
        if not 0 < first < 1 or n_stages < 2:
            raise ValueError(
                "a float stage_split is the first stage's share, in (0, 1), and needs n_stages >= 2; "
                f"got {stage_split!r} with n_stages={n_stages}."
            )
        return np.concatenate([[first], np.full(n_stages - 1, (1 - first) / (n_stages - 1))])
    shares = np.asarray(stage_split, dtype=np.float64)
    if shares.shape != (n_stages,) or not np.all(np.isfinite(shares)) or np.any(shares <= 0):
        raise ValueError(
            f"stage_split must hold {n_stages} positive shares (one per stage), got {stage_split!r}."
        )
    return shares / shares.sum()


def partition_stages(n_samples, fractions, rng):
    """Disjoint random index sets, one per stage, covering all examples.

    The split uses only public randomness, so which stage an example lands
    in reveals nothing about its label.
    """
    counts = np.floor(np.asarray(fractions) * n_samples).astype(np.int64)
    counts[: n_samples - counts.sum()] += 1  # hand out the remainder
    if np.any(counts < 1):
        raise ValueError(f"{n_samples} examples are too few for {len(fractions)} stages.")
    order = rng.permutation(n_samples)
    return np.split(order, np.cumsum(counts)[:-1])


def in_top_k(scores, codes, k):
    """Whether ``codes[i]`` is among the ``k`` largest ``scores[i]`` (ties:
    lower class index first), the App. B rule for reusing earlier stages'
    noisy labels."""
    order = np.argsort(-np.asarray(scores), axis=1, kind="stable")[:, :k]
    return np.any(order == np.asarray(codes)[:, None], axis=1)
