"""CSV tables (RFC 4180 comma-separated values), plain or gzipped.

One row per sample after a header row: a label column (the one given, else
the first named one of :data:`LABEL_COLUMN_NAMES`, case-insensitive, else the
last column) and numeric feature columns. The result is a vector dataset
(``image_shape=None``). Named ``tabular`` so that it does not shadow the
standard library's :mod:`csv`.

Bounds come first: the header row is read alone (:mod:`csv`) and its column count checked
against :data:`geoviz.limits.MAX_CSV_COLUMNS`, the cells (line breaks x columns) against
:data:`geoviz.limits.MAX_CSV_CELLS`, and the memory the parse needs (:data:`_BYTES_PER_VALUE`
per cell) against this process's limit (:func:`geoviz.memory.check_bytes`); a gzipped
table is never decompressed past what memory allows. Nothing is parsed before these pass.

Parsing is linear in the table's size whatever its shape: a table of at least
:data:`WIDE_COLUMNS` columns goes through :func:`numpy.loadtxt` (one pass for the features,
one for the label column), a narrower one through :func:`pandas.read_csv`, with every column
checked at once (no per-column Python loop: the old one cost 114 s on 10^6 columns). ``benchmarks/bench_csv.py`` measures both against
``numpy.loadtxt`` on the same bytes.
"""

from __future__ import annotations

import csv
import io

import numpy as np

from geoviz import limits
from geoviz.data.dataset import LabeledDataset
from geoviz.data.formats._common import _encode_labels, _make, _maybe_gunzip
from geoviz.errors import DatasetError, DatasetFormatError, ResourceError
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
    columns = _header(data, source)
    n_lines = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    n_values = n_lines * len(columns)  # cells, the header row included
    if n_values > limits.MAX_CSV_CELLS:
        raise ResourceError(
            f"{source}: the CSV has {n_lines:,} lines of {len(columns):,} columns "
            f"({n_values:,} cells), more than the {limits.MAX_CSV_CELLS:,} cells a table may "
            "have; split it, or save it as .npz"
        )
    check_bytes(
        2 * len(data) + _BYTES_PER_VALUE * n_values, f"parsing {source} ({n_values:,} cells)"
    )
    with memory_guard(f"parsing {source}"):
        return _parse_csv(data, columns, name=name, label_column=label_column, source=source)


def _header(data: bytes, source: str) -> list[str]:
    """The column names of the first line, refused beyond :data:`~geoviz.limits.MAX_CSV_COLUMNS`
    from a count of separators before the line is split."""
    end = data.find(b"\n")
    first = data if end < 0 else data[:end]
    if first.count(b",") + 1 > limits.MAX_CSV_COLUMNS:
        raise ResourceError(
            f"{source}: the CSV header has {first.count(b',') + 1:,} columns, more than the "
            f"{limits.MAX_CSV_COLUMNS:,} a table may have; save wide data as .npz"
        )
    try:
        text = first.decode("utf-8-sig").rstrip("\r")
        row = next(csv.reader([text]), [])
    except (UnicodeDecodeError, csv.Error) as exc:
        raise DatasetFormatError(f"cannot parse CSV header ({exc})", source) from None
    if not row:
        raise DatasetError("dataset is empty (the CSV has no header row)", source)
    return [c.strip() for c in row]


def _label_column(columns: list[str], label_column: str | None, source: str) -> str:
    if label_column is not None:
        if label_column not in columns:
            shown = columns if len(columns) <= 20 else [*columns[:20], "..."]
            raise DatasetFormatError(
                f"label column {label_column!r} not found (columns: {shown})", source
            )
        return label_column
    lowered = {c.lower(): c for c in reversed(columns)}
    return next((lowered[n] for n in LABEL_COLUMN_NAMES if n in lowered), columns[-1])


#: from this many columns on a table is parsed with :func:`numpy.loadtxt` (whose cost is
#: per cell); narrower tables with :func:`pandas.read_csv` (4x faster per cell on tall tables,
#: but with a cost per column that makes a 65,535-column table 20x slower than loadtxt)
WIDE_COLUMNS = 1024


