"""The export formats: one :class:`ExportFormatSpec` per format, in one registry.

A format is one module that builds its :class:`ExportFormatSpec` (how to write the bytes,
read them back, recognise them, describe them) plus one :func:`register_format` call; the
built-in four are registered by :mod:`geoviz.export.formats`. Everything else reads the
registry: the dispatcher (:func:`geoviz.export.export_dataset`, :func:`export_bytes`,
:func:`load_export`, :func:`load_hard_labels`, :func:`verify_manifest`), the CLI's
``--format`` choices and the app's Export page (its choices, file names and MIME types).
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from geoviz.data.dataset import SoftLabeledDataset
from geoviz.errors import DatasetFormatError, ExportError
from geoviz.files import open_regular_file

#: how an export sits on disk: one file, a folder of files, or a ``.zip`` of that folder
Container = Literal["file", "dir", "zip"]

__all__ = [
    "BuiltExport",
    "Container",
    "ExportFormatSpec",
    "embedded_manifest",
    "existing",
    "export_formats",
    "format_spec",
    "read_export",
    "register_format",
    "resolve_target",
    "sniff_format",
    "unregister_format",
]


@dataclass(frozen=True)
class BuiltExport:
    """An export in memory: ``files`` (relative path -> bytes) and its manifest without
    the files' checksums (the dispatcher adds those once the bytes are final)."""

    files: dict[str, bytes]
    manifest: dict[str, Any]


#: ``build(ds, filename, created, labels, hard)``: the dataset, the data file's name (a
#: single-file format writes exactly that file), the creation time (UTC, ISO), the hard
#: labels ``(N,)`` and their manifest entry
Builder = Callable[[SoftLabeledDataset, str, str, np.ndarray, dict[str, Any]], BuiltExport]


@dataclass(frozen=True)
class ExportFormatSpec:
    """What the dispatcher needs to know of one export format.

    Attributes
    ----------
    name
        The format's name (``--format`` value, manifest ``format``).
    extension
        Suffix of a file written in this format (``".npz"``; a tree format: its ``.zip``).
    description
        One line for users, with the fidelity (``"npz — NumPy archive ..., lossless"``).
    mime
        MIME type of a download.
    build
        Serialise a dataset (:data:`Builder`).
    read
        ``read(path, container)``: the dataset back from an export of this format.
    suffixes
        Path suffixes that name this format (default: ``(extension,)``).
    tree
        Written as a folder of files with ``manifest.json`` inside (or a ``.zip`` of it);
        single-file formats embed their manifest and get a sidecar one.
    images_only
        Only image data can be written in this format.
    image_fidelity
        ``(for images, for vectors)``: added to :attr:`description` by
        :meth:`describe` when the fidelity depends on the data (``None``: it does not).
    sniff
        ``sniff(head, zip_names)``: whether a file whose first bytes are ``head`` (and, for
        a zip archive, whose members are ``zip_names``; ``None`` otherwise) is one of
        this format.
    manifest
        ``manifest(path)``: the manifest embedded in a single file, or ``None``.
    hard_labels
        ``hard_labels(path, container)``: the stored hard labels (``None``: none stored)
        and the manifest if reading them gave it (``None``: ask :attr:`manifest`).
    snippet
        ``snippet(filename)``: one line of Python that loads the file.
    """

    name: str
    extension: str
    description: str
    mime: str
    build: Builder
    read: Callable[[Path, Container], SoftLabeledDataset]
    suffixes: tuple[str, ...] = ()
    tree: bool = False
    images_only: bool = False
    image_fidelity: tuple[str, str] | None = None
    sniff: Callable[[bytes, Sequence[str] | None], bool] | None = None
    manifest: Callable[[Path], dict[str, Any] | None] | None = None
    hard_labels: (
        Callable[[Path, Container], tuple[np.ndarray | None, Mapping[str, Any] | None]] | None
    ) = None
    snippet: Callable[[str], str] | None = field(default=None)

    def __post_init__(self) -> None:
        if not self.name or not self.name.isidentifier():
            raise ExportError(f"an export format needs a plain name, got {self.name!r}")
        if not self.extension.startswith("."):
            raise ExportError(f"format {self.name!r}: extension must start with '.'")

    @property
    def path_suffixes(self) -> tuple[str, ...]:
        """Lower-case suffixes that name this format in a path."""
        return tuple(s.lower() for s in (self.suffixes or (self.extension,)))

    def describe(self, *, images: bool = True) -> str:
        """:attr:`description`, with the fidelity for this kind of data where it depends."""
        if self.image_fidelity is None:
            return self.description
        return f"{self.description}, {self.image_fidelity[0 if images else 1]}"

    def container_for(self, path: Path) -> Container:
        """How an export of this format at ``path`` sits on disk."""
        if not self.tree:
            return "file"
        return "zip" if path.suffix.lower() == ".zip" else "dir"


_REGISTRY: dict[str, ExportFormatSpec] = {}


