"""Known context windows: imported sessions of the common model families need no
``--window``; the table is one module and the user overrides it without editing it."""

from __future__ import annotations

import pytest

from compaction.engine.windows import KNOWN_WINDOWS, WindowTable, known_window, normalise
from compaction.errors import CompactionConfigError
from compaction.service import BasicCompactService
from compaction.sessions.events import RequestHeader, TurnStart
from compaction.sessions.session import Session
from compaction.vocabulary.config import BasicConfig
from tests.builders import user


@pytest.mark.parametrize(
    ("model", "window"),
    [
        ("claude-sonnet-4-5-20250929", 200_000),
        ("anthropic/claude-opus-4-6", 200_000),
        ("us.anthropic.claude-3-5-sonnet-20240620-v1:0", 200_000),
        ("claude-2.1", 100_000),
        ("gpt-4o-mini-2024-07-18", 128_000),
        ("gpt-4-0613", 8_192),
        ("gpt-4.1", 1_047_576),
        ("gpt-5.1-codex", 272_000),
        ("gemini-2.5-pro", 1_048_576),
        ("models/gemini-1.5-pro-002", 2_097_152),
        ("deepseek-chat", 128_000),
        ("deepseek-coder-6.7b-instruct", 16_384),
        ("Qwen/Qwen2.5-Coder-32B-Instruct", 32_768),
        ("qwen/qwen-2.5-coder-32b-instruct", 32_768),
        ("qwen3-coder-480b-a35b-instruct", 262_144),
        ("meta-llama/Meta-Llama-3.1-8B-Instruct", 131_072),
        ("llama3.1:8b", 131_072),
        ("openai/openrouter-llama-4-maverick", 1_048_576),
        ("mistral-large-latest", 131_072),
        ("codestral-2501", 256_000),
    ],
)
def test_the_common_families_have_known_windows(model: str, window: int) -> None:
    assert known_window(model) == window


def test_the_longest_prefix_wins_and_unknown_models_have_none() -> None:
    table = WindowTable()
    assert table.match("gpt-4o-mini") == "gpt-4o" and table.match("gpt-4-turbo") == "gpt-4-turbo"
    assert known_window("test-model") is None and known_window("") is None
    assert normalise("Meta-Llama-3.1-8B-Instruct") == "llama-3.1-8b-instruct"
    assert all(tokens > 0 for tokens in KNOWN_WINDOWS.values())


def test_overrides_add_and_replace_entries_without_editing_the_table() -> None:
    table = WindowTable().with_overrides({"my-finetune": 32_000, "anthropic/claude": 150_000})
    assert table.lookup("my-finetune-v2") == 32_000
    assert table.lookup("claude-sonnet-4-5") == 150_000
    assert known_window("claude-sonnet-4-5") == 200_000  # the default table is untouched
    with pytest.raises(CompactionConfigError, match="the window of 'bad' must be a positive integer"):
        WindowTable({"bad": 0})


def header_session(model: str, window: int | None = None) -> Session:
    session = Session()
    user(session, "task")
    session.append(TurnStart(turn=1))
    session.append(RequestHeader(provider="anthropic", model=model, context_window=window))
    return session


def test_an_imported_claude_sonnet_session_needs_no_window() -> None:
    """Once refused with "no context capacity for anthropic/claude-sonnet-4-5-20250929"."""
    session = header_session("claude-sonnet-4-5-20250929")
    assert BasicCompactService().context_window(session) == 200_000


def test_config_then_header_then_table() -> None:
    assert (
        BasicCompactService(BasicConfig(context_window=5000)).context_window(
            header_session("claude-sonnet-4-5", 9000)
        )
        == 5000
    )
    assert BasicCompactService().context_window(header_session("claude-sonnet-4-5", 9000)) == 9000
    custom = WindowTable().with_overrides({"claude-sonnet-4-5": 1_000_000})
    assert BasicCompactService(windows=custom).context_window(header_session("claude-sonnet-4-5")) == (
        1_000_000
    )


def test_an_unknown_model_still_names_how_to_configure_it() -> None:
    with pytest.raises(
        CompactionConfigError,
        match=r"no context window known for anthropic/house-model.*"
        r"--window N.*context_window=N.*compaction\.toml",
    ):
        BasicCompactService().context_window(header_session("house-model"))
