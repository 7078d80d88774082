#!/usr/bin/python3
"""Writes libsigclient(3) from clients/sigclient.h, whose comments are the library's reference, so
that the installed manual is the header's own text (`make` builds it into BUILD/man/; `make install`
puts it in share/man/man3). Never edit the output: edit the comments in sigclient.h.

    man/h2man.py sigclient.h VERSION OUT

What it reads: the header's first comment (the DESCRIPTION), then groups of declarations, each a
comment followed by what it describes (functions, typedefs, #defines) up to the next comment or
blank line. Every function prototype goes into the SYNOPSIS and, with its comment, into FUNCTIONS;
types and constants go into TYPES and CONSTANTS as the header writes them. Include guards, #include
and extern "C" are left out. tests/deploy/test_man.sh checks that every sigclient_* function of the
header and of the built library is in the page.
"""
import re
import sys

SKIP = re.compile(r'^\s*(#ifndef|#ifdef|#endif|#include|#define SIGCLIENT_H\b|extern "C"|}\s*$)')


def esc(text: str) -> str:
    text = text.replace("\\", "\\e")
    return "".join(c if ord(c) < 128 else f"\\[u{ord(c):04X}]" for c in text)


def esc_code(text: str) -> str:
    return esc(text).replace("-", "\\-")


def roff_line(line: str) -> str:
    return "\\&" + line if line.startswith((".", "'")) else line


def comment_text(raw: str):
    """The lines of a /* ... */ comment without the markers and the leading ' * '."""
    body = raw.strip()
    body = body[2:] if body.startswith("/*") else body
    body = body[:-2] if body.endswith("*/") else body
    lines = []
    for line in body.split("\n"):
        line = re.sub(r"^\s*\*( |$)", "", line.rstrip())
        lines.append(line.rstrip())
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


def prose(lines):
    """Comment lines as roff: paragraphs split at blank lines, "- " lines as a bulleted list."""
    out, para, in_list = [], [], False

    def flush():
        nonlocal para
        if para:
            out.extend(roff_line(esc(p)) for p in para)
            para = []

    for line in lines:
        stripped = line.strip()
        if not stripped:
            flush()
            out.append(".PP")
            in_list = False
        elif stripped.startswith("- "):
            flush()
            out += [".IP \\(bu 2"]
            para = [stripped[2:]]
            in_list = True
        else:
            if in_list and not line.startswith(" "):
                flush()
                out.append(".PP")
                in_list = False
            para.append(stripped)
    flush()
    return out


def code(lines):
    return [".nf"] + [roff_line(esc_code(line)) for line in lines] + [".fi"]


def parse(header: str):
    """(description lines, groups): a group is (comment lines, [declarations as text])."""
    m = re.match(r"\s*(/\*.*?\*/)", header, re.S)
    if not m:
        raise SystemExit("h2man: the header does not start with a comment")
    description = comment_text(m.group(1))
    rest = header[m.end():]
    groups, comment, decls, pos = [], [], [], 0
    tokens = re.finditer(r"/\*.*?\*/|[^\n]*\n?", rest, re.S)
    current = ""
    depth = 0
    after_comment = False
    for tok in tokens:
        text = tok.group(0)
        if not text:
            continue
        if current == "" and text.lstrip().startswith("/*") and text.strip().endswith("*/") and depth == 0:
            if decls:
                groups.append((comment, decls))
                decls = []
            comment = comment_text(text)
            after_comment = True
            continue
        if after_comment and text == "\n":        # the end of the comment's own line
            after_comment = False
            continue
        after_comment = False
        if current == "" and (not text.strip() or SKIP.match(text)):
            if not text.strip() and decls:
                groups.append((comment, decls))
                comment, decls = [], []
            elif not text.strip() and comment and not decls:
                comment = []          # a comment about nothing that follows (a section note)
            continue
        current += text
        depth += text.count("{") - text.count("}")
        stripped = current.strip()
        if depth == 0 and (stripped.endswith(";") or (stripped.startswith("#define") and not stripped.endswith("\\"))):
            decls.append(stripped)
            current = ""
    if decls:
        groups.append((comment, decls))
    return description, groups


def function_name(decl: str):
    m = re.match(r"^[\w\s\*]*?\b(sigclient_\w+)\s*\(", decl.replace("\n", " "))
    return m.group(1) if m and not decl.startswith("typedef") else None


def one_line(decl: str) -> str:
    return re.sub(r"\s+", " ", decl).replace("( ", "(").replace(" )", ")")


