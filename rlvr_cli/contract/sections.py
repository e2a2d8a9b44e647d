"""Building blocks of the contract models: the strict `Section` base, integer and pattern types.

`1.0e3` is the integer 1000 (as JSON Schema's `integer` says); YAML `true` is not 1; a key
bound like `ge=1` sits inside the type so `PositiveInt | None` keeps it in the JSON Schema.
"""

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError

SHA256 = r"^[0-9a-f]{64}$"
DATE = r"^\d{4}-\d{2}-\d{2}$"
ENTRYPOINT = r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$"
CHECKPOINT_PARTS = (
    "model",
    "optimizer",
    "scheduler",
    "rng",
    "sampler",
    "data_cursor",
    "rollout_cursor",
)
Handling = Literal["none_present", "scrubbed", "scanned_clean"]


def integral(value: Any) -> Any:
    """An integer key takes an integer as written: `8.0` or `1.0e3` is a float (YAML 1.2 reads it
    so), refused with the integer to write instead — a contract says what it means."""
    if isinstance(value, float):
        hint = f"; write {int(value)}" if value.is_integer() and abs(value) < 1e18 else ""
        raise PydanticCustomError(
            "int_written_as_float",
            "expected an integer, got the float {value}{hint}",
            {"value": repr(value), "hint": hint},
        )
    return value


Int = Annotated[int, BeforeValidator(integral)]


def not_boolean(value: Any) -> Any:
    """YAML `true` equals 1 to Python, not to JSON Schema: keep the two in agreement."""
    if isinstance(value, bool):
        raise ValueError(f"expected 1, got {str(value).lower()}")
    return value


# The bound sits inside the type so that `PositiveInt | None` keeps it in the JSON Schema.
PositiveInt = Annotated[int, Field(ge=1), BeforeValidator(integral)]


class Section(BaseModel):
    """Base of every contract section: unknown keys are errors, no type coercion."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


def exactly_one(model: BaseModel, fields: dict[str, str], what: str) -> None:
    """`fields` maps the key as written in YAML to the attribute that holds it."""
    given = [key for key, attr in fields.items() if getattr(model, attr) is not None]
    if len(given) != 1:
        raise PydanticCustomError(
            "exactly_one",
            "{what} needs exactly one of {names}; {got}",
            {
                "what": what,
                "names": ", ".join(fields),
                "got": "got " + " and ".join(given) if given else "got none",
            },
        )


def one_of_required(*keys: str) -> dict[str, Any]:
    """JSON Schema twin of `exactly_one`: exactly one of `keys` present and not null."""
    return {"oneOf": [{"required": [k], "properties": {k: {"not": {"type": "null"}}}} for k in keys]}
