"""Argument helpers of the ``geoviz`` commands: parsers for ``argparse`` and bound checks.

Parsers (``type=`` of ``add_argument``; bad text is an argparse usage error, exit 2):
:func:`positive_int`, :func:`number`, :func:`names`, :func:`number_list`.

Shared options (one declaration each, with the per-command default and help as
parameters): :func:`add_n_option`, :func:`add_seed_option`, :func:`add_size_option`,
:func:`add_features_option`, :func:`add_epsilon_option`, :func:`add_backend_args`.

Checks (run right after parsing, before any dataset is loaded; a
:class:`~geoviz.errors.GeovizError` naming the flag, printed by :func:`geoviz.cli.main`):
:func:`cli_int`, :func:`cli_seed`, :func:`cli_epsilon`, :func:`cli_seeds` — the shared
bounds of :mod:`geoviz.limits`; :func:`cli_path` — a path the file system can take;
:func:`given_options` and :func:`refuse_unused` — an option that would do nothing in the
given combination is refused, not silently ignored.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from geoviz import limits
from geoviz.errors import GeovizError
from geoviz.tasks import check_ray_address
from geoviz.vocabulary import BUILTIN_SPACES, DEFAULT_EPSILON, EXPORT_FORMATS, TASK_BACKENDS

__all__ = [
    "MAX_CANDIDATES",
    "MAX_SEEDS",
    "OUTPUT_NAME_MARGIN",
    "ExportFormatChoices",
    "add_backend_args",
    "add_epsilon_option",
    "add_features_option",
    "add_n_option",
    "add_seed_option",
    "add_size_option",
    "cli_epsilon",
    "cli_int",
    "cli_path",
    "cli_seed",
    "cli_seeds",
    "given_options",
    "names",
    "number",
    "number_list",
    "positive_int",
    "ray_address",
    "reference_count",
    "refuse_unused",
]

#: training seeds of one command (``geoviz transfer --seeds``: each seed trains every method)
MAX_SEEDS = 100

#: most candidate references one ``geoviz screen`` takes
MAX_CANDIDATES = 64

#: bytes an output's file name must leave free for the siblings geoviz writes beside it:
#: the temporary ``.<name>.<12 hex>.p<pid>h<8 hex>.tmp`` (up to 46 bytes more) and the
#: manifest ``<stem>.manifest.json`` (14 more)
OUTPUT_NAME_MARGIN = 64

#: longest file name and path where the file system cannot be asked (Linux's limits)
_DEFAULT_NAME_MAX = 255
_DEFAULT_PATH_MAX = 4096


# --------------------------------------------------------------------------- argparse types


def positive_int(text: str) -> int:
    """An integer ``>= 1``."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def number(text: str) -> float:
    """A float (range checks come after parsing, e.g. :func:`cli_epsilon`)."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def names(text: str) -> list[str]:
    """Comma-separated dataset names (``"usps,kmnist"``), blanks dropped; at least one."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts:
        raise argparse.ArgumentTypeError("expected comma-separated dataset names, got nothing")
    return parts


def number_list(text: str) -> list[float]:
    """Comma-separated numbers (``--weights 0.5,0.3,0.2``), checked later against ``m``."""
    try:
        return [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers, got {text!r}"
        ) from None


# --------------------------------------------------------------------------- bound checks


def cli_int(value: Any, flag: str, low: int, high: int, *, why: str = "") -> int:
    """An integer option within ``[low, high]``, else a one-sentence GeovizError naming ``flag``."""
    return limits.check_int(value, flag, low, high, why=why)


def add_epsilon_option(parser: argparse.ArgumentParser) -> None:
    """``--epsilon`` (one definition for every command): parsed as a number, checked by
    :func:`cli_epsilon` where the command validates its options (``None``: the default,
    :data:`geoviz.vocabulary.DEFAULT_EPSILON`)."""
    parser.add_argument(
        "--epsilon",
        type=number,
        default=None,
        help=(
            "entropic regularisation relative to the mean ground cost: eps_abs = epsilon x "
            f"mean(||x-x'||^2 + W_2^2). Default {DEFAULT_EPSILON:g} (sharp maps: a few "
            "reference points per mapped point); larger values blur the maps (0.05 averages "
            f"about half the reference); {limits.EPSILON_MIN:g} to {limits.EPSILON_MAX:g}"
        ),
    )


