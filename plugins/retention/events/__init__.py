"""Events in and out: the outbox of ``retention.deleted`` events (a job kind of the
leased queue) and signed inbound hints that make objects eligible sooner."""
