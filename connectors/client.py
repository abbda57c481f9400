"""A small client of the Kafka Connect REST API: every call cdcpipe needs, errors as types.

A 409 (the workers are rebalancing) is retried with backoff, never reported as a failure; a worker that does
not answer is a ConnectUnavailableError that names the URL; any other 4xx/5xx carries Connect's own message.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import quote

import httpx

from connectors.config import ConnectSettings
from connectors.errors import (
    ConnectAuthError,
    ConnectError,
    ConnectorNotFoundError,
    ConnectUnavailableError,
    RebalanceInProgressError,
)

JSON = dict[str, Any]


class ConnectClient:
    """Calls on one Connect cluster. Use as a context manager, or call close()."""

    def __init__(self, settings: ConnectSettings, transport: httpx.BaseTransport | None = None) -> None:
        self.settings = settings
        # A group's workers each answer for the whole group: one that cannot be reached is passed over for the next.
        self._urls = settings.connect_urls()
        self._http = httpx.Client(
            timeout=settings.connect_timeout_s,
            transport=transport,
            auth=settings.basic_auth(),
        )

    def __enter__(self) -> ConnectClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # --- the REST calls ---------------------------------------------------------------------------------

    def connectors(self) -> list[str]:
        result: list[str] = self._call("GET", "/connectors")
        return sorted(result)

    def config(self, name: str) -> dict[str, str] | None:
        """The stored config (placeholders such as ${env:...} unresolved), or None if no such connector."""
        try:
            result: dict[str, str] = self._call("GET", f"/connectors/{_q(name)}/config")
        except ConnectorNotFoundError:
            return None
        return result

    def create_stopped(self, name: str, config: dict[str, str]) -> JSON:
        """Create the connector STOPPED (KIP-980): its offsets can be read, and reset, before any task runs."""
        result: JSON = self._call(
            "POST", "/connectors", json={"name": name, "config": config, "initial_state": "STOPPED"}
        )
        return result

    def put_config(self, name: str, config: dict[str, str]) -> JSON:
        """Create the connector, or replace its config."""
        result: JSON = self._call("PUT", f"/connectors/{_q(name)}/config", json=config)
        return result

    def validate(self, config: dict[str, str]) -> JSON:
        connector_class = config.get("connector.class", "")
        result: JSON = self._call("PUT", f"/connector-plugins/{_q(connector_class)}/config/validate", json=config)
        return result

    def status(self, name: str) -> JSON:
        result: JSON = self._call("GET", f"/connectors/{_q(name)}/status")
        return result

    def expanded(self) -> dict[str, JSON]:
        """Every connector's status and config in one request ({name: {"status": ..., "info": ...}})."""
        result: dict[str, JSON] = self._call("GET", "/connectors", params=[("expand", "status"), ("expand", "info")])
        return result

    def task_configs(self, name: str) -> list[dict[str, str]]:
        """The configs the connector's tasks run with now (a config change reaches them on their restart)."""
        result: list[dict[str, Any]] = self._call("GET", f"/connectors/{_q(name)}/tasks")
        return [dict(task.get("config", {})) for task in result]

    def pause(self, name: str) -> None:
        self._call("PUT", f"/connectors/{_q(name)}/pause")

    def resume(self, name: str) -> None:
        self._call("PUT", f"/connectors/{_q(name)}/resume")

    def stop(self, name: str) -> None:
        self._call("PUT", f"/connectors/{_q(name)}/stop")

    def restart(self, name: str, *, only_failed: bool = False) -> None:
        params = {"includeTasks": "true", "onlyFailed": str(only_failed).lower()}
        self._call("POST", f"/connectors/{_q(name)}/restart", params=params)

    def restart_task(self, name: str, task: int) -> None:
        self._call("POST", f"/connectors/{_q(name)}/tasks/{task}/restart")

    def delete(self, name: str) -> None:
        self._call("DELETE", f"/connectors/{_q(name)}")

    def offsets(self, name: str) -> JSON:
        result: JSON = self._call("GET", f"/connectors/{_q(name)}/offsets")
        return result

    def reset_offsets(self, name: str) -> JSON:
        result: JSON = self._call("DELETE", f"/connectors/{_q(name)}/offsets")
        return result

    # --- transport and errors --------------------------------------------------------------------------

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        delay = 0.25
        for attempt in range(self.settings.connect_retries + 1):
            try:
                return self._once(method, path, **kwargs)
            except RebalanceInProgressError:
                if attempt == self.settings.connect_retries:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 5.0)
        raise AssertionError("unreachable")  # pragma: no cover

    def _once(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._send(method, path, **kwargs)
        url = f"{self._urls[0]}{path}"
        if response.status_code < 300:
            return response.json() if response.content else None
        message = _message(response)
        # A worker answers 409 during a rebalance, and 500 "a rebalance is expected" just before one (seen while
        # connectors were being created side by side): both pass, so both are retried.
        if response.status_code == 409 or (response.status_code == 500 and "rebalance is expected" in message):
            raise RebalanceInProgressError(f"{method} {url}: {message}")
        if response.status_code in (401, 403):
            who = f"as {self.settings.connect_user}" if self.settings.connect_user else "without credentials"
            raise ConnectAuthError(
                f"{method} {url} -> HTTP {response.status_code}: Kafka Connect refused the request {who}; set "
                "CDCPIPE_CONNECT_USER and CDCPIPE_CONNECT_PASSWORD_FILE (or CDCPIPE_CONNECT_PASSWORD) to a user of "
                'its REST API (the local stack\'s: `eval "$(cdcpipe stack env)"`)'
            )
        if response.status_code == 404:
            raise ConnectorNotFoundError(f"{method} {url}: {message} (`cdcpipe connectors list` shows what exists)")
        raise ConnectError(f"{method} {url} -> HTTP {response.status_code}: {message}")

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """The request to the first worker that takes the connection; the one that did is tried first next time.

        Only a connection never made moves on (the request was not sent): a request that may have reached a
        worker is not sent again to another.
        """
        last: Exception | None = None
        for _ in self._urls:
            try:
                return self._http.request(method, f"{self._urls[0]}{path}", **kwargs)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                last = exc
                self._urls.append(self._urls.pop(0))
            except httpx.TransportError as exc:
                last = exc
                break
        raise ConnectUnavailableError(
            f"Kafka Connect at {', '.join(self._urls)} does not answer ({type(last).__name__}); is a worker running "
            "(`cdcpipe stack status`)? Set CDCPIPE_CONNECT_URL (one URL, or a group's, comma-separated) if it "
            "listens elsewhere."
        ) from last


def _q(name: str) -> str:
    """A connector (or plugin) name as one path segment; a name no REST path can carry is refused here."""
    if not name.strip() or "/" in name:
        raise ConnectError(
            f"{name!r} is not a connector name: Kafka Connect's REST API cannot address an empty name or one "
            "with '/'; `cdcpipe connectors list` shows the names"
        )
    return quote(name, safe="")


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        if "html" in response.headers.get("content-type", ""):
            return response.reason_phrase  # the web server's error page (Jetty's), not Connect's message
        return response.text.strip()[:500] or response.reason_phrase
    if isinstance(body, dict) and "message" in body:
        return str(body["message"])
    return str(body)[:500]
