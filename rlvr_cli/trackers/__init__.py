"""Trackers (TensorBoard, MLflow, Weights & Biases, trackio): sinks of the run's own metric rows.

The run folder stays the record; a tracker is a copy for the tools people already watch. Each
tracker runs in a process of its own behind a bounded backlog, so a slow or dead one never slows
the step loop, and one that fails is reported once (the log, `status.json`) and dropped.
"""
