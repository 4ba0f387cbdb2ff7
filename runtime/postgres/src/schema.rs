//! The store's tables and server-side functions, one migration per schema
//! version. Every statement runs with `search_path` set to the store's own
//! schema, so several policies (schemas) share one database.

/// The schema version this crate writes and reads.
pub const SCHEMA_VERSION: i32 = 4;

/// Migration `n` (index `n - 1`) takes a schema from version `n - 1` to `n`.
/// Version 0 is an empty schema. Public for the migration tests only.
#[doc(hidden)]
pub const MIGRATIONS: [&str; SCHEMA_VERSION as usize] = [V1, V2, V3, V4];

/// Version 1: the tables of `runtime/STORE.md` (decisions, per-server counts,
/// spend rows) with each counter's running state in a row of its own, and the
/// three functions that make admission, settlement and recording one
/// statement each.
///
/// Text columns use the "C" collation: the eviction order and `mcpc store`
/// listings compare identities byte by byte, as the Rust stores do.
const V1: &str = r#"
CREATE TABLE schema_version (
    version     integer NOT NULL
);
INSERT INTO schema_version (version) VALUES (0);

CREATE TABLE decisions (
    server_id    text COLLATE "C" NOT NULL,
    identity     text COLLATE "C" NOT NULL,
    verdict      text    NOT NULL CHECK (verdict IN ('allow', 'deny')),
    reason       text    NOT NULL,
    digest       text    NOT NULL,
    expires_at   bigint,
    data         text,
    represented  bigint  NOT NULL DEFAULT 0,
    decided_at   bigint  NOT NULL,
    recomputable boolean NOT NULL DEFAULT false,
    PRIMARY KEY (server_id, identity)
);
-- The eviction order of `store::eviction_key`.
CREATE INDEX decisions_eviction ON decisions
    (server_id, recomputable DESC, COALESCE(expires_at, 9223372036854775807), decided_at, identity);

CREATE TABLE servers (
    server_id           text COLLATE "C" PRIMARY KEY,
    stored              bigint NOT NULL DEFAULT 0,
    evicted             bigint NOT NULL DEFAULT 0,
    evicted_represented bigint NOT NULL DEFAULT 0
);

