"""The durable message log: events, the positional surface, sessions, the store, the loop."""
