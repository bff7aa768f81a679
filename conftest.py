"""Repository-wide pytest options."""


def pytest_addoption(parser):
    parser.addoption("--update-goldens", action="store_true", default=False,
                     help="rewrite golden-output files instead of comparing against them")
