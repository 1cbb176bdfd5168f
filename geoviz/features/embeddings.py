"""Precomputed embeddings as a feature space: a column of a parquet file or arrays of an npz.

Paper Sec. 5.3 computes the OTDD maps of natural-image datasets in the embedding space of a
pretrained model. A user who already has such embeddings (from any model, in any framework)
brings them as a file; :class:`EmbeddingSpace` reads it and maps each sample of each dataset
to its row, so the couplings are computed on the embeddings while ``P_a``'s images come back
through the plans from the references' own images (:mod:`geoviz.features.base`).

Which row is whose
------------------
A :class:`~geoviz.data.dataset.LabeledDataset` does not keep the indices its rows had in
its file, and a problem subsamples its datasets (``--n``; a caller may measure a space on a
smaller stratified subsample), so rows are matched by **content**: the key of a sample is a 64-bit
hash of its features as the problem uses them (:func:`row_keys`: float32 bytes, after
loading, subsampling and any resizing). A file carries the keys beside the embeddings and a
subsample finds its own rows in any order (identical samples share a key: the file's first
row of that key is taken). :func:`save_embeddings` writes such a file from
the datasets and their embeddings; compute the embeddings on the datasets as the problem
loads them (:func:`geoviz.geodesic.spec.load_spec_datasets`): resizing (``--size``, images
of different sizes) or turning grey images to RGB changes the features and so the keys.

A dataset whose rows come without keys is matched by position: the file must then hold
exactly one row per sample of that dataset, in the dataset's order (right when the problem
uses the whole dataset file, as loaded); any other count is refused.

File layouts
------------
``.npz`` (arrays read with ``allow_pickle=False``):

* one ``(N, d)`` array per dataset, keyed by the dataset's name, and optionally its
  ``(N,)`` integer keys under ``"<name>.keys"`` (what :func:`save_embeddings` writes);
* or, with a column (``FILE:COLUMN``), one ``(N_total, d)`` array ``COLUMN`` for every row,
  with ``"dataset"`` ``(N_total,)`` names and/or ``"key"`` ``(N_total,)`` keys.

``.parquet``: a list column (``COLUMN``, default ``"embedding"``) of ``d`` numbers per row,
with a string column ``"dataset"`` and/or an integer column ``"key"``.

Refused, each in one sentence naming the file (and the dataset): a file that is not a
regular file of at most :data:`MAX_EMBEDDINGS_FILE_BYTES`; arrays declaring more than
:data:`MAX_EMBEDDINGS_BYTES` or more than this process's memory
(:func:`geoviz.memory.check_bytes`), checked from the headers before anything is
allocated; non-numeric, ragged or missing values; NaN or infinite values; a dataset with no
embeddings, with rows not found, or with another number of rows than its samples. The
space's digest covers the file's bytes.
"""

from __future__ import annotations

import hashlib
import io
import math
import zipfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from numpy.lib import format as npy_format

from geoviz import files
from geoviz.data.dataset import LabeledDataset
from geoviz.errors import GeovizError
from geoviz.features.base import FeatureSpace, FittedFeatures, Progress
from geoviz.memory import check_bytes, format_bytes

__all__ = [
    "DEFAULT_COLUMN",
    "EMBEDDINGS_FORMATS",
    "KEYS_SUFFIX",
    "MAX_EMBEDDINGS_BYTES",
    "MAX_EMBEDDINGS_FILE_BYTES",
    "MAX_EMBEDDING_DIM",
    "EmbeddingSpace",
    "EmbeddingsFormat",
    "row_keys",
    "save_embeddings",
]

EmbeddingsFormat = Literal["npz", "parquet"]
#: file suffix -> format
EMBEDDINGS_FORMATS: dict[str, EmbeddingsFormat] = {
    ".npz": "npz",
    ".parquet": "parquet",
    ".pq": "parquet",
}
#: Largest embeddings file read; change it on this module.
MAX_EMBEDDINGS_FILE_BYTES: int = 2 * 1024**3
#: Largest arrays a file may declare (as stored, or as float32 embeddings if larger);
#: change it on this module.
MAX_EMBEDDINGS_BYTES: int = 4 * 1024**3
#: Most numbers per embedding.
MAX_EMBEDDING_DIM = 65_536
#: The parquet column read when none is named.
DEFAULT_COLUMN = "embedding"
#: ``"<name>" + KEYS_SUFFIX``: the npz array of a dataset's row keys.
KEYS_SUFFIX = ".keys"


