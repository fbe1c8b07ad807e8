"""Legal holds: what must be kept is kept, whatever a policy says.

A hold (``retention.holds``) matches a tenant, a row key or an object id, of one
policy or of every policy, from the moment it is placed until it is lifted. It is
enforced where the deletion happens, never by a list read at planning time:

- row deletes embed :func:`~retention.holds.predicate.held_row` in the delete
  statement itself (the parent-key selection, so rows deleted by parent key follow);
- remote operations are screened just before each call (``objects.kind``) and wait
  in the operation state ``held``;
- the partition fast path leaves a partition with a held row to the row path.

:mod:`retention.holds.store` places, lifts and looks holds up.
"""
