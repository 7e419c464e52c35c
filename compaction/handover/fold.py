"""The span's identifiers folded as the messages arrive, and carried by the session's snapshot.

A compaction's identifiers (:func:`~compaction.handover.identifiers.extract` of the shadowed
messages: the template's facts, the completion and the fidelity gate count them) are the union, in
order of first appearance, of each message's own. :class:`IdentifierFold` keeps that union for the
surface from the first compactable node on (after the protected task statement at position 0),
each identifier with the surface position of the message that brought it first: the identifiers
of any span from there to a cut are the entries first seen before the cut, in the same order, so
one fold answers every cut the selection may choose, not only its end.

The read-ahead (:mod:`compaction.handover.readahead`) advances the fold as it reads the messages
and publishes its encoding as the session's reading :data:`READING`
(:attr:`~compaction.sessions.session.Session.readings`), which snapshots carry: a process that
loads the session compacts without extracting the span's identifiers again
(:func:`folded_identifiers`). The fold names the surface it was read from (its generation, the
seqs at its first and last position) and is used only while the session still has that surface;
a span that does not start at the fold's first position, or holds a checkpoint (whose identifiers
count for the gate but not for the facts), is extracted as before.
"""

from __future__ import annotations

from typing import Self, TypeVar

import msgspec

from compaction.handover.identifiers import Identifiers, message_kinds
from compaction.handover.reading import read
from compaction.sessions.blocks import Message
from compaction.sessions.session import Session, project

__all__ = ["READING", "IdentifierFold", "SurfaceFold", "folded_identifiers", "published_fold"]

READING = "handover/identifiers@1"
"""The fold's name among the session's readings; a change of what a message's identifiers are
(:func:`~compaction.handover.identifiers.message_kinds`) or of this encoding must bump it."""

KINDS = 5  # paths, commands, errors, error lines, ids: the order of Identifiers and Kinds


class FoldState(msgspec.Struct, array_like=True):
    """The encoded fold (see :class:`IdentifierFold`)."""

    generation: int
    begin: int
    begin_seq: int
    stop: int
    last_seq: int
    checkpoint_at: int
    first_seen: list[list[tuple[str, int]]]


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(FoldState)


class SurfaceFold:
    """A fold of the session's surface from the first compactable node on (``begin``, after the
    protected task statement) up to ``stop`` (exclusive), named by the surface it was read from
    (its generation, the seqs at ``begin`` and at ``stop - 1``). ``halt_at``: the first position
    from which the fold answers no span (a checkpoint met, or what the fold cannot follow; -1:
    none); nothing is folded from there on. Subclasses fold each message (:meth:`_fold`)."""

    def __init__(self, generation: int, begin: int, begin_seq: int) -> None:
        self.generation = generation
        self.begin = begin
        self.begin_seq = begin_seq
        self.stop = begin
        self.last_seq = -1
        self.halt_at = -1

    @classmethod
    def start(cls, session: Session) -> Self | None:
        """A fold of ``session``'s surface, nothing read yet; None when it has no compactable node."""
        nodes = session.nodes
        begin = 1 if nodes and nodes[0] == session.first_user_seq else 0
        if begin >= len(nodes):
            return None
        return cls(session.surface.generation, begin, nodes[begin])

    def holds(self, session: Session) -> bool:
        """Whether ``session``'s surface is still the one folded (the fresh nodes after ``stop``
        are its own)."""
        nodes = session.nodes
        return (
            self.generation == session.surface.generation
            and self.begin < len(nodes)
            and nodes[self.begin] == self.begin_seq
            and self.stop <= len(nodes)
            and (self.stop == self.begin or nodes[self.stop - 1] == self.last_seq)
        )

    def advance(self, session: Session, until: int | None = None) -> None:
        """Fold the surface's messages from ``stop`` up to position ``until`` (default: its end);
        ``session`` must hold the fold."""
        nodes = session.nodes
        until = len(nodes) if until is None else until
        for position in range(self.stop, until):
            if self.halt_at < 0:
                message = project(session.event(nodes[position]))
                if message is not None:
                    self._fold(session, message, position)
        if until > self.stop:
            self.stop, self.last_seq = until, nodes[until - 1]

    def _fold(self, session: Session, message: Message, position: int) -> None:
        raise NotImplementedError

    def encode(self) -> bytes:
        """The fold's state as the session's reading carries it."""
        raise NotImplementedError

    @classmethod
    def decode(cls, data: bytes) -> Self | None:
        """The fold ``data`` encodes, or None when it does not decode (another layout)."""
        raise NotImplementedError

    def span_stop(self, session: Session, shadowed: tuple[int, ...]) -> int | None:
        """The position that ends the span ``shadowed`` (surface seqs, in order) when the fold
        answers it (the span starts at ``begin``, the fold advanced over the nodes it has not
        read, no halt before the span's end), else None."""
        nodes = session.nodes
        stop = self.begin + len(shadowed)
        if not shadowed or shadowed[0] != self.begin_seq or stop > len(nodes):
            return None
        if nodes[stop - 1] != shadowed[-1]:
            return None
        if stop > self.stop:
            self.advance(session, stop)
        if 0 <= self.halt_at < stop:
            return None
        return stop


