"""The ``msvm`` command line: exit codes, reports and round trips through files."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from msvm.cli import main

VALID = """\
module "demo"

func @scale(x, n) regs=6 {
bb0:
  R0 = TENSOR_CREATE 0, [N, 4], float32, cpu
  R1 = SCALAR_ARG 1, n
  R2 = OP_CALL full, (), {shape=(), fill_value=R1, dtype="float32"}
  R3 = OP_CALL mul, (R0, R2), {}
  R4 = OP_CALL relu, (R3), {}
  RET (R4)
}
"""

INVALID = VALID.replace("R3 = OP_CALL mul, (R0, R2)", "R3 = OP_CALL mul, (R0, R5)").replace(
    "R4 = OP_CALL relu, (R3), {}", "R4 = OP_CALL relux, (R3), {}"
)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    paths = {
        "valid": tmp_path / "ok.msbc.txt",
        "invalid": tmp_path / "bad.msbc.txt",
        "garbage": tmp_path / "x.bin",
    }
    paths["valid"].write_text(VALID)
    paths["invalid"].write_text(INVALID)
    paths["garbage"].write_bytes(b"MSBC\xff\xff\x00\x00junk")
    return paths


def test_validate_exit_codes_and_reports(files, capsys):
    assert main(["validate", str(files["valid"])]) == 0
    assert "valid (1 function(s), 6 instructions" in capsys.readouterr().out
    assert main(["validate", str(files["invalid"])]) == 1
    out = capsys.readouterr().out
    assert "invalid, 2 errors" in out
    assert "E-VERIFY-REG-UNDEFINED" in out and "E-VERIFY-UNKNOWN-OP" in out and "msvm://bc/0x0003" in out
    assert main(["validate", str(files["garbage"])]) == 2
    assert "unreadable" in capsys.readouterr().err
    assert main(["validate", str(files["valid"].with_name("missing.msbc"))]) == 2


def test_validate_json(files, capsys):
    assert main(["validate", "--json", str(files["invalid"])]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] is False and report["readable"] is True
    codes = sorted(d["code"] for d in report["diagnostics"])
    assert codes == ["E-VERIFY-REG-UNDEFINED", "E-VERIFY-UNKNOWN-OP"]
    assert all(d["address"] is not None and d["hint"] for d in report["diagnostics"])
    assert main(["validate", "--json", str(files["garbage"])]) == 2
    assert json.loads(capsys.readouterr().out)["error"]["code"].startswith("E-FORMAT")


def test_asm_dis_run_round_trip(files, tmp_path, capsys):
    out = tmp_path / "ok.msbc"
    assert main(["asm", str(files["valid"]), "-o", str(out)]) == 0
    assert out.read_bytes().startswith(b"MSBC")
    assert main(["validate", str(out)]) == 0
    capsys.readouterr()
    assert main(["dis", str(out)]) == 0
    text = capsys.readouterr().out
    assert "R3 = OP_CALL mul, (R0, R2), {}" in text and "msvm://bc/0x0003" in text and "float32[N, 4]" in text
    x = np.arange(-4, 4, dtype=np.float32).reshape(2, 4)
    np.save(tmp_path / "x.npy", x)
    assert main(["run", str(out), str(tmp_path / "x.npy"), "3", "-o", str(tmp_path / "res")]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "res.0.npy"), np.maximum(x * 3, 0))


def test_asm_refuses_invalid_modules(files, tmp_path, capsys):
    assert main(["asm", str(files["invalid"]), "-o", str(tmp_path / "bad.msbc")]) == 1
    assert "E-VERIFY-UNKNOWN-OP" in capsys.readouterr().err
    assert not (tmp_path / "bad.msbc").exists()


def test_syntax_errors_name_line_and_column(tmp_path, capsys):
    bad = tmp_path / "syntax.msbc.txt"
    bad.write_text(VALID.replace("SCALAR_ARG 1, n", "SCALAR_ARG 1 n"))
    assert main(["validate", str(bad)]) == 2
    assert f"{bad}:6:" in capsys.readouterr().err


def test_console_script_and_python_m():
    done = subprocess.run(
        [sys.executable, "-m", "msvm", "--help"], capture_output=True, text=True, check=True
    )
    assert "validate" in done.stdout and "demo" in done.stdout


RESERVED_SYMBOL = """\
func @"f\\ud800"(x, n) regs=2 {
bb0:
  R0 = TENSOR_CREATE 0, [B, 8], float32, cpu  @"\\udfff.py":1:1
  R1 = SCALAR_ARG 1, max  @"\\udfff.py":2:1
  RET (R0)
}
"""


def test_validate_reports_a_reserved_symbol_as_invalid(tmp_path):
    """A symbol named like a shape function is a diagnostic (exit 1), in either report, and names
    with lone surrogates (JSON escapes in the text) print as escapes instead of failing the write."""
    path = tmp_path / "reserved.msbc.txt"
    path.write_text(RESERVED_SYMBOL)
    for flags in ([], ["--json"]):
        run = subprocess.run([sys.executable, "-m", "msvm", "validate", *flags, str(path)],
                             capture_output=True, text=True, encoding="utf-8", errors="strict")
        assert run.returncode == 1, run.stderr
        assert "E-VERIFY-BAD-SYMBOL" in run.stdout and "Traceback" not in run.stderr
    assert json.loads(run.stdout)["diagnostics"][0]["code"] == "E-VERIFY-BAD-SYMBOL"
