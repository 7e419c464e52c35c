"""The demo: a deterministic fake coding agent (:mod:`.model`) in a generated project with bugs
(:mod:`.workspace`), and the strategy comparison the ``demo`` command prints (:mod:`.phases`).

It stands in for a model client and its tools, so the demo, the README's examples and the benchmarks
run offline with realistic tool-heavy sessions.
"""

from compaction.cli.demo.model import (
    DEMO_MODEL,
    DEMO_PROVIDER,
    DEMO_SYSTEM_PROMPT,
    DEMO_TOOL_SPECS,
    DemoModel,
    demo_session_script,
    run_demo_session,
)
from compaction.cli.demo.workspace import DemoWorkspace, demo_tools, module_path, module_test_path

__all__ = [
    "DEMO_MODEL",
    "DEMO_PROVIDER",
    "DEMO_SYSTEM_PROMPT",
    "DEMO_TOOL_SPECS",
    "DemoModel",
    "DemoWorkspace",
    "demo_session_script",
    "demo_tools",
    "module_path",
    "module_test_path",
    "run_demo_session",
]
