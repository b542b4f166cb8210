"""docs/bytecode.md stays true: every opcode documented, the generated block current, examples valid."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from msvm.bytecode import docgen
from msvm.bytecode.opcodes import OPCODES, Kind
from msvm.bytecode.text import assemble, disassemble

DOC = Path(__file__).resolve().parents[2] / "docs" / "bytecode.md"


@pytest.fixture(scope="module")
def doc() -> str:
    return DOC.read_text(encoding="utf-8")


def test_generated_block_is_up_to_date(doc: str) -> None:
    assert docgen.render(doc) == doc, "docs/bytecode.md is stale: run python -m msvm.bytecode.docgen"
    assert docgen.main(["--check", str(DOC)]) == 0


def test_check_fails_on_drift(tmp_path: Path, doc: str, capsys: pytest.CaptureFixture[str]) -> None:
    stale = tmp_path / "bytecode.md"
    stale.write_text(doc.replace("### `JMP`", "### `JUMP`"), encoding="utf-8")
    assert docgen.main(["--check", str(stale)]) == 1
    assert "out of date" in capsys.readouterr().err
    assert docgen.main([str(stale)]) == 0
    assert stale.read_text(encoding="utf-8") == doc
    no_markers = tmp_path / "plain.md"
    no_markers.write_text("# nothing\n", encoding="utf-8")
    assert docgen.main(["--check", str(no_markers)]) == 2


def test_every_opcode_and_kind_has_its_section(doc: str) -> None:
    block = doc[doc.index(docgen.BEGIN) : doc.index(docgen.END)]
    for info in OPCODES:
        assert f"### `{info.name}`" in block
        section = block.split(f"### `{info.name}`", 1)[1].split("### ", 1)[0]
        assert info.doc in section
        for operand in info.operands:
            assert f"| `{operand.name}` | `{operand.kind.value}` |" in section
    for kind in Kind:
        assert f"| `{kind.value}` |" in block


def test_prose_sections_exist(doc: str) -> None:
    for heading in ("## Concepts", "## Text format", "### Grammar", "### Attribute values"):
        assert heading in doc
    assert "## Binary format" in doc
    assert "Placeholder" not in doc


def test_examples_assemble_and_round_trip(doc: str) -> None:
    examples = re.findall(r"```msbc\n(.*?)```", doc, re.S)
    assert examples
    for text in examples:
        module = assemble(text, "docs/bytecode.md")
        assert assemble(disassemble(module, {})) == module


def test_printed_examples_in_the_reference_assemble(doc: str) -> None:
    """The second line of each generated code block is real printer output: it must parse."""
    block = doc[doc.index(docgen.BEGIN) : doc.index(docgen.END)]
    for example in re.findall(r"```\n[^\n]*\n([^\n]*)\n```", block):
        body = f"func @f() regs=16 {{\nbb0:\n  {example}\nbb1:\nbb2:\n}}\n"
        prefix = "const k0 = int64[] 1\n" if "LOAD_CONST" in example else ""
        module = assemble(prefix + body)
        assert module.functions[0].blocks[0].instructions[0].name in example
