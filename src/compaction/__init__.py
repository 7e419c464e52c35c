"""Compaction: the capability seam over session logs (contract, meters, basic backend, summarizers,
strategies). Importing this package registers its event types (``compact/*``, ``scratchpad/set``,
``phase/end``) in the session event registry, so stored logs that use them can be read.
"""

from compaction import events as _events  # noqa: F401
from compaction import foreign as _foreign  # noqa: F401  (imports other harnesses' compactions)
from compaction.strategies import checkpoint as _checkpoint  # noqa: F401