def _parse_csv(
    data: bytes, columns: list[str], *, name: str, label_column: str | None, source: str
) -> LabeledDataset:
    lab_col = _label_column(columns, label_column, source)
    if len(columns) < 2:
        raise DatasetFormatError(f"no feature columns besides the label column {lab_col!r}", source)
    if len(columns) >= WIDE_COLUMNS:
        lab = columns.index(lab_col)
        wide = _wide_table(data, len(columns), lab)
        if wide is not None:
            features, raw_labels = wide
            if features.shape[0] == 0:
                raise DatasetError("dataset is empty (the CSV has a header but no rows)", source)
            feat_cols = [c for i, c in enumerate(columns) if i != lab]
            _check_finite(features, feat_cols, source)
            if np.any(raw_labels == ""):
                r = int(np.flatnonzero(raw_labels == "")[0])
                raise DatasetFormatError(
                    f"label column {lab_col!r} is empty on line {r + 2}", source
                )
            codes, classes = _encode_labels(_label_values(raw_labels), source)
            return _make(
                features.astype(np.float32),
                codes,
                classes,
                name=name,
                image_shape=None,
                source=source,
            )
    # narrow tables, and wide ones with a problem: the general parser names the problem
    return _parse_with_pandas(data, name=name, label_column=label_column, source=source)


def _wide_table(data: bytes, n_columns: int, label: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Features ``(N, n_columns - 1)`` float64 and labels ``(N,)`` as text, each read by
    :func:`numpy.loadtxt` in one pass; ``None`` when a feature cell is not a number or a
    row has another length (the general parser then finds and names the problem)."""
    options = {
        "delimiter": ",",
        "skiprows": 1,
        "comments": None,
        "quotechar": '"',
        "encoding": "utf-8-sig",
    }
    others = [i for i in range(n_columns) if i != label]
    try:
        features = np.loadtxt(
            io.BytesIO(data), dtype=np.float64, usecols=others, ndmin=2, **options
        )
        labels = np.loadtxt(io.BytesIO(data), dtype=str, usecols=[label], ndmin=1, **options)
    except (ValueError, UnicodeDecodeError):
        return None
    if features.shape[0] != labels.shape[0]:
        return None
    return features, labels


def _label_values(raw: np.ndarray) -> np.ndarray:
    """Label texts as :func:`pandas.read_csv` reads them: integers when every label is an
    integer, floats when every label is a number (refused later if not whole), else text."""
    try:
        numbers = raw.astype(np.float64)
    except ValueError:
        return raw
    if np.isfinite(numbers).all() and np.all(numbers == np.round(numbers)):
        return numbers.astype(np.int64)
    return numbers


def _check_finite(features: np.ndarray, feat_cols: list[str], source: str) -> None:
    finite = np.isfinite(features)
    if finite.all():
        return
    r, c = (int(v[0]) for v in np.nonzero(~finite))
    what = "missing or NaN" if np.isnan(features[r, c]) else "infinite"
    n_bad = int((~finite).any(axis=1).sum())
    raise DatasetError(
        f"features contain NaN or infinite values in {n_bad} sample(s): {what} value in column "
        f"{feat_cols[c]!r} on line {r + 2}",
        source,
    )


def _parse_with_pandas(
    data: bytes, *, name: str, label_column: str | None, source: str
) -> LabeledDataset:
    import pandas as pd

    try:
        df = pd.read_csv(io.BytesIO(data), low_memory=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError) as exc:
        raise DatasetFormatError(f"cannot parse CSV ({exc})", source) from exc
    columns = [str(c) for c in df.columns]
    df.columns = columns
    lab_col = _label_column(columns, label_column, source)
    feat_cols = [c for c in columns if c != lab_col]
    if not feat_cols:
        raise DatasetFormatError(f"no feature columns besides the label column {lab_col!r}", source)
    if len(df) == 0:
        raise DatasetError("dataset is empty (the CSV has a header but no rows)", source)
    feats = df[feat_cols]
    # every column's kind in one pass over the dtypes (a per-column lookup costs seconds
    # on a table with 10^5 columns)
    kinds = np.array([dt.kind for dt in feats.dtypes])
    not_numeric = np.flatnonzero(~np.isin(kinds, list("iufb")))
    if not_numeric.size:
        c = feat_cols[int(not_numeric[0])]
        col = feats.iloc[:, int(not_numeric[0])]
        bad = pd.to_numeric(col, errors="coerce").isna() & col.notna()
        row = int(np.flatnonzero(bad.to_numpy())[0]) if bad.any() else 0
        raise DatasetFormatError(
            f"column {c!r} is not numeric (e.g. {col.iloc[row]!r} on line {row + 2}); every "
            f"column except the label column {lab_col!r} must hold numbers",
            source,
        )
    features = feats.to_numpy(dtype=np.float64)
    _check_finite(features, feat_cols, source)
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
