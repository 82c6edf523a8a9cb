"""The measurement core: the plan swept point by point (runner), one point checked against its
float64 truth and then timed side by side (point, check, tasks, timing), and one row out
(metrics, memory, passes, results); the machine's state (machine, calibrate) and the run's
time (eta) beside it."""
