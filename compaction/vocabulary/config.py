"""Configuration of the basic backend, validated on load (knobs and defaults: docs/compaction.md).

``BasicConfig.from_mapping`` rejects unknown keys and bad values with the key, the value and the rule.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal, get_args

from compaction.errors import CompactionConfigError

NAME = "BasicCompactionConfig"

CompletionMode = Literal["appendix", "repair", "both", "off"]
"""How a summary is completed before the fidelity gate (:mod:`compaction.handover.completion`): ``appendix``
appends what it missed verbatim (no model call), ``repair`` asks the summarizer once more listing
what is missing, ``both`` repairs then appends what is still missing, ``off`` leaves it as written."""
COMPLETION_MODES: tuple[str, ...] = get_args(CompletionMode)


@dataclass(frozen=True)
class BasicConfig:
    threshold_ratio: float = 0.8
    retain_ratio: float | None = None  # default 0.16 when retain_tokens is not given
    retain_tokens: int | None = None
    max_tokens: int = 8192
    compaction_retries: int = 1
    max_overflow_retries: int = 1
    auto: bool = True
    context_window: int | None = None  # falls back to the latest request/header's context_window
    keep_first_user_message: bool = True
    min_identifier_ratio: float = 0.9
    require_sections: bool = True
    lease_seconds: float = 600.0
    completion: CompletionMode = "appendix"

    def __post_init__(self) -> None:
        if self.completion not in COMPLETION_MODES:
            raise CompactionConfigError(
                f"{NAME}.completion ({self.completion!r}) must be one of {', '.join(COMPLETION_MODES)}"
            )
        _ratio("threshold_ratio", self.threshold_ratio)
        if self.retain_ratio is not None:
            _ratio("retain_ratio", self.retain_ratio)
        if self.retain_ratio is not None and self.retain_tokens is not None:
            raise CompactionConfigError(f"{NAME}: retain_ratio and retain_tokens are mutually exclusive")
        _non_negative_int("retain_tokens", self.retain_tokens)
        _non_negative_int("compaction_retries", self.compaction_retries)
        _non_negative_int("max_overflow_retries", self.max_overflow_retries)
        if not _is_int(self.max_tokens) or self.max_tokens <= 0:
            raise CompactionConfigError(f"{NAME}.max_tokens ({self.max_tokens!r}) must be a positive integer")
        if self.context_window is not None and (not _is_int(self.context_window) or self.context_window <= 0):
            raise CompactionConfigError(
                f"{NAME}.context_window ({self.context_window!r}) must be a positive integer"
            )
        for name in ("auto", "keep_first_user_message", "require_sections"):
            if not isinstance(getattr(self, name), bool):
                raise CompactionConfigError(f"{NAME}: {name} must be a boolean; got {getattr(self, name)!r}")
        if not (_is_number(self.min_identifier_ratio) and 0 <= self.min_identifier_ratio <= 1):
            raise CompactionConfigError(
                f"{NAME}.min_identifier_ratio ({self.min_identifier_ratio!r}) must be a number in [0, 1]"
            )
        if not (_is_number(self.lease_seconds) and 0 < self.lease_seconds < 10**9):
            raise CompactionConfigError(
                f"{NAME}.lease_seconds ({self.lease_seconds!r}) must be a positive, finite number of "
                "seconds (less than 10**9)"
            )
        if self.retain_tokens is None and self.resolved_retain_ratio >= self.threshold_ratio:
            raise CompactionConfigError(
                f"{NAME}: retain_ratio ({self.resolved_retain_ratio}) must be less than the resolved "
                f"threshold_ratio ({self.threshold_ratio})"
            )

    @property
    def resolved_retain_ratio(self) -> float:
        return 0.16 if self.retain_ratio is None else self.retain_ratio

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> BasicConfig:
        allowed = {f.name for f in fields(cls)}
        for key in values:
            if key not in allowed:
                raise CompactionConfigError(
                    f"{NAME}: unknown key {key!r} (allowed: {', '.join(sorted(allowed))})"
                )
        return cls(**dict(values))

    def budget(self, context_window: int) -> tuple[int, int]:
        """``(threshold_tokens, retain_tokens)`` for a window; raises when retention >= threshold."""
        if not _is_int(context_window) or context_window <= 0:
            raise CompactionConfigError(
                f"{NAME}: contextWindow ({context_window!r}) must be a positive integer"
            )
        threshold = math.floor(context_window * self.threshold_ratio)
        retain = (
            self.retain_tokens
            if self.retain_tokens is not None
            else math.floor(context_window * self.resolved_retain_ratio)
        )
        if retain >= threshold:
            raise CompactionConfigError(
                f"{NAME}: retain_tokens ({retain}) must be less than threshold tokens {threshold} "
                f"(context window {context_window})"
            )
        return threshold, retain


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _ratio(name: str, value: object) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value <= 1:
        raise CompactionConfigError(f"{NAME}.{name} ({value!r}) must be a number in (0, 1]")


def _non_negative_int(name: str, value: object) -> None:
    if value is not None and (not _is_int(value) or value < 0):  # type: ignore[operator]
        raise CompactionConfigError(f"{NAME}.{name} ({value!r}) must be a non-negative integer")
