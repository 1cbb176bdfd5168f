"""geoviz Streamlit app: generalized geodesics between labelled datasets.

Run with ``streamlit run app.py`` (or ``make run``). Works offline on the
bundled *NIST samples: the default scenario is Q = MNIST with references
Fashion-MNIST, USPS and KMNIST. ``GEOVIZ_APP_N`` sets the samples per dataset
(default 2000).
"""

from __future__ import annotations

import streamlit as st

from geoviz import app_compute as compute
from geoviz.app_state import SessionModel
from geoviz.viz.weights import format_weights

# a plain emoji as favicon: Material icons (":material/...:") would be fetched from a font CDN,
# and the app must work offline
PAGE_ICON = "🌐"
st.set_page_config(page_title="geoviz · generalized geodesics", page_icon=PAGE_ICON, layout="wide")

model = SessionModel(st.session_state)

PAGES = [
    st.Page(
        "pages/1_datasets.py",
        title="1 · Datasets",
        url_path="datasets",
        icon=":material/database:",
        default=True,
    ),
    st.Page("pages/2_maps.py", title="2 · OTDD maps", url_path="maps", icon=":material/route:"),
    st.Page(
        "pages/3_geodesic.py",
        title="3 · Geodesic",
        url_path="geodesic",
        icon=":material/change_history:",
    ),
    st.Page(
        "pages/4_mccann.py", title="4 · McCann", url_path="mccann", icon=":material/animation:"
    ),
    st.Page("pages/5_export.py", title="5 · Export", url_path="export", icon=":material/download:"),
    st.Page(
        "pages/6_about.py",
        title="6 · About the method",
        url_path="about",
        icon=":material/menu_book:",
    ),
]
navigation = st.navigation(PAGES)

# filled after the page ran, so it shows what the page just computed
scenario_box = st.sidebar.container()

navigation.run()
# once per process, after the first page is shown: UMAP compiles while the user reads it
compute.start_embedding_warm_up()

with scenario_box:
    st.markdown("### Current scenario")
    data = compute.store().get(("data", model.scenario.data_key()))
    # counts of the already loaded (cached) datasets: nothing is reloaded here
    counts = None if data is None else [ds.n_samples for ds in data.datasets]
    for line in model.scenario.describe(
        is_image=None if data is None else data.is_image, n_samples=counts
    ):
        st.markdown(line)
    result = compute.geodesic_if_ready(model)
    if result is not None:
        names = [ds.name for ds in result.references]
        st.markdown(f"**â** = {format_weights(result.a_hat, names)}")
        picked = model.picked_weights(len(names))
        if picked is not None:
            st.markdown(f"**picked a** = {format_weights(picked, names)}")
    else:
        st.caption("OTDD maps not computed yet (pages 2–5 compute them).")
