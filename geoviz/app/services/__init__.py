"""The app's services: every computation a page needs, cached, without Streamlit.

One module per page, and the shared parts:

* :mod:`~geoviz.app.services.datasets` (Datasets page), :mod:`~geoviz.app.services.maps`
  (Maps), :mod:`~geoviz.app.services.geodesic` (the fit, ``P_a``, mixup),
  :mod:`~geoviz.app.services.export` (Export), :mod:`~geoviz.app.services.evidence`
  (Evidence: the transfer runs) and :mod:`~geoviz.app.services.stored_evidence` (the
  studies shipped with the app), :mod:`~geoviz.app.services.embeddings` (the UMAP/PCA
  embedding);
* :mod:`~geoviz.app.services.caches` (the process's job runner and cache tiers, the disk
  cache) and :mod:`~geoviz.app.services.errors` (what a visitor reads).

Pages (``pages/*.py``) call these functions and :mod:`geoviz.viz` (figures, and tables in
:mod:`geoviz.viz.report`), and only lay out widgets; :mod:`geoviz.app.widgets` holds the
Streamlit parts they share. A page imports the service module it uses
(``from geoviz.app.services import maps as map_services``), so that a call says where its
function lives. Services take values (a :class:`~geoviz.app.scenario.Scenario`, loaded
data, a fitted result, :class:`~geoviz.geodesic.weights.SimplexWeights`); only those that
need the session's uploads or the server's settings take the
:class:`~geoviz.app.session.SessionModel`.

Caching: one in-memory :class:`~geoviz.app.jobs.ResultStore` per server process
(:func:`~geoviz.app.services.caches.store`) with two tiers: *fits* (datasets, maps,
embeddings, pairwise OTDD) and *derived* values (``P_a``, figures, tables, export bytes),
so moving the weights can never evict a fit. Keys are the scenario's hash
(:meth:`Scenario.key`, computed once per scenario) plus the call's parameters, shared by
every page and session. What must survive a restart goes to the on-disk
:class:`~geoviz.backend.DiskCache` as well: the OTDD maps (by
:func:`geoviz.geodesic.fit_geodesic`), the fitted embedding and the ``P_a`` placements
(:func:`~geoviz.app.services.embeddings.embedding`,
:func:`~geoviz.app.services.embeddings.place_points`). Uploads have their own store
(:func:`~geoviz.app.services.caches.upload_store`,
:class:`geoviz.app.uploads.UploadStore`): files on disk under a quota and an expiry, parsed
datasets in memory under a byte budget, named by a keyed hash
(:func:`~geoviz.app.services.datasets.add_upload`), so a shared URL works on the same
server while the upload lasts.

The geodesic fit runs as a :class:`~geoviz.app.jobs.BackgroundJob` in the store
(:func:`~geoviz.app.services.geodesic.start_geodesic`): it outlives the page that started
it, and any page can watch its progress. The scenario's map method (barycentric or
neural) is part of its key, so both geodesics of the same data live side by side in the
store (and the maps in the disk cache): the Maps page compares them
(:mod:`~geoviz.app.services.maps`). What a map can tell is read off its typed diagnostics
(:func:`geoviz.viz.report.map_table`, :func:`geoviz.viz.report.field_text`; formats keyed
by diagnostics type and field in :data:`geoviz.viz.report.FIELD_FORMATS`), never by its
method's name.
"""
