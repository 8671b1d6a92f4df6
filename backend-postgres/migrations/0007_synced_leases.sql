-- The liveness schema, version 7: a lease drawn before a promotion is renewed after it
-- only when the writes made under it reached the standby. Runs with search_path set to
-- the namespace's schema.
--
-- With asynchronous replication the old primary acknowledges commits the standby may
-- lack when it is promoted: a completion, a release, a requeue. The promoted server
-- then holds the lease live, with items still owned under it that its holder is done
-- with; renewed, the lease would keep them owned forever. So each lease records
-- whether the server that drew it replicated synchronously (`synced`), and `RENEW`
-- (src/lease.rs) refuses a lease drawn on an earlier timeline that was not: its holder
-- sees Lost, the checker reaps it when it expires, and its items go back to the queue.
-- Under synchronous replication every acknowledged commit is on the standby, and a
-- promotion costs no lease.

-- True when a commit acknowledged now is on a synchronous standby too.
CREATE FUNCTION replication_synchronous() RETURNS boolean
LANGUAGE sql STABLE
AS $$
SELECT current_setting('synchronous_standby_names') <> ''
   AND current_setting('synchronous_commit') IN ('on', 'remote_write', 'remote_apply')
$$;

ALTER TABLE leases ADD COLUMN synced boolean NOT NULL DEFAULT false;
UPDATE leases SET synced = replication_synchronous();

-- Every lease drawn (a new row, or a row whose token changes) records the setting.
CREATE FUNCTION leases_synced() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    NEW.synced := replication_synchronous();
    RETURN NEW;
END
$$;

CREATE TRIGGER leases_synced BEFORE INSERT OR UPDATE OF token ON leases
FOR EACH ROW EXECUTE FUNCTION leases_synced();
