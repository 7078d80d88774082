#!/usr/bin/env python3
"""The transport figures of docs/perf.md from one `STEPS=transport bash tools/gpu-serving.sh` call
(or the same step run on the development machine): medians over the rounds of each row, set beside
their physics from the same call, and the issue's targets checked.

    python3 tools/transport-table.py OUT        (OUT: the call's output folder, holding summary.md)

Reads OUT/summary.md: the `### NAME` sections gpu-serving.sh writes (sigload's tables, build/rtt's
and sigbench's). Prints markdown.
"""
import re
import statistics
import sys


def sections(text):
    """{name: [rows as dicts by header]} for every `### name` followed by markdown tables (a row followed
    by a `| --- |` line is the header of the rows after it)."""
    out, name, header, last = {}, None, None, None
    for line in text.splitlines():
        if line.startswith("### "):
            name, header, last = line[4:].strip(), None, None
            out.setdefault(name, [])
            continue
        if not name or not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if set("".join(cells)) <= set("-: "):
            if last is not None and out[name] and out[name][-1] is last:
                out[name].pop()
            header = list(last.values()) if last is not None else header
            last = None
            continue
        if header is None:
            header = cells
            continue
        last = dict(zip(header, cells))
        out[name].append(last)
    return out


def num(v):
    try:
        return float(str(v).replace(",", ""))
    except ValueError:
        return None


def row_of(rows, first_col_prefix):
    for r in rows:
        if list(r.values())[0].startswith(first_col_prefix):
            return r
    return None


def load_rows(secs, prefix):
    """The sigserve (or echo) row of each round's section NAME-r1, NAME-r2, ...: [(p50, p99, server mean)]."""
    got = []
    for name, rows in sorted(secs.items()):
        if re.fullmatch(re.escape(prefix) + r"-r\d+", name):
            for r in rows:
                step = r.get("step", "")
                if step.startswith(("open", "echo-open", "closed")):
                    got.append((num(r.get("p50")), num(r.get("p99")), num(r.get("server mean"))))
    return got


def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(v):
    return "-" if v is None else f"{v:.2f}"


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    secs = sections(open(f"{out}/summary.md").read())
    rtt = {list(r.values())[0]: r for r in secs.get("transport-rtt", [])}
    cpu = row_of(secs.get("transport-inprocess", []), "cpu loop")
    pers = row_of(secs.get("transport-inprocess", []), "persistent-nvrtc") or \
        row_of(secs.get("transport-inprocess", []), "persistent")

    def rtt_of(method, col):
        return num(rtt[method][col]) if method in rtt else None

    print("| row (medians of the rounds) | p50 us | p99 us | server mean us | rounds |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for method in ("tcp", "tcp-spin", "zmq", "zmq-spin", "zmtp", "zmtp-spin"):
        if method in rtt:
            print(f"| raw round trip: {method} (build/rtt, 2 KiB) | {fmt(rtt_of(method, 'p50'))} | "
                  f"{fmt(rtt_of(method, 'p99'))} | | 1 |")
    if cpu:
        print(f"| tick_mlp in process, CPU loop (sigbench) | {fmt(num(cpu['p50']))} | {fmt(num(cpu['p99']))} | | 1 |")
    if pers:
        print(f"| tick_mlp in process, persistent kernel (sigbench) | {fmt(num(pers['p50']))} | {fmt(num(pers['p99']))} | | 1 |")
    results = {}
    for label, prefix in (("echo floor, sigload zmtp -> echo zmtp", "transport-echo-zmtp"),
                          ("echo floor, sigload libzmq -> echo libzmq", "transport-echo-libzmq"),
                          ("sigload zmtp -> sigserve zmtp", "transport-zmtp-by-zmtp"),
                          ("sigload libzmq -> sigserve zmtp", "transport-zmtp-by-libzmq"),
                          ("sigload zmtp -> sigserve libzmq", "transport-libzmq-by-zmtp"),
                          ("sigload libzmq -> sigserve libzmq", "transport-libzmq-by-libzmq"),
                          ("persistent, busy_poll, sigload zmtp busy-polling", "transport-persistent")):
        rows = load_rows(secs, prefix)
        if not rows:
            continue
        m = (med(r[0] for r in rows), med(r[1] for r in rows), med(r[2] for r in rows))
        results[prefix] = m
        print(f"| {label}, 10k/s | {fmt(m[0])} | {fmt(m[1])} | {fmt(m[2])} | {len(rows)} |")
    print()
    print("| target | required | measured | met |")
    print("| --- | --- | --- | --- |")

    def check(what, required, measured, ok):
        print(f"| {what} | {required} | {measured} | {'yes' if ok else 'NO'} |")

    tcp50, tcp99 = rtt_of("tcp", "p50"), rtt_of("tcp", "p99")
    z = results.get("transport-zmtp-by-zmtp")
    if z and tcp50 is not None and cpu:
        floor50 = tcp50 + num(cpu["p50"])
        check("libsigclient -> sigserve (zmtp) p50", f"<= raw TCP + model + 3 = {floor50 + 3:.2f}", fmt(z[0]),
              z[0] <= floor50 + 3)
        floor99 = tcp99 + num(cpu["p99"])
        check("libsigclient -> sigserve (zmtp) p99", f"<= raw TCP p99 + model p99 + 10 = {floor99 + 10:.2f}", fmt(z[1]),
              z[1] <= floor99 + 10)
    a, b = results.get("transport-zmtp-by-libzmq"), results.get("transport-libzmq-by-libzmq")
    if a and b:
        gain = (b[0] - a[0]) / b[0]
        check("libzmq client: sigserve zmtp vs libzmq, p50", ">= 40% faster", f"{100 * gain:.0f}% ({fmt(a[0])} vs {fmt(b[0])})",
              gain >= 0.4)
    p = results.get("transport-persistent")
    spin50 = rtt_of("tcp-spin", "p50")
    if p and spin50 is not None and pers:
        floor = spin50 + num(pers["p50"])
        check("persistent MLP, zmtp, busy_poll p50", f"<= raw TCP (busy-polled) + kernel + 3 = {floor + 3:.2f}", fmt(p[0]),
              p[0] <= floor + 3)
    e = results.get("transport-echo-zmtp")
    if e and tcp50 is not None:
        check("sigload's zmtp echo floor p50", f"<= 1.2 x raw TCP = {1.2 * tcp50:.2f}", fmt(e[0]), e[0] <= 1.2 * tcp50)
    for name in sorted(n for n in secs if n.startswith("transport-tput")):
        best = 0
        for r in secs[name]:
            if r.get("step", "").startswith("open") and num(r.get("p99")) is not None and num(r.get("p99")) <= 1000 \
                    and r.get("errors", "0").strip() in ("0", ""):
                best = max(best, num(r.get("achieved req/s")) or 0)
        check(f"single-row tick_mlp, 4 fronts ({name}), p99 <= 1 ms", ">= 500000 req/s", f"{best:.0f} req/s",
              best >= 500000)


if __name__ == "__main__":
    main()
