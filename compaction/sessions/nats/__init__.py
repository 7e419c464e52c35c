"""The session log on NATS JetStream: eventsourcing recorders on a replicated, durable stream.

``SessionStore.open("nats://HOST:PORT[,HOST:PORT...]?stream=S&replicas=N")`` stores each session
on its own subject of one stream, one commit message per save (:mod:`.frames`), with the
recorders of :mod:`.recorders` (needs the ``nats`` extra: ``pip install event-compaction[nats]``).
The recorders are synchronous; :mod:`.loop` runs the asyncio client on a private event loop.
See docs/sessions.md, "NATS JetStream".
"""
