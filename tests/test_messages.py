"""Error messages print public numbers as users write them, never numpy reprs."""

import numpy as np
import pytest

from skdp_label import BudgetAccountant
from skdp_label.mechanisms import Laplace, OptimalUnbiased, RandomizedResponse, RPWithPrior, RROnBins

F = np.float64
CASES = {
    "bounds reversed": lambda: Laplace(1.0, bounds=(F(5.0), F(1.0))).fit([2.0]),
    "bounds not finite": lambda: Laplace(1.0, bounds=(F(0.0), F(np.inf))).fit([2.0]),
    "bounds not a pair": lambda: Laplace(1.0, bounds=(F(1.0), F(2.0), F(3.0))).fit([2.0]),
    "classes too few": lambda: RandomizedResponse(1.0, classes=np.array([np.int64(3)])).fit([3]),
    "prior epsilon too large": lambda: RROnBins(1.0, bounds=(0, 4), prior_epsilon=F(2.0)).fit([1.0]),
    "granularity": lambda: RPWithPrior(1.0, bounds=(0, 4), granularity=F(0.3)).fit([1.0]),
    "accountant epsilon": lambda: BudgetAccountant(epsilon=F(-1.0)),
    "spend n_labels": lambda: BudgetAccountant().spend(F(1.0), n_labels=F(-2.5), description="x"),
    "labels outside": lambda: OptimalUnbiased(1.0, bounds=(F(0.0), F(10.0))).fit([11.0]),
}


@pytest.mark.parametrize("case", CASES, ids=str)
def test_no_numpy_repr_in_messages(case):
    with pytest.raises(ValueError) as info:
        CASES[case]()
    message = str(info.value)
    assert "np." not in message and "float64" not in message and "array(" not in message, message
