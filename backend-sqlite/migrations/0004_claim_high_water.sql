-- The liveness schema, version 4 (late claims): a claim request id is
-- single-use per token.

-- The greatest claim request id (32 hex digits, so text order is numeric order)
-- admitted under the lease's current token: a claim with an id not greater than it,
-- whose items are gone, is a late or repeated copy and assigns nothing. NULL: none
-- yet. Every acquire writes a new token and resets it with the row.
ALTER TABLE liveness_leases ADD COLUMN last_claim TEXT;
