"""Why capturing a user's model failed, in one line that points at the user's code.

torch's messages run to dozens of lines and name torch's own files; a user needs the
exception's type, the line of *their* code that was running (`my_model.py:42`), and the
fix when there is a usual one. Only guard errors (a Python `if`, `while` or `.item()`
on a tensor's values, which fake tensors cannot answer) are data-dependent control flow;
every other exception is reported as what it is.
"""

from __future__ import annotations

import sysconfig
import traceback
from pathlib import Path

import torch
from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

_GUARD_ERRORS = (
    GuardOnDataDependentSymNode,
    DataDependentOutputException,
    DynamicOutputShapeException,
)
DATA_DEPENDENT = (
    "data-dependent control flow: the step is traced with fake tensors, which have shapes "
    "but no values, so an `if`, `while` or `.item()` on a tensor's values cannot be "
    "captured; compute both branches and pick with torch.where, or branch on shapes only"
)
# torch.nn.Transformer(Encoder|Decoder) inspects a mask's values to tell whether it is
# causal unless told; `_detect_is_causal_mask` is the torch function that does it.
_CAUSAL_MASK_CHECK = "_detect_is_causal_mask"
CAUSAL_MASK_FIX = (
    "torch.nn.Transformer inspects the mask's values to see whether it is causal; pass "
    "tgt_is_causal=True (or is_causal=True / src_is_causal=True) with a causal mask"
)

# Frames in these folders are not the user's: torch, the standard library, this project.
_NOT_USER = tuple(
    str(Path(p).resolve())
    for p in (
        Path(torch.__file__).parent,
        sysconfig.get_paths()["stdlib"],
        Path(__file__).parents[1] / "suites",
        Path(__file__).parents[1] / "simulator",
        Path(__file__).parents[1] / "eagle",
    )
)


def first_line(e: BaseException) -> str:
    """An exception's first line: torch's messages can run to dozens."""
    text = str(e).strip()
    return text.splitlines()[0] if text else ""


def _show(path: Path) -> str:
    """A frame's file as a user reads it: relative to the current folder when inside it,
    after `site-packages/` for an installed package, else in full."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        parts = path.parts
        if "site-packages" in parts:
            return str(Path(*parts[parts.index("site-packages") + 1 :]))
        return str(path)


def user_frame(e: BaseException) -> traceback.FrameSummary | None:
    """The innermost frame of `e`'s traceback in code that is neither torch, the standard
    library nor this project: the user's model file, or a library such as transformers."""
    for frame in reversed(traceback.extract_tb(e.__traceback__)):
        path = Path(frame.filename)
        if frame.filename.startswith("<") or str(path.resolve()).startswith(_NOT_USER):
            continue
        return frame
    return None


def explain(e: BaseException) -> str:
    """One line: the exception's type and first line, where in the user's code it
    happened, and the usual fix for data-dependent control flow or a causal mask."""
    where = ""
    frame = user_frame(e)
    if frame is not None:
        code = f": `{frame.line}`" if frame.line else ""
        where = f" at {_show(Path(frame.filename))}:{frame.lineno} (in {frame.name}{code})"
    text = f"{type(e).__name__}{where}: {first_line(e)}"
    names = {f.name for f in traceback.extract_tb(e.__traceback__)}
    if _CAUSAL_MASK_CHECK in names:
        return f"{text} ({CAUSAL_MASK_FIX})"
    if isinstance(e, _GUARD_ERRORS):
        return f"{text} ({DATA_DEPENDENT})"
    return text
