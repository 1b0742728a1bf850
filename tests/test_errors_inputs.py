"""The same hard inputs, by hand, for every reader: empty files, whitespace only, a lone byte-order
mark, binary data, Latin-1, and UTF-16/UTF-32 with a byte-order mark (read like UTF-8). The
fuzz tests (tests/test_fuzz_*.py) cover the rest; these pin the exact messages."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import SEED_512, SEED_OPTABLE, TOPOLOGIES, WORKLOADS

from sim.errors import InputError
from sim.models.inspect import infer
from sim.models.vocab.module_tree import import_module_tree
from sim.models.vocab.param_table import import_param_table
from sim.models.vocab.spec import load_model
from sim.topology.load import load_topology
from sim.workload.registry import read_workload

MODELS = WORKLOADS / "models"
READERS = {  # name: (reader, a valid file, message for an empty file)
    "aicb": (read_workload, SEED_512, ":1: format: unrecognised workload format"),
    "optable": (lambda p: read_workload(p, "optable"), SEED_OPTABLE,
                ":1: header: empty file (expected a header row)"),
    "param table": (import_param_table, MODELS / "gpt2-pipe-stage-params-tp4.txt",
                    ":1: header: header must be name;module;shape;partitioning_ranks;precs"),
    "module tree": (import_module_tree, MODELS / "megatron-core-gpt-12layer-tree.txt",
                    ":1: Module: no 'Module:' line"),
    "topology": (load_topology, TOPOLOGIES / "tiny-2x2.yaml",
                 ":1: empty topology file (no YAML content)"),
    "model": (load_model, MODELS / "gpt3-175b.yaml",
              ":1: model: a model spec must be a mapping of keys to values, got None"),
}


def _call(reader, path):
    return reader(str(path))


@pytest.mark.parametrize("name", list(READERS))
@pytest.mark.parametrize("content", [b"", b"\n\n  \n", b"\xef\xbb\xbf", b"\r\n"])
def test_empty_files(name, content, tmp_path):
    reader, _, needle = READERS[name]
    path = tmp_path / "f"
    path.write_bytes(content)
    with pytest.raises(InputError) as e:
        _call(reader, path)
    assert str(e.value) == f"{path}{needle}" or str(e.value).startswith(f"{path}{needle}")


@pytest.mark.parametrize("name", list(READERS))
def test_binary_data(name, tmp_path):
    reader, good, _ = READERS[name]
    path = tmp_path / "f"
    head = good.read_bytes()[:40]
    path.write_bytes(head + b"\x00\x01\x02")
    with pytest.raises(InputError) as e:
        _call(reader, path)
    line = head.count(b"\n") + 1
    assert str(e.value) == f"{path}:{line}: encoding: binary data (NUL byte at offset 40), " \
                           "expected a text file"


@pytest.mark.parametrize("name", list(READERS))
def test_latin1_names_line_and_byte(name, tmp_path):
    reader, good, _ = READERS[name]
    lines = good.read_text().split("\n")
    lines[1] = lines[1] + " \u00b5"  # µ: one byte 0xb5 in Latin-1, invalid alone in UTF-8
    data = "\n".join(lines).encode("latin-1")
    path = tmp_path / "f"
    path.write_bytes(data)
    with pytest.raises(InputError) as e:
        _call(reader, path)
    assert str(e.value) == (f"{path}:2: encoding: not UTF-8 text (byte 0xb5 at offset "
                            f"{data.index(bytes([0xB5]))}); save the file as UTF-8")


@pytest.mark.parametrize("name", list(READERS))
@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-16-be", "utf-32", "utf-8"])
def test_byte_order_marked_unicode_reads_like_utf8(name, encoding, tmp_path):
    reader, good, _ = READERS[name]
    text = good.read_text()
    path = tmp_path / good.name
    data = text.encode(encoding)
    if encoding == "utf-16-be":
        data = b"\xfe\xff" + data  # with its BOM
    path.write_bytes(data)
    a = _call(reader, good)
    b = _call(reader, path)
    if name == "topology":
        a, b = (dataclasses.replace(x, path="") for x in (a, b))
    elif hasattr(a, "path"):
        a.path = b.path = ""
    if hasattr(a, "tensors"):  # parameter table: compare what was read
        a, b = a.tensors, b.tensors
    assert a == b


def test_utf16_without_bom_is_binary_not_garbage(tmp_path):
    path = tmp_path / "w.txt"
    path.write_bytes(SEED_512.read_text().encode("utf-16-le"))
    with pytest.raises(InputError, match="binary data"):
        read_workload(path)


def test_truncated_utf16_is_named(tmp_path):
    path = tmp_path / "w.txt"
    path.write_bytes(SEED_512.read_text().encode("utf-16")[:-1])  # half a character
    with pytest.raises(InputError) as e:
        read_workload(path)
    assert "starts with a UTF-16 byte-order mark but is not valid UTF-16" in str(e.value)


def test_line_numbers_count_only_real_line_ends(tmp_path):
    """A form feed or U+2028 inside a row is whitespace, not a new line for the numbering."""
    text = SEED_512.read_text().split("\n")
    text[2] = text[2].replace("\t", "\x0c", 1)  # still 12 columns
    text[4] = text[4] + "\u2028extra"  # a 13th column on line 5
    path = tmp_path / "w.txt"
    path.write_text("\n".join(text))
    with pytest.raises(InputError) as e:
        read_workload(path)
    assert str(e.value) == f"{path}:5: row: expected 12 columns, found 13"


def test_inspect_sniffs_undecodable_files_cleanly(tmp_path):
    path = tmp_path / "m.txt"
    path.write_bytes(b"Module: GPTModel\n\xff\n")
    with pytest.raises(InputError, match=r"m.txt:2: encoding: not UTF-8"):
        infer(str(path))