-- One row per counter: the total of its spend rows at or after `floor`,
-- the prune mark (spend before it may have been deleted) and the rolling
-- window it was last admitted with. An admission locks these rows (in
-- counter order) and nothing else, so admissions for different servers
-- never wait on each other.
CREATE TABLE counters (
    server_id   text COLLATE "C" NOT NULL,
    counter     text COLLATE "C" NOT NULL,
    total       bigint NOT NULL DEFAULT 0,
    floor       bigint NOT NULL DEFAULT -9223372036854775808,
    pruned      bigint NOT NULL DEFAULT -9223372036854775808,
    rolling_ms  bigint,
    -- Bounds of the counter's spend rows (NULL: none): at or below the
    -- oldest, at or above the newest. They spare an admission the look-ups
    -- that would find nothing (no spend to prune, none past a fixed
    -- window's end).
    oldest      bigint,
    newest      bigint,
    PRIMARY KEY (server_id, counter)
);

CREATE TABLE spend (
    server_id   text COLLATE "C" NOT NULL,
    counter     text COLLATE "C" NOT NULL,
    at          bigint NOT NULL,
    reservation bigint NOT NULL,
    amount      bigint NOT NULL,
    PRIMARY KEY (server_id, counter, at, reservation)
);

-- Reservation ids: unique across every process sharing the schema.
CREATE SEQUENCE reservation_ids MINVALUE 1 START 1 CACHE 1;

-- i64 arithmetic that saturates as the Rust stores' does.
CREATE FUNCTION sat(value numeric) RETURNS bigint LANGUAGE sql IMMUTABLE AS
$$ SELECT GREATEST(LEAST(value, 9223372036854775807), -9223372036854775808)::bigint $$;

-- `DecisionStore::admit`, every check in one statement: the same steps as
-- the in-memory store's `admit_into`, on the counters' rows, which are read
-- and locked at once (in counter order, so two admissions never deadlock)
-- and stay locked until the caller's COMMIT. Their state is worked on in
-- local arrays and written back by one UPDATE; the spend by one INSERT.
-- The caller computes each check's floor, prune cut and (fixed windows)
-- end; `ms` is NULL for a fixed window. Returns o_refused NULL and the
-- reservation when every check fitted.
CREATE FUNCTION admit(
    p_server text, p_counters text[], p_amounts bigint[], p_limits bigint[],
    p_ms bigint[], p_floors bigint[], p_cuts bigint[], p_ends bigint[], p_now bigint,
    OUT o_refused integer, OUT o_available_at bigint, OUT o_reservation bigint)
LANGUAGE plpgsql AS $fn$
DECLARE
    n integer := cardinality(p_counters);
    distinct_names integer := 0;
    i integer;
    j integer;
    k integer;
    rec record;
    c_name text[];
    c_total bigint[];
    c_floor bigint[];
    c_pruned bigint[];
    c_rolling bigint[];
    c_oldest bigint[];
    c_newest bigint[];
    delta numeric;
    spent numeric;
    pending numeric;
    newest_deleted bigint;
    first_free bigint;
    fits boolean := true;
BEGIN
    FOR i IN 1 .. n LOOP
        IF NOT (p_counters[i] = ANY (p_counters[1:i - 1])) THEN
            distinct_names := distinct_names + 1;
        END IF;
    END LOOP;
    FOR attempt IN 1 .. 2 LOOP
        c_name := '{}'; c_total := '{}'; c_floor := '{}'; c_pruned := '{}';
        c_rolling := '{}'; c_oldest := '{}'; c_newest := '{}';
        FOR rec IN SELECT counter, total, floor, pruned, rolling_ms, oldest, newest FROM counters
                WHERE server_id = p_server AND counter = ANY (p_counters)
                ORDER BY counter FOR UPDATE LOOP
            c_name := c_name || rec.counter;
            c_total := c_total || rec.total;
            c_floor := c_floor || rec.floor;
            c_pruned := c_pruned || rec.pruned;
            c_rolling := c_rolling || rec.rolling_ms;
            c_oldest := c_oldest || rec.oldest;
            c_newest := c_newest || rec.newest;
        END LOOP;
        EXIT WHEN cardinality(c_name) = distinct_names;
        -- A counter's first admission: make its row (default state), then lock again.
        INSERT INTO counters (server_id, counter)
            SELECT p_server, c FROM (SELECT DISTINCT c FROM unnest(p_counters) AS c) AS d
            ORDER BY c
            ON CONFLICT DO NOTHING;
    END LOOP;
    FOR i IN 1 .. n LOOP
        k := array_position(c_name, p_counters[i]);
        IF p_ms[i] IS NOT NULL THEN
            -- A lengthened rolling window does not hold what the shorter deleted against it.
            IF c_rolling[k] IS NOT NULL AND p_ms[i] > c_rolling[k] THEN
                c_pruned[k] := -9223372036854775808;
            END IF;
            c_rolling[k] := p_ms[i];
        END IF;
        IF p_floors[i] < c_pruned[k] THEN
            -- The window reaches back over deleted spend: refuse.
            o_refused := i - 1;
            o_available_at := CASE WHEN p_ms[i] IS NULL THEN p_ends[i]
                ELSE sat(sat(c_pruned[k]::numeric + p_ms[i])::numeric - 1) END;
            fits := false;
            EXIT;
        END IF;
        -- Move the floor, keeping the total the sum of the rows at or after it.
        IF p_floors[i] <> c_floor[k] THEN
            IF c_oldest[k] < GREATEST(p_floors[i], c_floor[k])
                    AND c_newest[k] >= LEAST(p_floors[i], c_floor[k]) THEN
                SELECT COALESCE(sum(amount), 0) INTO delta FROM spend
                    WHERE server_id = p_server AND counter = p_counters[i]
                      AND at >= LEAST(p_floors[i], c_floor[k])
                      AND at < GREATEST(p_floors[i], c_floor[k]);
            ELSE
                delta := 0;
            END IF;
            IF p_floors[i] > c_floor[k] THEN
                c_total[k] := GREATEST(c_total[k] - delta, 0);
            ELSE
                c_total[k] := sat(c_total[k] + delta);
            END IF;
            c_floor[k] := p_floors[i];
        END IF;
        spent := c_total[k];
        IF p_ms[i] IS NULL AND c_newest[k] >= p_ends[i] THEN
            -- A fixed window counts only what was recorded before its end.
            SELECT GREATEST(spent - COALESCE(sum(amount), 0), 0) INTO spent FROM spend
                WHERE server_id = p_server AND counter = p_counters[i] AND at >= p_ends[i];
        END IF;
        -- Prune up to 16 rows older than the retention, oldest first.
        IF c_oldest[k] < p_cuts[i] THEN
            WITH doomed AS (
                DELETE FROM spend WHERE (server_id, counter, at, reservation) IN (
                    SELECT server_id, counter, at, reservation FROM spend
                    WHERE server_id = p_server AND counter = p_counters[i] AND at < p_cuts[i]
                    ORDER BY at, reservation LIMIT 16)
                RETURNING at)
            SELECT max(at) INTO newest_deleted FROM doomed;
            IF newest_deleted IS NOT NULL THEN
                c_pruned[k] := GREATEST(c_pruned[k], newest_deleted + 1);
            END IF;
            SELECT min(at) INTO first_free FROM spend
                WHERE server_id = p_server AND counter = p_counters[i];
            c_oldest[k] := first_free;
            IF first_free IS NULL THEN
                c_newest[k] := NULL;
            END IF;
        END IF;
        -- Several checks may name one counter: count what earlier ones add.
        pending := 0;
        FOR j IN 1 .. i - 1 LOOP
            IF p_counters[j] = p_counters[i] THEN
                pending := pending + p_amounts[j];
            END IF;
        END LOOP;
        spent := spent + pending;
        CONTINUE WHEN spent + p_amounts[i] <= p_limits[i];
        o_refused := i - 1;
        IF p_ms[i] IS NULL THEN
            o_available_at := p_ends[i];
        ELSIF p_amounts[i] > p_limits[i] THEN
            o_available_at := 9223372036854775807;
        ELSE
            -- The row whose leaving frees enough; it leaves `ms` after it was recorded.
            SELECT w.at INTO first_free FROM (
                SELECT s.at, sum(s.amount) OVER (ORDER BY s.at, s.reservation) AS freed
                FROM spend AS s
                WHERE s.server_id = p_server AND s.counter = p_counters[i] AND s.at >= p_floors[i]
            ) AS w
            WHERE w.freed >= spent + p_amounts[i] - p_limits[i]
            ORDER BY w.at LIMIT 1;
            o_available_at := CASE WHEN first_free IS NULL THEN 9223372036854775807
                ELSE sat(first_free::numeric + p_ms[i]) END;
        END IF;
        fits := false;
        EXIT;
    END LOOP;
    IF fits THEN
        o_reservation := nextval('reservation_ids');
        FOR i IN 1 .. n LOOP
            k := array_position(c_name, p_counters[i]);
            IF p_now >= c_floor[k] THEN
                c_total[k] := sat(c_total[k]::numeric + p_amounts[i]);
            END IF;
            c_oldest[k] := LEAST(COALESCE(c_oldest[k], p_now), p_now);
            c_newest[k] := GREATEST(COALESCE(c_newest[k], p_now), p_now);
        END LOOP;
        -- Two checks of one counter share its spend row.
        INSERT INTO spend AS s (server_id, counter, at, reservation, amount)
            SELECT p_server, u.c, p_now, o_reservation, sat(sum(u.a))
            FROM unnest(p_counters, p_amounts) AS u(c, a) GROUP BY u.c
            ON CONFLICT (server_id, counter, at, reservation)
            DO UPDATE SET amount = sat(s.amount::numeric + excluded.amount);
    END IF;
    -- Every state change stays, admitted or refused (as in the other stores).
    UPDATE counters AS c SET total = v.total, floor = v.floor, pruned = v.pruned,
            rolling_ms = v.rolling, oldest = v.oldest, newest = v.newest
        FROM unnest(c_name, c_total, c_floor, c_pruned, c_rolling, c_oldest, c_newest)
            AS v(counter, total, floor, pruned, rolling, oldest, newest)
        WHERE c.server_id = p_server AND c.counter = v.counter;
END
$fn$;

-- `DecisionStore::settle`: 1 = the reservation was never issued, 0 = done
-- (also when its spend has been pruned).
CREATE FUNCTION settle(p_server text, p_reservation bigint, p_at bigint, p_counter text,
    p_actual bigint) RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE
    last bigint;
    called boolean;
    counter_floor bigint;
    old bigint;
BEGIN
    SELECT last_value, is_called INTO last, called FROM reservation_ids;
    IF NOT called OR p_reservation > last THEN
        RETURN 1;
    END IF;
    SELECT floor INTO counter_floor FROM counters
        WHERE server_id = p_server AND counter = p_counter FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    SELECT amount INTO old FROM spend WHERE server_id = p_server AND counter = p_counter
        AND at = p_at AND reservation = p_reservation FOR UPDATE;
    IF FOUND THEN
        UPDATE spend SET amount = p_actual WHERE server_id = p_server AND counter = p_counter
            AND at = p_at AND reservation = p_reservation;
    END IF;
    IF old IS NOT NULL AND p_at >= counter_floor THEN
        UPDATE counters SET total = GREATEST(sat(total::numeric - old + p_actual), 0)
            WHERE server_id = p_server AND counter = p_counter;
    END IF;
    RETURN 0;
END
$fn$;

-- `DecisionStore::record`: insert or replace, then evict past the bound in
-- the order of `store::eviction_key`. The server's row is locked first, so
-- its counts stay exact under concurrent records.
CREATE FUNCTION record(p_server text, p_identity text, p_verdict text, p_reason text,
    p_digest text, p_expires_at bigint, p_data text, p_decided_at bigint,
    p_recomputable boolean, p_max bigint) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
    inserted boolean;
    sv servers%ROWTYPE;
    gone bigint;
    gone_represented numeric;
BEGIN
    INSERT INTO servers (server_id) VALUES (p_server) ON CONFLICT DO NOTHING;
    SELECT * INTO sv FROM servers WHERE server_id = p_server FOR UPDATE;
    INSERT INTO decisions AS d (server_id, identity, verdict, reason, digest, expires_at, data,
            represented, decided_at, recomputable)
        VALUES (p_server, p_identity, p_verdict, p_reason, p_digest, p_expires_at, p_data, 0,
            p_decided_at, p_recomputable)
        ON CONFLICT (server_id, identity) DO UPDATE SET verdict = excluded.verdict,
            reason = excluded.reason, digest = excluded.digest,
            expires_at = excluded.expires_at, data = excluded.data, represented = 0,
            decided_at = excluded.decided_at, recomputable = excluded.recomputable
        RETURNING (xmax = 0) INTO inserted;
    IF NOT inserted THEN
        RETURN; -- replaced: the count is unchanged
    END IF;
    sv.stored := sv.stored + 1;
    IF sv.stored > p_max THEN
        WITH victims AS (
            DELETE FROM decisions WHERE server_id = p_server AND identity IN (
                SELECT identity FROM decisions WHERE server_id = p_server
                ORDER BY recomputable DESC, COALESCE(expires_at, 9223372036854775807),
                         decided_at, identity
                LIMIT sv.stored - p_max)
            RETURNING represented)
        SELECT count(*), COALESCE(sum(represented), 0) INTO gone, gone_represented FROM victims;
        sv.stored := sv.stored - gone;
        sv.evicted := sv.evicted + gone;
        sv.evicted_represented := sat(sv.evicted_represented + gone_represented);
    END IF;
    UPDATE servers SET stored = sv.stored, evicted = sv.evicted,
            evicted_represented = sv.evicted_represented
        WHERE server_id = p_server;
END
$fn$;

-- `DecisionStore::purge_stale`.
CREATE FUNCTION purge_stale(p_server text, p_digest text, p_now bigint) RETURNS bigint
LANGUAGE plpgsql AS $fn$
DECLARE
    removed bigint;
BEGIN
    PERFORM 1 FROM servers WHERE server_id = p_server FOR UPDATE;
    WITH gone AS (
        DELETE FROM decisions WHERE server_id = p_server
            AND (digest <> p_digest OR (expires_at IS NOT NULL AND expires_at <= p_now))
        RETURNING 1)
    SELECT count(*) INTO removed FROM gone;
    IF removed > 0 THEN
        UPDATE servers SET stored = GREATEST(stored - removed, 0) WHERE server_id = p_server;
    END IF;
    RETURN removed;
END
$fn$;
"#;

/// Version 2 (the runtime's store schema 4): each decision records the
/// statement that decided (`Statement::stored_name`; NULL for rows stored
/// before, whose statement the engine derives from the reason), and the
/// operators' functions of `StoreAdmin`: `usage` (an admission's arithmetic
/// for one check, recording nothing) and `prune_spend`.
const V2: &str = r#"
ALTER TABLE decisions ADD COLUMN statement text;

DROP FUNCTION record(text, text, text, text, text, bigint, text, bigint, boolean, bigint);
CREATE FUNCTION record(p_server text, p_identity text, p_verdict text, p_reason text,
    p_digest text, p_expires_at bigint, p_data text, p_decided_at bigint,
    p_recomputable boolean, p_statement text, p_max bigint) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
    inserted boolean;
    sv servers%ROWTYPE;
    gone bigint;
    gone_represented numeric;
BEGIN
    INSERT INTO servers (server_id) VALUES (p_server) ON CONFLICT DO NOTHING;
    SELECT * INTO sv FROM servers WHERE server_id = p_server FOR UPDATE;
    INSERT INTO decisions AS d (server_id, identity, verdict, reason, digest, expires_at, data,
            represented, decided_at, recomputable, statement)
        VALUES (p_server, p_identity, p_verdict, p_reason, p_digest, p_expires_at, p_data, 0,
            p_decided_at, p_recomputable, p_statement)
        ON CONFLICT (server_id, identity) DO UPDATE SET verdict = excluded.verdict,
            reason = excluded.reason, digest = excluded.digest,
            expires_at = excluded.expires_at, data = excluded.data, represented = 0,
            decided_at = excluded.decided_at, recomputable = excluded.recomputable,
            statement = excluded.statement
        RETURNING (xmax = 0) INTO inserted;
    IF NOT inserted THEN
        RETURN; -- replaced: the count is unchanged
    END IF;
    sv.stored := sv.stored + 1;
    IF sv.stored > p_max THEN
        WITH victims AS (
            DELETE FROM decisions WHERE server_id = p_server AND identity IN (
                SELECT identity FROM decisions WHERE server_id = p_server
                ORDER BY recomputable DESC, COALESCE(expires_at, 9223372036854775807),
                         decided_at, identity
                LIMIT sv.stored - p_max)
            RETURNING represented)
        SELECT count(*), COALESCE(sum(represented), 0) INTO gone, gone_represented FROM victims;
        sv.stored := sv.stored - gone;
        sv.evicted := sv.evicted + gone;
        sv.evicted_represented := sat(sv.evicted_represented + gone_represented);
    END IF;
    UPDATE servers SET stored = sv.stored, evicted = sv.evicted,
            evicted_represented = sv.evicted_represented
        WHERE server_id = p_server;
END
$fn$;

-- `StoreAdmin::usage`: what `admit` of this one check would compute at
-- p_now (the same steps, on a copy of the counter's state), recording and
-- pruning nothing. o_available_at NULL: the amount fits now.
CREATE FUNCTION usage(p_server text, p_counter text, p_amount bigint, p_limit bigint,
    p_ms bigint, p_floor bigint, p_end bigint,
    OUT o_spent bigint, OUT o_available_at bigint)
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
    st counters%ROWTYPE;
    delta numeric;
    spent numeric;
    first_free bigint;
BEGIN
    SELECT * INTO st FROM counters WHERE server_id = p_server AND counter = p_counter;
    IF NOT FOUND THEN
        spent := 0;
    ELSE
        IF p_ms IS NOT NULL THEN
            IF st.rolling_ms IS NOT NULL AND p_ms > st.rolling_ms THEN
                st.pruned := -9223372036854775808;
            END IF;
        END IF;
        IF p_floor < st.pruned THEN
            -- Over deleted spend: the window counts as full.
            o_spent := p_limit;
            o_available_at := CASE WHEN p_ms IS NULL THEN p_end
                ELSE sat(sat(st.pruned::numeric + p_ms)::numeric - 1) END;
            RETURN;
        END IF;
        IF p_floor <> st.floor THEN
            SELECT COALESCE(sum(amount), 0) INTO delta FROM spend
                WHERE server_id = p_server AND counter = p_counter
                  AND at >= LEAST(p_floor, st.floor) AND at < GREATEST(p_floor, st.floor);
            IF p_floor > st.floor THEN
                st.total := GREATEST(st.total - delta, 0);
            ELSE
                st.total := sat(st.total + delta);
            END IF;
        END IF;
        spent := st.total;
        IF p_ms IS NULL THEN
            SELECT GREATEST(spent - COALESCE(sum(amount), 0), 0) INTO spent FROM spend
                WHERE server_id = p_server AND counter = p_counter AND at >= p_end;
        END IF;
    END IF;
    o_spent := sat(spent);
    IF spent + p_amount <= p_limit THEN
        o_available_at := NULL;
    ELSIF p_ms IS NULL THEN
        o_available_at := p_end;
    ELSIF p_amount > p_limit THEN
        o_available_at := 9223372036854775807;
    ELSE
        SELECT w.at INTO first_free FROM (
            SELECT s.at, sum(s.amount) OVER (ORDER BY s.at, s.reservation) AS freed
            FROM spend AS s
            WHERE s.server_id = p_server AND s.counter = p_counter AND s.at >= p_floor
        ) AS w
        WHERE w.freed >= spent + p_amount - p_limit
        ORDER BY w.at LIMIT 1;
        o_available_at := CASE WHEN first_free IS NULL THEN 9223372036854775807
            ELSE sat(first_free::numeric + p_ms) END;
    END IF;
END
$fn$;

-- `StoreAdmin::prune_expired`'s spend part: for each counter (locked by the
-- caller), delete the rows before its cut, moving the floor past them when
-- it was below (the total keeps counting the rows at or after the floor)
-- and the prune mark past the newest deleted. Returns the rows deleted.
CREATE FUNCTION prune_spend(p_servers text[], p_counters text[], p_cuts bigint[])
RETURNS bigint
LANGUAGE plpgsql AS $fn$
DECLARE
    i integer;
    st counters%ROWTYPE;
    delta numeric;
    gone bigint;
    newest bigint;
    removed bigint := 0;
BEGIN
    FOR i IN 1 .. cardinality(p_counters) LOOP
        SELECT * INTO st FROM counters
            WHERE server_id = p_servers[i] AND counter = p_counters[i] FOR UPDATE;
        CONTINUE WHEN NOT FOUND;
        WITH doomed AS (
            DELETE FROM spend WHERE server_id = p_servers[i] AND counter = p_counters[i]
                AND at < p_cuts[i]
            RETURNING at, amount)
        SELECT count(*), max(at), COALESCE(sum(amount) FILTER (WHERE at >= st.floor), 0)
            INTO gone, newest, delta FROM doomed;
        CONTINUE WHEN gone = 0;
        IF p_cuts[i] > st.floor THEN
            st.total := GREATEST(st.total - delta, 0);
            st.floor := p_cuts[i];
        END IF;
        st.pruned := GREATEST(st.pruned, newest + 1);
        SELECT min(at) INTO st.oldest FROM spend
            WHERE server_id = p_servers[i] AND counter = p_counters[i];
        IF st.oldest IS NULL THEN
            st.newest := NULL;
        END IF;
        UPDATE counters SET total = st.total, floor = st.floor, pruned = st.pruned,
                oldest = st.oldest, newest = st.newest
            WHERE server_id = p_servers[i] AND counter = p_counters[i];
        removed := removed + gone;
    END LOOP;
    RETURN removed;
END
$fn$;
"#;

/// Version 3: `admit_batch`, the admissions of one server that arrived
/// together in one process, in one statement and one transaction: the lock
/// is taken and the commit flushed once for all of them. Each request is
/// the `admit` call it would have been alone, in arrival order, so each
/// sees the spend (and the counter state) of the ones before it exactly as
/// successive calls would.
const V3: &str = r#"
-- Request i has p_sizes[i] checks, the next ones in the flat arrays, and is
-- made at p_nows[i]. Returns one element per request in each array (the
-- `admit` outputs). The batch's counters (their union) are locked first, in
-- counter order, as one `admit` locks its own: two batches of different
-- processes then never wait on each other in opposite orders.
CREATE FUNCTION admit_batch(
    p_server text, p_sizes integer[], p_counters text[], p_amounts bigint[], p_limits bigint[],
    p_ms bigint[], p_floors bigint[], p_cuts bigint[], p_ends bigint[], p_nows bigint[],
    OUT o_refused integer[], OUT o_available_at bigint[], OUT o_reservation bigint[])
LANGUAGE plpgsql AS $fn$
DECLARE
    i integer;
    first integer := 1;
    last integer;
    refused integer;
    available_at bigint;
    reservation bigint;
BEGIN
    PERFORM 1 FROM counters WHERE server_id = p_server AND counter = ANY (p_counters)
        ORDER BY counter FOR UPDATE;
    o_refused := '{}';
    o_available_at := '{}';
    o_reservation := '{}';
    FOR i IN 1 .. cardinality(p_sizes) LOOP
        last := first + p_sizes[i] - 1;
        SELECT a.o_refused, a.o_available_at, a.o_reservation
            INTO refused, available_at, reservation
            FROM admit(p_server, p_counters[first:last], p_amounts[first:last],
                p_limits[first:last], p_ms[first:last], p_floors[first:last],
                p_cuts[first:last], p_ends[first:last], p_nows[i]) AS a;
        o_refused := array_append(o_refused, refused);
        o_available_at := array_append(o_available_at, available_at);
        o_reservation := array_append(o_reservation, reservation);
        first := last + 1;
    END LOOP;
END
$fn$;
"#;

/// Version 4: a check fits when `spent + max(amount, 1) <= limit`
/// (`docs/spec/store.md`, "Expiry, windows and reservations"): an exhausted
/// window refuses an amount of 0, as the Rust stores' `Assessed::judge`
/// does. `admit` and `usage` are replaced whole, changed only there
/// (`GREATEST(…, 1)` where they compared the amount).
const V4: &str = r#"
-- `admit` of version 1, with an amount of 0 needing room for 1.
CREATE OR REPLACE FUNCTION admit(
    p_server text, p_counters text[], p_amounts bigint[], p_limits bigint[],
    p_ms bigint[], p_floors bigint[], p_cuts bigint[], p_ends bigint[], p_now bigint,
    OUT o_refused integer, OUT o_available_at bigint, OUT o_reservation bigint)
LANGUAGE plpgsql AS $fn$
DECLARE
    n integer := cardinality(p_counters);
    distinct_names integer := 0;
    i integer;
    j integer;
    k integer;
    rec record;
    c_name text[];
    c_total bigint[];
    c_floor bigint[];
    c_pruned bigint[];
    c_rolling bigint[];
    c_oldest bigint[];
    c_newest bigint[];
    delta numeric;
    spent numeric;
    pending numeric;
    newest_deleted bigint;
    first_free bigint;
    fits boolean := true;
BEGIN
    FOR i IN 1 .. n LOOP
        IF NOT (p_counters[i] = ANY (p_counters[1:i - 1])) THEN
            distinct_names := distinct_names + 1;
        END IF;
    END LOOP;
    FOR attempt IN 1 .. 2 LOOP
        c_name := '{}'; c_total := '{}'; c_floor := '{}'; c_pruned := '{}';
        c_rolling := '{}'; c_oldest := '{}'; c_newest := '{}';
        FOR rec IN SELECT counter, total, floor, pruned, rolling_ms, oldest, newest FROM counters
                WHERE server_id = p_server AND counter = ANY (p_counters)
                ORDER BY counter FOR UPDATE LOOP
            c_name := c_name || rec.counter;
            c_total := c_total || rec.total;
            c_floor := c_floor || rec.floor;
            c_pruned := c_pruned || rec.pruned;
            c_rolling := c_rolling || rec.rolling_ms;
            c_oldest := c_oldest || rec.oldest;
            c_newest := c_newest || rec.newest;
        END LOOP;
        EXIT WHEN cardinality(c_name) = distinct_names;
        -- A counter's first admission: make its row (default state), then lock again.
        INSERT INTO counters (server_id, counter)
            SELECT p_server, c FROM (SELECT DISTINCT c FROM unnest(p_counters) AS c) AS d
            ORDER BY c
            ON CONFLICT DO NOTHING;
    END LOOP;
    FOR i IN 1 .. n LOOP
        k := array_position(c_name, p_counters[i]);
        IF p_ms[i] IS NOT NULL THEN
            -- A lengthened rolling window does not hold what the shorter deleted against it.
            IF c_rolling[k] IS NOT NULL AND p_ms[i] > c_rolling[k] THEN
                c_pruned[k] := -9223372036854775808;
            END IF;
            c_rolling[k] := p_ms[i];
        END IF;
        IF p_floors[i] < c_pruned[k] THEN
            -- The window reaches back over deleted spend: refuse.
            o_refused := i - 1;
            o_available_at := CASE WHEN p_ms[i] IS NULL THEN p_ends[i]
                ELSE sat(sat(c_pruned[k]::numeric + p_ms[i])::numeric - 1) END;
            fits := false;
            EXIT;
        END IF;
        -- Move the floor, keeping the total the sum of the rows at or after it.
        IF p_floors[i] <> c_floor[k] THEN
            IF c_oldest[k] < GREATEST(p_floors[i], c_floor[k])
                    AND c_newest[k] >= LEAST(p_floors[i], c_floor[k]) THEN
                SELECT COALESCE(sum(amount), 0) INTO delta FROM spend
                    WHERE server_id = p_server AND counter = p_counters[i]
                      AND at >= LEAST(p_floors[i], c_floor[k])
                      AND at < GREATEST(p_floors[i], c_floor[k]);
            ELSE
                delta := 0;
            END IF;
            IF p_floors[i] > c_floor[k] THEN
                c_total[k] := GREATEST(c_total[k] - delta, 0);
            ELSE
                c_total[k] := sat(c_total[k] + delta);
            END IF;
            c_floor[k] := p_floors[i];
        END IF;
        spent := c_total[k];
        IF p_ms[i] IS NULL AND c_newest[k] >= p_ends[i] THEN
            -- A fixed window counts only what was recorded before its end.
            SELECT GREATEST(spent - COALESCE(sum(amount), 0), 0) INTO spent FROM spend
                WHERE server_id = p_server AND counter = p_counters[i] AND at >= p_ends[i];
        END IF;
        -- Prune up to 16 rows older than the retention, oldest first.
        IF c_oldest[k] < p_cuts[i] THEN
            WITH doomed AS (
                DELETE FROM spend WHERE (server_id, counter, at, reservation) IN (
                    SELECT server_id, counter, at, reservation FROM spend
                    WHERE server_id = p_server AND counter = p_counters[i] AND at < p_cuts[i]
                    ORDER BY at, reservation LIMIT 16)
                RETURNING at)
            SELECT max(at) INTO newest_deleted FROM doomed;
            IF newest_deleted IS NOT NULL THEN
                c_pruned[k] := GREATEST(c_pruned[k], newest_deleted + 1);
            END IF;
            SELECT min(at) INTO first_free FROM spend
                WHERE server_id = p_server AND counter = p_counters[i];
            c_oldest[k] := first_free;
            IF first_free IS NULL THEN
                c_newest[k] := NULL;
            END IF;
        END IF;
        -- Several checks may name one counter: count what earlier ones add.
        pending := 0;
        FOR j IN 1 .. i - 1 LOOP
            IF p_counters[j] = p_counters[i] THEN
                pending := pending + p_amounts[j];
            END IF;
        END LOOP;
        spent := spent + pending;
        CONTINUE WHEN spent + GREATEST(p_amounts[i], 1) <= p_limits[i];
        o_refused := i - 1;
        IF p_ms[i] IS NULL THEN
            o_available_at := p_ends[i];
        ELSIF GREATEST(p_amounts[i], 1) > p_limits[i] THEN
            o_available_at := 9223372036854775807;
        ELSE
            -- The row whose leaving frees enough; it leaves `ms` after it was recorded.
            SELECT w.at INTO first_free FROM (
                SELECT s.at, sum(s.amount) OVER (ORDER BY s.at, s.reservation) AS freed
                FROM spend AS s
                WHERE s.server_id = p_server AND s.counter = p_counters[i] AND s.at >= p_floors[i]
            ) AS w
            WHERE w.freed >= spent + GREATEST(p_amounts[i], 1) - p_limits[i]
            ORDER BY w.at LIMIT 1;
            o_available_at := CASE WHEN first_free IS NULL THEN 9223372036854775807
                ELSE sat(first_free::numeric + p_ms[i]) END;
        END IF;
        fits := false;
        EXIT;
    END LOOP;
    IF fits THEN
        o_reservation := nextval('reservation_ids');
        FOR i IN 1 .. n LOOP
            k := array_position(c_name, p_counters[i]);
            IF p_now >= c_floor[k] THEN
                c_total[k] := sat(c_total[k]::numeric + p_amounts[i]);
            END IF;
            c_oldest[k] := LEAST(COALESCE(c_oldest[k], p_now), p_now);
            c_newest[k] := GREATEST(COALESCE(c_newest[k], p_now), p_now);
        END LOOP;
        -- Two checks of one counter share its spend row.
        INSERT INTO spend AS s (server_id, counter, at, reservation, amount)
            SELECT p_server, u.c, p_now, o_reservation, sat(sum(u.a))
            FROM unnest(p_counters, p_amounts) AS u(c, a) GROUP BY u.c
            ON CONFLICT (server_id, counter, at, reservation)
            DO UPDATE SET amount = sat(s.amount::numeric + excluded.amount);
    END IF;
    -- Every state change stays, admitted or refused (as in the other stores).
    UPDATE counters AS c SET total = v.total, floor = v.floor, pruned = v.pruned,
            rolling_ms = v.rolling, oldest = v.oldest, newest = v.newest
        FROM unnest(c_name, c_total, c_floor, c_pruned, c_rolling, c_oldest, c_newest)
            AS v(counter, total, floor, pruned, rolling, oldest, newest)
        WHERE c.server_id = p_server AND c.counter = v.counter;
END
$fn$;

-- `usage` of version 2, with the same rule.
CREATE OR REPLACE FUNCTION usage(p_server text, p_counter text, p_amount bigint, p_limit bigint,
    p_ms bigint, p_floor bigint, p_end bigint,
    OUT o_spent bigint, OUT o_available_at bigint)
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
    st counters%ROWTYPE;
    delta numeric;
    spent numeric;
    first_free bigint;
BEGIN
    SELECT * INTO st FROM counters WHERE server_id = p_server AND counter = p_counter;
    IF NOT FOUND THEN
        spent := 0;
    ELSE
        IF p_ms IS NOT NULL THEN
            IF st.rolling_ms IS NOT NULL AND p_ms > st.rolling_ms THEN
                st.pruned := -9223372036854775808;
            END IF;
        END IF;
        IF p_floor < st.pruned THEN
            -- Over deleted spend: the window counts as full.
            o_spent := p_limit;
            o_available_at := CASE WHEN p_ms IS NULL THEN p_end
                ELSE sat(sat(st.pruned::numeric + p_ms)::numeric - 1) END;
            RETURN;
        END IF;
        IF p_floor <> st.floor THEN
            SELECT COALESCE(sum(amount), 0) INTO delta FROM spend
                WHERE server_id = p_server AND counter = p_counter
                  AND at >= LEAST(p_floor, st.floor) AND at < GREATEST(p_floor, st.floor);
            IF p_floor > st.floor THEN
                st.total := GREATEST(st.total - delta, 0);
            ELSE
                st.total := sat(st.total + delta);
            END IF;
        END IF;
        spent := st.total;
        IF p_ms IS NULL THEN
            SELECT GREATEST(spent - COALESCE(sum(amount), 0), 0) INTO spent FROM spend
                WHERE server_id = p_server AND counter = p_counter AND at >= p_end;
        END IF;
    END IF;
    o_spent := sat(spent);
    IF spent + GREATEST(p_amount, 1) <= p_limit THEN
        o_available_at := NULL;
    ELSIF p_ms IS NULL THEN
        o_available_at := p_end;
    ELSIF GREATEST(p_amount, 1) > p_limit THEN
        o_available_at := 9223372036854775807;
    ELSE
        SELECT w.at INTO first_free FROM (
            SELECT s.at, sum(s.amount) OVER (ORDER BY s.at, s.reservation) AS freed
            FROM spend AS s
            WHERE s.server_id = p_server AND s.counter = p_counter AND s.at >= p_floor
        ) AS w
        WHERE w.freed >= spent + GREATEST(p_amount, 1) - p_limit
        ORDER BY w.at LIMIT 1;
        o_available_at := CASE WHEN first_free IS NULL THEN 9223372036854775807
            ELSE sat(first_free::numeric + p_ms) END;
    END IF;
END
$fn$;
"#;
