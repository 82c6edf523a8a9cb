"""Reporting, from result rows alone (never the timer): tables (build, tables), the marks a
figure carries (flags), runs compared (compare), plots. `python -m bench.report`."""
