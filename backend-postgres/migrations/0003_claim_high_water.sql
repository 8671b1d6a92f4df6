-- The liveness schema, version 3 (late claims): a claim request id is
-- single-use per token. Runs with search_path set to the namespace's schema.

-- The greatest claim request id (32 hex digits; collation "C", so text order is
-- numeric order) admitted under the lease's current token: a claim with an id not
-- greater than it, whose items are gone, is a late or repeated copy and assigns
-- nothing. NULL: none yet. Every acquire writes a new token and resets it.
ALTER TABLE leases ADD COLUMN last_claim text COLLATE "C";
