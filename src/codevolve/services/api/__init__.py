"""The REST API and the dashboard: one FastAPI app, built by :func:`app.create_app`."""
