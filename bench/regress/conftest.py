"""The suite's option: the planted regression (bench/regress/suite.py)."""


def pytest_addoption(parser):
    parser.addoption(
        "--perf-slowdown",
        default=None,
        metavar="CASE",
        help="the suite: make CASE do 25%% more work (the planted regression)",
    )