def row_keys(features: torch.Tensor | np.ndarray) -> np.ndarray:
    """The key of each sample: a 64-bit hash of its features, as :class:`EmbeddingSpace`
    matches rows.

    Parameters
    ----------
    features
        ``(N, D)`` features of a dataset as the problem uses them (after loading,
        subsampling and resizing), converted to float32.

    Returns
    -------
    np.ndarray
        ``(N,)`` int64: the first 8 bytes of BLAKE2b (``digest_size=8``) of each row's
        little-endian float32 bytes, read as a little-endian signed integer. Part of the
        file format: keys saved once keep matching.
    """
    if isinstance(features, torch.Tensor):
        features = features.detach().cpu().numpy()
    x = np.ascontiguousarray(np.asarray(features, dtype="<f4"))  # the same bytes everywhere
    if x.ndim != 2:
        raise GeovizError(f"row keys are computed on (N, D) features, got shape {x.shape}")
    out = np.empty(x.shape[0], dtype=np.int64)
    for i, row in enumerate(x):
        out[i] = int.from_bytes(
            hashlib.blake2b(row.tobytes(), digest_size=8).digest(), "little", signed=True
        )
    return out


def save_embeddings(
    path: str | Path,
    datasets: Sequence[LabeledDataset],
    embeddings: Sequence[torch.Tensor | np.ndarray],
) -> Path:
    """Write each dataset's embeddings with its row keys, as :class:`EmbeddingSpace` reads.

    Parameters
    ----------
    path
        ``.npz`` (one ``(N, d)`` array per dataset name and its ``"<name>.keys"``) or
        ``.parquet`` (columns ``dataset``, ``key`` and ``embedding``).
    datasets
        The datasets as the problem uses them (their features give the keys).
    embeddings
        ``(N_i, d)`` per dataset, rows in the dataset's order.
    """
    path = Path(path)
    fmt = _format_of(path)
    if len(datasets) != len(embeddings):
        raise GeovizError(f"{len(datasets)} datasets but {len(embeddings)} embedding arrays")
    names = [ds.name for ds in datasets]
    if len(set(names)) != len(names):
        raise GeovizError(f"dataset names must differ to be saved apart, got {names}")
    vectors = [np.asarray(_numpy(e), dtype=np.float32) for e in embeddings]
    for ds, z in zip(datasets, vectors, strict=True):
        if z.ndim != 2 or z.shape[0] != ds.n_samples:
            raise GeovizError(
                f"the embeddings of {ds.name} have shape {z.shape}; expected "
                f"({ds.n_samples}, d), one row per sample"
            )
    keys = [row_keys(ds.features) for ds in datasets]
    if fmt == "npz":
        arrays: dict[str, np.ndarray] = {}
        for name, z, k in zip(names, vectors, keys, strict=True):
            arrays[name], arrays[name + KEYS_SUFFIX] = z, k
        with path.open("wb") as fh:
            np.savez(fh, **arrays)  # type: ignore[arg-type]
        return path
    import pyarrow as pa
    import pyarrow.parquet as pq

    flat = np.concatenate(vectors)
    table = pa.table(
        {
            "dataset": pa.array([n for n, z in zip(names, vectors, strict=True) for _ in z]),
            "key": pa.array(np.concatenate(keys)),
            DEFAULT_COLUMN: pa.FixedSizeListArray.from_arrays(
                pa.array(flat.reshape(-1)), flat.shape[1]
            ),
        }
    )
    pq.write_table(table, path)
    return path


def _numpy(values: torch.Tensor | np.ndarray) -> np.ndarray:
    if isinstance(values, torch.Tensor):
        return values.detach().cpu().numpy()
    return np.asarray(values)


def _format_of(path: Path) -> EmbeddingsFormat:
    fmt = EMBEDDINGS_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise GeovizError(
            f"{path.name} is not an embeddings file: use .npz or .parquet "
            f"(got {path.suffix or 'no suffix'!r})"
        )
    return fmt


