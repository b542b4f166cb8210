"""docs/ stays true: every generated block current; every opcode, op, verifier code and error class in it."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import msvm.errors
from msvm import docgen
from msvm.bytecode.opcodes import OPCODES, Kind
from msvm.bytecode.text import assemble, disassemble
from msvm.ops.registry import REGISTRY, Attr, OpDef, TensorType
from msvm.scheduler.variants import VARIANTS
from msvm.verifier.diagnostics import CODES

DOCS = Path(__file__).resolve().parents[2] / "docs"
CORPUS = Path(__file__).resolve().parents[2] / "tests" / "data" / "invalid"


def read(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def block(text: str, name: str) -> str:
    return text[text.index(docgen.begin(name)) : text.index(docgen.end(name))]


def section(text: str, heading: str) -> str:
    """The text under ``heading`` up to the next heading of any level."""
    return text.split(heading + "\n", 1)[1].split("\n#", 1)[0]


# -- the generator ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(docgen.BLOCKS))
def test_generated_blocks_are_up_to_date(name: str) -> None:
    text = read(name)
    assert docgen.render(text, name) == text, f"docs/{name} is stale: run python -m msvm.docgen"
    for marker in docgen.BLOCKS[name]:
        assert text.count(docgen.begin(marker)) == 1 and text.count(docgen.end(marker)) == 1


def test_check_passes_on_the_repository() -> None:
    assert docgen.main(["--check"]) == 0


@pytest.mark.parametrize("name", sorted(docgen.BLOCKS))
def test_check_fails_on_drift_and_a_rewrite_fixes_it(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = read(name)
    first = next(iter(docgen.BLOCKS[name]))
    start = original.index(docgen.begin(first)) + len(docgen.begin(first))
    stale = tmp_path / name
    stale.write_text(original[:start] + "\nhand-edited line" + original[start:], encoding="utf-8")
    assert docgen.main(["--check", str(stale)]) == 1
    assert "out of date" in capsys.readouterr().err
    assert docgen.main([str(stale)]) == 0
    assert stale.read_text(encoding="utf-8") == original


def test_check_fails_when_a_source_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new kernel variant, verifier code or error docstring makes the committed page stale."""
    from msvm.scheduler.variants import Variant

    copies = {}
    for name in ("ops.md", "verifier.md", "errors.md"):
        copies[name] = tmp_path / name
        copies[name].write_text(read(name), encoding="utf-8")
    monkeypatch.setitem(VARIANTS, "relu", [Variant("relu", "fast_relu", lambda attrs: None, constraints="x")])
    monkeypatch.setitem(CODES, "NEW-CODE", "a code added to the table")
    monkeypatch.setattr(msvm.errors.ShapeError, "__doc__", "Shapes that disagree.")
    for path in copies.values():
        assert docgen.main(["--check", str(path)]) == 1, path.name
    assert "| `fast_relu` | native |" in docgen.op_reference()
    assert "#### `E-VERIFY-NEW-CODE`" in docgen.verifier_reference()


def test_missing_markers_and_unknown_files_are_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    no_markers = tmp_path / "ops.md"
    no_markers.write_text("# nothing\n", encoding="utf-8")
    assert docgen.main(["--check", str(no_markers)]) == 2
    assert "BEGIN OPS" in capsys.readouterr().err
    unknown = tmp_path / "notes.md"
    unknown.write_text("# notes\n", encoding="utf-8")
    assert docgen.main(["--check", str(unknown)]) == 2


