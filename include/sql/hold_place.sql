-- Place one legal hold (policy NULL: every policy) and return it. Inserts one row.
INSERT INTO retention.holds (policy, match, value, reason, placed_by)
VALUES (%(policy)s, %(match)s, %(value)s, %(reason)s, %(placed_by)s)
RETURNING hold_id, policy, match, value, reason, placed_by, placed_at,
          lifted_by, lifted_at, lift_reason
