-- Migration 0025: the take-ahead inside the bucket, and a 429 that lowers the
-- rate to what the API admitted (issue 21; the reasons are in the module
-- docstring of retention.queue.limiter).
--
-- hold_seconds: how long a worker of the scope may keep tokens it took ahead
-- (written by limiter_ensure.sql from the policy's rate and burst; 0: no
-- take-ahead). The bucket then holds at most burst - configured_rate x
-- hold_seconds tokens: the rest is the reserve that tokens taken ahead, and used
-- late, draw on. So calls stay within rate x interval + burst, the bound of an API
-- with the same rate and burst.
--
-- busy_since, granted_before_busy: since when the scope has been busy (its
-- bucket not full, and not closed), and granted_total at that moment. A 429
-- after a busy spell tells what the API admitted: the grants since, less its
-- burst and the refused call, per second.
--
-- admitted_rate: what the last such 429 measured (NULL: nothing learned). The
-- effective rate climbs back to it at rate_ceiling / recovery_seconds per
-- second, and above it four times more slowly.
--
-- retention.take_tokens: the bucket holds at most burst - configured_rate x
-- hold_seconds, as limiter_ensure.sql fills it. Not rate_ceiling, which the API's
-- headers lower (migration 0023): a slow pace would raise the cap, and an answer that
-- raised the pace again within a hold would let the tokens granted in it exceed the
-- burst by (configured rate - pace) x hold. The hold is sized by the
-- configured rate (retention.queue.limiter.hold_seconds), so the reserve is too.
--
-- retention.throttle_scope: a 429 answered while the scope is closed (by an earlier
-- 429's Retry-After, an outage pause, or headers saying nothing is left) is for a
-- call granted before the close, which already said what it says: it extends the
-- close, but lowers no rate. Otherwise one answered more than a second after an
-- earlier 429 would halve the rate again (the busy spell, restarted at the
-- reopening, has not begun), and one after headers said nothing was left would
-- lower it and keep the headers from raising it for recovery_seconds.
ALTER TABLE retention.rate_limiters
    ADD COLUMN IF NOT EXISTS hold_seconds double precision NOT NULL DEFAULT 0
        CHECK (hold_seconds >= 0),
    ADD COLUMN IF NOT EXISTS busy_since timestamptz NOT NULL DEFAULT clock_timestamp(),
    ADD COLUMN IF NOT EXISTS granted_before_busy bigint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS admitted_rate double precision CHECK (admitted_rate > 0);
UPDATE retention.rate_limiters SET granted_before_busy = granted_total;

-- Take up to p_wanted tokens (as migration 0009), with the bucket capped at burst
-- less what the configured rate earns in the hold, the recovery of migration 0002
-- slowed above the admitted rate, and the count of busy grants restarted whenever the
-- bucket is full. Locks the scope's row of retention.rate_limiters (FOR UPDATE)
-- for the length of its statement.
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
    climb double precision;
    learned double precision;
    rate double precision;
    cap double precision;
    available double precision;
    busy_from timestamptz;
    granted_before bigint;
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
    -- Back up to the admitted rate at the configured pace, four times more slowly above it.
    climb := elapsed * r.rate_ceiling / r.recovery_seconds;
    learned := coalesce(r.admitted_rate, r.rate_ceiling);
    IF r.effective_rate >= learned THEN
        rate := r.effective_rate + climb / 4;
    ELSIF r.effective_rate + climb > learned THEN
        rate := learned + (r.effective_rate + climb - learned) / 4;
    ELSE
        rate := r.effective_rate + climb;
    END IF;
    rate := least(r.rate_ceiling, rate);
    cap := greatest(1, r.burst - coalesce(r.configured_rate, r.rate_ceiling) * r.hold_seconds);
    available := least(cap, r.tokens + elapsed * rate);
    busy_from := r.busy_since;
    granted_before := r.granted_before_busy;
    IF available >= cap THEN  -- idle long enough to fill the bucket: busy from now on
        busy_from := t;
        granted_before := r.granted_total;
    END IF;
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
        granted_total = granted_total + granted,
        busy_since = busy_from,
        granted_before_busy = granted_before
    WHERE scope = p_scope;
END
$fn$;

-- The API said 429 (or 503 with Retry-After) although the bucket allowed the call:
-- close the scope until the time it named; if it was open, lower the rate (at most
-- once a second) to what the API admitted, or halve it (see the header). Locks the scope's
-- row of retention.rate_limiters (FOR UPDATE) for the length of its statement.
CREATE OR REPLACE FUNCTION retention.throttle_scope(
    p_scope text,
    p_retry_after_seconds double precision
) RETURNS double precision LANGUAGE plpgsql AS $fn$
DECLARE
    t timestamptz := clock_timestamp();
    reopen timestamptz := clock_timestamp() + make_interval(secs => p_retry_after_seconds);
    r retention.rate_limiters%ROWTYPE;
    busy double precision;
    beyond double precision;
    admitted double precision;
    rate double precision;
    decrease boolean;
BEGIN
    SELECT * INTO r FROM retention.rate_limiters WHERE scope = p_scope FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    rate := r.effective_rate;
    decrease := r.last_decrease_at < t - interval '1 second' AND NOT r.closed_until > t;
    IF decrease THEN
        busy := extract(epoch FROM t - r.busy_since);
        beyond := r.granted_total - r.granted_before_busy - r.burst - 1;
        IF busy > 0 AND beyond >= r.burst / 2 THEN
            admitted := least(r.rate_ceiling, beyond / busy);
        END IF;
        IF admitted >= r.effective_rate / 2 THEN
            rate := greatest(r.min_rate, least(r.effective_rate, admitted));
        ELSE
            admitted := NULL;  -- too few calls, or too idle a spell, to tell: halve
            rate := greatest(r.min_rate, r.effective_rate / 2);
        END IF;
    END IF;
    UPDATE retention.rate_limiters
    SET closed_until = greatest(closed_until, reopen),
        tokens = 0,
        updated_at = greatest(updated_at, reopen),
        effective_rate = rate,
        admitted_rate = coalesce(admitted, admitted_rate),
        last_decrease_at = CASE WHEN decrease THEN t ELSE last_decrease_at END,
        busy_since = greatest(busy_since, reopen),
        granted_before_busy = granted_total,
        throttled_total = throttled_total + 1
    WHERE scope = p_scope;
    RETURN rate;
END
$fn$;
