"""Release: bundles (everything a shipped policy is, hashed), a registry that keeps the current
and the last known-good bundle, rollback, and the drill that proves rollback works."""
