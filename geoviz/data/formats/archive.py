"""Safe extraction of zip archives (PKWARE APPNOTE ``.zip``) holding a dataset folder.

Folder layouts (ImageFolder, MNIST-M, IDX pairs) are uploaded, or stored, as
one ``.zip``. Extraction refuses zip-slip members (absolute paths, drive
letters, ``..``) and encrypted members, skips hidden entries (``__MACOSX/``,
``.DS_Store``), and caps the member count and the uncompressed size at limits
the caller passes: :data:`MAX_ZIP_MEMBERS` and :data:`MAX_UNCOMPRESSED_BYTES`,
defined here and read by the dispatcher in :mod:`geoviz.data.formats` at each
call (so they can be changed on that package). The dispatcher also decides
which dataset the extracted folder holds.

Nothing is extracted before the members' declared uncompressed sizes
(``ZipInfo.file_size``) have been added up and checked: against the cap, against the
free space of the temporary folder, and against this process's memory (the dataset
inside needs at least its files' size once loaded; :func:`geoviz.memory.check_bytes`).
The declared sizes are a true bound: :mod:`zipfile` never yields more than a member's
declared size (and checks its CRC), and the bytes written are counted again while
extracting. A compression-ratio test is therefore not needed: a highly compressed member
is harmless once its declared size fits.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import IO

from geoviz.data.formats._common import _hidden, rebased_errors
from geoviz.data.formats.idx import _IDX_MAX_HEADER, _idx_role, check_idx_head
from geoviz.errors import DatasetFormatError, ResourceError
from geoviz.memory import check_bytes, format_bytes

#: Largest total uncompressed size of a zip archive that will be extracted.
MAX_UNCOMPRESSED_BYTES: int = 2 * 1024**3
#: Largest number of members of a zip archive that will be extracted.
MAX_ZIP_MEMBERS: int = 500_000


@contextmanager
def _extracted_zip(
    file: Path | IO[bytes], label: str, *, limit: int, max_members: int
) -> Iterator[Path]:
    """Extract ``file`` to a temporary folder, yield it, and delete it afterwards.

    Dataset errors raised while extracting or in the ``with`` body name
    ``label/<member>`` instead of the temporary folder (see
    :func:`~geoviz.data.formats._common.rebased_errors`).

    Parameters
    ----------
    file
        The archive: a path or a binary file object.
    label
        Name of the archive in error messages (the upload name or the path).
    limit, max_members
        Largest total uncompressed size in bytes and largest number of
        members (see :func:`_extract_zip`).
    """
    with tempfile.TemporaryDirectory(prefix="geoviz-zip-") as tmp:
        root = Path(tmp)
        with rebased_errors(root, label):
            _extract_zip(file, root, label, limit=limit, max_members=max_members)
            yield root


def _extract_zip(
    file: Path | IO[bytes], dest: Path, label: str, *, limit: int, max_members: int
) -> None:
    """Extract ``file`` into ``dest``, refusing zip-slip members and oversized archives.

    ``limit`` caps the total uncompressed size in bytes (declared and actually
    written), ``max_members`` the number of members.
    """
    try:
        zf = zipfile.ZipFile(file)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError) as exc:
        raise DatasetFormatError(f"not a valid zip archive ({exc})", label) from exc
    with zf:
        infos = zf.infolist()
        if len(infos) > max_members:
            raise DatasetFormatError(
                f"zip archive has {len(infos)} members, more than the limit of {max_members}",
                label,
            )
        plan: list[tuple[zipfile.ZipInfo, tuple[str, ...]]] = []
        total = 0
        for info in infos:
            member = info.filename.replace("\\", "/")
            pure = PurePosixPath(member)
            if member.startswith("/") or re.match(r"^[A-Za-z]:", member) or ".." in pure.parts:
                raise DatasetFormatError(
                    f"refusing unsafe zip member {info.filename!r}: absolute path or '..' "
                    "would write outside the extraction folder (zip-slip)",
                    label,
                )
            parts = tuple(p for p in pure.parts if p not in ("", "."))
            if not parts or any(_hidden(p) for p in parts):
                continue  # __MACOSX/, .DS_Store and other hidden entries
            if info.flag_bits & 0x1:
                raise DatasetFormatError(f"zip member {info.filename!r} is encrypted", label)
            total += info.file_size
            if total > limit:
                raise DatasetFormatError(
                    f"zip archive expands to more than {_fmt_bytes(limit)} (the limit for uploads); "
                    "upload a smaller dataset or load it from disk",
                    label,
                )
            plan.append((info, parts))
        _check_room(total, dest, label)
        _check_idx_members(zf, plan, label)
        dest_resolved = dest.resolve()
        written = 0
        for info, parts in plan:
            target = dest.joinpath(*parts)
            if not target.resolve().is_relative_to(dest_resolved):
                raise DatasetFormatError(
                    f"refusing unsafe zip member {info.filename!r} (zip-slip)", label
                )
            try:
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, open(target, "wb") as out:
                    while chunk := src.read(1 << 20):
                        written += len(chunk)
                        if written > limit:
                            raise DatasetFormatError(
                                f"zip archive expands to more than {_fmt_bytes(limit)} (the limit for uploads)",
                                label,
                            )
                        out.write(chunk)
            except DatasetFormatError:
                raise
            except (
                zipfile.BadZipFile,
                zlib.error,
                EOFError,
                OSError,
                NotImplementedError,
                RuntimeError,
            ) as exc:
                # an OSError's text names the temporary folder: its reason only
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
                raise DatasetFormatError(
                    f"cannot extract zip member {info.filename!r} ({reason})", label
                ) from exc


def _check_room(total: int, dest: Path, label: str) -> None:
    """Refuse an archive whose declared contents fit neither the disk nor the memory."""
    try:
        free = shutil.disk_usage(dest).free
    except OSError:
        free = None
    if free is not None and total > free:
        raise ResourceError(
            f"{label}: extracting the zip archive needs {format_bytes(total)} of disk space but "
            f"the temporary folder has only {format_bytes(free)} free; free some space or set "
            "TMPDIR to a larger disk"
        )
    check_bytes(
        total, f"loading the dataset in {label} ({format_bytes(total)} uncompressed)", at_least=True
    )


def _check_idx_members(
    zf: zipfile.ZipFile, plan: list[tuple[zipfile.ZipInfo, tuple[str, ...]]], label: str
) -> None:
    """Check the dimensions declared by the archive's IDX members before extracting any.

    An uncompressed IDX file of zeros compresses a thousandfold, and its dataset needs
    13 times its size (float32 features and their temporaries): its header is read from
    the archive (the first bytes of the member only) and checked against memory.
    """
    for info, parts in plan:
        if info.is_dir() or _idx_role(parts[-1]) is None or parts[-1].lower().endswith(".gz"):
            continue
        try:
            with zf.open(info) as member:
                head = member.read(_IDX_MAX_HEADER)
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError) as exc:
            raise DatasetFormatError(
                f"cannot extract zip member {info.filename!r} ({exc})", label
            ) from exc
        check_idx_head(head, f"{label}/{'/'.join(parts)}")


def _fmt_bytes(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:g} {unit}" if unit == "bytes" else f"{n:.3g} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} bytes"  # pragma: no cover
