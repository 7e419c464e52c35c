"""BasicConfig validation: every rule rejects with the key, the value and the rule, and the budget
for a window follows the documented formulas (docs/compaction.md)."""

from __future__ import annotations

from typing import Any

import pytest

from compaction.errors import CompactionConfigError, CompactionError, ConfigurationError
from compaction.vocabulary.config import BasicConfig


def test_defaults() -> None:
    config = BasicConfig()
    assert (config.threshold_ratio, config.retain_ratio, config.retain_tokens) == (0.8, None, None)
    assert config.resolved_retain_ratio == 0.16
    assert (config.max_tokens, config.compaction_retries, config.max_overflow_retries) == (8192, 1, 1)
    assert config.auto and config.keep_first_user_message and config.require_sections
    assert (config.min_identifier_ratio, config.lease_seconds, config.context_window) == (0.9, 600.0, None)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"treshold_ratio": 0.5}, r"BasicCompactionConfig: unknown key 'treshold_ratio' \(allowed: auto, "),
        (
            {"threshold_ratio": 0},
            r"BasicCompactionConfig\.threshold_ratio \(0\) must be a number in \(0, 1\]",
        ),
        ({"threshold_ratio": 1.5}, r"threshold_ratio \(1\.5\) must be a number in \(0, 1\]"),
        ({"threshold_ratio": True}, r"threshold_ratio \(True\) must be a number in \(0, 1\]"),
        ({"threshold_ratio": "0.8"}, r"threshold_ratio \('0\.8'\) must be a number in \(0, 1\]"),
        ({"retain_ratio": 0}, r"BasicCompactionConfig\.retain_ratio \(0\) must be a number in \(0, 1\]"),
        (
            {"retain_ratio": 0.1, "retain_tokens": 10},
            r"retain_ratio and retain_tokens are mutually exclusive",
        ),
        (
            {"retain_tokens": -1},
            r"BasicCompactionConfig\.retain_tokens \(-1\) must be a non-negative integer",
        ),
        ({"retain_tokens": 1.5}, r"retain_tokens \(1\.5\) must be a non-negative integer"),
        ({"compaction_retries": -1}, r"compaction_retries \(-1\) must be a non-negative integer"),
        ({"max_overflow_retries": False}, r"max_overflow_retries \(False\) must be a non-negative integer"),
        ({"max_tokens": 0}, r"BasicCompactionConfig\.max_tokens \(0\) must be a positive integer"),
        ({"context_window": -5}, r"BasicCompactionConfig\.context_window \(-5\) must be a positive integer"),
        ({"auto": "yes"}, r"BasicCompactionConfig: auto must be a boolean; got 'yes'"),
        ({"keep_first_user_message": 1}, r"keep_first_user_message must be a boolean; got 1"),
        ({"require_sections": None}, r"require_sections must be a boolean; got None"),
        ({"min_identifier_ratio": 1.2}, r"min_identifier_ratio \(1\.2\) must be a number in \[0, 1\]"),
        ({"lease_seconds": 0}, r"BasicCompactionConfig\.lease_seconds \(0\) must be a positive, finite"),
        ({"lease_seconds": True}, r"BasicCompactionConfig\.lease_seconds \(True\) must be a positive"),
        ({"lease_seconds": float("inf")}, r"BasicCompactionConfig\.lease_seconds \(inf\) must be a positive"),
        ({"min_identifier_ratio": True}, r"min_identifier_ratio \(True\) must be a number in \[0, 1\]"),
        (
            {"threshold_ratio": 0.1},
            r"BasicCompactionConfig: retain_ratio \(0\.16\) must be less than the resolved "
            r"threshold_ratio \(0\.1\)",
        ),
        ({"threshold_ratio": 0.5, "retain_ratio": 0.5}, r"retain_ratio \(0\.5\) must be less than"),
    ],
)
def test_every_bad_value_is_rejected_with_key_value_and_rule(values: dict[str, Any], message: str) -> None:
    with pytest.raises(CompactionConfigError, match=message) as caught:
        BasicConfig.from_mapping(values)
    assert isinstance(caught.value, ConfigurationError)  # catchable as a configuration error
    assert isinstance(caught.value, CompactionError)


def test_from_mapping_accepts_every_field() -> None:
    config = BasicConfig.from_mapping(
        {"threshold_ratio": 0.9, "retain_tokens": 100, "context_window": 5000, "auto": False}
    )
    assert (config.threshold_ratio, config.retain_tokens, config.context_window) == (0.9, 100, 5000)
    assert not config.auto


def test_budget_follows_the_spec_formulas() -> None:
    assert BasicConfig().budget(10_000) == (8000, 1600)
    assert BasicConfig(threshold_ratio=0.75, retain_ratio=0.1).budget(999) == (749, 99)
    assert BasicConfig(retain_tokens=0).budget(100) == (80, 0)


def test_retain_tokens_must_stay_below_the_threshold_tokens() -> None:
    with pytest.raises(
        CompactionConfigError,
        match=r"BasicCompactionConfig: retain_tokens \(800\) must be less than threshold tokens 800 "
        r"\(context window 1000\)",
    ):
        BasicConfig(retain_tokens=800).budget(1000)


@pytest.mark.parametrize("window", [0, -1, 1.5, True])
def test_the_window_must_be_a_positive_integer(window: Any) -> None:
    with pytest.raises(CompactionConfigError, match=r"contextWindow \(.*\) must be a positive integer"):
        BasicConfig().budget(window)
