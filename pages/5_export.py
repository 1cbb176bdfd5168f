"""Page 5 · Export: write P_a at the chosen weights as npz, pt, ImageFolder zip or Parquet."""

from __future__ import annotations

import json
from typing import NamedTuple

import streamlit as st

from geoviz import glossary
from geoviz.app import widgets
from geoviz.app.services import export as export_services
from geoviz.app.services import geodesic as geodesic_services
from geoviz.app.services.errors import error_text
from geoviz.app.session import SessionModel
from geoviz.data.dataset import SoftLabeledDataset
from geoviz.errors import ExportExistsError, GeovizError
from geoviz.export import (
    DEFAULT_HARD_LABEL_RULE,
    HARD_LABEL_RULES,
    export_formats,
    format_description,
    load_snippet,
)
from geoviz.geodesic.result import GeodesicResult
from geoviz.geodesic.uncertainty import GeodesicBootstrap
from geoviz.geodesic.weights import SimplexWeights, format_weights
from geoviz.viz.images import as_display_images, image_grid, soft_label_captions
from geoviz.viz.report import hard_label_shares, markdown_literal, plotly_literal

RULE_HELP = {
    "block-sample": "block-sample — draw reference i with probability a_i, then its top class",
    "argmax": "argmax — top class over all references (over-represents large a_i)",
}


def intervals_note(boot: GeodesicBootstrap | None, error: BaseException | None) -> None:
    """One line on whether the written manifest carries the bootstrap intervals."""
    if boot is not None:
        st.caption(
            f"The manifest carries the bootstrap intervals of page 3 ({boot.replicates} "
            f"resamples of Q, level {boot.level:.0%}) under `uncertainty`."
        )
    elif error is not None:
        st.caption("The manifest has no intervals: " + markdown_literal(error_text(error)))
    else:
        st.caption("The bootstrap intervals are being computed; the file will carry them.")


def weights_choice(model: SessionModel, result: GeodesicResult) -> SimplexWeights:
    """The weights to write: ``a_hat``, or the ones picked on page 3 (shown with their
    objective)."""
    names = list(result.reference_names)
    picked = model.picked_weights(result.m)
    options = [f"{glossary.A_HAT} (projection of Q onto the geodesic)", "picked a (page 3)"]
    source = st.radio(
        "Weights",
        options,
        index=1 if picked is not None else 0,
        horizontal=True,
        key="export_weights",
        help=f"Pick weights on page 3; until then only {glossary.A_HAT} is available.",
    )
    if source == options[1] and picked is None:
        st.info(f"No weights picked on page 3 yet: using {glossary.A_HAT}.")
    weights = (
        picked
        if (source == options[1] and picked is not None)
        else SimplexWeights.from_input(result.a_hat, result.m, decimals=None)  # a_hat exactly
    )
    st.markdown(
        f"a = {format_weights(weights, [markdown_literal(n) for n in names])} · "
        f"{glossary.OBJECTIVE} = "
        f"{float(result.objective(weights)):.4g}"
    )
    return weights


class ExportChoice(NamedTuple):
    """What the visitor chose to write: how many samples, the format, the subsample's
    seed, and the hard-label rule with its seed."""

    n: int
    fmt: str
    seed: int
    rule: str
    label_seed: int


def export_choice(result: GeodesicResult) -> ExportChoice:
    """The widgets of the sample count, the format and the hard-label rule."""
    n_max = result.target.n_samples
    images = result.image_shape is not None
    c1, c3 = st.columns(2)
    n = int(c1.number_input("Number of samples", 2, n_max, n_max, step=100, key="export_n"))
    seed = int(c3.number_input("Subsample seed", 0, 10_000, 0, key="export_seed"))
    formats = list(export_formats(images=images))  # what geoviz.export has registered
    # the whole width: each format's one-line description is whole at 1280 px (a third of
    # the width cut it, issue 45)
    fmt = st.selectbox(
        "Format",
        formats,
        format_func=lambda f: format_description(f, images=images),
        key="export_fmt",
    )
    if "lossy (uint8)" in format_description(fmt, images=images):
        st.caption(
            "This format stores images as uint8 PNGs: features are rounded to multiples of 1/255 "
            "(lossy (uint8)); use npz or pt for exact float32 features."
        )
    r1, r2 = st.columns([3, 1])
    rule = r1.radio(
        "Hard-label rule",
        list(HARD_LABEL_RULES),
        index=list(HARD_LABEL_RULES).index(DEFAULT_HARD_LABEL_RULE),
        format_func=lambda r: RULE_HELP.get(r, r),
        key="export_label_rule",
        help="How the `labels` column and ImageFolder class folders are derived from the soft "
        "labels. block-sample keeps each reference's share of hard labels near its weight a_i; "
        "argmax favours references with large weights. Recorded in the manifest.",
    )
    label_seed = int(r2.number_input("Hard-label seed", 0, 10_000, 0, key="export_label_seed"))
    return ExportChoice(n, fmt, seed, rule, label_seed)


