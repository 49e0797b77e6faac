"""What the rendering tests share: a local page server on loopback (tests/rendering/pages.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.rendering.pages import PageServer


@pytest.fixture
def site() -> Iterator[PageServer]:
    server = PageServer("127.0.0.1").start()
    yield server
    server.stop()
