"""Test doubles for what the test machines lack (GPUs); never imported by product code."""
