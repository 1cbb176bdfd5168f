"""The app's services: every computation a page needs, cached, without Streamlit.

One module per page, and the shared parts:

* :mod:`~geoviz.app.services.datasets` (Datasets page), :mod:`~geoviz.app.services.maps`
  (Maps), :mod:`~geoviz.app.services.geodesic` (the fit, ``P_a``, mixup),
  :mod:`~geoviz.app.services.mccann_path` (McCann), :mod:`~geoviz.app.services.export`
  (Export), :mod:`~geoviz.app.services.evidence` (Evidence),
  :mod:`~geoviz.app.services.embeddings` (the UMAP/PCA embedding);
* :mod:`~geoviz.app.services.caches` (the process's job runner and cache tiers, the disk
  cache) and :mod:`~geoviz.app.services.errors` (what a visitor reads).

Pages (``pages/*.py``) call these functions and :mod:`geoviz.viz` (figures, and tables in
:mod:`geoviz.viz.report`), and only lay out widgets; :mod:`geoviz.app.widgets` holds the
Streamlit parts they share. ``from geoviz.app import services`` gives every public name.
Services take values (a :class:`~geoviz.app.scenario.Scenario`, loaded data, a fitted
result, :class:`~geoviz.geodesic.weights.SimplexWeights`); only those that need the
session's uploads or the server's settings take the
:class:`~geoviz.app.session.SessionModel`.

Caching: one in-memory :class:`~geoviz.app.jobs.ResultStore` per server process
(:func:`store`) with two tiers: *fits* (datasets, maps, embeddings, pairwise OTDD) and
*derived* values (``P_a``, McCann steps, figures, tables, export bytes), so moving the
weights can never evict a fit. Keys are the scenario's hash (:meth:`Scenario.key`,
computed once per scenario) plus the call's parameters, shared by every page and session.
What must survive a restart goes to the on-disk :class:`~geoviz.backend.DiskCache` as
well: the OTDD maps (by :func:`geoviz.geodesic.fit_geodesic`), the fitted embedding and
the ``P_a`` placements (:func:`embedding`, :func:`place_points`). Uploads have their own
store (:func:`upload_store`, :class:`geoviz.app.uploads.UploadStore`): files on disk under a
quota and an expiry, parsed datasets in memory under a byte budget, named by a keyed hash
(:func:`add_upload`), so a shared URL works on the same server while the upload lasts.

The geodesic fit runs as a :class:`~geoviz.app.jobs.BackgroundJob` in the store
(:func:`start_geodesic`): it outlives the page that started it, and any page can watch
its progress. The scenario's map method (barycentric or neural) is part of its key, so
both geodesics of the same data live side by side in the store (and the maps in the disk
cache): the Maps page compares them (:func:`map_pair`, :func:`side_by_side_figures`,
:func:`map_comparison_tables`). What a map can tell is read off its typed diagnostics
(:func:`map_table`, :func:`field_text`; formats keyed by diagnostics type and field in
:data:`geoviz.viz.report.FIELD_FORMATS`), never by its method's name.
"""

from __future__ import annotations

from geoviz.app.services.caches import (
    BACKGROUND_NICENESS,
    MAX_DERIVED,
    MAX_FITS,
    configure_torch,
    disk_cache,
    lower_thread_priority,
    session_scope,
    store,
    sweep_once,
    upload_store,
)
from geoviz.app.services.datasets import (
    FEATURE_SPACE_HELP,
    ScenarioData,
    add_upload,
    choice_caption,
    choice_options,
    dataset_projection,
    feature_space_names,
    pairwise_otdd,
    pairwise_otdd_if_ready,
    scenario_data,
    scenario_data_if_ready,
    space_line,
    upload_notice,
)
from geoviz.app.services.embeddings import (
    embedding,
    embedding_on_disk,
    place_points,
    start_embedding,
    start_embedding_warm_up,
)
from geoviz.app.services.errors import (
    error_text,
)
from geoviz.app.services.evidence import (
    EvidenceRequest,
    EvidenceResult,
    evidence_if_ready,
    evidence_job,
    evidence_scenario,
    finish_evidence,
    start_evidence,
)
from geoviz.app.services.export import (
    export_folder,
    export_payload,
    export_ready,
    save_export,
)
from geoviz.app.services.geodesic import (
    EXPLORER_REPLICATES,
    bootstrap_for_export,
    bootstrap_job,
    explorer_bootstrap,
    finish_geodesic,
    geodesic_config,
    geodesic_if_ready,
    geodesic_job,
    interpolation,
    mixup,
    start_geodesic,
)
from geoviz.app.services.maps import (
    MAX_TEACHING_POINTS,
    companion_scenario,
    comparison_indices,
    map_comparison_tables,
    map_pair,
    nearest_reference_figure,
    plan_neighbours_figure,
    set_epsilon,
    set_map_method,
    side_by_side_figures,
    teaching_indices,
)
from geoviz.app.services.mccann_path import (
    mccann,
)
from geoviz.viz.fitted_maps import distance_caption, has_plan_neighbours
from geoviz.viz.report import (
    NO_PLAN,
    diagnostic_fields,
    field_format,
    field_text,
    field_value,
    format_stat,
    hard_label_shares,
    label_agreement,
    map_table,
    map_table_notes,
    nearest_reference_ratio,
    nearest_reference_table,
    plan_neighbours_table,
)

__all__ = [
    "BACKGROUND_NICENESS",
    "EXPLORER_REPLICATES",
    "FEATURE_SPACE_HELP",
    "MAX_DERIVED",
    "MAX_FITS",
    "MAX_TEACHING_POINTS",
    "NO_PLAN",
    "EvidenceRequest",
    "EvidenceResult",
    "ScenarioData",
    "add_upload",
    "bootstrap_for_export",
    "bootstrap_job",
    "choice_caption",
    "choice_options",
    "companion_scenario",
    "comparison_indices",
    "configure_torch",
    "dataset_projection",
    "diagnostic_fields",
    "disk_cache",
    "distance_caption",
    "embedding",
    "embedding_on_disk",
    "error_text",
    "evidence_if_ready",
    "evidence_job",
    "evidence_scenario",
    "explorer_bootstrap",
    "export_folder",
    "export_payload",
    "export_ready",
    "feature_space_names",
    "field_format",
    "field_text",
    "field_value",
    "finish_evidence",
    "finish_geodesic",
    "format_stat",
    "geodesic_config",
    "geodesic_if_ready",
    "geodesic_job",
    "hard_label_shares",
    "has_plan_neighbours",
    "interpolation",
    "label_agreement",
    "lower_thread_priority",
    "map_comparison_tables",
    "map_pair",
    "map_table",
    "map_table_notes",
    "mccann",
    "mixup",
    "nearest_reference_figure",
    "nearest_reference_ratio",
    "nearest_reference_table",
    "pairwise_otdd",
    "pairwise_otdd_if_ready",
    "place_points",
    "plan_neighbours_figure",
    "plan_neighbours_table",
    "save_export",
    "scenario_data",
    "scenario_data_if_ready",
    "session_scope",
    "set_epsilon",
    "set_map_method",
    "side_by_side_figures",
    "space_line",
    "start_embedding",
    "start_embedding_warm_up",
    "start_evidence",
    "start_geodesic",
    "store",
    "sweep_once",
    "teaching_indices",
    "upload_notice",
    "upload_store",
]
