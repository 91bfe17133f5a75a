"""The offline HTML report: a view model (`model`), its decimation and its renderer (`html`)."""

from tracekit.report.html import Budget, render, write
from tracekit.report.model import (
    TSG_PALETTE,
    ConnectionView,
    Kind,
    Palette,
    Plot,
    Report,
    ReportError,
    Shade,
    Table,
    Trace,
)

__all__ = [
    "TSG_PALETTE",
    "Budget",
    "ConnectionView",
    "Kind",
    "Palette",
    "Plot",
    "Report",
    "ReportError",
    "Shade",
    "Table",
    "Trace",
    "render",
    "write",
]
