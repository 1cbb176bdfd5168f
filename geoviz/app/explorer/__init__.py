"""Live exploration in the browser: the payload (:mod:`.payload`) and the component
(:mod:`.component`, imported on demand because it needs Streamlit)."""