def wrapped(decl: str, width: int = 72):
    """A declaration on one line, or broken after commas with the arguments under the first one."""
    line = one_line(decl)
    if len(line) <= width or "(" not in line:
        return [line]
    head, _, args = line.rpartition(" (") if line.startswith("typedef") else line.partition(" (")
    indent = " " * (len(head) + 2)
    lines, current = [], head + " ("
    for arg in re.split(r"(?<=,) ", args):
        if len(current) + len(arg) > width and current.strip() and not current.endswith("("):
            lines.append(current.rstrip())
            current = indent
        current += arg + " "
    lines.append(current.rstrip())
    return lines


def convert(header: str, version: str) -> str:
    description, groups = parse(header)
    title = description[0]
    summary = title.split(":", 1)[1].strip() if ":" in title else title
    summary = re.sub(r"\s*\(.*\)$", "", summary.rstrip("."))
    functions = [(c, d) for c, d in groups if any(function_name(x) for x in d)]
    types = [(c, d) for c, d in groups if (c, d) not in functions and any(x.startswith("typedef") for x in d)]
    constants = [(c, d) for c, d in groups if (c, d) not in functions and (c, d) not in types]
    out = [
        '.\\" Generated by man/h2man.py from clients/sigclient.h. Do not edit: edit the header\'s comments.',
        f'.TH LIBSIGCLIENT 3 "" "sigserve {version}" "Library Functions Manual"',
        ".ad l",                     # ragged right, no hyphenation: names and types read as written
        ".nh",
        ".SH NAME",
        f"libsigclient \\- {esc(summary)}",
        ".SH LIBRARY",
        "libsigclient (\\fI\\-lsigclient\\fR; \\fBpkg\\-config \\-\\-cflags \\-\\-libs libsigclient\\fR)",
        ".SH SYNOPSIS",
        ".nf",
        ".B #include <sigclient.h>",
        ".PP",
    ]
    for _, decls in functions:
        for d in decls:
            if function_name(d):
                out += [roff_line(esc_code(line)) for line in wrapped(d)]
    out += [".fi", ".PP",
            "Link with \\fB\\-lsigclient\\fR, or build with "
            "\\fBcc prog.c $(pkg\\-config \\-\\-cflags \\-\\-libs libsigclient)\\fR.",
            ".SH DESCRIPTION"]
    body = description[1:]
    while body and not body[0].strip():
        body.pop(0)
    out += prose(body)
    out.append(".SH FUNCTIONS")
    for comment, decls in functions:
        out += [".PP", ".nf"]
        for d in decls:
            if "{" in d:                      # a struct the functions take, as the header writes it
                out += [roff_line(esc_code(line)) for line in d.split("\n")]
            else:
                out += [roff_line("\\fB" + esc_code(line) + "\\fR") for line in wrapped(d)]
        out += [".fi"]
        if comment:
            out += [".RS 4"] + prose(comment) + [".RE"]
    out.append(".SH TYPES")
    for comment, decls in types:
        out.append(".PP")
        if comment:
            out += prose(comment) + [".PP"]
        out += [".RS 4"]
        for d in decls:
            out += code(d.split("\n"))
        out += [".RE"]
    if constants:
        out.append(".SH CONSTANTS")
        for comment, decls in constants:
            out.append(".PP")
            if comment:
                out += prose(comment) + [".PP"]
            out += [".RS 4"] + code(decls) + [".RE"]
    out += [".SH SEE ALSO", ".BR sigserve (1),", ".BR sigclient (1),", ".BR sigload (1),",
            ".BR sigserve.json (5),", ".BR zmq (7)",
            ".PP", "The wire protocol: proto/signal.proto (package sigserve.v1) in the sigserve sources."]
    tidy = []
    for line in out:
        if line == ".PP" and tidy and tidy[-1] in (".PP", ".SH FUNCTIONS", ".SH TYPES", ".SH CONSTANTS") or \
           line == ".PP" and tidy and tidy[-1].startswith((".SH", ".RS")):
            continue
        if line.startswith((".SH", ".RE")) and tidy and tidy[-1] == ".PP":
            tidy.pop()
        tidy.append(line)
    return "\n".join(tidy) + "\n"


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    src, version, dest = argv
    with open(src, encoding="utf-8") as f:
        page = convert(f.read(), version)
    with open(dest, "w", encoding="ascii") as f:
        f.write(page)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
