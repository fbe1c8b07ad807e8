"""The leased queue and its one worker loop, shared by every job kind.

``leased`` (the queue's statements, states and ``Finish``), ``worker`` (claim →
token → the kind's attempt → decide → the kind's record; no transport),
``outage`` (an outage told from one object's failure), ``classify`` (outcomes,
one table per HTTP kind, one Retry-After rule), ``decisions`` (snooze and
backoff), ``http`` (one sender, for the kinds that use HTTP), ``limiter`` (the
shared token bucket).
Job kinds live with what they deliver: ``retention.objects.kind`` and
``retention.events.outbox``.
"""
