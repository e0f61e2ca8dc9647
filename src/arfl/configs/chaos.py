"""A ``[[chaos]]`` entry: the keys every fault kind takes, and the kind's own (its ``Params``
model, :attr:`arfl.registry.FaultInfo.params`), written flat in the spec."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializationInfo,
    SerializeAsAny,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from arfl.params import Duration, NoParams, Params
from arfl.registry import FAULTS

CHAOS_KEYS = frozenset({"at", "fault", "replica", "duration", "after_boundary"})
"""The ``[[chaos]]`` keys every fault kind takes; the others are the kind's own
(:attr:`arfl.registry.FaultInfo.params`)."""


class Chaos(BaseModel):
    """One scheduled fault. The keys every kind takes are fields; the kind's own are
    ``params``, written flat in the entry."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    at: Duration
    """When the fault starts, after the start of the input."""
    fault: str
    """The fault kind."""
    replica: int | Literal["leader"] | None = Field(
        None,
        json_schema_extra={"constraint": 'below replication.replicas; "leader": active-leader'},
    )
    """The replica it hits: an index from 0, or "leader" (active-leader); unset for a fault on
    the merger."""
    duration: Duration | None = None
    """How long a lasting fault holds before it is reverted; an instant one takes none."""
    after_boundary: Duration | None = None
    """Inject this long after the first batch boundary of another replica from ``at`` on
    (:mod:`arfl.faults.align`)."""
    params: SerializeAsAny[Params] = Field(default_factory=NoParams)
    """The kind's own keys (``cpu``, ``delay``, ``from``, ...), validated by its model."""

    @model_validator(mode="before")
    @classmethod
    def _own_keys(cls, data: Any) -> Any:
        """The keys no kind shares go to ``params`` (written flat in the spec)."""
        if not isinstance(data, dict) or "params" in data:
            return data
        own = {k: v for k, v in data.items() if k not in CHAOS_KEYS}
        return {**{k: v for k, v in data.items() if k in CHAOS_KEYS}, "params": own}

    @field_validator("fault")
    @classmethod
    def _fault(cls, v: str) -> str:
        if v not in FAULTS:
            raise ValueError(f"unknown {v!r} (known: {', '.join(FAULTS.names())})")
        return v

    @field_validator("params", mode="plain")
    @classmethod
    def _params(cls, v: Any, info: ValidationInfo) -> Params:
        fault = info.data.get("fault")
        if fault is None:  # unknown: that error is the one to read
            return NoParams()
        model = FAULTS.info(fault).params
        return v if isinstance(v, model) else model.model_validate(v)

    @model_validator(mode="after")
    def _shape(self) -> Chaos:
        kind = FAULTS.info(self.fault)
        if kind.takes_duration and self.duration is None:
            raise ValueError(f'{self.fault} needs duration = "..."')
        if not kind.takes_duration and self.duration is not None:
            raise ValueError(f"{self.fault} takes no duration")
        if kind.on != "replica" and self.replica is not None:
            raise ValueError(f"{self.fault} acts on the {kind.on}: drop replica")
        return self

    @model_serializer(mode="wrap")
    def _flat(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        """Written back flat, as a spec has it."""
        out = handler(self)
        if isinstance(out, dict):
            own = out.pop("params", None)
            out.update(own or {})
        return out


def unjudgeable(chaos: list[Chaos], input_s: float, settle_s: float) -> list[str]:
    """The faults whose impact window cannot close before the input ends, in words: the window
    lasts at least the fault's own duration plus ``report.settle`` (a kill's restart and
    catch-up come on top), and one the input's end cuts is never judged masked (docs/design.md
    §4). Only the last fault: an earlier one's window ends at the next fault."""
    out = []
    last = max((c.at for c in chaos), default=None)
    for i, c in enumerate(chaos):
        if c.at != last:  # an earlier fault's window ends at the next one
            continue
        needs = (c.duration or 0.0) + settle_s
        start = c.at + (c.after_boundary or 0.0)
        if start + needs > input_s:
            latest = input_s - needs - (c.after_boundary or 0.0)
            out.append(
                f"chaos[{i}] ({c.fault} at {c.at:g}s): its impact window needs at least "
                f"{needs:g} s (duration + report.settle) and the input ends at {input_s:g} s, "
                "so it cannot be judged masked (unjudged unless the output shows harm); "
                + (
                    f"set at <= {latest:g}s (a kill needs its restart and catch-up on top) "
                    "or a longer workload.duration"
                    if latest > 0
                    else "set a longer workload.duration"
                )
            )
    return out


def in_warmup(chaos: list[Chaos], warmup_s: float, auto: bool) -> list[str]:
    """The faults that come before the warm-up ends (about, for an automatic one): no steady
    state precedes them, so none of them can be judged masked (docs/design.md §4)."""
    out = []
    for i, c in enumerate(chaos):
        if c.at < warmup_s:
            how = (
                f"with workload.warmup unset it lasts until every replica has passed its first "
                f"batch boundary, about {warmup_s:g} s here"
                if auto
                else f"workload.warmup is {warmup_s:g} s"
            )
            out.append(
                f"chaos[{i}] ({c.fault} at {c.at:g}s) comes in the warm-up ({how}), with no "
                f"steady state before it to judge it by; set at >= {warmup_s:g}s and a longer "
                "workload.duration" + ("" if auto else ", or a shorter workload.warmup")
            )
    return out
