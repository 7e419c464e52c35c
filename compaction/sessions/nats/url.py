"""``nats://HOST:PORT[,HOST:PORT...][?stream=NAME&replicas=N&timeout=SECONDS]`` as store settings.

Parsed without importing nats-py, so a URL error needs no client installed. The default stream is
``compaction``, the default replica count 1 (3 or 5 on a cluster); ``timeout`` bounds each request
to the servers (default 5 seconds).
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl

from compaction.errors import ConfigurationError

FACTORY_TOPIC = "compaction.sessions.nats.recorders:JetStreamFactory"
DEFAULT_STREAM = "compaction"
EXPECTED = "nats://HOST:PORT[,HOST:PORT...][?stream=NAME&replicas=N]"
_HOST_PORT = re.compile(r"^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.\-]+)(:(\d{1,5}))?$")
_STREAM = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_PARAMETERS = ("stream", "replicas", "timeout")


def nats_settings(url: str) -> dict[str, str]:
    """The eventsourcing settings of the JetStream factory for ``url``."""
    rest = url[len("nats://") :]
    hosts, _, query = rest.partition("?")
    servers = [_server(url, part) for part in hosts.rstrip("/").split(",")]
    settings = {
        "PERSISTENCE_MODULE": FACTORY_TOPIC,
        "NATS_SERVERS": ",".join(servers),
        "NATS_STREAM": DEFAULT_STREAM,
        "NATS_REPLICAS": "1",
    }
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key not in _PARAMETERS:
            raise ConfigurationError(
                f"store URL {url!r}: unknown parameter {key!r}; expected one of "
                f"{', '.join(_PARAMETERS)} ({EXPECTED})"
            )
        settings[f"NATS_{key.upper()}"] = _checked(url, key, value)
    return settings


def _server(url: str, part: str) -> str:
    found = _HOST_PORT.fullmatch(part)
    port = int(found.group(3) or 4222) if found else 0
    if not found or not 1 <= port <= 65535:
        raise ConfigurationError(
            f"store URL {url!r}: {part!r} is not a HOST:PORT (PORT 1..65535); expected {EXPECTED}"
        )
    return f"nats://{found.group(1)}:{port}"


def _checked(url: str, key: str, value: str) -> str:
    if key == "stream" and not _STREAM.fullmatch(value):
        raise ConfigurationError(
            f"store URL {url!r}: stream {value!r} is not a stream name; expected letters, digits, "
            "'-' and '_' (at most 64)"
        )
    if key == "replicas" and value not in ("1", "2", "3", "4", "5"):
        raise ConfigurationError(f"store URL {url!r}: replicas={value!r}; expected a whole number 1..5")
    if key == "timeout":
        try:
            ok = 0 < float(value) <= 3600
        except ValueError:
            ok = False
        if not ok:
            raise ConfigurationError(
                f"store URL {url!r}: timeout={value!r}; expected seconds, more than 0 and at most 3600"
            )
    return value
