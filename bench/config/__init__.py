"""Configuration: the schema Hydra fills (schema), its validation into a plan (plan), what the
command line is checked for before Hydra runs (cli), and the user's own implementations
(plugins). A multirun's start and end are bench/callbacks.py (they read the reports too)."""