# ---------------------------------------------------------------------------- reading
@dataclass(frozen=True)
class _Group:
    """Rows of the file: a dataset's (``name``) or any keyed rows (``name=None``)."""

    name: str | None
    vectors: np.ndarray  # (n, d) float32
    keys: np.ndarray | None  # (n,) int64, or None: matched by position


class _FileError:
    """Sentences about one embeddings file."""

    def __init__(self, path: Path, column: str | None) -> None:
        self.label = path.name if column is None else f"{path.name}:{column}"

    def __call__(self, problem: str) -> GeovizError:
        return GeovizError(f"the embeddings file {self.label} {problem}")


def _check_declared(stored: int, n_values: int, dim: int, what: str, error: _FileError) -> None:
    """Refuse, before reading, arrays that declare ``stored`` bytes with ``n_values``
    embedding values (``dim`` per row) when they exceed the caps or this process's memory."""
    if dim > MAX_EMBEDDING_DIM:
        raise error(f"has embeddings of {dim:,} numbers; at most {MAX_EMBEDDING_DIM:,}")
    n_bytes = max(stored, 4 * n_values)
    cap = MAX_EMBEDDINGS_BYTES  # read at call time: can be changed on the module
    if n_bytes > cap:
        raise error(
            f"declares {format_bytes(n_bytes)} of embeddings ({what}), more than the "
            f"{format_bytes(cap)} geoviz reads"
        )
    # the arrays as stored, the values as numbers (up to float64) and their float32 copy
    check_bytes(stored + 12 * n_values, f"reading the embeddings of {error.label} ({what})")


def _npy_shape(zf: zipfile.ZipFile, member: str, error: _FileError) -> tuple[tuple[int, ...], Any]:
    """Shape and dtype an npz member declares, read from its header only."""
    info = zf.getinfo(member)
    try:
        with zf.open(info) as fp:
            version = npy_format.read_magic(fp)
            if version == (1, 0):
                shape, _, dtype = npy_format.read_array_header_1_0(fp)
            else:
                shape, _, dtype = npy_format.read_array_header_2_0(fp)
            header = fp.tell()
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error) as err:
        key = member.removesuffix(".npy")
        raise error(f"has a corrupt array {key!r} ({type(err).__name__})") from None
    shape = tuple(int(s) for s in shape)
    if dtype.hasobject:
        raise error(f"stores {member.removesuffix('.npy')!r} as Python objects; refused")
    if header + math.prod(shape) * dtype.itemsize > info.file_size:
        raise error(f"declares array {member.removesuffix('.npy')!r} {shape} larger than it holds")
    return shape, dtype


def _as_vectors(values: np.ndarray, what: str, error: _FileError) -> np.ndarray:
    """``(n, d)`` real numbers -> float32, finite; else a sentence."""
    if values.dtype.kind not in "biuf":
        raise error(f"holds {values.dtype} values for {what}, not real numbers")
    if values.ndim != 2 or values.shape[1] == 0:
        raise error(f"holds shape {values.shape} for {what}; expected (rows, d) with d >= 1")
    out = np.ascontiguousarray(values, dtype=np.float32)
    finite = np.isfinite(out).all(axis=1)
    if not finite.all():
        bad = int((~finite).sum())
        raise error(f"holds NaN or infinite values in {bad:,} of the {len(out):,} rows of {what}")
    return out


def _as_keys(values: np.ndarray, n: int, what: str, error: _FileError) -> np.ndarray:
    if values.dtype.kind not in "iu" or values.shape != (n,):
        raise error(
            f"holds keys of dtype {values.dtype} and shape {values.shape} for {what}; "
            f"expected ({n:,},) integers (row_keys)"
        )
    return values.astype(np.uint64).view(np.int64) if values.dtype.kind == "u" else values


