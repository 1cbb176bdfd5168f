"""The app as a host of the live explorer (:mod:`geoviz.explorer`, the payload and the
JavaScript every host shares): the payloads of the app's scenarios (:mod:`.service`, no
Streamlit) and the Streamlit component that sends them to the browser (:mod:`.component`)."""
