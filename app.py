"""geoviz Streamlit app: generalized geodesics between labelled datasets (start page).

Run with ``geoviz app`` (or ``make run``): it serves this machine only (127.0.0.1), where a
bare ``streamlit run app.py`` listens on every interface. Works offline on the
bundled *NIST samples: the default scenario is Q = MNIST with references
Fashion-MNIST, USPS and KMNIST. ``GEOVIZ_APP_N`` sets the samples per dataset
(default 2000).

The pages live in ``pages/`` (Streamlit's pages directory, served at
``/datasets``, ``/maps``, ``/geodesic``, ``/mccann``, ``/export``, ``/about``);
every page, this one included, opens with :func:`geoviz.app.widgets.app_page`.
"""

from __future__ import annotations

import streamlit as st

from geoviz import glossary
from geoviz.app import widgets
from geoviz.app.services import geodesic as geodesic_services
from geoviz.app.session import SessionModel

STEPS = (
    ("pages/1_datasets.py", "Pick the target Q and the references P_i, or load a preset."),
    ("pages/2_maps.py", "OTDD maps T_i from Q to each P_i, and how sharp they are."),
    ("pages/3_geodesic.py", f"{glossary.OBJECTIVE} over the weight simplex: pick a, look at P_a."),
    ("pages/4_mccann.py", "Slide t from Q to one reference along the McCann interpolation."),
    ("pages/5_export.py", "Save P_a with soft and hard labels and a checksummed manifest."),
    ("pages/6_about.py", "The method in a few paragraphs."),
    (
        "pages/7_evidence.py",
        "Pretrain on P_a, fine-tune on a few labelled target samples: does a low W² transfer better?",
    ),
)


def main(model: SessionModel) -> None:
    st.title("geoviz · datasets between datasets")
    st.markdown(
        "Generate labelled datasets *between* existing ones by interpolating along "
        "generalized geodesics in optimal-transport space (Fan & Alvarez-Melis, UAI 2023): "
        r"$P_a = \big(\sum_i a_i T_i\big)_\sharp Q$, with $T_i$ the OTDD map from the "
        "target Q to reference P_i and a on the simplex. The weights closest to Q minimise "
        r"$\mathcal{W}^2(P_a, Q)$."
    )
    labels = {page.script: page for page in widgets.PAGES}
    for script, text in STEPS:
        page = labels[script]
        left, right = st.columns([1, 3])
        with left:
            st.page_link(page.script, label=page.label, icon=page.icon)
        right.markdown(text)
    ready = geodesic_services.geodesic_if_ready(model.scenario)
    st.info(
        "The maps of the current scenario are computed; the Geodesic page opens at once."
        if ready is not None
        else "Start on 1 · Datasets, or open 3 · Geodesic to compute the default scenario "
        "(about 12 s on 2 cores at N = 2000)."
    )


with widgets.app_page("Start") as model:
    main(model)
