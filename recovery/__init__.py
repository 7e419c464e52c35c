"""Recovery after crashes: the orphan scan, the inertness proof, repair, the recovery process.

An orphan is a ``compact/start`` with no ``compact/end`` of the same compaction id. Recovery finds
them all in one pass over the store (:class:`OrphanScanner`), decides live or stale from the lease
each start records (:func:`judge`), proves each one inert by folding the surface with and without
its events (:func:`prove_inert`), and, only when asked, closes stale inert ones with
``compact/end{error: "abandoned: ..."}`` plus the interrupted-turn closers
(:func:`settle`). :func:`recover` runs one pass; :class:`Recovery` also follows the store.
:func:`surface_hash` (from :mod:`compaction.sessions.hashing`, re-exported here) is the stable
fingerprint of a surface that export and copy reuse.
See ``docs/recovery.md``.
"""

from __future__ import annotations

from compaction.errors import (
    OrphanCorruptionError,
    RecoveryConfigError,
    RecoveryError,
    RepairConflictError,
)
from compaction.sessions.hashing import SURFACE_HASH_VERSION, hash_surface, surface_hash
from recovery.closers import interrupted_turn_closers
from recovery.inertness import InertnessProof, prove_inert
from recovery.liveness import Liveness, judge, process_alive
from recovery.process import Recovery, RecoveryConfig, recover
from recovery.repair import Settlement, settle
from recovery.report import OrphanReport, RecoveryReport
from recovery.scan import Orphan, OrphanScanner

__all__ = [
    "SURFACE_HASH_VERSION",
    "InertnessProof",
    "Liveness",
    "Orphan",
    "OrphanCorruptionError",
    "OrphanReport",
    "OrphanScanner",
    "Recovery",
    "RecoveryConfig",
    "RecoveryConfigError",
    "RecoveryError",
    "RecoveryReport",
    "RepairConflictError",
    "Settlement",
    "hash_surface",
    "interrupted_turn_closers",
    "judge",
    "process_alive",
    "prove_inert",
    "recover",
    "settle",
    "surface_hash",
]
