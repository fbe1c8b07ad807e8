-- The policies with held operations (an every-policy hold was lifted: each of them
-- re-checks its held operations). Read-only; the operations_held index.
SELECT DISTINCT policy FROM retention.operations WHERE state = 'held'