def preview(result: GeodesicResult, pa: SoftLabeledDataset, choice: ExportChoice) -> None:
    """The first samples of ``P_a``, its hard labels per reference and its metadata."""
    st.subheader("Preview")
    if pa.image_shape is not None:
        k = min(20, pa.n_samples)
        st.plotly_chart(
            image_grid(
                as_display_images(pa.features[:k], pa.image_shape),
                soft_label_captions(pa.soft_labels[:k], pa.class_names, two_lines=True),
                ncols=10,
                title=f"{plotly_literal(pa.name)}: first {k} of {pa.n_samples} samples",
            ),
            key="export_preview",
        )
        if isinstance(pa.metadata.get("grey_note"), str):  # a colour target of grey references
            st.caption(markdown_literal(pa.metadata["grey_note"]))
    st.markdown("**Hard labels per reference** (share of samples vs the weights a)")
    st.dataframe(hard_label_shares(result, pa, choice.rule, choice.label_seed), hide_index=True)
    with st.expander("Metadata written with the data"):
        st.json(json.loads(json.dumps(pa.metadata, default=str)))


def download(
    model: SessionModel, result: GeodesicResult, pa: SoftLabeledDataset, choice: ExportChoice
) -> tuple[GeodesicBootstrap | None, BaseException | None]:
    """The file to download (prepared on a click); returns the bootstrap the manifest
    carries and why it is missing."""
    fmt, rule, label_seed = choice.fmt, choice.rule, choice.label_seed
    st.subheader("Download")
    # the manifest carries the bootstrap intervals the Geodesic page showed (its explorer's
    # bootstrap, started here if no page asked for it yet), as `geoviz project --out` does
    boot, boot_error = geodesic_services.explorer_bootstrap(
        model.scenario, result, wait_seconds=0.0
    )
    intervals_note(boot, boot_error)
    ready = export_services.export_ready(
        export_services.with_intervals(pa, boot), fmt, rule, label_seed
    )
    if not ready and st.button(f"Prepare {fmt} file", type="primary", key="export_prepare"):
        with st.spinner("Serialising…"):
            try:
                boot = geodesic_services.bootstrap_for_export(
                    model.scenario, result, boot, boot_error
                )
                export_services.export_payload(
                    export_services.with_intervals(pa, boot), fmt, rule, label_seed
                )
            except GeovizError as err:
                widgets.show_error(err)
            else:
                st.rerun()  # show the download button instead of this one
    if ready:
        data, filename, mime = export_services.export_payload(
            export_services.with_intervals(pa, boot), fmt, rule, label_seed
        )
        st.download_button(
            f"Download {markdown_literal(filename)} ({len(data) / 1e6:.2f} MB)",
            data,
            file_name=filename,
            mime=mime,
            key="export_download",
            on_click="ignore",
        )
        st.markdown("Load it back with:")
        st.code(load_snippet(fmt, filename), language="python")
    return boot, boot_error


def save_to_folder(
    model: SessionModel,
    result: GeodesicResult,
    pa: SoftLabeledDataset,
    choice: ExportChoice,
    boot: GeodesicBootstrap | None,
    boot_error: BaseException | None,
) -> None:
    """Writing under the operator's export folder, when the server allows it."""
    st.subheader("Save to a folder on the server")
    root = model.settings.export_root
    if root is None:
        st.caption(
            "Saving on the server is off: use the download button above. (The server's operator "
            "can allow it with `GEOVIZ_EXPORT_ROOT`, a folder exports are written under.)"
        )
        return
    sub = st.text_input(
        "Sub-folder of the server's export folder (optional)",
        "",
        key="export_subfolder",
        help="One folder name; anything else is replaced by '_'. Files are written only "
        "inside the export folder the operator set.",
    )
    overwrite = st.checkbox("Overwrite existing files", key="export_overwrite")
    if st.button("Save to folder", key="export_save"):
        try:
            boot = geodesic_services.bootstrap_for_export(model.scenario, result, boot, boot_error)
            res = export_services.save_export(
                export_services.with_intervals(pa, boot),
                root,
                choice.fmt,
                subfolder=sub,
                overwrite=overwrite,
                rule=choice.rule,
                seed=choice.label_seed,
            )
        except ExportExistsError:
            st.error(
                "A file of that name is already in the export folder. Tick “Overwrite existing "
                "files” to replace it, or choose another sub-folder."
            )
        except (GeovizError, OSError) as err:
            widgets.show_error(err, "Could not save")
        else:
            shown = [str(p.relative_to(root)) for p in res.paths]
            st.success(
                "Wrote "
                + ", ".join(markdown_literal(p) for p in shown)
                + " in the server's export folder."
            )


def main(model: SessionModel) -> None:
    st.title("5 · Export")
    st.markdown(
        r"Write samples of $P_a = \big(\sum_i a_i T_i\big)_\sharp Q$ with their soft labels "
        "and a checksummed manifest."
    )
    result = widgets.geodesic_with_status(model)
    if result is None:
        return
    weights = weights_choice(model, result)
    choice = export_choice(result)
    n_max = result.target.n_samples
    try:
        pa = geodesic_services.interpolation(
            model.scenario,
            result,
            weights,
            n=None if choice.n >= n_max else choice.n,
            seed=choice.seed,
        )
    except GeovizError as err:
        widgets.show_error(err)
        return
    preview(result, pa, choice)
    boot, boot_error = download(model, result, pa, choice)
    save_to_folder(model, result, pa, choice, boot, boot_error)


with widgets.app_page("5 · Export") as model:
    main(model)
