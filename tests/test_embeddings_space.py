"""Precomputed embeddings as a feature space (geoviz.features.embeddings, issue 42 item 3):
the same distances as the space that computed them, rows found again after subsampling, and
every bad file refused in one sentence naming the file and the dataset."""

from __future__ import annotations

import dataclasses
import io
import pickle
import zipfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from synthetic_data import bars

from geoviz.cli.geodesic_options import EMBEDDINGS_SUFFIXES, embeddings_file
from geoviz.data.dataset import LabeledDataset
from geoviz.errors import GeovizError, ResourceError
from geoviz.features import embeddings
from geoviz.features.builtin import PCASpace
from geoviz.features.embeddings import EmbeddingSpace, row_keys, save_embeddings
from geoviz.geodesic.config import GeodesicConfig
from geoviz.geodesic.pipeline import fit_in_space
from geoviz.ot.otdd_cost import OTDDConfig

CONFIG = GeodesicConfig(otdd=OTDDConfig(max_iter=400))


@pytest.fixture
def problem() -> list[LabeledDataset]:
    """Q and two references, 1x16x16 images, 40 samples each, named q, p1, p2."""
    return [
        dataclasses.replace(bars(40, seed), name=name)
        for seed, name in zip((0, 1, 2), ("q", "p1", "p2"), strict=True)
    ]


def _pca(datasets: list[LabeledDataset], k: int = 6) -> list[torch.Tensor]:
    """The known map: ``k`` principal components of the union."""
    fitted = PCASpace(k).fit(datasets)
    return [fitted.transform(ds).features for ds in datasets]


def _npz(path: Path, **arrays: np.ndarray) -> Path:
    with path.open("wb") as fh:
        np.savez(fh, **arrays)  # type: ignore[arg-type]
    return path


def _refused(path: Path | str, datasets: list[LabeledDataset] | None, match: str, **kw) -> str:
    """The one-sentence error of reading (and fitting on ``datasets``) ``path``."""
    with pytest.raises(GeovizError, match=match) as info:
        space = EmbeddingSpace(path, **kw)
        if datasets is not None:
            space.fit(datasets)
    text = str(info.value)
    assert "\n" not in text and "Traceback" not in text
    return text


# --------------------------------------------------------------------------- round trip
@pytest.mark.parametrize("suffix", [".npz", ".parquet"])
def test_saved_pca_embeddings_give_the_pca_spaces_distances(problem, tmp_path, suffix):
    path = save_embeddings(tmp_path / f"pca{suffix}", problem, _pca(problem))
    q, refs = problem[0], problem[1:]
    direct = fit_in_space(q, refs, CONFIG, PCASpace(6))
    from_file = fit_in_space(q, refs, CONFIG, EmbeddingSpace(path))
    assert from_file.features_name == "embeddings:pca" and direct.features_name == "pca6"
    np.testing.assert_allclose(from_file.otdd, direct.otdd, rtol=1e-5)
    np.testing.assert_allclose(from_file.w_to_target, direct.w_to_target, rtol=1e-5)
    np.testing.assert_allclose(from_file.w_between, direct.w_between, rtol=1e-5, atol=1e-6)
    # P_a's images still come back through the couplings: the references' own pixels
    assert from_file.mapped_features[0].shape == (40, 256)


def test_one_column_for_every_row_with_names_and_no_keys_is_matched_by_position(problem, tmp_path):
    vectors = _pca(problem)
    names = np.array([ds.name for ds, z in zip(problem, vectors, strict=True) for _ in z])
    flat = torch.cat(vectors).numpy()
    npz = _npz(tmp_path / "long.npz", emb=flat, dataset=names)
    table = pa.table(
        {
            "dataset": pa.array(names.tolist()),
            "vec": pa.array(flat.tolist(), type=pa.list_(pa.float32())),
        }
    )
    pq.write_table(table, tmp_path / "long.parquet")
    _refused(npz, None, r"long\.npz holds 'dataset' or 'key' arrays, .* name it \(FILE:COLUMN\)")
    for space in (EmbeddingSpace(npz, "emb"), EmbeddingSpace(tmp_path / "long.parquet", "vec")):
        fitted = space.fit(problem)
        for ds, z in zip(problem, vectors, strict=True):
            assert torch.equal(fitted.transform(ds).features, z)


def test_keyed_rows_alone_need_no_dataset_names(problem, tmp_path):
    vectors = _pca(problem)
    keys = np.concatenate([row_keys(ds.features) for ds in problem])
    path = _npz(tmp_path / "keyed.npz", emb=torch.cat(vectors).numpy(), key=keys)
    fitted = EmbeddingSpace(path, "emb").fit(problem)
    assert torch.equal(fitted.transform(problem[2]).features, vectors[2])


