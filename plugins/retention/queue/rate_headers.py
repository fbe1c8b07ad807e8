"""Read an API's own rate-limit headers (pure): how many calls are left, and until when.

Three families are read, each into one :class:`QuotaReading` (calls left, seconds
until the quota resets, and the limit and window when they are said):

- the IETF draft's structured fields (draft-ietf-httpapi-ratelimit-headers):
  ``RateLimit-Policy: "default";q=100;w=60`` names each quota policy (``q`` calls
  per ``w`` seconds, ``qu`` the unit) and ``RateLimit: "default";r=40;t=12`` says
  what is left of it (``r``) and in how many seconds it resets (``t``);
- the draft's older fields ``RateLimit-Limit``, ``RateLimit-Remaining`` and
  ``RateLimit-Reset`` (delta seconds);
- the widespread ``X-RateLimit-Limit``, ``X-RateLimit-Remaining`` and
  ``X-RateLimit-Reset``, whose reset is either seconds or an epoch timestamp: a
  value larger than a year of seconds (:data:`EPOCH_AFTER_SECONDS`) can only be
  an epoch.

A header that is malformed (not a number, negative, an inner list) or that
contradicts itself or another family (more remaining than the limit, a reset in
the past, two families saying different things) gives a :class:`QuotaProblem`
naming it, and no reading: the limiter then keeps its configured rate, and the
run summary says once that the headers were ignored. A family that says only
part of what a pace needs (a limit alone, remaining without a reset) steers
nothing and is no problem: many APIs send ``X-RateLimit-Limit`` only as
information.

The structured fields are parsed here rather than by an RFC 9651 library: no
such library is among the project's pinned dependencies, and the two fields need
only a List of Items with parameters whose values are integers, decimals,
strings, tokens, byte sequences or booleans (:func:`parse_sf_list`). An inner
list, or any syntax outside that subset, is a malformed header.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

IETF = "RateLimit"  # the draft's structured fields (RateLimit and RateLimit-Policy)
RATELIMIT = "RateLimit-*"  # the draft's older RateLimit-Limit/-Remaining/-Reset
X_RATELIMIT = "X-RateLimit-*"  # the widespread X-RateLimit-Limit/-Remaining/-Reset

EPOCH_AFTER_SECONDS = 365 * 86_400  # a reset larger than a year of seconds is an epoch
# The API's clock and ours differ: an epoch reset up to this far in the past reads as "now",
# and an epoch reset (read on our clock) may differ this much from another family's delta
# and still agree. Beyond it, the headers contradict the calendar or each other.
CLOCK_SKEW_SECONDS = 30.0
PAST_TOLERANCE_SECONDS = CLOCK_SKEW_SECONDS
RESET_AGREEMENT_SECONDS = 1.0  # two deltas may differ by whole-second rounding
SHOWN_CHARACTERS = 60  # a problem quotes at most this much of a header's value
REQUESTS_UNIT = "requests"  # the IETF quota unit that counts calls (the default)

WHOLE = re.compile(r"\d{1,15}")
SECONDS = re.compile(r"\d{1,15}(\.\d{1,9})?")


@dataclass(frozen=True)
class QuotaReading:
    """What an answer's headers say of the quota: calls left and seconds until it resets."""

    family: str
    remaining: int
    reset_seconds: float
    limit: int | None = None
    window_seconds: float | None = None
    # the reset was an epoch timestamp, read on our clock (so off by the clocks' skew)
    from_epoch: bool = field(default=False, compare=False)

    @property
    def pace(self) -> float | None:
        """Calls per second that spend what is left exactly by the reset (None: the quota
        resets now, so what is left says nothing about a pace)."""
        if self.reset_seconds <= 0:
            return None
        return self.remaining / self.reset_seconds

    @property
    def described(self) -> str:
        """``40 calls left, reset in 12 s (RateLimit)`` for a log line."""
        return f"{self.remaining} calls left, reset in {self.reset_seconds:g} s ({self.family})"


@dataclass(frozen=True)
class QuotaProblem:
    """Headers that were ignored, and why: the words the run summary shows."""

    family: str
    problem: str

    def __str__(self) -> str:
        return self.problem