def test_a_new_op_without_a_shape_example_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CI guard: registering an op without documenting it breaks --check (and this test suite)."""

    def infer(ctx: object, x: TensorType, alpha: float) -> TensorType:
        return x

    op = OpDef(
        "undocumented_op", ("x",), {"alpha": Attr("float", 1.0, doc="a factor")}, infer, lambda x, alpha: x,
        doc="a test op",
    )
    monkeypatch.setitem(REGISTRY, op.name, op)
    copy = tmp_path / "ops.md"
    copy.write_text(read("ops.md"), encoding="utf-8")
    assert docgen.main(["--check", str(copy)]) == 2
    err = capsys.readouterr().err
    assert "undocumented_op" in err and "OP_EXAMPLES" in err
    monkeypatch.setitem(docgen.OP_EXAMPLES, op.name, (("float32[N]",), {"alpha": 2.0}))
    assert docgen.main(["--check", str(copy)]) == 1  # documented now: the page is merely stale
    assert docgen.op_example(op.name) == "undocumented_op(x: float32[N], alpha=2.0) → float32[N]"


def test_an_op_without_a_doc_line_or_with_a_wrong_example_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    relu = REGISTRY["relu"]
    monkeypatch.setitem(
        REGISTRY,
        "relu",
        OpDef(relu.name, relu.inputs, relu.attrs, relu.infer, relu.kernel, traits=relu.traits),
    )
    with pytest.raises(docgen.DocgenError, match=r"relu.*doc"):
        docgen.op_reference()
    monkeypatch.setitem(REGISTRY, "relu", relu)
    monkeypatch.setitem(docgen.OP_EXAMPLES, "matmul", (("float32[N, 3]", "float32[4, M]"), {}))
    with pytest.raises(docgen.DocgenError, match="matmul"):
        docgen.op_example("matmul")


def test_an_attribute_without_a_doc_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The table of attributes has no "—" rows: an Attr registered without doc= breaks --check."""
    flatten = REGISTRY["flatten"]
    attrs = {**flatten.attrs, "end_dim": Attr("int", -1)}
    monkeypatch.setitem(
        REGISTRY,
        "flatten",
        OpDef(flatten.name, flatten.inputs, attrs, flatten.infer, flatten.kernel, traits=flatten.traits,
              doc=flatten.doc),
    )
    copy = tmp_path / "ops.md"
    copy.write_text(read("ops.md"), encoding="utf-8")
    assert docgen.main(["--check", str(copy)]) == 2
    err = capsys.readouterr().err
    assert "'end_dim'" in err and "'flatten'" in err and "doc=" in err


def test_every_op_attribute_has_a_doc() -> None:
    undocumented = [f"{op}.{key}" for op, d in REGISTRY.items() for key, a in d.attrs.items() if not a.doc]
    assert not undocumented


def test_every_example_names_a_registered_op() -> None:
    assert sorted(docgen.OP_EXAMPLES) == sorted(REGISTRY)


# -- bytecode.md --------------------------------------------------------------------------------------


def test_every_opcode_and_kind_has_its_section() -> None:
    text = block(read("bytecode.md"), "OPCODES")
    for info in OPCODES:
        assert f"### `{info.name}`" in text
        body = section(text, f"### `{info.name}`")
        assert info.doc in body
        for operand in info.operands:
            assert f"| `{operand.name}` | `{operand.kind.value}` |" in body
    for kind in Kind:
        assert f"| `{kind.value}` |" in text


def test_bytecode_prose_sections_exist() -> None:
    text = read("bytecode.md")
    for heading in (
        "## Concepts",
        "## Text format",
        "### Grammar",
        "### Attribute values",
        "## Binary format",
    ):
        assert heading in text
    assert "Placeholder" not in text


def test_bytecode_examples_assemble_and_round_trip() -> None:
    examples = re.findall(r"```msbc\n(.*?)```", read("bytecode.md"), re.S)
    assert examples
    for text in examples:
        module = assemble(text, "docs/bytecode.md")
        assert assemble(disassemble(module, {})) == module


def test_printed_examples_in_the_opcode_reference_assemble() -> None:
    """The second line of each generated code block is real printer output: it must parse."""
    for example in re.findall(r"```\n[^\n]*\n([^\n]*)\n```", block(read("bytecode.md"), "OPCODES")):
        body = f"func @f() regs=16 {{\nbb0:\n  {example}\nbb1:\nbb2:\n}}\n"
        prefix = "const k0 = int64[] 1\n" if "LOAD_CONST" in example else ""
        module = assemble(prefix + body)
        assert module.functions[0].blocks[0].instructions[0].name in example