# --------------------------------------------------------------------------- subsamples
@pytest.mark.parametrize("suffix", [".npz", ".parquet"])
def test_a_subsample_in_another_order_finds_its_own_rows(problem, tmp_path, suffix):
    vectors = _pca(problem)
    path = save_embeddings(tmp_path / f"all{suffix}", problem, vectors)
    rows = [[33, 2, 17, 8, 21, 0, 5], [1, 3, 4, 7, 10, 11], [39, 38, 20, 10, 4, 30]]
    subsets = [ds.subset(r) for ds, r in zip(problem, rows, strict=True)]
    fitted = EmbeddingSpace(path).fit(subsets)
    for sub, z, r in zip(subsets, vectors, rows, strict=True):
        assert torch.equal(fitted.transform(sub).features, z[r])
    # the fitted space pickles (a background job sends it to a child process)
    again = pickle.loads(pickle.dumps(fitted))
    assert torch.equal(again.transform(subsets[1]).features, vectors[1][rows[1]])


def test_rows_without_keys_refuse_a_subsample(problem, tmp_path):
    vectors = _pca(problem)
    path = _npz(
        tmp_path / "plain.npz",
        **{ds.name: z.numpy() for ds, z in zip(problem, vectors, strict=True)},
    )
    sub = [problem[0], problem[1].subset(range(30)), problem[2]]
    text = _refused(path, sub, r"holds 40 rows for p1, which has 30 samples in this problem")
    assert text.startswith("the embeddings file plain.npz ") and "save_embeddings" in text


# --------------------------------------------------------------------------- bad input
def test_wrong_length_nan_and_missing_dataset_are_sentences(problem, tmp_path):
    vectors = [z.numpy() for z in _pca(problem)]
    short = _npz(tmp_path / "short.npz", q=vectors[0], p1=vectors[1][:39], p2=vectors[2])
    _refused(short, problem, r"^the embeddings file short\.npz holds 39 rows for p1, which has 40")
    bad = vectors[2].copy()
    bad[7, 1] = np.nan
    nan = _npz(tmp_path / "nan.npz", q=vectors[0], p1=vectors[1], p2=bad)
    _refused(
        nan, None, r"nan\.npz holds NaN or infinite values in 1 of the 40 rows of dataset 'p2'"
    )
    inf = save_embeddings(tmp_path / "inf.parquet", problem, vectors)
    table = pq.read_table(inf)
    flat = np.stack(table.column("embedding").to_pylist()).astype(np.float32)
    flat[3, 0] = np.inf
    table = table.set_column(2, "embedding", pa.array(flat.tolist(), type=pa.list_(pa.float32())))
    pq.write_table(table, inf)
    _refused(inf, None, r"inf\.parquet holds NaN or infinite values in 1 of the 120 rows")
    two = save_embeddings(tmp_path / "two.npz", problem[:2], vectors[:2])
    text = _refused(two, problem, r"two\.npz has no embeddings for p2 \(none of its 40 samples")
    assert "the file names q, p1" in text


def test_rows_of_other_features_are_not_found(problem, tmp_path):
    """Keys computed before a resize (or on other data) match none of the rows."""
    vectors = _pca(problem)
    path = save_embeddings(tmp_path / "e.npz", problem, vectors)
    moved = dataclasses.replace(problem[1], features=problem[1].features * 0.5)
    text = _refused(path, [problem[0], moved, problem[2]], r"has no row for 40 of the 40 samples")
    assert "of p1" in text and "row_keys" in text
    fitted = EmbeddingSpace(path).fit(problem)
    with pytest.raises(GeovizError, match=r"40 of 40 samples have no row in the embeddings file"):
        fitted.transform(moved)


def test_non_numeric_ragged_and_unlabelled_columns_are_sentences(problem, tmp_path):
    words = _npz(tmp_path / "words.npz", q=np.array([["a", "b"]] * 40))
    _refused(words, None, r"words\.npz holds <U1 values for dataset 'q', not real numbers")
    flat = _npz(tmp_path / "flat.npz", q=np.zeros(40, np.float32))
    _refused(flat, None, r"flat\.npz holds shape \(40,\) for 'q'; expected \(rows, d\)")
    pq.write_table(
        pa.table({"dataset": ["q", "q"], "embedding": [[1.0, 2.0], [1.0, 2.0, 3.0]]}),
        tmp_path / "ragged.parquet",
    )
    _refused(tmp_path / "ragged.parquet", None, r"rows of different lengths .* \(2 to 3 numbers\)")
    pq.write_table(
        pa.table({"dataset": ["q"], "embedding": [["x", "y"]]}), tmp_path / "strings.parquet"
    )
    _refused(tmp_path / "strings.parquet", None, r"holds lists of string in column 'embedding'")
    pq.write_table(pa.table({"dataset": ["q"], "embedding": [1.5]}), tmp_path / "scalar.parquet")
    _refused(tmp_path / "scalar.parquet", None, r"holds double in column 'embedding', not a list")
    pq.write_table(
        pa.table({"dataset": ["q", "q"], "embedding": [[1.0], None]}), tmp_path / "null.parquet"
    )
    _refused(tmp_path / "null.parquet", None, r"has missing values in column 'embedding'")
    pq.write_table(pa.table({"embedding": [[1.0]]}), tmp_path / "whose.parquet")
    _refused(tmp_path / "whose.parquet", None, r"neither a 'dataset' nor a 'key' column")
    _refused(tmp_path / "whose.parquet", None, r"has no column 'emb' ", column="emb")
    mixed = _npz(tmp_path / "mixed.npz", q=np.zeros((40, 3)), p1=np.zeros((40, 4)))
    _refused(mixed, None, r"holds embeddings of different lengths \(q: 3, p1: 4\)")


