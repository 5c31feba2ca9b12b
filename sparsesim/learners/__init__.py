"""Learners, one module per algorithm family."""
