"""The leased queue and its one worker loop, shared by every job kind.

``leased`` (the queue's statements), ``worker`` (claim → token → send →
classify → decide → record), ``classify`` (one table per kind, one
Retry-After rule), ``http`` (one sender), ``limiter`` (the shared token bucket).
Job kinds live with what they deliver: ``retention.objects.operations`` and
``retention.events.outbox``.
"""
