-- The lease store as a production engine would keep it in PostgreSQL.
-- Times are milliseconds of store time (bigint); nothing reads now().
-- Every integer is a bigint: u32 fits whole, u64 up to i64::MAX.

-- Task kinds with the lease TTL of the deployment (NULL: heartbeat-owned).
CREATE TABLE task_kinds (
    kind         text PRIMARY KEY,
    lease_ttl_ms bigint CHECK (lease_ttl_ms >= 0)
);

CREATE TABLE tasks (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- The enqueue's idempotency key: a repeated key creates nothing and
    -- answers this task. Never reused, never expires.
    enqueue_key       bigint UNIQUE,
    kind              text NOT NULL REFERENCES task_kinds,
    grp               bigint,
    stage_pipeline    bigint,
    stage_index       bigint,
    index_id          bigint,
    not_before_ms     bigint NOT NULL,
    state             text NOT NULL CHECK (state IN ('ready', 'leased', 'done', 'dead')),
    owner_proc        bigint,
    owner_incarnation bigint,
    -- +1 on every claim: the fence of the current attempt.
    attempt           bigint NOT NULL DEFAULT 0,
    lease_expiry_ms   bigint,
    retries           bigint NOT NULL DEFAULT 0,
    retry_at_ms       bigint NOT NULL,
    updated_ms        bigint NOT NULL,
    repair_count      bigint NOT NULL DEFAULT 0,
    -- The owner whose attempt (the row's last, `attempt`) completed the
    -- task: its retried completion is answered "applied" again.
    completed_proc        bigint,
    completed_incarnation bigint,
    -- Only a leased task has an owner, and only a leased task a lease.
    CHECK ((state = 'leased') = (owner_proc IS NOT NULL)),
    CHECK ((owner_proc IS NULL) = (owner_incarnation IS NULL)),
    CHECK (state = 'leased' OR lease_expiry_ms IS NULL),
    CHECK ((stage_pipeline IS NULL) = (stage_index IS NULL)),
    -- Exactly the done tasks record who completed them.
    CHECK ((state = 'done') = (completed_proc IS NOT NULL)),
    CHECK ((completed_proc IS NULL) = (completed_incarnation IS NULL))
);

-- The claim scan: due ready tasks in (retry_at_ms, id) order.
CREATE INDEX tasks_ready ON tasks (retry_at_ms, id) WHERE state = 'ready';
-- Lease sweeps (release-dead, orphans, reclaim, repair) read leased tasks only.
CREATE INDEX tasks_leased_owner ON tasks (owner_proc, owner_incarnation) WHERE state = 'leased';
CREATE INDEX tasks_leased_group ON tasks (grp, lease_expiry_ms) WHERE state = 'leased';

-- Liveness: last sign of life per process incarnation (a heartbeat, or the
-- first claim). The newest incarnation of a process is the largest one here.
CREATE TABLE heartbeats (
    proc        bigint NOT NULL,
    incarnation bigint NOT NULL,
    last_ms     bigint NOT NULL,
    -- It deregistered: no sign of life any more (the row stays, so that
    -- older incarnations still read as superseded).
    gone        boolean NOT NULL DEFAULT false,
    PRIMARY KEY (proc, incarnation)
);

-- Incarnations that deregistered: their claims get nothing, their
-- heartbeats no longer count.
CREATE TABLE left_owners (
    proc        bigint NOT NULL,
    incarnation bigint NOT NULL,
    PRIMARY KEY (proc, incarnation)
);

CREATE TABLE stages (
    pipeline    bigint NOT NULL,
    stage_index bigint NOT NULL CHECK (stage_index >= 0),
    task_id     bigint REFERENCES tasks,
    done        boolean NOT NULL DEFAULT false,
    PRIMARY KEY (pipeline, stage_index),
    -- done is absorbing and unlinks the task.
    CHECK (NOT (done AND task_id IS NOT NULL))
);

-- An index whose build completed, waiting for the next index finalization
-- pass, and the (first) task that built it. An index is built or
-- materialized, never both: the pass moves it.
CREATE TABLE built_indexes (
    index_id bigint PRIMARY KEY,
    task_id  bigint NOT NULL REFERENCES tasks
);

CREATE TABLE materialized_indexes (
    index_id bigint PRIMARY KEY
);

-- Group repair backoff: consecutive looks that found nothing to repair.
CREATE TABLE group_repair (
    grp        bigint PRIMARY KEY,
    misses     bigint NOT NULL,
    next_at_ms bigint NOT NULL
);
