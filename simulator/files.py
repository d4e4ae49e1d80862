"""Reading and writing the project's data files safely.

Every file a user may get from someone else (graphs, clusters, profiles, run dirs) is
data: it is read with a size cap, so a small file that decompresses to gigabytes is
refused in well under a second instead of filling memory. Every file the project writes
goes to a temporary name unique to the writer (pid and random suffix, so two processes
never share one) and is renamed into place, so a killed writer never leaves a truncated
file; it is created with the user's umask, like any other file they make.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import secrets
import sys
import warnings
import zlib
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

# A cap on the bytes of one data file after decompression. The largest graph the suite
# captures (GNMT, default variant: 34,988 ops) is 13 MB of JSON; 128 MiB leaves ten times
# room and refuses a decompression bomb in about half a second on the development machine.
LIMIT_ENV = "EAGLE_MAX_INPUT_BYTES"
DEFAULT_LIMIT = 128 * 2**20
_CHUNK = 2**20


class InputTooLarge(ValueError):  # noqa: N818 (callers catch it by this name)
    """A data file is larger (after decompression) than the input limit."""


def input_limit() -> int:
    """Bytes one data file may hold after decompression: `$EAGLE_MAX_INPUT_BYTES`, else
    DEFAULT_LIMIT. A value that is not a positive integer is refused by name."""
    raw = os.environ.get(LIMIT_ENV)
    if raw is None or raw == "":
        return DEFAULT_LIMIT
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise InputTooLarge(f"{LIMIT_ENV}={raw!r} must be a positive number of bytes")
    return value


def read_limited(path: Path) -> bytes:
    """The bytes of `path`, gunzipped if its name ends in `.gz`, at most `input_limit()`.

    Raises InputTooLarge past the limit (naming it and how to raise it), OSError when the
    file cannot be read, and ValueError for a corrupt gzip stream.
    """
    limit = input_limit()
    chunks: list[bytes] = []
    total = 0
    try:
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rb") as f:
            while True:
                chunk = f.read(_CHUNK)
                if not chunk:
                    break
                total += len(chunk)
                if total > limit:
                    raise InputTooLarge(
                        f"{path} holds more than {limit:,} bytes"
                        f"{' once decompressed' if path.name.endswith('.gz') else ''}; if it is "
                        f"a real input, raise the limit with {LIMIT_ENV}=BYTES"
                    )
                chunks.append(chunk)
    except (gzip.BadGzipFile, zlib.error, EOFError) as e:
        raise ValueError(f"corrupt gzip data ({e or type(e).__name__})") from None
    return b"".join(chunks)


def parse_json(data: bytes) -> Any:
    """The JSON document in `data` (UTF-8); every failure is a one-line ValueError.

    Besides malformed JSON (json.JSONDecodeError) and bad UTF-8 (UnicodeDecodeError), a
    document can defeat the parser itself: nesting deeper than the recursion limit (a
    RecursionError, which would end a command with a traceback) or an integer too long
    for Python to convert (a ValueError whose advice to raise the interpreter's limit
    is wrong here: no number of the project's formats needs more than a float's 309
    digits). Both are refused with a message that says where and what to fix. So are
    two kinds of JSON that parse but mislead: a key given twice in one object (the last
    would win silently) and a lone surrogate escape (a name no file or terminal can
    print: a traceback later, far from the file).
    """
    try:
        doc = json.loads(data.decode("utf-8"), object_pairs_hook=_once_each)
        if _SURROGATE.search(data):  # rare: only then is the whole document checked
            json.dumps(doc, ensure_ascii=False).encode("utf-8")
        return doc
    except UnicodeEncodeError:
        raise ValueError(
            "a \\u escape stands for half of a character (a lone surrogate), not text"
        ) from None
    except RecursionError:
        raise ValueError(
            "JSON nested too deeply to read (over ~1000 levels; the project's formats "
            "need only a few)"
        ) from None
    except ValueError as e:
        if type(e) is not ValueError:  # JSONDecodeError, UnicodeDecodeError: say as is
            raise
        raise ValueError(_long_integer(data, e)) from None


# A \\u escape of a UTF-16 surrogate (half of a character when not paired).
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


class _KeyTwiceError(ValueError):
    """Its own kind, so that `parse_json` passes its message on as it is."""


def _once_each(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refusing a key given twice (json keeps the last without a word)."""
    doc: dict[str, Any] = {}
    for key, value in pairs:
        if key in doc:
            raise _KeyTwiceError(f"key {key!r} is given twice in one object; keep one")
        doc[key] = value
    return doc


def parse_csv(data: bytes) -> pd.DataFrame:
    """The CSV table in `data`, its first line the header; every failure is a one-line
    ValueError. A row longer than the header is refused: pandas would take its first
    fields as the row's index and shift every named column onto the wrong values."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", pd.errors.ParserWarning)
        try:
            return pd.read_csv(io.BytesIO(data), index_col=False)
        except pd.errors.ParserWarning:
            raise ValueError("a row has more fields than the header") from None
        except pd.errors.ParserError as e:  # a ValueError, but messages of many lines
            raise ValueError(" ".join(str(e).split())) from None


def _long_integer(data: bytes, error: ValueError) -> str:
    """Where the integer too long to parse is, for the error message (error path only)."""
    limit = sys.get_int_max_str_digits()
    found = re.search(rb"[0-9]{%d,}" % (limit + 1), data) if limit else None
    if found is None:
        return str(error)
    before = data[max(0, found.start() - 120) : found.start()]
    key = re.search(rb'"([^"\\]{1,100})"\s*:\s*-?$', before)
    where = f"byte {found.start()}" + (
        f", field {key.group(1).decode(errors='replace')!r}" if key else ""
    )
    return (
        f"an integer of {found.end() - found.start()} digits ({where}) is too long to read; "
        "every number must fit a float (below ~1.8e308)"
    )


class YamlRefused(yaml.YAMLError):
    """A YAML file uses something the project's loaders refuse; `line` is 1-based."""

    def __init__(self, message: str, mark: Any) -> None:  # a yaml Mark (either kind) or None
        super().__init__(message)
        self.message = message
        self.line = mark.line + 1 if mark is not None else 0


class NoAliasLoader(yaml.SafeLoader):
    """SafeLoader (plain data, no tags that build objects) that refuses aliases before
    any is expanded: a 13-line file of nested aliases (the "billion laughs") took a
    minute and gigabytes. No file of this project needs them."""

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event: yaml.AliasEvent = self.current_event  # what check_event just peeked at
            raise YamlRefused(
                f"YAML alias *{event.anchor} is not allowed here (nested aliases can expand "
                "to gigabytes); write the value out in full",
                event.start_mark,
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        """A mapping, refusing a key written twice: YAML keeps the last silently, so
        `{memory: 16e9, memory: 1}` would read as 1 byte."""
        seen = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode):  # by value: `1` and `0x1` are one key
                key = self.construct_object(key_node)
                if key in seen:
                    raise YamlRefused(
                        f"key {key_node.value!r} is given twice in one mapping; keep one",
                        key_node.start_mark,
                    )
                seen.add(key)
        return super().construct_mapping(node, deep)


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file unique to this writer."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "xb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