def test_files_that_are_not_embeddings_are_sentences(tmp_path):
    _refused(tmp_path / "missing.npz", None, r"^the embeddings file missing\.npz cannot be read")
    (tmp_path / "dir.npz").mkdir()
    _refused(tmp_path / "dir.npz", None, r"dir\.npz is a directory, not a regular file")
    (tmp_path / "e.csv").write_text("1,2\n")
    _refused(tmp_path / "e.csv", None, r"e\.csv is not an embeddings file: use \.npz or \.parquet")
    (tmp_path / "junk.npz").write_bytes(b"junk")
    _refused(tmp_path / "junk.npz", None, r"junk\.npz is not an npz archive")
    (tmp_path / "junk.parquet").write_bytes(b"junk")
    _refused(tmp_path / "junk.parquet", None, r"junk\.parquet is not a parquet file")
    _refused(_npz(tmp_path / "none.npz"), None, r"none\.npz holds no embeddings \(it holds \[\]\)")
    objects = tmp_path / "objects.npz"
    with objects.open("wb") as fh:
        np.savez(fh, q=np.array([{"a": 1}, None], dtype=object))
    _refused(objects, None, r"stores 'q' as Python objects; refused")


def _forged_npz(path: Path, shape: tuple[int, ...]) -> Path:
    """An npz whose member declares ``shape`` float32 but holds a few bytes."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f4", "fortran_order": False, "shape": shape}
    )
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("q.npy", header.getvalue() + b"\0" * 64)
    return path


def test_sizes_are_bounded_before_anything_is_allocated(problem, tmp_path, monkeypatch):
    forged = _forged_npz(tmp_path / "forged.npz", (10**12, 8))
    _refused(forged, None, r"forged\.npz declares array 'q' \(1000000000000, 8\) larger than it")
    big = tmp_path / "big.npz"
    with big.open("wb") as fh:  # 8 MB of zeros, compressed to a few kB
        np.savez_compressed(fh, q=np.zeros((2000, 1000), np.float32))
    monkeypatch.setattr(embeddings, "MAX_EMBEDDINGS_BYTES", 2**20)
    _refused(big, None, r"big\.npz declares 7\.6 MiB of embeddings \(npz\), more than the 1\.0 MiB")
    parquet = save_embeddings(tmp_path / "big.parquet", problem, [torch.zeros(40, 3000)] * 3)
    _refused(parquet, None, r"big\.parquet declares .* \(120 rows\), more than the 1\.0 MiB")
    keys = tmp_path / "keys.npz"
    with keys.open("wb") as fh:  # small embeddings, 8 MB of (compressed) keys
        np.savez_compressed(fh, q=np.zeros((10, 2), np.float32), **{"q.keys": np.zeros(10**6)})
    _refused(keys, None, r"keys\.npz declares 7\.6 MiB of embeddings \(npz\)")
    monkeypatch.setattr(embeddings, "MAX_EMBEDDINGS_BYTES", 2**40)
    monkeypatch.setattr("geoviz.memory.memory_limit", lambda: (2**20, "a test limit"))
    with pytest.raises(ResourceError, match=r"reading the embeddings of big\.npz .* refused"):
        EmbeddingSpace(big)
    monkeypatch.setattr(embeddings, "MAX_EMBEDDINGS_FILE_BYTES", 100)
    _refused(parquet, None, r"big\.parquet is .* larger than the 100 bytes geoviz reads from one")


def test_the_digest_covers_the_files_bytes(problem, tmp_path):
    vectors = _pca(problem)
    a = save_embeddings(tmp_path / "a.npz", problem, vectors)
    copy = tmp_path / "copy"
    copy.mkdir()
    same = copy / "a.npz"
    same.write_bytes(a.read_bytes())
    vectors[1] = vectors[1].clone()
    vectors[1][0, 0] += 1.0
    other = save_embeddings(tmp_path / "b.npz", problem, vectors)
    digests = [EmbeddingSpace(p, name="e").fit(problem).digest for p in (a, same, other)]
    assert digests[0] == digests[1] != digests[2]


def test_row_keys_are_a_fixed_function_of_the_features():
    """The keys are part of the file format: saved files keep matching."""
    x = np.array([[0.0, 1.0], [0.5, -2.0], [0.0, 1.0]], np.float32)
    keys = row_keys(x)
    assert keys.dtype == np.int64 and keys[0] == keys[2] != keys[1]
    import hashlib

    expected = hashlib.blake2b(np.array([0.5, -2.0], "<f4").tobytes(), digest_size=8).digest()
    assert keys[1] == int.from_bytes(expected, "little", signed=True)
    assert np.array_equal(row_keys(torch.from_numpy(x).double()), keys)


def test_the_clis_suffixes_and_column_rule_are_the_librarys(tmp_path):
    assert set(EMBEDDINGS_SUFFIXES) == set(embeddings.EMBEDDINGS_FORMATS)
    assert embeddings_file("x/e.npz:emb") == (Path("x/e.npz"), "emb")
    assert embeddings_file("e.parquet") == (Path("e.parquet"), None)
    assert embeddings_file("dir:1/e.npz") == (Path("dir:1/e.npz"), None)


# --------------------------------------------------------------------------- the CLI
DIGITS = ["--target", "mnist", "--refs", "usps,fashion_mnist", "--size", "16", "--quiet"]


@pytest.fixture(scope="module")
def digit_embeddings(tmp_path_factory) -> Path:
    """PCA embeddings of every sample of the bundled digits as ``DIGITS`` loads them (16 px),
    saved with their keys: any ``--n`` subsample finds its rows."""
    from geoviz.data.choice import DatasetChoice
    from geoviz.geodesic.spec import GeodesicSpec, load_spec_datasets

    spec = GeodesicSpec(
        target=DatasetChoice.named("mnist", "train"),
        references=tuple(DatasetChoice.named(n, "train") for n in ("usps", "fashion_mnist")),
        image_size=16,
    )
    data = load_spec_datasets(spec)
    datasets = [data.target, *data.references]
    path = tmp_path_factory.mktemp("emb") / "digits.npz"
    return save_embeddings(path, datasets, _pca(datasets, 12))


def test_the_cli_runs_in_embeddings_of_the_bundled_digits(digit_embeddings, tmp_path, capsys):
    from geoviz.cli import main

    args = ["distance", *DIGITS, "--n", "60", "--features-embeddings", str(digit_embeddings)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "space: embeddings:digits" in out and "app (its maps" not in out
    # the same rows as one parquet column, named explicitly, and another subsample
    datasets_path = tmp_path / "digits.parquet"
    with np.load(digit_embeddings) as npz:
        names = [k for k in npz.files if not k.endswith(".keys")]
        pq.write_table(
            pa.table(
                {
                    "dataset": [n for n in names for _ in range(len(npz[n]))],
                    "key": np.concatenate([npz[n + ".keys"] for n in names]),
                    "z": pa.array(np.concatenate([npz[n] for n in names]).tolist()),
                }
            ),
            datasets_path,
        )
    assert (
        main(["distance", *DIGITS, "--n", "40", "--features-embeddings", f"{datasets_path}:z"]) == 0
    )
    assert "space: embeddings:digits" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--features", "pca"], "--features pca and --features-embeddings both choose the space"),
        (["--features-size", "32"], "--features-size only applies with --features-model FILE"),
        (["--features-arch", "torchvision:resnet18"], "--features-arch only applies with"),
    ],
)
def test_the_cli_refuses_options_that_do_not_go_with_embeddings(
    digit_embeddings, extra, message, capsys
):
    from geoviz.cli import main

    args = ["distance", *DIGITS, "--n", "40", "--features-embeddings", str(digit_embeddings)]
    assert main([*args, *extra]) == 2
    assert message in capsys.readouterr().err


def test_the_cli_says_which_dataset_has_no_embeddings(problem, tmp_path, capsys):
    from geoviz.cli import main

    path = save_embeddings(tmp_path / "other.npz", problem, _pca(problem))
    assert main(["distance", *DIGITS, "--n", "40", "--features-embeddings", str(path)]) == 2
    err = capsys.readouterr().err
    assert "the embeddings file other.npz has no embeddings for mnist" in err
    assert "Traceback" not in err
    long = str(tmp_path / ("x" * 300 + ".npz"))
    assert main(["distance", *DIGITS, "--n", "40", "--features-embeddings", long]) == 2
    assert "--features-embeddings: the name " in capsys.readouterr().err
