"""The Streamlit app's own package, kept apart from the library.

Layers (each imports only the ones below it)::

    app.py, pages/*.py        widgets and plots only
    geoviz.app.widgets,       Streamlit parts the pages share (the only Streamlit imports
    geoviz.app.explorer_host  here: widgets.py and explorer_host/component.py)
    geoviz.app.services       every computation a page needs, one module per page, cached
                              in two tiers (fits, derived values); no Streamlit
    the app's state           geoviz.app.scenario, .settings, .links (URL state), .session
                              and .jobs (background jobs, the tiered result store); each
                              name is imported from the module that defines it; no Streamlit
    geoviz (library)          data, OT, geodesics, export, viz (figures; tables in
                              geoviz.viz.report); never imports the app
"""
