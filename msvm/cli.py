"""The ``msvm`` command line: validate, dis, asm, run, trace conversion, ONNX import and the demo.

Exit codes of ``validate`` are a contract for scripts: 0 valid, 1 invalid, 2 unreadable.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from .errors import BytecodeFormatError, MsvmError, VerifyError


def _cmd_validate(args: argparse.Namespace) -> int:
    from .validate import read_module
    from .verifier import check_module

    try:
        module = read_module(Path(args.file))
    except BytecodeFormatError as exc:
        if args.json:
            print(
                json.dumps(
                    {"file": args.file, "valid": False, "readable": False, "error": exc.to_dict()}, indent=2
                )
            )
        else:
            print(f"{args.file}: unreadable\n  {exc}", file=sys.stderr)
        return 2
    diags = check_module(module)
    if args.json:
        print(
            json.dumps(
                {
                    "file": args.file,
                    "valid": not diags,
                    "readable": True,
                    "functions": [f.name for f in module.functions],
                    "diagnostics": [d.to_dict() for d in diags],
                },
                indent=2,
            )
        )
    elif diags:
        print(_printable(f"{args.file}: invalid, {len(diags)} error{'s' if len(diags) != 1 else ''}"))
        for d in diags:
            print(_printable(f"  {d}"))
    else:
        n = sum(f.size for f in module.functions)
        print(
            _printable(
                f"{args.file}: valid ({len(module.functions)} function(s), {n} instructions, "
                f"{len(module.constants)} constant(s))"
            )
        )
    return 1 if diags else 0


def _printable(text: str) -> str:
    """``text`` as stdout can write it: a module's names may hold lone surrogates (JSON strings in the
    text format can spell them), which a UTF-8 stream refuses; they are written as escapes."""
    encoding = sys.stdout.encoding or "utf-8"
    return text.encode(encoding, "backslashreplace").decode(encoding)


def _cmd_dis(args: argparse.Namespace) -> int:
    from .bytecode.text import disassemble
    from .validate import read_module

    print(disassemble(read_module(Path(args.file))), end="")
    return 0


def _cmd_asm(args: argparse.Namespace) -> int:
    from .bytecode.binary import save_module
    from .bytecode.text import assemble
    from .verifier import verify_module

    path = Path(args.file)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BytecodeFormatError(f"cannot read {path}: {exc}", code="E-FORMAT-IO") from None
    module = assemble(text, filename=str(path))
    if not args.no_verify:
        verify_module(module)
    out = Path(args.output or path.with_suffix(".msbc"))
    save_module(module, out)
    print(f"wrote {out} ({out.stat().st_size} bytes)")
    return 0


def _parse_arg(text: str):
    import numpy as np

    if text.endswith(".npy"):
        return np.load(text, allow_pickle=False)
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise SystemExit(f"msvm run: argument {text!r} is neither an int, a float nor a .npy file") from None


def _cmd_run(args: argparse.Namespace) -> int:
    import numpy as np

    from .interpreter import Program
    from .validate import read_module

    module = read_module(Path(args.file))
    program = Program(module)
    name = args.function or module.functions[0].name
    values = [_parse_arg(a) for a in args.args]
    result = program.function(name)(*values)
    results = result if isinstance(result, tuple) else (result,)
    for i, value in enumerate(results):
        if args.output and isinstance(value, np.ndarray):
            out = Path(f"{args.output}.{i}.npy")
            np.save(out, value, allow_pickle=False)
            print(f"result {i}: {value.dtype}{list(value.shape)} -> {out}")
        else:
            print(f"result {i}: {value!r}")
    return 0


def _cmd_trace(args: argparse.Namespace) -> int:
    from .observe.trace import to_chrome_trace, to_csv

    out = (
        to_csv(args.output, args.source)
        if args.format == "csv"
        else to_chrome_trace(args.output, args.source)
    )
    print(f"wrote {out}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    run_demo()
    return 0


def _cmd_onnx(args: argparse.Namespace) -> int:
    from . import onnx
    from .bytecode.binary import save_module
    from .verifier import verify_module

    if args.check:
        problems = onnx.check(args.file)
        for problem in problems:
            print(f"  {problem.message}" + (f" ({problem.hint})" if problem.hint else ""))
        print(f"{args.file}: {len(problems)} unsupported node(s)" if problems else f"{args.file}: supported")
        return 1 if problems else 0
    module, _ = onnx.translate(args.file)
    verify_module(module)
    out = Path(args.output or Path(args.file).with_suffix(".msbc"))
    save_module(module, out)
    print(f"wrote {out} ({out.stat().st_size} bytes)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="msvm", description="MS-BC bytecode tools and the msvm demo.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser(
        "validate", help="verify a .msbc or MS-BC text file (exit 0 valid, 1 invalid, 2 unreadable)"
    )
    p.add_argument("file")
    p.add_argument("--json", action="store_true", help="machine-readable report")
    p.set_defaults(fn=_cmd_validate)

    p = sub.add_parser("dis", help="disassemble a .msbc file (or re-print MS-BC text)")
    p.add_argument("file")
    p.set_defaults(fn=_cmd_dis)

    p = sub.add_parser("asm", help="assemble MS-BC text into a .msbc file")
    p.add_argument("file")
    p.add_argument("-o", "--output", help="output path (default: FILE with .msbc suffix)")
    p.add_argument("--no-verify", action="store_true", help="write the file even if it does not verify")
    p.set_defaults(fn=_cmd_asm)

    p = sub.add_parser("run", help="run a function of a module on .npy / number arguments")
    p.add_argument("file")
    p.add_argument("args", nargs="*", help="one per parameter: path.npy, an int or a float")
    p.add_argument("-f", "--function", help="function name (default: the first)")
    p.add_argument("-o", "--output", help="save array results as OUTPUT.<i>.npy")
    p.set_defaults(fn=_cmd_run)

    p = sub.add_parser("trace", help="convert .bclog traces to CSV or Chrome-trace JSON")
    p.add_argument("format", choices=("csv", "chrome"))
    p.add_argument("source", help="a .bclog file or a directory of them")
    p.add_argument("output")
    p.set_defaults(fn=_cmd_trace)

    p = sub.add_parser("demo", help="a short tour in the terminal: compile, verify, disassemble, run")
    p.add_argument("--headless", action="store_true", help="accepted for symmetry with the lab launcher")
    p.set_defaults(fn=_cmd_demo)

    p = sub.add_parser("onnx", help="import an ONNX model: verify and save it as .msbc, or --check its ops")
    p.add_argument("file")
    p.add_argument("-o", "--output", help="output path (default: FILE with .msbc suffix)")
    p.add_argument("--check", action="store_true", help="list every unsupported node, exit 1 if any")
    p.set_defaults(fn=_cmd_onnx)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except VerifyError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    except BytecodeFormatError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except MsvmError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
