"""The REST client's error handling, against a stand-in transport (the real Connect is in the integration tests)."""

from __future__ import annotations

import httpx
import pytest

from connectors.client import ConnectClient
from connectors.config import ConnectSettings
from connectors.errors import ConnectError, ConnectorNotFoundError, ConnectUnavailableError, RebalanceInProgressError


def client(handler: httpx.MockTransport, retries: int = 3) -> ConnectClient:
    return ConnectClient(ConnectSettings.load(connect_retries=retries), transport=handler)


def test_a_rebalance_is_retried_until_it_is_over() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        if len(calls) < 3:
            return httpx.Response(409, json={"error_code": 409, "message": "Cannot complete request momentarily"})
        return httpx.Response(200, json=["a"])

    assert client(httpx.MockTransport(handler)).connectors() == ["a"]
    assert len(calls) == 3


def test_a_rebalance_connect_expects_is_retried_too() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        if len(calls) < 2:
            message = "Request cannot be completed because a rebalance is expected"
            return httpx.Response(500, json={"error_code": 500, "message": message})
        return httpx.Response(200, json={"name": "x"})

    assert client(httpx.MockTransport(handler)).config("x") == {"name": "x"}
    assert len(calls) == 2


def test_a_rebalance_that_never_ends_is_reported_as_retryable() -> None:
    transport = httpx.MockTransport(lambda _: httpx.Response(409, json={"message": "rebalance in progress"}))
    with pytest.raises(RebalanceInProgressError) as raised:
        client(transport, retries=1).connectors()
    assert raised.value.retryable


def test_errors_carry_connects_message() -> None:
    transport = httpx.MockTransport(
        lambda _: httpx.Response(400, json={"error_code": 400, "message": "Connector config is bad"})
    )
    with pytest.raises(ConnectError, match="HTTP 400: Connector config is bad"):
        client(transport).put_config("x", {})


def test_unknown_connector_is_its_own_error_and_config_of_it_is_none() -> None:
    transport = httpx.MockTransport(lambda _: httpx.Response(404, json={"message": "Connector x not found"}))
    assert client(transport).config("x") is None
    with pytest.raises(ConnectorNotFoundError, match="connectors list"):
        client(transport).status("x")


def test_a_worker_that_is_down_is_named() -> None:
    settings = ConnectSettings.load(connect_url="http://127.0.0.1:9", connect_timeout_s=2)
    with pytest.raises(ConnectUnavailableError, match=r"http://127.0.0.1:9 does not answer"):
        ConnectClient(settings).connectors()


def test_a_group_worker_that_is_down_is_passed_over_and_the_one_that_answered_is_asked_first() -> None:
    asked = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.port)
        if request.url.port == 8083:
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(200, json=["a"])

    settings = ConnectSettings.load(connect_url="http://127.0.0.1:8083, http://127.0.0.1:8183/")
    with ConnectClient(settings, transport=httpx.MockTransport(handler)) as connect:
        assert connect.connectors() == ["a"]
        assert connect.connectors() == ["a"]
    assert asked == [8083, 8183, 8183]


def test_a_request_that_may_have_reached_a_worker_is_not_sent_to_another() -> None:
    asked = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.port)
        raise httpx.ReadTimeout("no answer", request=request)

    settings = ConnectSettings.load(connect_url="http://127.0.0.1:8083,http://127.0.0.1:8183")
    with pytest.raises(ConnectUnavailableError, match=r"8083, http://127.0.0.1:8183 does not answer \(ReadTimeout\)"):
        ConnectClient(settings, transport=httpx.MockTransport(handler)).delete("x")
    assert asked == [8083]
