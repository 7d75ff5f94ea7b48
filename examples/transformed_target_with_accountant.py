"""Privatize labels inside fit with TransformedTargetRegressor, and account for it.

Run: python examples/transformed_target_with_accountant.py
"""

import numpy as np
from sklearn.compose import TransformedTargetRegressor
from sklearn.datasets import load_diabetes
from sklearn.linear_model import Ridge
from sklearn.model_selection import GridSearchCV, train_test_split

from skdp_label import BudgetAccountant
from skdp_label.mechanisms import Staircase

X, y = load_diabetes(return_X_y=True)
X_train, X_test, y_train, y_test = train_test_split(X, y, random_state=0)

acc = BudgetAccountant(epsilon=50.0)
model = TransformedTargetRegressor(
    regressor=Ridge(alpha=0.1),
    transformer=Staircase(bounds=(0, 350), accountant=acc),  # public bounds of the score
    check_inverse=False,
)
search = GridSearchCV(model, {"transformer__epsilon": [1.0, 2.0, 4.0]}, cv=3, n_jobs=2)
search.fit(X_train, y_train)
rmse = np.sqrt(np.mean((search.predict(X_test) - y_test) ** 2))
print(f"best epsilon {search.best_params_['transformer__epsilon']}, test RMSE {rmse:.1f}")
print(acc.summary())
print("Every fold re-privatized its labels: model selection on private labels is not free.")
