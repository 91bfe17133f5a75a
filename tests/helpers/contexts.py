"""The AnalysisContext the real pipeline hands its detectors, for tests that run detectors
one by one on it (the conformance suite, settings at the ends of their ranges)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tracekit import pipeline
from tracekit.analysis import Analysis


def analyze_with_context(sender: Path, receiver: Path | None = None) -> tuple[Analysis, Any]:
    """Read the captures and run the whole pipeline; the analysis and its detectors' context."""
    seen: list[Any] = []
    run = pipeline.run_detectors

    def recording(ctx: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(ctx)
        return run(ctx, *args, **kwargs)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(pipeline, "run_detectors", recording)
        analysis = pipeline.analyze_files(sender, receiver)
    (ctx,) = seen
    return analysis, ctx
