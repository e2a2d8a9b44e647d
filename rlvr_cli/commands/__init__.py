"""Glue between one CLI command and the domain packages: collect inputs, call, format output."""
