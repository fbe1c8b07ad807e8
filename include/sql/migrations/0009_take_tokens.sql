-- Migration 0009: take several tokens of a limiter scope in one statement.
-- The bucket arithmetic of retention.take_token (migration 0002), but up to
-- p_wanted tokens are granted at once (as many whole tokens as the bucket
-- holds), so a fast worker pays for one locked update of the scope's row per
-- few calls instead of one per call. retention.take_token becomes a call of
-- this one with p_wanted = 1 (kept for workers of the previous release during
-- a rolling deploy), so the arithmetic is written once.
-- Each call locks the scope's row of retention.rate_limiters (FOR UPDATE) for
-- the length of its statement.
CREATE OR REPLACE FUNCTION retention.take_tokens(
    p_scope text,
    p_wanted integer,
    OUT granted integer,
    OUT wait_seconds double precision,
    OUT effective_rate double precision
) LANGUAGE plpgsql AS $fn$
DECLARE
    r retention.rate_limiters%ROWTYPE;
    t timestamptz;
    elapsed double precision;
    rate double precision;
    available double precision;
BEGIN
    IF p_wanted IS NULL OR p_wanted < 1 THEN
        RAISE EXCEPTION 'retention: take_tokens wants at least one token, got %', p_wanted;
    END IF;
    SELECT * INTO r FROM retention.rate_limiters WHERE scope = p_scope FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'retention: no rate limiter for scope %', p_scope;
    END IF;
    t := clock_timestamp();
    IF r.closed_until > t THEN
        granted := 0;
        wait_seconds := extract(epoch FROM r.closed_until - t);
        effective_rate := r.effective_rate;
        RETURN;
    END IF;
    elapsed := greatest(0, extract(epoch FROM t - r.updated_at));
    rate := least(
        r.rate_ceiling,
        r.effective_rate + elapsed * r.rate_ceiling / r.recovery_seconds
    );
    available := least(r.burst, r.tokens + elapsed * rate);
    effective_rate := rate;
    granted := least(p_wanted, floor(available))::integer;
    IF granted >= 1 THEN
        wait_seconds := 0;
        available := available - granted;
    ELSE
        granted := 0;
        wait_seconds := (1 - available) / rate;
    END IF;
    UPDATE retention.rate_limiters
    SET tokens = available,
        effective_rate = rate,
        updated_at = t,
        granted_total = granted_total + granted
    WHERE scope = p_scope;
END
$fn$;

CREATE OR REPLACE FUNCTION retention.take_token(
    p_scope text,
    OUT granted boolean,
    OUT wait_seconds double precision,
    OUT effective_rate double precision
) LANGUAGE sql AS $fn$
    SELECT t.granted >= 1, t.wait_seconds, t.effective_rate
    FROM retention.take_tokens(p_scope, 1) AS t
$fn$;
