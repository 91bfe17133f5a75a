"""What every test shares: the markers' conditions.

A test marked `root` needs network namespaces, tc or mounts; one marked `browser` opens a page in
headless Chromium. Each is skipped, with its reason, where its condition does not hold, so that
`pytest` runs anywhere and `make test` (root, Chromium installed) runs everything.

Tests marked `slow` run first: `make test` shares them among its workers (pytest-xdist hands
out tests in the order collected), so that none is left to run alone at the end.
"""

from __future__ import annotations

import os

import pytest

from tests.helpers.browser import chromium_available


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("root") is not None and os.geteuid() != 0:
        pytest.skip("needs root (network namespaces, tc, nftables or mounts)")
    if item.get_closest_marker("browser") is not None and not chromium_available():
        pytest.skip("needs Chromium (/usr/bin/chromium)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: slow first