def _read_npz(data: bytes, column: str | None, error: _FileError) -> list[_Group]:
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, OSError, ValueError) as err:
        raise error(f"is not an npz archive ({type(err).__name__})") from None
    with zf:
        members = {m.removesuffix(".npy"): m for m in zf.namelist() if m.endswith(".npy")}
        shapes = {key: _npy_shape(zf, m, error) for key, m in members.items()}
        if column is not None:
            wanted = [k for k in (column, "dataset", "key") if k in shapes]
        elif "dataset" in shapes or "key" in shapes:
            raise error(
                "holds 'dataset' or 'key' arrays, so one array holds every row: name it "
                "(FILE:COLUMN)"
            )
        else:
            wanted = [k for k in shapes if not k.endswith(KEYS_SUFFIX)]
        vector_keys = [column] if column is not None else list(wanted)
        if not vector_keys:
            raise error(f"holds no embeddings (it holds {sorted(shapes)})")
        for key in vector_keys:
            if key not in shapes:
                raise error(f"has no array {key!r} (it holds {sorted(shapes)})")
            if len(shapes[key][0]) != 2:
                raise error(f"holds shape {shapes[key][0]} for {key!r}; expected (rows, d)")
        if column is None:
            wanted += [k + KEYS_SUFFIX for k in wanted if k + KEYS_SUFFIX in shapes]
        n_values = sum(math.prod(shapes[k][0]) for k in vector_keys)
        stored = sum(math.prod(shapes[k][0]) * shapes[k][1].itemsize for k in wanted)
        dim = max(shapes[k][0][1] for k in vector_keys)
        _check_declared(stored, n_values, dim, "npz", error)
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as npz:
                arrays = {k: np.asarray(npz[k]) for k in wanted}
        except (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error) as err:
            raise error(f"holds an unreadable array ({type(err).__name__})") from None
    if column is None:
        return [
            _Group(
                name=key,
                vectors=_as_vectors(arrays[key], f"dataset {key!r}", error),
                keys=None
                if key + KEYS_SUFFIX not in arrays
                else _as_keys(
                    arrays[key + KEYS_SUFFIX], arrays[key].shape[0], f"dataset {key!r}", error
                ),
            )
            for key in vector_keys
        ]
    vectors = _as_vectors(arrays[column], f"column {column!r}", error)
    names = arrays.get("dataset")
    if names is not None and (names.dtype.kind not in "US" or names.shape != (len(vectors),)):
        raise error(
            f"holds 'dataset' of dtype {names.dtype} and shape {names.shape}; expected "
            f"({len(vectors):,},) names"
        )
    keys = arrays.get("key")
    return _long_groups(
        vectors,
        None if names is None else [str(n) for n in names.tolist()],
        None if keys is None else _as_keys(keys, len(vectors), f"column {column!r}", error),
        error,
    )


def _long_groups(
    vectors: np.ndarray, names: list[str] | None, keys: np.ndarray | None, error: _FileError
) -> list[_Group]:
    """Rows of one table (a ``dataset`` name and/or a ``key`` each) as groups."""
    if names is None and keys is None:
        raise error("has neither a 'dataset' nor a 'key' column to tell whose each row is")
    if names is None:
        return [_Group(name=None, vectors=vectors, keys=keys)]
    order = np.asarray(names)
    groups = []
    for name in dict.fromkeys(names):  # in order of first appearance
        rows = np.flatnonzero(order == name)
        groups.append(
            _Group(name=name, vectors=vectors[rows], keys=None if keys is None else keys[rows])
        )
    return groups


