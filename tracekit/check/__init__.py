"""`tracekit check`: judge analysed captures against a policy and a baseline, for CI.

inputs (paths -> CaptureInput) -> pipeline.analyze -> verdict (policy, baseline) -> CheckResult,
which junit and text render. Nothing here prints or exits.
"""
