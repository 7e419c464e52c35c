"""Adapters that make this library the memory of agent frameworks (each an optional extra).

=========================================  ==================  ===========================
adapter                                    framework           extra
=========================================  ==================  ===========================
``openai_agents.CompactingSession``        OpenAI Agents SDK   ``openai-agents``
``pydantic_ai.CompactingHistory``          pydantic-ai         ``pydantic-ai``
``langchain.CompactionMiddleware``         LangChain v1        ``langchain``
=========================================  ==================  ===========================

Each module imports its framework lazily (on first use of the adapter), so ``import
compaction.integrations`` and the base install stay free of them; a missing framework raises
:class:`~compaction.errors.FrameworkMissingError` naming the extra. The shared part,
:mod:`compaction.integrations.memory`, records items as events and compacts the surface, off the
event loop, one conversation (the framework's own id, namespaced per framework) per session;
:mod:`compaction.integrations.summarizers` makes a framework's own model the summarizer;
``CompactingHistory.capability()`` is :mod:`compaction.integrations.pydantic_ai_capability`.
"""

from __future__ import annotations

from compaction.integrations.memory import CompactingMemory

__all__ = ["CompactingMemory"]