def register_format(spec: ExportFormatSpec, *, replace: bool = False) -> ExportFormatSpec:
    """Add ``spec`` to the registry (the order of registration is the order offered).

    Raises
    ------
    ExportError
        A format of that name, or one claiming one of its suffixes, is registered already
        (unless ``replace``).
    """
    if not isinstance(spec, ExportFormatSpec):
        raise ExportError(f"register_format needs an ExportFormatSpec, got {type(spec).__name__}")
    if not replace:
        if spec.name in _REGISTRY:
            raise ExportError(f"export format {spec.name!r} is registered already")
        for other in _REGISTRY.values():
            taken = set(other.path_suffixes) & set(spec.path_suffixes)
            if taken and not (spec.tree and other.tree and taken == {".zip"}):
                raise ExportError(
                    f"export format {spec.name!r}: suffix {sorted(taken)[0]!r} already names "
                    f"{other.name!r}"
                )
    _REGISTRY[spec.name] = spec
    return spec


def unregister_format(name: str) -> None:
    """Remove format ``name`` (a plug-in's, or a test's toy format)."""
    _REGISTRY.pop(name, None)


def export_formats(*, images: bool | None = None) -> tuple[str, ...]:
    """The registered formats' names, in registration order; with ``images=False`` only
    those that can hold vectors."""
    return tuple(
        name for name, spec in _REGISTRY.items() if images is not False or not spec.images_only
    )


def format_spec(name: str) -> ExportFormatSpec:
    """The spec of format ``name``; :class:`ExportError` naming the choices otherwise."""
    spec = _REGISTRY.get(str(name))
    if spec is None:
        raise ExportError(
            f"unknown export format {name!r}: use one of {', '.join(export_formats())}"
        )
    return spec


def _by_suffix(suffix: str) -> ExportFormatSpec | None:
    for spec in _REGISTRY.values():
        if suffix in spec.path_suffixes:
            return spec
    return None


def resolve_target(path: Path, fmt: str | None) -> tuple[ExportFormatSpec, Container]:
    """Format and container of an export to be written at ``path`` (the format inferred from
    the suffix when ``fmt`` is ``None``; a folder or no suffix: the first tree format)."""
    suffix = path.suffix.lower()
    inferred = _by_suffix(suffix)
    if fmt is None:
        if inferred is None and (suffix == "" or path.is_dir()):
            inferred = next((s for s in _REGISTRY.values() if s.tree), None)
        if inferred is None:
            known = ", ".join(
                sorted({s for spec in _REGISTRY.values() for s in spec.path_suffixes})
            )
            raise ExportError(
                f"{path}: cannot infer the export format from suffix {suffix!r}; use {known} "
                "or a directory, or pass format="
            )
        spec = inferred
    else:
        spec = format_spec(fmt)
        if inferred is not None and suffix not in spec.path_suffixes:
            raise ExportError(f"{path}: suffix {suffix!r} does not match format {spec.name!r}")
    return spec, spec.container_for(path)


def existing(path: str | Path) -> Path:
    """``path`` as a :class:`~pathlib.Path`; :class:`DatasetFormatError` when nothing is there."""
    path = Path(path)
    if not path.exists():
        raise DatasetFormatError("no such file or directory", path)
    return path


def sniff_format(path: Path) -> tuple[ExportFormatSpec, Container]:
    """The format of the export at ``path`` (which exists): by its suffix, else by its first
    bytes and, for a zip archive, its members (each format's :attr:`~ExportFormatSpec.sniff`)."""
    if path.is_dir():
        tree = next((s for s in _REGISTRY.values() if s.tree), None)
        if tree is not None:
            return tree, "dir"
    spec = _by_suffix(path.suffix.lower())
    if spec is not None:
        return spec, spec.container_for(path)
    try:
        with open_regular_file(path, error=lambda problem: DatasetFormatError(problem, path)) as fh:
            head = fh.read(4)
    except OSError as err:
        raise DatasetFormatError(f"cannot read export: {err.strerror or err}", path) from err
    names: list[str] | None = None
    if head.startswith(b"PK"):
        try:
            with zipfile.ZipFile(path) as zf:
                names = zf.namelist()
        except zipfile.BadZipFile as err:
            raise DatasetFormatError(f"corrupt zip archive: {err}", path) from err
    for spec in _REGISTRY.values():
        if spec.sniff is not None and spec.sniff(head, names):
            return spec, "zip" if spec.tree else "file"
    known = ", ".join(export_formats())
    raise DatasetFormatError(f"not a geoviz export ({known}; a tree format as a dir or zip)", path)


def read_export(path: Path) -> SoftLabeledDataset:
    """Read the export at ``path`` (which exists) with the reader of its format."""
    spec, container = sniff_format(path)
    return spec.read(path, container)


def embedded_manifest(path: Path) -> dict[str, Any] | None:
    """The manifest inside a single-file export, or ``None`` (a tree format, or none there)."""
    spec, _ = sniff_format(path)
    if spec.manifest is None:
        return None
    try:
        return spec.manifest(path)
    except Exception as err:  # any parse failure of a file claiming to be an export
        raise ExportError(f"{path}: corrupt export: {err}") from err
