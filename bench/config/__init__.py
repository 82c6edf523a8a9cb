"""Configuration: the schema Hydra fills (schema), its validation into a plan (plan), what the
command line is checked for before Hydra runs (cli), the multirun's end (callbacks), and the
user's own implementations (plugins)."""
