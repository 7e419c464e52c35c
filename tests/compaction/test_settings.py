"""``compaction.toml``: a full file loads into the services, each unknown key and each cross-field
rule gives its message, and one process serving two models compacts each at its own threshold."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from compaction.engine.settings import default_settings_path, load_settings, settings_from
from compaction.errors import CompactionConfigError
from compaction.service import service_for
from compaction.sessions.events import RequestHeader, TurnStart
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore
from compaction.vocabulary.events import CompactStart
from tests.builders import answer_step, end_turn, run_json, tool_step, user
from tests.builders import turn as whole_turn

FULL = """
[store]
url = "memory://"

[meter]
name = "heuristic"

[pruner]
threshold_chars = 4000
head_chars = 1000
tail_chars = 500

[engine]
threshold_ratio = 0.8
retain_ratio = 0.1
max_tokens = 2048

[[policies]]
model = "openai/small"
threshold_ratio = 0.3
retain_tokens = 50
context_window = 4000
summarization_provider = "openai"
summarization_model = "mini"

[[policies]]
model = "anthropic/large"
threshold_ratio = 0.95
context_window = 4000
"""


def test_a_full_file_loads_and_resolves_per_model(tmp_path: Path) -> None:
    path = tmp_path / "compaction.toml"
    path.write_text(FULL)
    settings = load_settings(path)
    assert settings.store_url == "memory://" and settings.meter == "heuristic"
    assert (settings.pruner.threshold_chars, settings.pruner.head_chars) == (4000, 1000)
    small = settings.policy_for("openai/small")
    assert (small.config.threshold_ratio, small.config.retain_tokens, small.config.retain_ratio) == (
        0.3,
        50,
        None,
    )
    assert small.config.max_tokens == 2048  # inherited from [engine]
    assert small.summarization == ("openai", "mini")
    large = settings.policy_for("anthropic/large")
    assert (large.config.threshold_ratio, large.config.retain_ratio) == (0.95, 0.1)
    assert settings.policy_for("other/model") is settings.default
    assert [m["model"] for m in settings.as_json()["models"]] == ["*", "openai/small", "anthropic/large"]
    assert default_settings_path(tmp_path) == path
    assert default_settings_path(tmp_path / "nowhere") is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[pruner]\nmaxChars = 3", 'pruner: unknown key "maxChars"'),
        ("[engine]\nthreshold = 0.5", 'engine: unknown key "threshold"'),
        ("[store]\npath = 'x'", 'store: unknown key "path"'),
        ("[meter]\nkind = 'x'", 'meter: unknown key "kind"'),
        ("[[policies]]\nmodel = 'a/b'\nwindow = 3", 'policies[0]: unknown key "window"'),
        ("[extra]\nx = 1", 'top level: unknown key "extra"'),
        (
            "[engine]\nthreshold_ratio = 0.5\n[[policies]]\nmodel = 'a/b'\n"
            "threshold_ratio = 0.1\nretain_ratio = 0.2",
            "policies[0]: retain_ratio (0.2) must be less than the resolved threshold_ratio (0.1)",
        ),
        (
            "[engine]\nretain_ratio = 0.2\n[[policies]]\nmodel = 'a/b'\nthreshold_ratio = 0.1",
            "policies[0]: retain_ratio (0.2) must be less than the resolved threshold_ratio (0.1)",
        ),
        (
            "[engine]\nsummarization_provider = 'openai'",
            "engine: summarization_provider and summarization_model must be set together or not at all",
        ),
        (
            "[[policies]]\nmodel = 'a/b'\nsummarization_model = 'mini'",
            "policies[0]: summarization_provider and summarization_model must be set together",
        ),
        (
            "[engine]\nretain_ratio = 0.1\nretain_tokens = 5",
            "engine: retain_ratio and retain_tokens are mutually exclusive",
        ),
        ("[[policies]]\nmodel = 'nomodel'", "policies[0].model ('nomodel') must be \"provider/model\""),
        (
            "[[policies]]\nmodel = 'a/b'\n[[policies]]\nmodel = 'a/b'",
            "policies[1]: duplicate model policy for a/b",
        ),
        ("[pruner]\nthreshold_chars = 10", "pruner: headChars + marker + tailChars"),
        ("[meter]\nname = 'abacus'", "unknown meter 'abacus'"),
    ],
)
def test_each_rule_names_section_and_key(text: str, message: str) -> None:
    with pytest.raises(CompactionConfigError) as refused:
        settings_from(tomllib.loads(text))
    assert message in str(refused.value)


def _busy_session(store: SessionStore, provider: str, model: str) -> Session:
    session = store.create()
    whole_turn(session, "read the modules", steps=3, output="x" * 2000, window=4000)
    user(session, "and now?")
    session.append(TurnStart(turn=2))
    session.append(RequestHeader(provider=provider, model=model, context_window=4000, reason="change"))
    tool_step(session, output="y" * 2000)
    return session


async def test_one_process_serves_two_models_at_their_own_thresholds() -> None:
    settings = settings_from(tomllib.loads(FULL))
    with SessionStore.open(settings.store_url) as store:
        small = _busy_session(store, "openai", "small")
        large = _busy_session(store, "anthropic", "large")
        assert len(small.nodes) == len(large.nodes)  # the same history, priced the same
        compacted = await service_for(settings, small).compact_if_needed(small, store=store)
        left = await service_for(settings, large).compact_if_needed(large, store=store)
        assert compacted is not None and left is None
        assert small.last_of(CompactStart.TYPE) is not None and large.last_of(CompactStart.TYPE) is None
        answer_step(small)
        end_turn(small)


def test_config_check_prints_each_model_and_refuses_an_unknown_key(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.toml", tmp_path / "bad.toml"
    good.write_text(FULL)
    bad.write_text("[pruner]\nmaxChars = 3\n")
    code, document = run_json("config", "check", str(good))
    assert code == 0
    assert [(m["model"], m["threshold_ratio"]) for m in document["models"]] == [
        ("*", 0.8),
        ("openai/small", 0.3),
        ("anthropic/large", 0.95),
    ]
    code, document = run_json("config", "check", str(bad))
    assert code == 1 and 'pruner: unknown key "maxChars"' in document["error"]["message"]


def test_the_config_option_names_the_store_and_the_compact_policy(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    path = tmp_path / "compaction.toml"
    path.write_text(FULL.replace('url = "memory://"', f'url = "{url}"'))
    with SessionStore.open(url) as store:
        session = _busy_session(store, "openai", "small")
        answer_step(session)
        end_turn(session)
        store.save(session)
    code, listed = run_json("--config", str(path), "sessions")
    assert code == 0 and [s["session_id"] for s in listed["sessions"]] == [str(session.id)]
    code, compacted = run_json("--config", str(path), "compact", str(session.id), "--manual")
    assert code == 0 and compacted["threshold"] == 1200  # openai/small: 0.3 x its window 4000
