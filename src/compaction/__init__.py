"""Compaction: the capability seam over session logs (contract, meters, basic backend, summarizers)."""

from compaction import events as _events  # noqa: F401  (registers compact/* event types)
