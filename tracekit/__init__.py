"""tracekit: TCP transfer analysis from sender and receiver packet captures.

Data flows one way: capture -> packet table -> connections -> series -> detectors -> findings.
"""

__version__ = "0.1.0"
