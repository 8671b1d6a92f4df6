-- The liveness schema, version 2: the store clock becomes the host's boot clock.
--
-- Expiries are now milliseconds of the host's CLOCK_BOOTTIME (which never steps and
-- counts suspend), read by the store in Rust and bound into each statement, instead of
-- wall-clock milliseconds read by SQLite. A boot clock restarts at each boot, so the
-- file records the boot its expiries were counted in: `liveness_boot` holds the boot
-- id (/proc/sys/kernel/random/boot_id) of the last process to open the file. A
-- process opening it under another boot (after a reboot, every holder died) retires
-- every lease, atomically, under the write lock, before anything else runs.

-- The column changes meaning, so it changes name: a process of the previous build
-- still running on this file fails on its next statement ("no such column") instead
-- of comparing its wall clock with boot-clock expiries. The expiry index follows the
-- rename.
ALTER TABLE liveness_leases RENAME COLUMN expires_at TO expires_boot_ms;

-- Existing expiries were counted on the wall clock and cannot be compared with the
-- boot clock: every existing lease is expired (its holder runs the previous build,
-- which cannot use this schema). The checker reaps them and requeues their items as
-- usual; tokens, items and the dead set are untouched.
UPDATE liveness_leases SET expires_boot_ms = 0;

-- One row: the boot the expiries are counted in. '' (no boot) until the first open
-- under this schema records its own, retiring every lease on the way.
CREATE TABLE liveness_boot (
    one     INTEGER NOT NULL PRIMARY KEY CHECK (one = 1),
    boot_id TEXT    NOT NULL
) STRICT;

INSERT INTO liveness_boot (one, boot_id) VALUES (1, '');
