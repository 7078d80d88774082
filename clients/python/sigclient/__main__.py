"""python3 -m sigclient: the sigclient-py command."""
import sys

from .cli import main

sys.exit(main())
