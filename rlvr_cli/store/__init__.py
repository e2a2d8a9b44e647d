"""The run folder on disk, below the trainer and the audits: its layout and status, the
rollout records, and the files every stage reads back. No torch here."""
