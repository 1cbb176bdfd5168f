"""scikit-learn toy datasets: names from outside are checked before anything is loaded."""

from __future__ import annotations

import pytest

from geoviz.data.sklearn_sets import load_sklearn
from geoviz.errors import DatasetError, UnknownDatasetError


@pytest.mark.parametrize("name", ["mnist", ["iris"], None, 3])
def test_unknown_or_unhashable_names_are_one_sentence(name) -> None:
    with pytest.raises(UnknownDatasetError, match=r"^no scikit-learn dataset .*available: digits"):
        load_sklearn(name)  # type: ignore[arg-type]


def test_split_is_checked_and_iris_loads() -> None:
    with pytest.raises(DatasetError, match="split must be 'train' or 'test'"):
        load_sklearn("iris", "validation")  # type: ignore[arg-type]
    train, test = load_sklearn("iris"), load_sklearn("iris", "test")
    assert (train.n_samples, test.n_samples, train.n_features) == (120, 30, 4)
