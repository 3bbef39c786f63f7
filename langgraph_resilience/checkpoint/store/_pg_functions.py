"""The Postgres functions the migrations (`_schema`) create, and the markers
their errors carry (the savers translate a marked error into ours)."""

from __future__ import annotations

__all__ = [
    "ARCHIVED_MARKER",
    "FORK_MARKER",
    "LEASE_MARKER",
    "_PG_CHECK_FENCE",
    "_PG_LIMIT_ACQUIRE",
    "_PG_LIMIT_ACQUIRE_29",
    "_PG_REFUSE_FORK",
    "_PG_REFUSE_FORK_OR_ARCHIVED",
]

# Postgres refuses a fork in the same statement as the write: this function takes
# a per-thread lock, then raises when the namespace already holds a checkpoint
# newer than the parent (other than the one being written). SQLite runs the same
# query in the write's transaction instead (`_threads.put_checkpoint`).
FORK_MARKER = "resilience-fork"


def _refuse_fork(then: str = "") -> str:
    """The fork check's function; ``then``: what it checks after (a later version)."""
    return f"""
CREATE OR REPLACE FUNCTION resilience_refuse_fork(
    p_thread TEXT, p_ns TEXT, p_parent TEXT, p_new TEXT
) RETURNS VOID LANGUAGE plpgsql AS $$
DECLARE
    newer TEXT;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext(p_thread), hashtext(p_ns));
    SELECT checkpoint_id INTO newer FROM checkpoints
    WHERE thread_id = p_thread AND checkpoint_ns = p_ns
      AND checkpoint_id > p_parent AND checkpoint_id <> p_new
    ORDER BY checkpoint_id DESC LIMIT 1;
    IF newer IS NOT NULL THEN
        RAISE EXCEPTION '{FORK_MARKER}' USING DETAIL = newer;
    END IF;{then}
END $$"""


_PG_REFUSE_FORK = _refuse_fork()

# Postgres fences a write in the same round trip: this function raises unless
# the run still carries the writer's fencing token, and holds the run's row
# (FOR SHARE) until the write commits, so a claim cannot slip in between.
LEASE_MARKER = "resilience-lease-lost"
# Version 14 of the fork check also refuses a write to a thread moved to the
# archive after the writer read it (its parent is gone from the hot tier: the
# write would store a checkpoint whose history, and on Postgres the blobs of its
# unchanged channels, are only in the archive). Reading the thread restores it.
ARCHIVED_MARKER = "resilience-archived"
_PG_REFUSE_FORK_OR_ARCHIVED = _refuse_fork(
    f"""
    IF EXISTS (
        SELECT 1 FROM resilience_archive WHERE thread_id = p_thread AND status = 'archived'
    ) THEN
        RAISE EXCEPTION '{ARCHIVED_MARKER}' USING DETAIL = p_parent;
    END IF;"""
)

_PG_CHECK_FENCE = f"""
CREATE OR REPLACE FUNCTION resilience_check_fence(p_run TEXT, p_token BIGINT)
RETURNS VOID LANGUAGE plpgsql AS $$
DECLARE
    current BIGINT;
BEGIN
    SELECT fencing_token INTO current FROM resilience_runs WHERE run_id = p_run FOR SHARE;
    IF current IS DISTINCT FROM p_token THEN
        RAISE EXCEPTION '{LEASE_MARKER}' USING DETAIL = coalesce(current::text, 'none');
    END IF;
END $$"""

