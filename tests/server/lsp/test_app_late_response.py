"""A response the server stopped waiting for (``asyncio.wait_for`` timed out on a slow client,
e.g. while it ran a recording) is dropped with a log line; it used to raise out of the read loop
and end the session."""

from __future__ import annotations

import asyncio

from msprof_lsp.server.lsp.app import create_server


def test_late_response_is_dropped_and_a_live_one_still_lands() -> None:
    ls = create_server()
    protocol = ls.protocol
    loop = asyncio.new_event_loop()
    try:
        late, live = loop.create_future(), loop.create_future()
        late.cancel()
        protocol._request_futures["late"] = late
        protocol._request_futures["live"] = live
        protocol._handle_response("late", {"ok": True})
        protocol._handle_response("live", {"ok": True})
        assert "late" not in protocol._request_futures and late.cancelled()
        assert live.result() == {"ok": True}
    finally:
        loop.close()
