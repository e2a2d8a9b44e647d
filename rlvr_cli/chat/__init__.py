"""Rendering conversations with a tokenizer's chat template, loss masks, checks and packing."""
