"""File and folder names in an export: manifest and labels files, safe names, sidecars."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

MANIFEST_NAME = "manifest.json"
LABELS_NAME = "labels.csv"
#: Windows device names, reserved with any extension and in any case (its documentation's
#: list: COM0-9 and LPT0-9 include the superscript digits ¹ ² ³, which Windows also takes
#: for device numbers)
_DEVICE_DIGITS = "0123456789\u00b9\u00b2\u00b3"
_WINDOWS_RESERVED = frozenset(
    {"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"}
    | {f"COM{d}" for d in _DEVICE_DIGITS}
    | {f"LPT{d}" for d in _DEVICE_DIGITS}
)


def is_windows_reserved(name: str) -> bool:
    """Whether Windows refuses ``name`` as a file or folder name because it is a device:
    its part before the first dot, without trailing spaces and dots, is one of
    ``CON PRN AUX NUL COM0-9 LPT0-9 COM¹²³ LPT¹²³`` (case-insensitive; ``nul.txt``,
    ``Com¹.tar.gz`` and ``AUX . `` too)."""
    stem = str(name).rstrip(" .").split(".")[0].rstrip(" ")
    return stem.upper() in _WINDOWS_RESERVED


def sidecar_manifest_path(path: str | Path) -> Path:
    """Where the manifest of a single-file export lives: ``out/synth.npz`` -> ``out/synth.manifest.json``."""
    path = Path(path)
    return path.with_name(f"{path.stem if path.suffix else path.name}.manifest.json")


def safe_name(name: str, fallback: str = "item", max_bytes: int = 100) -> str:
    """A file/folder name derived from ``name`` that is safe on Linux, macOS and Windows.

    Letters and digits (any script, NFC-normalised) and ``-_.+`` are kept;
    everything else (``/``, ``\\``, ``:``, spaces, quotes, control characters...)
    becomes ``_``; runs of ``_`` collapse; leading/trailing dots, underscores and
    spaces are dropped (no hidden files, no ``..``); Windows device names
    (:func:`is_windows_reserved`, e.g. ``CON``, ``nul.txt``, ``COM¹``) get a ``_`` prefix; the result is at most ``max_bytes`` UTF-8 bytes. Empty results
    give ``fallback``. Distinct names can map to the same result: see
    :func:`class_folder_names` for a collision-free mapping.
    """
    text = unicodedata.normalize("NFC", str(name))
    text = "".join(ch if (ch.isalnum() or ch in "-_.+") else "_" for ch in text)
    text = re.sub(r"_+", "_", text).strip("._ ")
    while len(text.encode("utf-8")) > max_bytes:
        text = text[:-1].rstrip("._ ")
    if not text:
        text = fallback
    if is_windows_reserved(text):
        text = f"_{text}"
    return text


def class_folder_names(class_names: tuple[str, ...] | list[str]) -> list[str]:
    """One distinct, file-system-safe folder name per class (case-insensitively distinct).

    Collisions after :func:`safe_name` (``"a/b"`` and ``"a_b"``, ``"A"`` and
    ``"a"``) are resolved by appending ``_<class index>``, in class order, so the
    mapping is deterministic. Names never clash with ``labels.csv`` or
    ``manifest.json``.
    """
    used = {LABELS_NAME.casefold(), MANIFEST_NAME.casefold()}
    folders: list[str] = []
    for k, name in enumerate(class_names):
        candidate = safe_name(name, fallback=f"class_{k}")
        while candidate.casefold() in used:
            candidate = f"{candidate}_{k}"
        used.add(candidate.casefold())
        folders.append(candidate)
    return folders