def _read_parquet(data: bytes, column: str, error: _FileError) -> list[_Group]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(io.BytesIO(data))
        schema = pf.schema_arrow
    except Exception as err:  # pyarrow raises ArrowInvalid / OSError variants
        raise error(f"is not a parquet file ({type(err).__name__})") from None
    if column not in schema.names:
        raise error(f"has no column {column!r} (it holds {schema.names})")
    kind = schema.field(column).type
    if not (
        pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)
    ):
        raise error(f"holds {kind} in column {column!r}, not a list of numbers per row")
    if not (pa.types.is_integer(kind.value_type) or pa.types.is_floating(kind.value_type)):
        raise error(f"holds lists of {kind.value_type} in column {column!r}, not numbers")
    meta = pf.metadata
    leaf = next(
        i for i in range(meta.num_columns) if meta.schema.column(i).path.split(".")[0] == column
    )
    n_values = sum(meta.row_group(g).column(leaf).num_values for g in range(meta.num_row_groups))
    rows = int(meta.num_rows)
    wanted = [c for c in (column, "dataset", "key") if c in schema.names]
    leaves = [
        i for i in range(meta.num_columns) if meta.schema.column(i).path.split(".")[0] in wanted
    ]
    stored = sum(
        meta.row_group(g).column(i).total_uncompressed_size
        for g in range(meta.num_row_groups)
        for i in leaves
    )
    _check_declared(stored, n_values, n_values // max(rows, 1), f"{rows:,} rows", error)
    try:
        table = pf.read(columns=wanted)
    except Exception as err:
        raise error(f"holds an unreadable column ({type(err).__name__})") from None
    values = table.column(column).combine_chunks()
    if values.null_count or values.flatten().null_count:
        raise error(f"has missing values in column {column!r}")
    if pa.types.is_fixed_size_list(kind):
        dim = int(kind.list_size)
    else:
        lengths = np.asarray(values.value_lengths())
        dim = int(lengths[0]) if len(lengths) else 0
        if (lengths != dim).any():
            raise error(
                f"has rows of different lengths in column {column!r} ({int(lengths.min())} to "
                f"{int(lengths.max())} numbers): every embedding has the same length"
            )
    flat = np.asarray(values.flatten().to_numpy(zero_copy_only=False))
    vectors = _as_vectors(flat.reshape(len(values), dim), f"column {column!r}", error)
    names = keys = None
    if "dataset" in wanted:
        names_col = table.column("dataset")
        if not pa.types.is_string(names_col.type) and not pa.types.is_large_string(names_col.type):
            raise error(f"holds {names_col.type} in column 'dataset', not names")
        names = [str(n) for n in names_col.to_pylist()]
    if "key" in wanted:
        key_col = table.column("key")
        if not pa.types.is_integer(key_col.type) or key_col.null_count:
            raise error(f"holds {key_col.type} in column 'key', not integer row keys")
        keys = _as_keys(np.asarray(key_col.to_numpy()), len(vectors), f"column {column!r}", error)
    return _long_groups(vectors, names, keys, error)


def _read_groups(path: Path, column: str | None, error: _FileError) -> tuple[list[_Group], str]:
    """The file's groups of rows and the sha256 of its bytes."""
    fmt = _format_of(path)
    data = files.read_regular_file(
        path,
        max_bytes=MAX_EMBEDDINGS_FILE_BYTES,  # read at call time: can be changed on the module
        what=f"reading the embeddings file {path.name}",
        error=lambda problem: error(problem.replace("cannot read file", "cannot be read")),
    )
    sha = hashlib.sha256(data).hexdigest()
    if fmt == "npz":
        groups = _read_npz(data, column, error)
    else:
        groups = _read_parquet(data, column or DEFAULT_COLUMN, error)
    if not groups or not any(len(g.vectors) for g in groups):
        raise error("holds no embeddings")
    dims = {g.vectors.shape[1] for g in groups}
    if len(dims) > 1:
        detail = ", ".join(f"{g.name or 'keyed rows'}: {g.vectors.shape[1]}" for g in groups)
        raise error(f"holds embeddings of different lengths ({detail}); they must all be equal")
    return groups, sha


# ---------------------------------------------------------------------------- the space
class _Lookup:
    """Features -> the embedding of the row with the same key (picklable, as the fitted
    spaces of :mod:`geoviz.features.builtin`)."""

    def __init__(self, keys: np.ndarray, vectors: np.ndarray, label: str) -> None:
        order = np.argsort(keys, kind="stable")  # the first of equal keys is the file's first
        self.keys = keys[order]
        self.rows = order
        self.vectors = torch.from_numpy(vectors)
        self.label = label

    def find(self, x: torch.Tensor | np.ndarray) -> np.ndarray:
        """``(N,)`` row of each sample of ``x`` in :attr:`vectors`, ``-1`` where none."""
        wanted = row_keys(x)
        if not len(self.keys):
            return np.full(len(wanted), -1, dtype=np.int64)
        pos = np.minimum(np.searchsorted(self.keys, wanted), len(self.keys) - 1)
        return np.where(self.keys[pos] == wanted, self.rows[pos], -1)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        rows = self.find(x)
        missing = int((rows < 0).sum())
        if missing:
            raise GeovizError(
                f"{missing:,} of {len(rows):,} samples have no row in the embeddings file "
                f"{self.label}: rows are matched by the key of each sample's features "
                "(geoviz.features.embeddings.row_keys)"
            )
        return self.vectors[torch.from_numpy(rows)]


class EmbeddingSpace(FeatureSpace):
    """Precomputed embeddings read from a file (see the module docstring; paper Sec. 5.3).

    Parameters
    ----------
    path
        An ``.npz`` or ``.parquet`` file; read (and checked) now.
    column
        The parquet column (default :data:`DEFAULT_COLUMN`), or the npz array holding every
        row (``None``: one array per dataset name).
    name
        Shown and recorded as ``"embeddings:<name>"`` (default: the file's stem).

    Raises
    ------
    GeovizError
        The file cannot be read or holds no usable embeddings (one sentence naming it).
    ResourceError
        Its declared embeddings would not fit in memory.
    """

    def __init__(
        self, path: str | Path, column: str | None = None, *, name: str | None = None
    ) -> None:
        self.path = Path(path)
        self.column = None if column is None else str(column)
        self._error = _FileError(self.path, self.column)
        self.groups, self.sha256 = _read_groups(self.path, self.column, self._error)
        self.label = str(name) if name is not None else self.path.stem
        self.name = f"embeddings:{self.label}"
        self.dim = int(self.groups[0].vectors.shape[1])

    def params(self) -> dict[str, Any]:
        return {"file": self.sha256, "column": self.column, "name": self.label}

    def _fit(
        self, datasets: list[LabeledDataset], digest_: str, progress: Progress | None
    ) -> FittedFeatures:
        if progress is not None:
            progress("embeddings", 0.0)
        positional = {g.name: g for g in self.groups if g.keys is None and g.name is not None}
        keys = [g.keys for g in self.groups if g.keys is not None]
        vectors = [g.vectors for g in self.groups if g.keys is not None]
        for ds in datasets:
            group = positional.get(ds.name)
            if group is None:
                continue
            if len(group.vectors) != ds.n_samples:
                raise self._error(
                    f"holds {len(group.vectors):,} rows for {ds.name}, which has "
                    f"{ds.n_samples:,} samples in this problem: without keys rows are matched "
                    "by position, one per sample; save them with their keys "
                    "(geoviz.features.embeddings.save_embeddings) to match a subsample"
                )
            keys.append(row_keys(ds.features))
            vectors.append(group.vectors)
        lookup = _Lookup(
            np.concatenate(keys) if keys else np.zeros(0, dtype=np.int64),
            np.concatenate(vectors) if vectors else np.zeros((0, self.dim), dtype=np.float32),
            self._error.label,
        )
        for ds in datasets:
            if ds.name not in positional:
                self._check_found(ds, lookup)
        if progress is not None:
            progress("embeddings", 1.0)
        return FittedFeatures(
            name=self.name,
            digest=digest_,
            dim=self.dim,
            encode=lookup,
            info={"file": self.path.name, "sha256": self.sha256[:16]},
        )

    def _check_found(self, ds: LabeledDataset, lookup: _Lookup) -> None:
        """Every sample of ``ds`` has a row, else a sentence naming the file and ``ds``."""
        missing = int((lookup.find(ds.features) < 0).sum())
        if not missing:
            return
        names = [g.name for g in self.groups if g.name is not None]
        if missing == ds.n_samples and ds.name not in names:
            held = ", ".join(names) if names else "keyed rows only"
            raise self._error(
                f"has no embeddings for {ds.name} (none of its {ds.n_samples:,} samples' "
                f"keys is there; the file names {held})"
            )
        raise self._error(
            f"has no row for {missing:,} of the {ds.n_samples:,} samples of {ds.name}: rows "
            "are matched by the key of each sample's features as the problem uses them "
            "(row_keys, after subsampling and resizing), so compute the embeddings on the "
            "problem's datasets (load_spec_datasets) and save them with save_embeddings"
        )
