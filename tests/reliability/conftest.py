"""Reliability and security harnesses: fuzzing, model-based isolation, crashes, faults, secrets."""

from __future__ import annotations

from tests.support import figures


def pytest_terminal_summary(terminalreporter):
    lines = figures.summary()
    if lines:
        terminalreporter.section("reliability figures")
        for line in lines:
            terminalreporter.write_line(line)