def cli_epsilon(value: Any, flag: str = "--epsilon") -> limits.RelativeEpsilon:
    """A relative epsilon option checked by :func:`geoviz.limits.check_epsilon`: the
    :class:`~geoviz.limits.RelativeEpsilon` that the library receives and never checks again.

    The message names the flag (``--epsilon 1e-20 is below 0.0001 ...``).
    """
    try:
        return limits.check_epsilon(value)
    except GeovizError as err:
        text = str(err).replace("use epsilon >=", f"use {flag} >=")
        raise GeovizError(
            flag + text[len("epsilon") :] if text.startswith("epsilon") else f"{flag}: {text}"
        ) from None


def reference_count(refs: Sequence[str], flag: str = "--refs") -> int:
    """The number of ``refs`` checked by the library's one rule
    (:func:`geoviz.limits.check_reference_count`), named by ``flag``: before any dataset
    is loaded, and before options that depend on it (``--weights``) are read."""
    try:
        return limits.check_reference_count(len(refs))
    except GeovizError as err:
        raise GeovizError(f"{flag}: {err} (comma-separated names)") from None


def cli_seed(value: Any, flag: str = "--seed") -> int:
    """A seed option in ``[0, MAX_SEED]``."""
    return limits.check_int(value, flag, 0, limits.MAX_SEED)


def cli_seeds(text: str, flag: str = "--seeds") -> list[int]:
    """1 to :data:`MAX_SEEDS` distinct comma-separated seeds, each in ``[0, MAX_SEED]``."""
    try:
        seeds = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise GeovizError(f"{flag}: expected comma-separated integers, got {text!r}") from None
    if not seeds:
        raise GeovizError(f"{flag}: expected at least one seed")
    if len(seeds) > MAX_SEEDS:
        raise GeovizError(f"{flag}: at most {MAX_SEEDS} seeds, got {len(seeds)}")
    if len(set(seeds)) != len(seeds):
        raise GeovizError(f"{flag}: seeds must be distinct, got {text!r}")
    for seed in seeds:
        cli_seed(seed, f"{flag}: every seed")
    return seeds


def _fs_limit(path: Path, name: str, default: int) -> int:
    """``os.pathconf`` of the nearest existing folder of ``path`` (``default`` if unknown)."""
    for folder in (path.parent, *path.parent.parents):
        try:
            if os.path.isdir(folder):
                return int(os.pathconf(folder, name))
        except (OSError, ValueError):
            break
    return default


def _cut(text: str, limit: int = 24) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def cli_path(text: str | Path, flag: str, *, output: bool = False) -> Path:
    """``text`` as a path the file system can take, else a one-sentence GeovizError naming
    ``flag`` (before any work, instead of an ``OSError`` after it).

    Refused: a NUL character, a path longer than the file system's ``PC_PATH_MAX``, a
    name (path component) longer than its ``PC_NAME_MAX`` bytes (255 on Linux); for an
    ``output``, a final name that leaves less than :data:`OUTPUT_NAME_MARGIN` bytes for
    the temporary and manifest files written beside it.
    """
    raw = str(text)
    if "\0" in raw:
        raise GeovizError(f"{flag}: the path contains a NUL character")
    path = Path(raw)
    path_max = _fs_limit(path, "PC_PATH_MAX", _DEFAULT_PATH_MAX)
    size = len(os.fsencode(raw))
    if size >= path_max:
        raise GeovizError(f"{flag}: the path is {size:,} bytes long; at most {path_max - 1:,}")
    name_max = _fs_limit(path, "PC_NAME_MAX", _DEFAULT_NAME_MAX)
    parts = path.parts
    for k, part in enumerate(parts):
        size = len(os.fsencode(part))
        last = output and k == len(parts) - 1
        limit = name_max - OUTPUT_NAME_MARGIN if last else name_max
        if size > limit:
            room = (
                f" (the file system takes {name_max}, less {OUTPUT_NAME_MARGIN} for the "
                "temporary and manifest files beside it)"
                if last
                else ""
            )
            raise GeovizError(
                f"{flag}: the name {_cut(part)!r} is {size:,} bytes long; at most {limit}{room}"
            )
    return path