Quota = QuotaReading | QuotaProblem | None


class Malformed(ValueError):
    """A header outside the syntax this module reads; its message names the header."""


def shown(value: object) -> str:
    """``value`` quoted for a problem message, cut to ``SHOWN_CHARACTERS``: the message is
    stored, summarised and shown in the view, and an API's header can be any length."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) > SHOWN_CHARACTERS:
        text = text[: SHOWN_CHARACTERS - 1] + "…"
    return repr(text) if isinstance(value, str) else text


def read_quota(headers: Mapping[str, str] | None, now: float) -> Quota:
    """The quota an answer's headers describe (``now``: epoch seconds, for epoch resets).

    None when no family says enough to pace by; a :class:`QuotaProblem` when any
    family present is malformed or contradictory, or two families disagree.
    """
    lowered = {key.lower(): value for key, value in (headers or {}).items()}
    readings: list[QuotaReading] = []
    for family, read in (
        (IETF, _read_ietf),
        (RATELIMIT, _read_ratelimit),
        (X_RATELIMIT, _read_x_ratelimit),
    ):
        try:
            reading = read(lowered, now)
        except Malformed as bad:
            return QuotaProblem(family, str(bad))
        if reading is not None:
            readings.append(reading)
    if not readings:
        return None
    first = readings[0]
    for other in readings[1:]:
        disagreement = _disagreement(first, other)
        if disagreement:
            return QuotaProblem(other.family, disagreement)
    return first


def _disagreement(a: QuotaReading, b: QuotaReading) -> str | None:
    """How two families' readings of one answer contradict each other (None: they agree)."""
    if a.remaining != b.remaining:
        return f"{a.family} says {a.remaining} calls left, {b.family} says {b.remaining}"
    if a.limit is not None and b.limit is not None and a.limit != b.limit:
        return f"{a.family} says a limit of {a.limit}, {b.family} says {b.limit}"
    leeway = CLOCK_SKEW_SECONDS if a.from_epoch != b.from_epoch else RESET_AGREEMENT_SECONDS
    if abs(a.reset_seconds - b.reset_seconds) > leeway:
        return (
            f"{a.family} says the quota resets in {a.reset_seconds:g} s, "
            f"{b.family} in {b.reset_seconds:g} s"
        )
    return None


# --- the two older families: one number per header ---------------------------------------


def _read_ratelimit(headers: Mapping[str, str], now: float) -> QuotaReading | None:
    return _read_numbers(headers, now, RATELIMIT, "RateLimit")


def _read_x_ratelimit(headers: Mapping[str, str], now: float) -> QuotaReading | None:
    return _read_numbers(headers, now, X_RATELIMIT, "X-RateLimit")


def _read_numbers(
    headers: Mapping[str, str], now: float, family: str, prefix: str
) -> QuotaReading | None:
    """``<prefix>-Limit``, ``-Remaining`` and ``-Reset``; a pace needs the last two."""
    names = {part: f"{prefix}-{part}" for part in ("Limit", "Remaining", "Reset")}
    raw = {part: headers.get(name.lower()) for part, name in names.items()}
    if all(value is None for value in raw.values()):
        return None
    limit = None if raw["Limit"] is None else _first_whole(names["Limit"], raw["Limit"])
    remaining = None if raw["Remaining"] is None else _whole(names["Remaining"], raw["Remaining"])
    reset = None if raw["Reset"] is None else _reset(names["Reset"], raw["Reset"], now)
    if limit is not None and remaining is not None and remaining > limit:
        raise Malformed(f"{names['Remaining']} {remaining} is more than {names['Limit']} {limit}")
    if remaining is None or reset is None:
        return None  # a limit alone, or remaining without a reset: nothing to pace by
    epoch = raw["Reset"] is not None and float(raw["Reset"].strip()) > EPOCH_AFTER_SECONDS
    return QuotaReading(family, remaining, reset, limit, from_epoch=epoch)


def _whole(name: str, value: str) -> int:
    text = value.strip()
    if not WHOLE.fullmatch(text):
        raise Malformed(f"{name} {shown(value)} is not a whole number of calls (0 or more)")
    return int(text)


