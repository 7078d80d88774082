"""The sigserve.v1 wire code, generated and kept here.

signal_pb2.py is the output of ``protoc --proto_path=proto --python_out=... proto/signal.proto``
by protoc 3.21 (Debian bookworm's protobuf-compiler, which deploy/install-deps.sh installs),
byte for byte what the C build writes to build/gen/py/signal_pb2.py. It is kept in the tree rather
than generated when the package is built because a plain ``pip install ./clients/python`` must
work offline and without protoc: generating at build time would need protoc on the installing
machine, or grpcio-tools from the network. Code from protoc 3.21 loads in every protobuf runtime
from 3.20 on (hence ``protobuf>=3.20``), including bookworm's python3-protobuf; a newer protoc's
output would not load in that runtime, so regenerate with 3.21 only.

The risk of a kept copy is staleness: ``make python-proto`` regenerates it, and
``make python-proto-check`` fails when it differs from what proto/signal.proto gives now
(tests/python/test_client.py also compares its descriptor with the build's).

The file keeps the proto's own name ("signal.proto") so that it registers exactly the descriptor
the build's signal_pb2 does: both can be loaded in one process without a conflict.
"""