def given_options(args: argparse.Namespace, defaults: Mapping[str, Any]) -> set[str]:
    """The options of ``defaults`` (``dest`` -> default) given on the command line, and
    their defaults filled in for the rest.

    Those options are declared with ``default=None`` so that a value given explicitly
    (even the default's) can be told apart from one left out (:func:`refuse_unused`).
    """
    given = set()
    for dest, default in defaults.items():
        if getattr(args, dest, None) is None:
            setattr(args, dest, default)
        else:
            given.add(dest)
    return given


def refuse_unused(given: Iterable[str], unused: Mapping[str, str]) -> None:
    """Refuse the first option of ``given`` that ``unused`` (``dest`` -> why it would do
    nothing) lists: one sentence naming the option, ``--option only applies ...``."""
    given = set(given)
    for dest, why in unused.items():
        if dest in given:
            raise GeovizError(f"--{dest.replace('_', '-')} {why}")


# --------------------------------------------------------------------------- shared options


def add_n_option(parser: argparse.ArgumentParser, *, default: int | None, help: str) -> None:
    """``--n``: samples per dataset (a positive integer; its bounds are checked after parsing
    with :func:`cli_int`). ``default`` and ``help`` are the command's."""
    parser.add_argument("--n", type=positive_int, default=default, help=help)


def add_seed_option(parser: argparse.ArgumentParser, *, help: str) -> None:
    """``--seed`` (default 0; checked after parsing with :func:`cli_seed`): what it seeds is
    the command's ``help``."""
    parser.add_argument("--seed", type=int, default=0, help=help)


def add_size_option(parser: argparse.ArgumentParser, *, default: int | None, help: str) -> None:
    """``--size``: the common image size (a positive integer; its bounds, which depend on the
    command, are checked after parsing)."""
    parser.add_argument("--size", type=positive_int, default=default, help=help)


def add_features_option(parser: argparse.ArgumentParser, *, default: str | None, help: str) -> None:
    """``--features``: one of the named spaces (:data:`geoviz.vocabulary.BUILTIN_SPACES`).
    ``default`` is ``"auto"``, or ``None`` where a given option must be told apart
    (:func:`given_options`)."""
    parser.add_argument("--features", choices=BUILTIN_SPACES, default=default, help=help)


def add_backend_args(parser: argparse.ArgumentParser, what: str) -> None:
    """``--backend`` and ``--ray-address``: how independent tasks run (:mod:`geoviz.tasks`).

    ``what`` names one task in the help text ("each (method, seed)", "each refit").
    """
    parser.add_argument(
        "--backend",
        choices=TASK_BACKENDS,
        default=None,  # "auto"; None tells a given --backend apart (geoviz.cli.args.given_options)
        help=f"run {what} as a Ray task (ray), in this process (sequential), or Ray if "
        "installed (auto, default)",
    )
    parser.add_argument(
        "--ray-address",
        default=None,
        help="Ray cluster address (default: $RAY_ADDRESS, else a local cluster)",
    )


def ray_address(args: argparse.Namespace) -> str | None:
    """``--ray-address``, else ``$RAY_ADDRESS``, else ``None`` (a local cluster); a malformed
    one is refused in one sentence naming where it came from."""
    if args.ray_address:
        return check_ray_address(args.ray_address, "--ray-address")
    return check_ray_address(os.environ.get("RAY_ADDRESS") or None, "RAY_ADDRESS")


class ExportFormatChoices:
    """``--format``'s ``choices``: every registered export format, read when asked.

    A value is checked against the export registry itself
    (:func:`geoviz.export.export_formats`, loaded then: a command runs anyway), so a
    plug-in's format registered in this process is accepted. Listing the choices
    (``--help``, a usage error) reads the registry once it is loaded, else the built-in
    names (:data:`geoviz.vocabulary.EXPORT_FORMATS`, what loading it would give): the
    help imports no torch.
    """

    def _names(self, *, load: bool) -> tuple[str, ...]:
        if load or "geoviz.export" in sys.modules:
            from geoviz.export import export_formats

            return export_formats()
        return EXPORT_FORMATS

    def __contains__(self, value: object) -> bool:
        return value in self._names(load=True)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names(load=False))