# Version 25's text, as it was migrated (version 29 replaces it: below).
# Postgres acquires limits in one round trip: for each (sorted) name, take the
# limit's lock (advisory, per transaction), create or read the limit, refuse on
# other numbers, a pause, a full set of live holds (dropping those of ``p_dead``
# holders and run-out leases) or a full rate window (dropping starts older than
# the window); admitted by all, store a start and a hold for each. 0 stands for
# "no bound" in the arrays. A rate's window is kept a guard longer than ``per``
# (2.5%, at most 25 ms; `_limits.window`), so that the starts the tries see,
# each a moment after its admission, also keep to the rate.
_PG_LIMIT_ACQUIRE = """
CREATE OR REPLACE FUNCTION resilience_limit_acquire(
    p_names TEXT[], p_concurrency INTEGER[], p_rate INTEGER[], p_per DOUBLE PRECISION[],
    p_hold TEXT, p_holder TEXT, p_lease DOUBLE PRECISION, p_dead TEXT[],
    p_blamed TEXT, p_waited DOUBLE PRECISION
) RETURNS TABLE (
    o_wait DOUBLE PRECISION, o_why TEXT, o_name TEXT, o_concurrency INTEGER,
    o_rate INTEGER, o_per DOUBLE PRECISION, o_holders TEXT[]
) LANGUAGE plpgsql AS $$
DECLARE
    now_ DOUBLE PRECISION := extract(epoch from clock_timestamp());
    i INTEGER;
    l_conc INTEGER;
    l_rate INTEGER;
    l_per DOUBLE PRECISION;
    l_paused DOUBLE PRECISION;
    n INTEGER;
    oldest DOUBLE PRECISION;
    hs TEXT[];
BEGIN
    -- A hold or start lost with the server's last moments is a try's slot for one
    -- crash: not worth a WAL flush per try (releases are relaxed the same way).
    PERFORM set_config('synchronous_commit', 'off', true);
    IF p_waited > 0 THEN
        UPDATE resilience_limits l SET waited = l.waited + p_waited WHERE l.name = p_blamed;
    END IF;
    FOR i IN 1 .. coalesce(array_length(p_names, 1), 0) LOOP
        -- One acquirer of a limit at a time (a lock, not a row write).
        PERFORM pg_advisory_xact_lock(hashtext('resilience_limit'), hashtext(p_names[i]));
        SELECT l.concurrency, l.rate, l.per, l.paused_until INTO l_conc, l_rate, l_per, l_paused
            FROM resilience_limits l WHERE l.name = p_names[i];
        IF NOT FOUND THEN
            INSERT INTO resilience_limits (name, concurrency, rate, per, waited, created_at)
            VALUES (p_names[i], nullif(p_concurrency[i], 0), nullif(p_rate[i], 0), p_per[i], 0,
                now_)
            RETURNING concurrency, rate, per, paused_until INTO l_conc, l_rate, l_per, l_paused;
        END IF;
        IF l_conc IS DISTINCT FROM nullif(p_concurrency[i], 0)
            OR l_rate IS DISTINCT FROM nullif(p_rate[i], 0)
            OR (l_rate IS NOT NULL AND l_per IS DISTINCT FROM p_per[i]) THEN
            RETURN QUERY SELECT NULL::float8, 'mismatch'::text, p_names[i], l_conc,
                l_rate, l_per, NULL::text[];
            RETURN;
        END IF;
        IF l_paused > now_ THEN
            RETURN QUERY SELECT l_paused - now_, 'paused'::text, p_names[i],
                l_conc, l_rate, l_per, NULL::text[];
            RETURN;
        END IF;
        IF l_conc IS NOT NULL THEN
            DELETE FROM resilience_limit_holds h WHERE h.name = p_names[i]
                AND (h.lease_until < now_ OR h.holder = ANY(p_dead));
            SELECT count(*), array_agg(DISTINCT h.holder) INTO n, hs
                FROM resilience_limit_holds h WHERE h.name = p_names[i];
            IF n >= l_conc THEN
                RETURN QUERY SELECT NULL::float8, 'full'::text, p_names[i], l_conc,
                    l_rate, l_per, hs;
                RETURN;
            END IF;
        END IF;
        IF l_rate IS NOT NULL THEN
            DELETE FROM resilience_limit_starts s WHERE s.name = p_names[i]
                AND s.at <= now_ - l_per - least(0.025, l_per * 0.025);
            SELECT count(*), min(s.at) INTO n, oldest
                FROM resilience_limit_starts s WHERE s.name = p_names[i];
            IF n >= l_rate THEN
                RETURN QUERY SELECT oldest + l_per + least(0.025, l_per * 0.025) - now_,
                    'rate'::text, p_names[i], l_conc, l_rate, l_per, NULL::text[];
                RETURN;
            END IF;
        END IF;
    END LOOP;
    FOR i IN 1 .. coalesce(array_length(p_names, 1), 0) LOOP
        IF p_rate[i] > 0 THEN
            INSERT INTO resilience_limit_starts (name, hold, at) VALUES (p_names[i], p_hold, now_);
        END IF;
        IF p_concurrency[i] > 0 THEN
            INSERT INTO resilience_limit_holds (name, hold, holder, since, lease_until)
            VALUES (p_names[i], p_hold, p_holder, now_, now_ + p_lease);
        END IF;
    END LOOP;
    RETURN QUERY SELECT 0::float8, ''::text, NULL::text, NULL::integer, NULL::integer,
        NULL::float8, NULL::text[];
END $$"""


