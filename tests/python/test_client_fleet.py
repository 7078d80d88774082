#!/usr/bin/python3
"""The Python client's dns:// endpoints (every address behind a name, followed as it changes) and
opt-in retries, as in the C client (tests/test_dns.c): fake servers on 127.0.0.1 and 127.0.0.2
(client_fixture.py), a fake resolver, and the live sigserve this test starts reached through
"localhost"; last the server's clean exit. Waits are for the condition itself (a connection up, a
resolution made), each bounded.

Run from the repository root (tests/run.sh does):
    BUILD=build PYTHONPATH=build/gen/py:clients/python /usr/bin/python3 tests/python/test_client_fleet.py
or, with the package installed (tests/python/test_install.sh does), with no PYTHONPATH at all.
Uses only the standard library, pyzmq and protobuf. The last line printed is "N passed, N failed".
"""
import sys
import time
import unittest

import sigclient
import client_fixture as fx
from client_fixture import FakeServer, Fleet, Pool, ShutdownCheck, drive_until, py_cli, random_features, wait_connected
from reference import forward, free_port
from sigclient import SigClient, Timeout, Unavailable


setUpModule = fx.start_server
tearDownModule = fx.stop_server


# ---- dns:// endpoints and retries ----

class TestADnsRetry(unittest.TestCase):
    """dns://NAME:PORT (every address, followed as it changes) and opt-in retries, as in the C client
    (tests/test_dns.c): two fake servers on one port of 127.0.0.1 and 127.0.0.2, and the real server
    through "localhost"."""

    def setUp(self):
        self.port = free_port()
        self.fakes = []

    def tearDown(self):
        for f in self.fakes:
            f.close()

    def fake(self, address, tag, mode="ok"):
        f = FakeServer(address, self.port, tag, mode)
        self.fakes.append(f)
        return f

    def client(self, fleet, timeout_ms=2000, **kw):
        return SigClient(f"dns://fleet:{self.port}", timeout_ms=timeout_ms, resolver=fleet, **kw)

    def test_malformed_endpoints(self):
        for bad in ("dns://", "dns://fleet", "dns://:5555", "dns://fleet:0", "dns://fleet:65536", "dns://fleet:5a",
                    "dns://a/b:5555"):
            with self.assertRaises(ValueError, msg=bad):
                SigClient(bad)
            with self.assertRaises(ValueError, msg=bad):
                sigclient.resolve_endpoint(bad)
        with self.assertRaises(ValueError):
            SigClient("dns://fleet:1", retries=17)

    def test_resolve_endpoint(self):
        fleet = Fleet("10.0.0.9", "::1", "::1")
        self.assertEqual(sigclient.resolve_endpoint("dns://fleet:7000", fleet), ["tcp://10.0.0.9:7000", "tcp://[::1]:7000"])
        self.assertEqual(sigclient.resolve_endpoint("tcp://10.1.2.3:9"), ["tcp://10.1.2.3:9"])
        self.assertIn("tcp://127.0.0.1:7000", sigclient.resolve_endpoint("dns://localhost:7000"))
        fleet.down = True
        with self.assertRaisesRegex(sigclient.TransportError, "^dns://fleet:7000: test resolver: fleet is down$"):
            sigclient.resolve_endpoint("dns://fleet:7000", fleet)
        with self.assertRaisesRegex(sigclient.TransportError, "^dns://no-such-host.invalid:7000: "):
            sigclient.resolve_endpoint("dns://no-such-host.invalid:7000")

    def test_every_address_takes_requests(self):
        self.fake("127.0.0.1", 1.0)
        self.fake("127.0.0.2", 2.0)
        with self.client(Fleet("127.0.0.1", "127.0.0.2")) as c:
            self.assertEqual(c.peers, [f"tcp://127.0.0.1:{self.port}", f"tcp://127.0.0.2:{self.port}"])
            # both connections up: ZMQ_IMMEDIATE sends only to those
            self.assertTrue(wait_connected(c, self.fakes), "not both connected within 10 s")
            for _ in range(40):
                c.send_infer("m", [0.0])
            tags = [c.recv_infer().outputs[0] for _ in range(40)]
            self.assertEqual((tags.count(1.0), tags.count(2.0)), (20, 20))

    def test_follows_the_name(self):
        a = self.fake("127.0.0.1", 1.0)
        self.fake("127.0.0.2", 2.0)
        fleet = Fleet("127.0.0.1")
        # one retry: a request sent as its peer is disconnected may be dropped with the peer's pipe
        with self.client(fleet, timeout_ms=300, retries=1, resolve_interval_ms=100) as c:
            self.assertEqual([c.infer("m", [0.0]).outputs[0] for _ in range(10)], [1.0] * 10)
            fleet.addresses = ["127.0.0.2"]
            # the client re-resolves every 100 ms; then its only peer is the new address, and the old
            # pipe (whose requests the short timeout is for) is gone: a slow machine may take longer
            # than 300 ms to connect (it did once, beside an image build), so wait for the switch and
            # give the new connection a longer timeout
            self.assertTrue(drive_until(c, lambda: c.peers == [f"tcp://127.0.0.2:{self.port}"]), c.peers)
            c.timeout_ms = 5000
            self.assertEqual([c.infer("m", [0.0]).outputs[0] for _ in range(10)], [2.0] * 10)
            self.assertEqual(c.peers, [f"tcp://127.0.0.2:{self.port}"])
            self.assertLessEqual(a.requests, 11)
            looked_up = fleet.lookups
            fleet.down = True       # a failed resolution keeps what the client has
            self.assertTrue(drive_until(c, lambda: fleet.lookups > looked_up), "no resolution within 10 s")
            self.assertEqual(c.infer("m", [0.0]).outputs[0], 2.0)
            self.assertEqual(c.peers, [f"tcp://127.0.0.2:{self.port}"])

    def test_no_address_fails_fast_then_recovers(self):
        self.fake("127.0.0.1", 1.0)
        fleet = Fleet()
        fleet.down = True
        with self.client(fleet, timeout_ms=5000) as c:
            t0 = time.monotonic()
            with self.assertRaisesRegex(sigclient.TransportError,
                                        rf"^no address to send to: dns://fleet:{self.port} \[no address: "
                                        r"test resolver: fleet is down\]$"):
                c.infer("m", [0.0])
            self.assertLess(time.monotonic() - t0, 1.0)
            fleet.down, fleet.addresses = False, ["127.0.0.1"]
            # a name with no address is tried again every 200 ms (not after the 5 s interval)
            self.assertTrue(drive_until(c, lambda: c.peers == [f"tcp://127.0.0.1:{self.port}"]), c.peers)
            self.assertEqual(c.infer("m", [0.0]).outputs[0], 1.0)

    def test_unavailable_is_retried(self):
        a = self.fake("127.0.0.1", 1.0, "unavailable")
        self.fake("127.0.0.2", 2.0)
        with self.client(Fleet("127.0.0.1", "127.0.0.2")) as c:
            self.assertTrue(wait_connected(c, self.fakes), "not both connected within 10 s")
            failed = 0
            for _ in range(10):
                try:
                    c.infer("m", [0.0])
                except Unavailable as e:
                    self.assertEqual(str(e), "server replied STATUS_UNAVAILABLE: draining: this server is stopping")
                    failed += 1
            self.assertEqual(failed, 5)
            c.retries = 1
            results = [c.infer("m", [0.0]) for _ in range(10)]
            self.assertEqual([r.outputs[0] for r in results], [2.0] * 10)
            retried = sum(r.attempts == 2 for r in results)
            self.assertGreaterEqual(retried, 1)
            self.assertEqual(a.requests, 5 + retried)
            a.mode = self.fakes[1].mode = "unavailable"
            c.retries = 3
            with self.assertRaises(Unavailable) as cm:
                c.infer("m", [0.0])
            self.assertTrue(str(cm.exception).endswith("(after 4 attempts)"), str(cm.exception))
            self.assertEqual(cm.exception.result.attempts, 4)

    def test_timeout_is_retried(self):
        self.fake("127.0.0.1", 1.0, "silent")
        self.fake("127.0.0.2", 2.0)
        with self.client(Fleet("127.0.0.1", "127.0.0.2"), timeout_ms=300, retries=2) as c:
            self.assertTrue(wait_connected(c, self.fakes), "not both connected within 10 s")
            for _ in range(4):
                t0 = time.monotonic()
                r = c.infer("m", [0.0])
                self.assertEqual(r.outputs[0], 2.0)
                if r.attempts == 2:
                    self.assertGreaterEqual(time.monotonic() - t0, 0.29)
            for f in self.fakes:
                f.mode = "silent"
            c.retries = 1
            with self.assertRaisesRegex(Timeout, r"\(after 2 attempts\)$"):
                c.infer("m", [0.0])

    def test_localhost_reaches_the_real_server(self):
        port = fx.endpoints[0].rsplit(":", 1)[1]
        with SigClient(f"dns://localhost:{port}", timeout_ms=5000) as c:
            self.assertIn(f"tcp://127.0.0.1:{port}", c.peers)
            self.assertTrue(c.health().ready)
            f = random_features(512)
            pool = Pool()
            for _ in range(4):
                pool.add(c.infer("tick_mlp", f).outputs, forward(fx.tick, f, 1))
            pool.check(self)
        r = py_cli("--endpoint", f"dns://localhost:{port}", "health")
        self.assertEqual(r.rc, 0, r)
        self.assertTrue(r.out.startswith("live=1 ready=1"), r)


class Test9Shutdown(ShutdownCheck, unittest.TestCase):
    """Last: the server survived everything above, and SIGTERM stops it cleanly (exit code 0)."""


def main():
    # In this order: the last one stops the server.
    return fx.run((TestADnsRetry, Test9Shutdown))


if __name__ == "__main__":
    sys.exit(main())
