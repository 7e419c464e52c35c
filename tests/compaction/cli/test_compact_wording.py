"""``compaction compact`` speaks to people: no class or module names of the library, a model named
once (not ``openai/openai/...``), no brackets inside brackets."""

from __future__ import annotations

import re

import pytest

from compaction.sessions.events import RequestHeader, TurnStart
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore
from tests.builders import end_turn, run_human, tool_step, user

INTERNALS = re.compile(r"WindowTable|with_overrides|compaction\.engine|BasicConfig|compaction-basic")


def session_of(provider: str, model: str) -> Session:
    session = Session()
    user(session, "Fix the failing tests in src/app/.")
    session.append(TurnStart(turn=1))
    session.append(RequestHeader(provider=provider, model=model))
    tool_step(session, n_calls=1, output="ok")
    end_turn(session)
    return session


def compact(url: str, session: Session, *options: str) -> tuple[int, str]:
    with SessionStore.open(url) as store:
        store.save(session)
    code, out, err = run_human("--store", url, "compact", str(session.id), *options)
    return code, out + err


def nested_brackets(text: str) -> list[str]:
    """The lines of ``text`` with a bracket opened inside another."""
    found = []
    for line in text.splitlines():
        depth = 0
        for char in line:
            depth += {"(": 1, ")": -1}.get(char, 0)
            if depth > 1:
                found.append(line)
                break
    return found


def test_a_model_the_table_does_not_know_is_explained_in_the_commands_words(sqlite_url: str) -> None:
    code, text = compact(sqlite_url, session_of("openai", "unknown"))
    assert code == 1
    assert "--window" in text and "openai/unknown" in text, text
    assert not INTERNALS.search(text), text
    assert not nested_brackets(text), text


def test_a_model_named_with_its_provider_is_named_once(sqlite_url: str) -> None:
    code, text = compact(sqlite_url, session_of("openai", "openai/openrouter-llama-4-maverick"))
    assert code == 0, text
    assert "the known window of openai/openrouter-llama-4-maverick" in text, text
    assert "openai/openai/" not in text


@pytest.mark.parametrize("options", [(), ("--window", "3000")])
def test_the_window_source_has_no_brackets_inside_brackets(sqlite_url: str, options: tuple[str, ...]) -> None:
    code, text = compact(sqlite_url, session_of("openai", "gpt-4o"), *options)
    assert code == 0, text
    assert not nested_brackets(text), text
    assert not INTERNALS.search(text), text
