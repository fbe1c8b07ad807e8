"""Urgent erasures: one tenant's, one row key's or one object's data across a policy, now.

``request`` validates and records a request (idempotent on its request key);
``process`` works one erasure: every row and object of its scope whatever its age,
through the policy's own row deleter and operations ledger (urgent operations, ahead
of the routine backlog under the same rate limit), honouring holds, and ends with a
receipt (a ``retention.erased`` event in the policy's outbox).
"""