# Version 29: the same steps for less server time (about half of it on an
# uncontended concurrency limit, a quarter on a rate limit: benchmarks/limits.py).
# Holds and starts come and go with every try, so a limit's index entries are
# mostly of dead rows until the next vacuum; bitmap scans (the planner's choice
# on these small tables) never mark those entries dead, plain index scans do, and
# later scans skip them. One scan counts the live holds and whether any are to
# drop (run-out leases, ``p_dead`` holders): the DELETE runs only then, and the
# holders' names are gathered only for a full limit. The rate's count reads only
# the window's starts (the index is by name and time). Nothing else changed:
# the same lock, the same answers.
_PG_LIMIT_ACQUIRE_29 = """
CREATE OR REPLACE FUNCTION resilience_limit_acquire(
    p_names TEXT[], p_concurrency INTEGER[], p_rate INTEGER[], p_per DOUBLE PRECISION[],
    p_hold TEXT, p_holder TEXT, p_lease DOUBLE PRECISION, p_dead TEXT[],
    p_blamed TEXT, p_waited DOUBLE PRECISION
) RETURNS TABLE (
    o_wait DOUBLE PRECISION, o_why TEXT, o_name TEXT, o_concurrency INTEGER,
    o_rate INTEGER, o_per DOUBLE PRECISION, o_holders TEXT[]
) LANGUAGE plpgsql SET enable_bitmapscan = off AS $$
DECLARE
    now_ DOUBLE PRECISION := extract(epoch from clock_timestamp());
    i INTEGER;
    l_conc INTEGER;
    l_rate INTEGER;
    l_per DOUBLE PRECISION;
    l_paused DOUBLE PRECISION;
    n INTEGER;
    gone INTEGER;
    oldest DOUBLE PRECISION;
    since_ DOUBLE PRECISION;
    hs TEXT[];
BEGIN
    -- A hold or start lost with the server's last moments is a try's slot for one
    -- crash: not worth a WAL flush per try (releases are relaxed the same way).
    PERFORM set_config('synchronous_commit', 'off', true);
    IF p_waited > 0 THEN
        UPDATE resilience_limits l SET waited = l.waited + p_waited WHERE l.name = p_blamed;
    END IF;
    FOR i IN 1 .. coalesce(array_length(p_names, 1), 0) LOOP
        -- One acquirer of a limit at a time (a lock, not a row write).
        PERFORM pg_advisory_xact_lock(hashtext('resilience_limit'), hashtext(p_names[i]));
        SELECT l.concurrency, l.rate, l.per, l.paused_until INTO l_conc, l_rate, l_per, l_paused
            FROM resilience_limits l WHERE l.name = p_names[i];
        IF NOT FOUND THEN
            INSERT INTO resilience_limits (name, concurrency, rate, per, waited, created_at)
            VALUES (p_names[i], nullif(p_concurrency[i], 0), nullif(p_rate[i], 0), p_per[i], 0,
                now_)
            RETURNING concurrency, rate, per, paused_until INTO l_conc, l_rate, l_per, l_paused;
        END IF;
        IF l_conc IS DISTINCT FROM nullif(p_concurrency[i], 0)
            OR l_rate IS DISTINCT FROM nullif(p_rate[i], 0)
            OR (l_rate IS NOT NULL AND l_per IS DISTINCT FROM p_per[i]) THEN
            RETURN QUERY SELECT NULL::float8, 'mismatch'::text, p_names[i], l_conc,
                l_rate, l_per, NULL::text[];
            RETURN;
        END IF;
        IF l_paused > now_ THEN
            RETURN QUERY SELECT l_paused - now_, 'paused'::text, p_names[i],
                l_conc, l_rate, l_per, NULL::text[];
            RETURN;
        END IF;
        IF l_conc IS NOT NULL THEN
            SELECT count(*) FILTER (WHERE h.lease_until >= now_ AND h.holder <> ALL(p_dead)),
                count(*) FILTER (WHERE h.lease_until < now_ OR h.holder = ANY(p_dead))
                INTO n, gone FROM resilience_limit_holds h WHERE h.name = p_names[i];
            IF gone > 0 THEN
                DELETE FROM resilience_limit_holds h WHERE h.name = p_names[i]
                    AND (h.lease_until < now_ OR h.holder = ANY(p_dead));
            END IF;
            IF n >= l_conc THEN
                SELECT array_agg(DISTINCT h.holder) INTO hs
                    FROM resilience_limit_holds h WHERE h.name = p_names[i];
                RETURN QUERY SELECT NULL::float8, 'full'::text, p_names[i], l_conc,
                    l_rate, l_per, hs;
                RETURN;
            END IF;
        END IF;
        IF l_rate IS NOT NULL THEN
            since_ := now_ - l_per - least(0.025, l_per * 0.025);
            DELETE FROM resilience_limit_starts s WHERE s.name = p_names[i] AND s.at <= since_;
            SELECT count(*), min(s.at) INTO n, oldest
                FROM resilience_limit_starts s WHERE s.name = p_names[i] AND s.at > since_;
            IF n >= l_rate THEN
                RETURN QUERY SELECT oldest + l_per + least(0.025, l_per * 0.025) - now_,
                    'rate'::text, p_names[i], l_conc, l_rate, l_per, NULL::text[];
                RETURN;
            END IF;
        END IF;
    END LOOP;
    FOR i IN 1 .. coalesce(array_length(p_names, 1), 0) LOOP
        IF p_rate[i] > 0 THEN
            INSERT INTO resilience_limit_starts (name, hold, at) VALUES (p_names[i], p_hold, now_);
        END IF;
        IF p_concurrency[i] > 0 THEN
            INSERT INTO resilience_limit_holds (name, hold, holder, since, lease_until)
            VALUES (p_names[i], p_hold, p_holder, now_, now_ + p_lease);
        END IF;
    END LOOP;
    RETURN QUERY SELECT 0::float8, ''::text, NULL::text, NULL::integer, NULL::integer,
        NULL::float8, NULL::text[];
END $$"""
