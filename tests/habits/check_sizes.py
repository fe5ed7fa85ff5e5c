#!/usr/bin/env python3
"""Keeps the code readable: no source file in umr/, hca/, cache/, odp/, service/, protocol/,
client/, server/ or tools/ over 600 lines, and no function there over 80 lines, except those
listed in ALLOWED with the reason why they read better whole.

A function is found the way a reader finds one in clang-formatted code: a block opened at the end
of a line whose text (from the previous statement end) has a parameter list and is not a control
statement or a lambda. Nested blocks count towards the outermost function.

usage: check_sizes.py <source-root>
"""
import pathlib
import re
import sys

FOLDERS = ("umr", "hca", "cache", "odp", "service", "protocol", "client", "server", "tools")
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80
# "path:function" -> why it is clearer whole.
ALLOWED = {
    "hca/sim/internal/translator.cc:Translator::Walk":
        "the PRM's access checks of one key in their order (variant, free, PD, range, access, "
        "then the MTT, KLM or KSM translation), numbered 1 to 7 in its comments; split, the "
        "order a reader must verify would be spread over helpers",
    "hca/sim/internal/umr_executor.cc:ExecuteUmr":
        "one UMR's execution as the device does it: mask check, gather, decode, every "
        "precondition, then one commit; the preconditions read against the PRM as one list",
    "hca/verbs/context.cc:Context::Plan":
        "every check rdma-core and rxe make before a type-1 window bind, in the kernel's order, "
        "before anything is posted",
    "umr/wqe_builder.cc:BuildMap":
        "a map WQE's segments in the order they are laid into the send queue (control, UMR "
        "control, mkey context, translation inline or by pointer); the offsets read top to bottom",
}

CONTROL = re.compile(r"^\s*(\}\s*)?(if|for|while|switch|catch|do|else|try)\b")
LAMBDA = re.compile(r"\]\s*(\([^)]*\))?\s*(mutable\s*)?(ABSL_\w+\([^)]*\)\s*)?(->\s*[\w:<>]+\s*)?\{\s*$")
NAME = re.compile(r"([~\w:]+)\s*\(")


def strip(line):
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])*'", "''", line)
    return line.split("//", 1)[0]


def functions(path):
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    stack = []  # (kind, start line, name)
    found = []
    signature = ""
    for no, raw in enumerate(lines, 1):
        line = strip(raw)
        if line.strip().startswith("#"):
            continue
        for i, ch in enumerate(line):
            if ch == "{":
                head = (signature + " " + line[:i]).strip()
                in_function = any(k == "func" for k, _, _ in stack)
                kind = "block"
                if (not in_function and "(" in head and ")" in head
                        and not CONTROL.match(line) and not LAMBDA.search(line[: i + 1])
                        and not head.rstrip().endswith("=")
                        and not re.search(r"\b(namespace|class|struct|enum|union)\b", line)):
                    kind = "func"
                m = NAME.findall(head)
                stack.append((kind, no, m[0] if m else "?"))
                signature = ""
            elif ch == "}":
                if stack:
                    kind, start, name = stack.pop()
                    if kind == "func":
                        found.append((name, start, no - start - 1))
                signature = ""
            elif ch == ";":
                signature = ""
        if line.strip():
            signature = (signature + " " + line).strip() if "{" not in line and "}" not in line else ""
    return len(lines), found


def main():
    root = pathlib.Path(sys.argv[1])
    problems = []
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in (".cc", ".h") or path.name.endswith("_test.cc"):
                continue
            rel = path.relative_to(root).as_posix()
            n, funcs = functions(path)
            if n > MAX_FILE_LINES and rel not in ALLOWED:
                problems.append(f"{rel}: {n} lines (at most {MAX_FILE_LINES})")
            for name, start, length in funcs:
                if length > MAX_FUNCTION_LINES and f"{rel}:{name}" not in ALLOWED:
                    problems.append(f"{rel}:{start}: {name} has {length} lines "
                                    f"(at most {MAX_FUNCTION_LINES})")
    for p in problems:
        print(p)
    if problems:
        print(f"check_sizes: {len(problems)} problem(s); split them, or list them in ALLOWED "
              "with the reason they read better whole")
        return 1
    print("check_sizes: every file and function within bounds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
