"""The live explorer of a generalized geodesic, outside any one host (Sec. 3.3, Fig. 1).

One payload (:mod:`geoviz.explorer.payload`) and one JavaScript source (``frontend/``, ES
modules, no build step) serve both the Streamlit app (:mod:`geoviz.app.explorer_host`) and the
Jupyter widget (:mod:`geoviz.explorer.widget`).
"""
