"""CSV tables (RFC 4180 comma-separated values), plain or gzipped.

One row per sample after a header row: a label column (the one given, else
the first named one of :data:`LABEL_COLUMN_NAMES`, case-insensitive, else the
last column) and numeric feature columns. Parsed with :func:`pandas.read_csv`; the result is a vector dataset
(``image_shape=None``). Named ``tabular`` so that it does not shadow the
standard library's :mod:`csv`.

The memory a table needs is estimated before it is parsed, from its size and its count
of separators (:data:`_BYTES_PER_VALUE`), and checked against this process's limit
(:func:`geoviz.memory.check_bytes`); a gzipped table is never decompressed past what
memory allows.
"""

from __future__ import annotations

import io

import numpy as np

from geoviz.data.dataset import LabeledDataset
from geoviz.data.formats._common import _encode_labels, _make, _maybe_gunzip
from geoviz.errors import DatasetError, DatasetFormatError
from geoviz.memory import check_bytes, memory_guard

#: Column names taken as the label column of a CSV, in order of preference.
LABEL_COLUMN_NAMES: tuple[str, ...] = ("label", "labels", "class", "target", "y")

#: Peak memory per table cell while a CSV becomes a dataset (the parsed frame, its
#: float64 copy, the finite mask, the float32 features and the dataset's own checks),
#: measured on 200,000-row tables: about 36 bytes per cell for 0/1 cells and 56 for
#: 3-decimal numbers; plus twice the text (the parser's buffers).
_BYTES_PER_VALUE = 48


def _load_csv(data: bytes, *, name: str, label_column: str | None, source: str) -> LabeledDataset:
    data = _maybe_gunzip(data, source)
    if not data or data.isspace():  # (not data.strip(): that would copy the whole text)
        raise DatasetError("dataset is empty (the CSV file has no content)", source)
    n_values = data.count(b",") + data.count(b"\n") + 1  # cells, up to the header row
    check_bytes(
        2 * len(data) + _BYTES_PER_VALUE * n_values, f"parsing {source} ({n_values:,} cells)"
    )
    with memory_guard(f"parsing {source}"):
        return _parse_csv(data, name=name, label_column=label_column, source=source)


def _parse_csv(data: bytes, *, name: str, label_column: str | None, source: str) -> LabeledDataset:
    import pandas as pd

    try:
        df = pd.read_csv(io.BytesIO(data), low_memory=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError) as exc:
        raise DatasetFormatError(f"cannot parse CSV ({exc})", source) from exc
    columns = [str(c) for c in df.columns]
    df.columns = columns
    if label_column is not None:
        if label_column not in columns:
            raise DatasetFormatError(
                f"label column {label_column!r} not found (columns: {columns})", source
            )
        lab_col = label_column
    else:
        lowered = {c.lower(): c for c in reversed(columns)}
        lab_col = next((lowered[n] for n in LABEL_COLUMN_NAMES if n in lowered), columns[-1])
    feat_cols = [c for c in columns if c != lab_col]
    if not feat_cols:
        raise DatasetFormatError(f"no feature columns besides the label column {lab_col!r}", source)
    if len(df) == 0:
        raise DatasetError("dataset is empty (the CSV has a header but no rows)", source)
    for c in feat_cols:
        col = df[c]
        if not pd.api.types.is_numeric_dtype(col) or pd.api.types.is_complex_dtype(col):
            bad = pd.to_numeric(col, errors="coerce").isna() & col.notna()
            row = int(np.flatnonzero(bad.to_numpy())[0]) if bad.any() else 0
            raise DatasetFormatError(
                f"column {c!r} is not numeric (e.g. {col.iloc[row]!r} on line {row + 2}); every "
                f"column except the label column {lab_col!r} must hold numbers",
                source,
            )
    features = df[feat_cols].to_numpy(dtype=np.float64)
    finite = np.isfinite(features)
    if not finite.all():
        r, c = (int(v[0]) for v in np.nonzero(~finite))
        what = "missing or NaN" if np.isnan(features[r, c]) else "infinite"
        n_bad = int((~finite).any(axis=1).sum())
        raise DatasetError(
            f"features contain NaN or infinite values in {n_bad} sample(s): {what} value in column "
            f"{feat_cols[c]!r} on line {r + 2}",
            source,
        )
    labels = df[lab_col]
    if labels.isna().any():
        r = int(np.flatnonzero(labels.isna().to_numpy())[0])
        raise DatasetFormatError(f"label column {lab_col!r} is empty on line {r + 2}", source)
    raw = labels.to_numpy()
    if raw.dtype == object:
        raw = np.array([str(v) for v in raw], dtype=str)
    codes, classes = _encode_labels(raw, source)
    return _make(
        features.astype(np.float32), codes, classes, name=name, image_shape=None, source=source
    )
