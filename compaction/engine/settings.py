"""``compaction.toml``: one checked file for the store, the meter, the pruner, the engine and
per-model policies (docs/config.md).

Read with :mod:`tomllib`. Every section is strict: an unknown key is an error naming the section
and the key (``pruner: unknown key "maxChars"``); each value is checked by the configuration it
builds (:class:`~compaction.vocabulary.config.BasicConfig`, :class:`~compaction.engine.prune.PruneConfig`),
and the cross-field rules are checked per policy on the values it resolves to
(``policies[0]: retain_ratio (0.2) must be less than the resolved threshold_ratio (0.1)``). A
process serving several models asks :meth:`Settings.policy_for` (or :meth:`Settings.config_for`
with a session) for the configuration of each.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TypeVar

from compaction.engine.meters import meter_named
from compaction.engine.prune import PruneConfig
from compaction.errors import CompactionConfigError
from compaction.sessions.session import Session
from compaction.vocabulary.config import NAME as ENGINE_NAME
from compaction.vocabulary.config import BasicConfig

DEFAULT_FILE = "compaction.toml"
SECTIONS = ("store", "meter", "pruner", "engine", "policies")
SUMMARIZATION = ("summarization_provider", "summarization_model")
ENGINE_KEYS = frozenset(f.name for f in fields(BasicConfig)) | frozenset(SUMMARIZATION)
PRUNER_KEYS = frozenset(f.name for f in fields(PruneConfig))
POLICY_KEYS = frozenset(
    {"model", "threshold_ratio", "retain_ratio", "retain_tokens", "context_window", "max_tokens"}
) | frozenset(SUMMARIZATION)
RETENTION = ("retain_ratio", "retain_tokens")
C = TypeVar("C")


@dataclass(frozen=True)
class ModelPolicy:
    """What one model gets: its engine configuration and the model that summarizes for it
    (``None``: the summarizer's own)."""

    model: str
    config: BasicConfig
    summarization: tuple[str, str] | None = None

    def as_json(self) -> dict[str, Any]:
        config = self.config
        return {
            "model": self.model,
            "threshold_ratio": config.threshold_ratio,
            "retain_ratio": None if config.retain_tokens is not None else config.resolved_retain_ratio,
            "retain_tokens": config.retain_tokens,
            "context_window": config.context_window,
            "max_tokens": config.max_tokens,
            "summarization": "/".join(self.summarization) if self.summarization else None,
        }


@dataclass(frozen=True)
class Settings:
    """A loaded ``compaction.toml``: the sections resolved, one policy per configured model."""

    path: str
    store_url: str | None
    meter: str
    pruner: PruneConfig
    default: ModelPolicy
    policies: tuple[ModelPolicy, ...] = ()

    def policy_for(self, model: str | None) -> ModelPolicy:
        """The policy of ``provider/model`` (the engine section's for a model with none)."""
        return next((p for p in self.policies if p.model == model), self.default)

    def config_for(self, session: Session) -> BasicConfig:
        """The engine configuration for the model of ``session``'s latest ``request/header``."""
        header = session.latest_header()
        model = f"{header.provider}/{header.model}" if header is not None else None
        return self.policy_for(model).config

    def as_json(self) -> dict[str, Any]:
        pruner = self.pruner
        return {
            "path": self.path,
            "store": self.store_url,
            "meter": self.meter,
            "pruner": {
                "threshold_chars": pruner.threshold_chars,
                "head_chars": pruner.head_chars,
                "tail_chars": pruner.tail_chars,
            },
            "models": [self.default.as_json(), *(p.as_json() for p in self.policies)],
        }


def load_settings(path: str | Path) -> Settings:
    """Read and check ``path``; :class:`CompactionConfigError` names the section, key and rule."""
    where = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise CompactionConfigError(f"{where}: cannot read the configuration file: {e}") from e
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise CompactionConfigError(f"{where}: not valid TOML: {e}") from e
    return settings_from(data, where)


def default_settings_path(cwd: str | Path = ".") -> Path | None:
    """``./compaction.toml`` when it exists, else None."""
    candidate = Path(cwd) / DEFAULT_FILE
    return candidate if candidate.is_file() else None


def settings_from(data: Mapping[str, Any], where: str = DEFAULT_FILE) -> Settings:
    _known("top level", data, frozenset(SECTIONS))
    store = _table(data, "store")
    _known("store", store, frozenset({"url"}))
    meter = _table(data, "meter")
    _known("meter", meter, frozenset({"name"}))
    meter_name = str(meter.get("name", "heuristic"))
    meter_named(meter_name)  # an unknown meter fails here, not at the first compaction
    pruner = _table(data, "pruner")
    _known("pruner", pruner, PRUNER_KEYS)
    engine = _table(data, "engine")
    _known("engine", engine, ENGINE_KEYS)
    default = _engine_policy(engine)
    policies = _policies(data.get("policies", []), engine)
    url = store.get("url")
    if url is not None and not isinstance(url, str):
        raise CompactionConfigError(f"store.url ({url!r}) must be a string")
    return Settings(where, url, meter_name, _checked("pruner", PruneConfig, pruner), default, policies)


# ---------------------------------------------------------------- sections


def _engine_policy(engine: Mapping[str, Any]) -> ModelPolicy:
    values = {k: v for k, v in engine.items() if k not in SUMMARIZATION}
    return ModelPolicy("*", _checked("engine", BasicConfig, values), _pair("engine", engine))


def _policies(raw: object, engine: Mapping[str, Any]) -> tuple[ModelPolicy, ...]:
    if not isinstance(raw, list):
        raise CompactionConfigError("policies must be an array of tables ([[policies]])")
    seen: set[str] = set()
    resolved: list[ModelPolicy] = []
    for index, entry in enumerate(raw):
        name = f"policies[{index}]"
        if not isinstance(entry, dict):
            raise CompactionConfigError(f"{name} must be a table")
        _known(name, entry, POLICY_KEYS)
        model = entry.get("model")
        provider, _, model_name = model.partition("/") if isinstance(model, str) else ("", "", "")
        if not provider or not model_name:
            raise CompactionConfigError(
                f'{name}.model ({model!r}) must be "provider/model" with both parts non-empty'
            )
        route = f"{provider}/{model_name}"
        if route in seen:
            raise CompactionConfigError(f"{name}: duplicate model policy for {route}")
        seen.add(route)
        resolved.append(_policy(name, route, entry, engine))
    return tuple(resolved)


def _policy(name: str, model: str, entry: Mapping[str, Any], engine: Mapping[str, Any]) -> ModelPolicy:
    values = {k: v for k, v in engine.items() if k not in SUMMARIZATION}
    if any(k in entry for k in RETENTION):  # the policy's retention replaces the engine's form
        for key in RETENTION:
            values.pop(key, None)
    values.update({k: v for k, v in entry.items() if k not in SUMMARIZATION and k != "model"})
    pair = _pair(name, entry) if any(k in entry for k in SUMMARIZATION) else _pair("engine", engine)
    return ModelPolicy(model, _checked(name, BasicConfig, values), pair)


def _pair(name: str, section: Mapping[str, Any]) -> tuple[str, str] | None:
    provider, model = (section.get(k, "") for k in SUMMARIZATION)
    for key, value in zip(SUMMARIZATION, (provider, model), strict=True):
        if not isinstance(value, str):
            raise CompactionConfigError(f"{name}.{key} ({value!r}) must be a string")
    if bool(provider) != bool(model):
        raise CompactionConfigError(
            f"{name}: summarization_provider and summarization_model must be set together or "
            f"not at all (got provider {provider!r}, model {model!r})"
        )
    return (provider, model) if provider else None


# ---------------------------------------------------------------- checks


def _table(data: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = data.get(name, {})
    if not isinstance(value, dict):
        raise CompactionConfigError(f"{name} must be a table ([{name}])")
    return value


def _known(section: str, values: Mapping[str, Any], allowed: frozenset[str]) -> None:
    for key in values:
        if key not in allowed:
            raise CompactionConfigError(
                f'{section}: unknown key "{key}" (allowed: {", ".join(sorted(allowed))})'
            )


def _checked(section: str, kind: type[C], values: Mapping[str, Any]) -> C:
    """``kind(**values)``, its errors re-named after ``section`` (the file's own names)."""
    try:
        return kind(**dict(values))
    except CompactionConfigError as e:
        message = str(e).replace(ENGINE_NAME, section).replace("ToolResultPruneConfig", section)
        raise CompactionConfigError(message) from e
    except TypeError as e:
        raise CompactionConfigError(f"{section}: {e}") from e
