"""Each adapter takes the ``compaction.toml`` (``config=``): the store it names, and the policy of
the model the adapter runs (``<framework>/<model>``): one file, two models, two thresholds."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from compaction.errors import IntegrationError
from compaction.service import load_settings
from compaction.sessions.store import SessionStore
from tests.integrations.support import audit_passes, require_framework
from tests.integrations.test_compact_commands import FRAMEWORKS, KEY, Conversation, worked

require_framework("agents", "openai-agents")
require_framework("pydantic_ai", "pydantic-ai")
require_framework("langchain.agents", "langchain")

from compaction.integrations.langchain import CompactionMiddleware  # noqa: E402

REPORTED = {
    "openai-agents": "openai-agents/small",  # the SDK's items name no model: the adapter's model=
    "pydantic-ai": "pydantic-ai/function:Script:",  # the model's own name, on its responses
    "langchain": "langchain/fake-reader",  # the chat model's response_metadata model_name
}
"""The ``request/header`` model of each framework's test agent, which a policy names."""


def write_config(folder: Path, policy: str, url: str) -> Path:
    """A file whose engine never compacts these short conversations and whose policy for the
    model ``policy`` compacts them at half of a 6,000-token window."""
    path = folder / f"{policy.replace('/', '-').replace(':', '')}.toml"
    path.write_text(
        f"""
[store]
url = "{url}"

[engine]
context_window = 1000000

[[policies]]
model = "{policy}"
context_window = 6000
threshold_ratio = 0.5
retain_tokens = 1000
""",
        encoding="utf-8",
    )
    return path


@pytest.fixture(params=sorted(FRAMEWORKS))
def framework(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def adapter(framework: str) -> Callable[..., Conversation]:
    make = FRAMEWORKS[framework]
    return lambda **options: make(None, **options)  # type: ignore[arg-type]


async def test_the_policy_of_the_model_the_agent_runs_sets_its_threshold(
    framework: str, url: str, tmp_path: Path
) -> None:
    config = write_config(tmp_path, REPORTED[framework], url)
    chat = adapter(framework)(config=config, model="small")
    await worked(chat, 4)
    assert chat.memory.compactions, "the model's policy (window 6,000, ratio 0.5) never compacted"
    session = await chat.memory.load(KEY)
    header = session.latest_header()
    assert header is not None and f"{header.provider}/{header.model}" == REPORTED[framework]
    assert chat.memory.service_of(session).config.context_window == 6000
    chat.memory.close()
    audit_passes(url)


async def test_a_model_without_a_policy_gets_the_engine_section(
    framework: str, url: str, tmp_path: Path
) -> None:
    config = write_config(tmp_path, f"{framework}/another-model", url)
    chat = adapter(framework)(config=load_settings(config), model="small")
    await worked(chat, 4)
    assert not chat.memory.compactions, "a model without a policy gets [engine] (window 1,000,000)"
    assert chat.memory.service_of(await chat.memory.load(KEY)).config.context_window == 1_000_000
    session_id = chat.memory.session_id(KEY)
    chat.memory.close()
    with SessionStore.open(url) as store:
        assert store.exists(session_id), "the store the file names holds the conversation"


def test_a_config_and_a_service_are_refused_together(tmp_path: Path, url: str) -> None:
    from compaction.service import BasicCompactService

    config = write_config(tmp_path, "langchain/fake-reader", url)
    with pytest.raises(IntegrationError, match=r"config= .* or a service=; found both"):
        CompactionMiddleware(config=config, service=BasicCompactService())
