"""The click front end of tracekit: options in, configuration out; no analysis lives here."""
