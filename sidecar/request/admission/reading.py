"""What the client sent, read: a protocol upgrade asked for, and the one rule for input
the sidecar cannot read (refused, never admitted)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator, Mapping

from sidecar.refusals import Reason, Refusal
from sidecar.request.openai_api.request import InvalidRequest
from sidecar.request.policy.decision import RequestView

log = logging.getLogger(__name__)


def upgrades(request: RequestView) -> bool:
    """The request asks to switch protocols (a WebSocket, over HTTP/1.1 or HTTP/2)."""
    headers: Mapping[str, str] = request.headers
    return "upgrade" in headers or ":protocol" in headers or request.method == "CONNECT"


@contextlib.contextmanager
def client_input(request: RequestView) -> Iterator[None]:
    """What a client sent and the sidecar cannot read is refused, never admitted: its
    reader's refusal, or any error reading it raised (counted, and logged as a bug)."""
    try:
        yield
    except InvalidRequest as error:
        raise Refusal(Reason.INVALID_REQUEST, error.message, param=error.param) from None
    except (Refusal, asyncio.CancelledError):
        raise
    except Exception:
        log.warning(
            "reading a request failed; refused", exc_info=True, extra={"path": request.path}
        )
        raise Refusal(
            Reason.INVALID_REQUEST, "The request body could not be read as this API's."
        ) from None