def _first_whole(name: str, value: str) -> int:
    """A limit: a whole number, or (as drafts before the structured fields wrote it) a
    list whose first member is the limit in force, such as ``100, 100;w=60``."""
    first = value.split(",", 1)[0].split(";", 1)[0]
    limit = _whole(name, first)
    if limit == 0:
        raise Malformed(f"{name} {shown(value)} is a limit of no calls at all")
    return limit


def _reset(name: str, value: str, now: float) -> float:
    """Seconds until the reset: delta seconds, or an epoch timestamp when larger than a year."""
    text = value.strip()
    if not SECONDS.fullmatch(text):
        raise Malformed(f"{name} {shown(value)} is not a number of seconds or an epoch timestamp")
    seconds = float(text)
    if seconds <= EPOCH_AFTER_SECONDS:
        return seconds
    ago = now - seconds
    if ago > PAST_TOLERANCE_SECONDS:
        raise Malformed(f"{name} {shown(value)} is an epoch timestamp {ago:,.0f} s in the past")
    return max(0.0, seconds - now)


# --- the IETF structured fields -----------------------------------------------------------


def _read_ietf(headers: Mapping[str, str], now: float) -> QuotaReading | None:
    """``RateLimit`` (what is left) with ``RateLimit-Policy`` (the quotas): the most
    restrictive quota counted in requests that says both ``r`` and ``t``."""
    state = headers.get("ratelimit")
    declared = headers.get("ratelimit-policy")
    if state is None:
        if declared is not None:
            _policies(declared)  # checked all the same: a malformed field is said
        return None
    policies = _policies(declared) if declared is not None else {}
    best: QuotaReading | None = None
    for name, params in parse_sf_list("RateLimit", state):
        remaining = _sf_whole("RateLimit", name, params, "r")
        reset = _sf_whole("RateLimit", name, params, "t")
        quota, window, unit = policies.get(name, (None, None, REQUESTS_UNIT))
        if unit != REQUESTS_UNIT:
            continue  # a quota of bytes or of something else: it does not count calls
        if quota is not None and remaining is not None and remaining > quota:
            raise Malformed(
                f"RateLimit {shown(name)} says r={remaining}, "
                f"more than RateLimit-Policy's q={quota}"
            )
        if remaining is None or reset is None:
            continue
        reading = QuotaReading(IETF, remaining, float(reset), quota, window)
        if best is None or _tighter(reading, best):
            best = reading
    return best


def _tighter(a: QuotaReading, b: QuotaReading) -> bool:
    """Is ``a`` the more restrictive quota (the slower pace; a quota resetting now is not)?"""
    pace_a, pace_b = a.pace, b.pace
    if pace_a is None:
        return False
    return pace_b is None or pace_a < pace_b


def _policies(value: str) -> dict[str, tuple[int | None, float | None, str]]:
    """``RateLimit-Policy``: each policy's quota ``q``, window ``w`` and unit ``qu``."""
    found: dict[str, tuple[int | None, float | None, str]] = {}
    for name, params in parse_sf_list("RateLimit-Policy", value):
        quota = _sf_whole("RateLimit-Policy", name, params, "q")
        if quota == 0:
            raise Malformed(f"RateLimit-Policy {shown(name)} says q=0, a quota of no calls at all")
        window = _sf_whole("RateLimit-Policy", name, params, "w")
        if window == 0:
            raise Malformed(f"RateLimit-Policy {shown(name)} says w=0, a window of no time")
        unit = params.get("qu", REQUESTS_UNIT)
        if not isinstance(unit, str):
            raise Malformed(f"RateLimit-Policy {shown(name)}: qu={shown(unit)} is not a quota unit")
        found[name] = (quota, None if window is None else float(window), unit)
    return found


def _sf_whole(field: str, name: str, params: Mapping[str, object], key: str) -> int | None:
    value = params.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise Malformed(
            f"{field} {shown(name)}: {key}={shown(value)} is not a whole number (0 or more)"
        )
    return value


# --- RFC 9651 structured fields: the List-of-Items subset ----------------------------------

