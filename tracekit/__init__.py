"""tracekit: TCP transfer analysis from sender and receiver packet captures.

Data flows one way: capture -> packet table -> connections -> series -> detectors -> findings.
"""

__version__ = "0.1.0"

# The notebook API (tracekit.api: open, Run) is imported on first use, so that `import tracekit`
# stays cheap for the commands that never need pandas or the pipeline. It is the one import from
# the package's floor to a later stage, and tests/test_layout.py names it as such.
_API = ("open", "Run", "SeriesTables", "FIGURES")


def __getattr__(name: str) -> object:
    if name in _API:
        from tracekit import api

        return getattr(api, name)
    raise AttributeError(f"module 'tracekit' has no attribute {name!r}")
