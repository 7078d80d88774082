"""sigclient: the Python client of sigserve. The API lives in sigclient.client (its docstring is the
manual); this re-exports it, so ``from sigclient import SigClient`` is all a caller needs."""
from ._version import __version__
from .client import *  # noqa: F401,F403  (the names in client.__all__)
from .client import __all__ as _client_all
from .client import pb  # noqa: F401  (the generated sigserve.v1 module, for raw requests)

__all__ = list(_client_all) + ["__version__"]