SfBare = int | float | str | bool | bytes
SfItem = tuple[str, dict[str, SfBare]]  # an item's value as text, and its parameters

_TOKEN = re.compile(r"[A-Za-z*][A-Za-z0-9!#$%&'*+\-.^_`|~:/]*")
_KEY = re.compile(r"[a-z*][a-z0-9_\-.*]*")
_NUMBER = re.compile(r"-?\d{1,15}(\.\d{1,3})?")
_BYTES = re.compile(r":[A-Za-z0-9+/=]*:")


def parse_sf_list(field: str, value: str) -> list[SfItem]:
    """An RFC 9651 List of Items with parameters; each item's bare value as text.

    Raises :class:`Malformed` naming ``field`` for anything else (an inner list,
    an unterminated string, trailing characters).
    """
    return _SfParser(field, value).list()


class _SfParser:
    """A cursor over one field value (RFC 9651 section 4.2, the parts this module needs)."""

    def __init__(self, field: str, text: str) -> None:
        self.field = field
        self.text = text.strip(" \t")
        self.at = 0

    def fail(self, why: str) -> Malformed:
        return Malformed(f"{self.field} {shown(self.text)} is not a structured field list: {why}")

    def list(self) -> list[SfItem]:
        items: list[SfItem] = []
        if not self.text:
            return items
        while True:
            items.append(self.item())
            self.skip(" \t")
            if self.at == len(self.text):
                return items
            if self.text[self.at] != ",":
                raise self.fail(f"expected ',' at character {self.at + 1}")
            self.at += 1
            self.skip(" \t")
            if self.at == len(self.text):
                raise self.fail("a trailing ','")

    def item(self) -> SfItem:
        if self.peek() == "(":
            raise self.fail("an inner list")
        bare = self.bare()
        return (bare if isinstance(bare, str) else str(bare), self.params())

    def params(self) -> dict[str, SfBare]:
        found: dict[str, SfBare] = {}
        while self.peek() == ";":
            self.at += 1
            self.skip(" ")
            match = _KEY.match(self.text, self.at)
            if match is None:
                raise self.fail(f"expected a parameter name at character {self.at + 1}")
            self.at = match.end()
            value: SfBare = True
            if self.peek() == "=":
                self.at += 1
                value = self.bare()
            found[match.group()] = value
        return found

    def bare(self) -> SfBare:
        char = self.peek()
        if char == '"':
            return self.string()
        if char == "?":
            return self.boolean()
        if char == ":":
            match = _BYTES.match(self.text, self.at)
            if match is None:
                raise self.fail("an unterminated byte sequence")
            self.at = match.end()
            return match.group().strip(":").encode()
        if char is not None and (char.isdigit() or char == "-"):
            match = _NUMBER.match(self.text, self.at)
            if match is None:
                raise self.fail(f"a bad number at character {self.at + 1}")
            self.at = match.end()
            number = match.group()
            return float(number) if "." in number else int(number)
        match = _TOKEN.match(self.text, self.at)
        if match is None:
            raise self.fail(f"unexpected {shown(char)} at character {self.at + 1}")
        self.at = match.end()
        return match.group()

    def string(self) -> str:
        out: list[str] = []
        self.at += 1
        while self.at < len(self.text):
            char = self.text[self.at]
            self.at += 1
            if char == "\\":
                if self.at == len(self.text) or self.text[self.at] not in '"\\':
                    raise self.fail("a bad escape in a string")
                out.append(self.text[self.at])
                self.at += 1
            elif char == '"':
                return "".join(out)
            elif not (" " <= char <= "~"):
                raise self.fail("a character a string may not hold")
            else:
                out.append(char)
        raise self.fail("an unterminated string")

    def boolean(self) -> bool:
        token = self.text[self.at : self.at + 2]
        if token not in ("?0", "?1"):
            raise self.fail(f"a bad boolean at character {self.at + 1}")
        self.at += 2
        return token == "?1"

    def peek(self) -> str | None:
        return self.text[self.at] if self.at < len(self.text) else None

    def skip(self, chars: str) -> None:
        while self.at < len(self.text) and self.text[self.at] in chars:
            self.at += 1
