-- The liveness schema, version 14: when each item was enqueued, last claimed and last
-- finished an attempt without completing (`ItemRecord::times`,
-- `Capabilities::item_times`). Runs with search_path set to the namespace's schema.
--
-- By the server's clock_timestamp() (the clock of `due_at`, `ready_at` and
-- `OperatorStore::store_time`), written by the statements that move the item:
-- `enqueued_at` by the enqueue; `attempted_at` by each claim (its instant, the one
-- its `waited` counts to); `finished_at` by each hand-back of an owned item that does
-- not complete it (a failure's retry or dead letter, the sweep of its dead owner's
-- items). A dead letter's retry leaves all three; a completed item's row goes with
-- them. In no index: nothing chooses by them.
--
-- The items already there have none (NULL): when they came is not known. Columns
-- added without a default rewrite nothing; `enqueued_at` then defaults to
-- clock_timestamp() for new rows (every enqueue here sets it itself; the default
-- serves a row an older build still running writes).
ALTER TABLE items
    ADD COLUMN enqueued_at timestamptz,
    ADD COLUMN attempted_at timestamptz,
    ADD COLUMN finished_at timestamptz;
ALTER TABLE items ALTER COLUMN enqueued_at SET DEFAULT clock_timestamp();
