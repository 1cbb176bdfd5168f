"""The Streamlit app's own package, kept apart from the library.

Layers (each imports only the ones below it)::

    app.py, pages/*.py        widgets and plots only
    geoviz.app.widgets        Streamlit parts the pages share (the only Streamlit import here)
    geoviz.app.services       every computation a page needs, cached; no Streamlit
    geoviz.app.state          scenario, session model, URL state, result store; no Streamlit
    geoviz (library)          data, OT, geodesics, export, viz; never imports the app
"""
