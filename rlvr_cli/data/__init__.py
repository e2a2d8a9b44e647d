"""The data stage: `rlvr data check` (ids, duplicates, near duplicates, leakage, PII and
secrets, the holdout design, row schema) and `rlvr data split`."""
