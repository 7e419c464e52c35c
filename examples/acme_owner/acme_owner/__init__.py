"""A worked example of plugging into event-compaction: the ``acme/owner`` event names the user a
session works for, and the ``acme_savings`` view totals the tokens compaction saved per user."""
