# The one place the package's version is written: pyproject.toml reads it (tool.setuptools.dynamic),
# sigclient.__version__ and `sigclient-py --version` show it. It must equal the repository's VERSION
# file (`make python-version-check` and tests/python/test_client.py check that): setuptools will not
# read a file outside clients/python, and a copy of the folder must still build.
__version__ = "0.1.0"
