"""The stack's config: what every layer shares (`types`, `hosts`, `project`), the whole stack's
model assembled from the layers' own sections (`fleet`), and the loader (`load`).

Deliberately empty: a layer's `config.py` imports `types` and `hosts` from here while `fleet`
imports the layers' models, so this package imports nothing of its own.
"""
