-- The erasure a request key names (a repeated request answers with it). Read-only.
SELECT * FROM retention.erasures WHERE request_key = %(request_key)s