# -- ops.md -------------------------------------------------------------------------------------------


def test_every_op_has_its_section() -> None:
    text = block(read("ops.md"), "OPS")
    for name, op in REGISTRY.items():
        heading = f"#### `{name}`"
        assert text.count(heading + "\n") == 1, name
        body = section(text, heading)
        assert f"`{docgen._signature(op)}` — " in body
        assert f"\n{name}(" in body and " → " in body, f"{name}: no shape example"
        for trait in op.traits:
            assert f"`{trait}`" in body
        for key in op.attrs:
            assert f"| `{key}` | `{op.attrs[key].kind}`" in body, f"{name}.{key}"
        for variant in VARIANTS.get(name, []):
            assert f"| `{variant.name}` | {variant.kind} |" in body, f"{name}/{variant.name}"
        family = docgen._FAMILIES[docgen.op_family(op.traits)][0]
        assert text.index(f"### {family}\n") < text.index(heading), f"{name} is not under {family}"


def test_the_conv2d_example_is_the_shape_functions_answer() -> None:
    assert docgen.op_example("conv2d").startswith(
        "conv2d(input: float32[N, 3, H, W], weight: float32[16, 3, 3, 3], padding=1) → float32[N, 16, H, W]"
    )
    assert docgen.op_example("split").endswith("→ (float32[N, 4], float32[N, 4])")


# -- verifier.md --------------------------------------------------------------------------------------


def test_every_verifier_code_has_its_section_with_its_real_diagnostic() -> None:
    text = block(read("verifier.md"), "VERIFIER-CODES")
    for code, meaning in CODES.items():
        heading = f"#### `E-VERIFY-{code}`"
        assert text.count(heading + "\n") == 1, code
        body = section(text, heading)
        assert meaning[1:] in body
        own = CORPUS / f"{code.lower()}.msbc.txt"
        if own.exists():
            assert f"(../tests/data/invalid/{own.name})" in body
            assert f"[E-VERIFY-{code}]" in body.split("```text", 1)[1], f"{code}: the example's diagnostic"
        else:
            assert "No text example" in body


def test_validate_block_shows_the_commands_real_output() -> None:
    text = block(read("verifier.md"), "VALIDATE")
    assert "$ msvm validate tests/data/invalid/" in text and '"diagnostics": [' in text
    assert "Exit status 1." in text


# -- errors.md ----------------------------------------------------------------------------------------


def test_every_error_class_has_its_section() -> None:
    text = block(read("errors.md"), "ERRORS")
    classes = [
        c
        for c in vars(msvm.errors).values()
        if isinstance(c, type) and issubclass(c, Exception) and c.__module__ == "msvm.errors"
    ]
    assert len(classes) >= 8
    for cls in classes:
        body = section(text, f"### `{cls.__name__}`")
        assert f"Code `{cls.default_code}`" in body
        first = " ".join(inspect.getdoc(cls).split(";")[0].split())  # docstring lines join into one
        assert first.replace("``", "`") in body
        assert re.search(rf"^\s*{cls.__name__}\s+{cls.default_code}$", text, re.M), cls.__name__
        assert getattr(msvm, cls.__name__) is cls, f"ms.{cls.__name__} is not exported"


# -- links --------------------------------------------------------------------------------------------


def _anchors(text: str) -> set[str]:
    return {docgen._slug(h) for h in re.findall(r"^#+ (.+)$", text, re.M)} | set(
        re.findall(r'id="([^"]+)"', text)
    )


@pytest.mark.parametrize(
    "path", [*sorted(DOCS.glob("*.md")), DOCS.parent / "README.md"], ids=lambda p: p.name
)
def test_relative_links_resolve(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file) if file else path
        assert resolved.exists(), f"{path.name}: broken link {target}"
        if anchor and resolved.suffix == ".md":
            assert anchor in _anchors(resolved.read_text(encoding="utf-8")), (
                f"{path.name}: no anchor {target}"
            )