F = TypeVar("F", bound=SurfaceFold)


class IdentifierFold(SurfaceFold):
    """The identifiers of surface positions ``begin`` to ``stop`` (exclusive), each with the
    position of the message that brought it first, by kind; halted at the first checkpoint met."""

    def __init__(self, generation: int, begin: int, begin_seq: int) -> None:
        super().__init__(generation, begin, begin_seq)
        self.first_seen: tuple[dict[str, int], ...] = tuple({} for _ in range(KINDS))

    def _fold(self, session: Session, message: Message, position: int) -> None:
        if read(message).checkpoint:
            self.halt_at = position
            return
        for seen, found in zip(self.first_seen, message_kinds(message), strict=True):
            for identifier in found:
                seen.setdefault(identifier, position)

    def identifiers(self, stop: int) -> Identifiers:
        """The identifiers of positions ``begin`` to ``stop`` (at most :attr:`stop`), in order."""
        groups = [{found: None for found, at in seen.items() if at < stop} for seen in self.first_seen]
        return Identifiers(*groups)

    def encode(self) -> bytes:
        first_seen = [list(seen.items()) for seen in self.first_seen]
        state = FoldState(
            self.generation,
            self.begin,
            self.begin_seq,
            self.stop,
            self.last_seq,
            self.halt_at,
            first_seen,
        )
        return _ENCODER.encode(state)

    @classmethod
    def decode(cls, data: bytes) -> IdentifierFold | None:
        """The fold ``data`` encodes, or None when it does not decode (another layout)."""
        try:
            state = _DECODER.decode(data)
        except msgspec.DecodeError:
            return None
        if len(state.first_seen) != KINDS:
            return None
        fold = cls(state.generation, state.begin, state.begin_seq)
        fold.stop, fold.last_seq, fold.halt_at = state.stop, state.last_seq, state.checkpoint_at
        fold.first_seen = tuple(dict(pairs) for pairs in state.first_seen)
        return fold


def folded_identifiers(session: Session, shadowed: tuple[int, ...]) -> Identifiers | None:
    """:func:`~compaction.handover.identifiers.extract` of the messages of ``shadowed`` (surface
    seqs, in order), from the session's published fold (advanced over the nodes it has not read,
    up to the span's end); None when there is no usable fold for this span."""
    fold = published_fold(session, READING, IdentifierFold)
    if fold is None or not shadowed:
        return None
    stop = fold.span_stop(session, shadowed)
    return None if stop is None else fold.identifiers(stop)


def published_fold(session: Session, reading: str, kind: type[F]) -> F | None:
    """The fold ``session`` publishes as ``reading``, when it still holds the session's surface:
    the read-ahead's own fold when this process read the session ahead (its reading is the fold's
    bound :meth:`~SurfaceFold.encode`: nothing is encoded or decoded), else the one its snapshot
    carried, decoded; None when there is none."""
    published = session.readings.get(reading)
    if published is None:
        return None
    live = getattr(published, "__self__", None)
    fold = live if isinstance(live, kind) else kind.decode(published())
    return fold if fold is not None and fold.holds(session) else None
