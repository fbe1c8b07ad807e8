-- One erasure by id, for processing and for explain --erasure. Read-only.
SELECT * FROM retention.erasures WHERE erasure_id = %(erasure_id)s
