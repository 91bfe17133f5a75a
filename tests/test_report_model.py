"""The view model refuses shapes the renderer could not draw."""

from __future__ import annotations

import numpy as np
import pytest

from tracekit.errors import TracekitError
from tracekit.report.model import (
    ConnectionView,
    Kind,
    Plot,
    Report,
    ReportError,
    Shade,
    Table,
    Trace,
)

X = np.arange(3, dtype=np.float64)


def test_a_model_that_cannot_be_drawn_is_a_bug_not_bad_input() -> None:
    # TracekitError is bad input (exit 2); a model built wrong is tracekit's own fault (exit 3).
    assert not issubclass(ReportError, TracekitError)


def test_mismatched_lengths_are_refused() -> None:
    with pytest.raises(ReportError, match="one length"):
        Trace("t", Kind.LINE, X, X[:2])


def test_segments_need_y_end() -> None:
    with pytest.raises(ReportError, match="y_end"):
        Trace("t", Kind.SEGMENTS, X, X)
    with pytest.raises(ReportError, match="y_end"):
        Trace("t", Kind.SEGMENTS, X, X, y_end=X[:1])


def test_keep_must_be_a_boolean_mask() -> None:
    with pytest.raises(ReportError, match="keep"):
        Trace("t", Kind.MARKERS, X, X, keep=np.array([1, 0, 1]))
    assert len(Trace("t", Kind.MARKERS, X, X, keep=np.array([True, False, True]))) == 3


def test_shade_must_not_run_backwards() -> None:
    with pytest.raises(ReportError, match="before it starts"):
        Shade(2.0, 1.0, "x")
    with pytest.raises(ReportError, match="finite"):
        Shade(0.0, float("nan"), "x")


def test_table_rows_match_columns() -> None:
    with pytest.raises(ReportError, match="cells"):
        Table(("a", "b"), ((1,),))
    with pytest.raises(ReportError, match="links"):
        Table(("a",), ((1,), (2,)), links=(0,))


def test_receiver_plots_pair_with_sender_plots() -> None:
    plot = Plot("p", "time (s)", "y", ())
    with pytest.raises(ReportError, match="receiver"):
        ConnectionView("c", (), (plot,), (plot, plot))


def test_links_must_name_a_shown_connection() -> None:
    table = Table(("#",), ((1,),), links=(1,))
    view = ConnectionView("c", (), ())
    with pytest.raises(ReportError, match="connection 1"):
        Report("r", table, Table((), ()), (view,), (), "0")
