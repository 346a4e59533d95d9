"""The node types of the params.yaml schema (esnfed_stages.params.schema): each checks one value
at a dotted key and raises :class:`Invalid` with a one-line message naming the key, and lists the
leaf keys it declares (for the drift test of declared_keys)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from esnfed_core.errors import ConfigError
from esnfed_core.quote import quote
from esnfed_core.search import parse_dimension
from esnfed_core.validation import Bound, ParameterError, check_param
from esnfed_stages.data import _datasets


class Invalid(ConfigError):
    """One schema violation; the message starts with the dotted key."""


class Node:
    def check(self, key: str, value: Any) -> None:
        raise NotImplementedError

    def keys(self, key: str) -> set[str]:
        """Dotted leaf keys this node declares (for the drift test)."""
        return {key}


@dataclass(frozen=True)
class Num(Node):
    """A finite number (an integer if ``integer``) in a range; validation.check_param's rules."""

    integer: bool = False
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    nonzero: bool = False  # joblib's n_jobs: any integer but 0

    @classmethod
    def of(cls, bound: Bound) -> "Num":
        """The range of a core value type's parameter (defined there, once)."""
        return cls(bound.integer, bound.low, bound.high, bound.low_open, bound.high_open)

    def check(self, key: str, value: Any) -> None:
        try:
            check_param(key, value, integer=self.integer, low=self.low, high=self.high,
                        low_open=self.low_open, high_open=self.high_open)
        except ParameterError as exc:
            raise Invalid(str(exc)) from None
        if self.nonzero and value == 0:
            raise Invalid(f"{key}: must not be 0, got 0")


@dataclass(frozen=True)
class Choice(Node):
    values: tuple

    def check(self, key: str, value: Any) -> None:
        # bool is an int in Python: true must not pass for 1
        if isinstance(value, bool) or value not in self.values:
            raise Invalid(f"{key}: expected one of {', '.join(map(str, self.values))}, got {quote(value)}")


class Bool(Node):
    def check(self, key: str, value: Any) -> None:
        if not isinstance(value, bool):
            raise Invalid(f"{key}: expected true or false, got {quote(value)}")


class Text(Node):
    def check(self, key: str, value: Any) -> None:
        if not isinstance(value, str) or not value:
            raise Invalid(f"{key}: expected a non-empty string, got {quote(value)}")


@dataclass(frozen=True)
class ListOf(Node):
    """A list of ``item``s, without repeats; non-empty unless ``empty``."""

    item: Node
    empty: bool = False

    def check(self, key: str, value: Any) -> None:
        if not isinstance(value, list) or (not value and not self.empty):
            raise Invalid(f"{key}: expected a {'' if self.empty else 'non-empty '}list, got {quote(value)}")
        for v in value:
            self.item.check(key, v)
        hashable = [v for v in value if not isinstance(v, (list, dict))]
        if len(set(hashable)) != len(hashable):
            raise Invalid(f"{key}: lists a value twice: {quote(value)}")


@dataclass(frozen=True)
class Nullable(Node):
    inner: Node

    def check(self, key: str, value: Any) -> None:
        if value is not None:
            self.inner.check(key, value)


@dataclass(frozen=True)
class Fields(Node):
    """A mapping with the ``required`` and ``optional`` keys only."""

    required: Mapping[str, Node] = field(default_factory=dict)
    optional: Mapping[str, Node] = field(default_factory=dict)

    def check(self, key: str, value: Any) -> None:
        where = f"{key}: " if key else ""
        if not isinstance(value, Mapping):
            raise Invalid(f"{where}expected a mapping, got {quote(value)}")
        allowed = {**self.required, **self.optional}
        for k in value:
            if str(k) not in allowed:
                expected = ", ".join(allowed) or "no keys"
                raise Invalid(f"{_join(key, k)}: unknown key (expected {expected})")
        for k in self.required:
            if k not in value:
                raise Invalid(f"{_join(key, k)}: missing")
        for k, node in allowed.items():
            if k in value:
                node.check(_join(key, k), value[k])

    def keys(self, key: str) -> set[str]:
        out: set[str] = set()
        for k, node in {**self.required, **self.optional}.items():
            out |= node.keys(_join(key, k))
        return out or {key}


@dataclass(frozen=True)
class Entries(Node):
    """A non-empty mapping of free names (e.g. budget names) to ``value`` nodes."""

    value: Node

    def check(self, key: str, value: Any) -> None:
        if not isinstance(value, Mapping) or not value:
            raise Invalid(f"{key}: expected a non-empty mapping of name -> settings, got {quote(value)}")
        for name, v in value.items():
            self.value.check(f"{key}.{name}", v)

    def keys(self, key: str) -> set[str]:
        return self.value.keys(f"{key}.*")


@dataclass(frozen=True)
class Space(Node):
    """A search space (esnfed_core.search): each hyperparameter's every possible value must lie in
    its domain; integer hyperparameters need a list or an integer grid."""

    domains: Mapping[str, Num]
    # hyperparameters a space may search but need not (a sparse reservoir's connectivity): absent
    # from the repository's params.yaml, so not in keys()
    optional: Mapping[str, Num] = field(default_factory=dict)

    def check(self, key: str, value: Any) -> None:
        Fields(required={n: _ANY for n in self.domains}, optional={n: _ANY for n in self.optional}).check(key, value)
        for name, domain in {**self.domains, **self.optional}.items():
            if name not in value:
                continue
            where = f"{key}.{name}"
            try:
                dim = parse_dimension(name, value[name], key, lambda v: domain.check(where, v))
            except ConfigError as exc:
                raise Invalid(str(exc)) from None
            if dim.values is not None:
                for v in dim.values:
                    domain.check(where, v)
            elif domain.integer:
                raise Invalid(f"{where}: must be a list or a {{low, high, step}} grid of integers, "
                              f"got a continuous range {quote(value[name])}")
            else:  # uniform on [low, high): high may equal an inclusive upper bound
                domain.check(f"{where}.low", dim.low)
                Num(high=domain.high).check(f"{where}.high", dim.high)

    def keys(self, key: str) -> set[str]:
        return {f"{key}.{n}" for n in self.domains}


@dataclass(frozen=True)
class Delegate(Node):
    """A section whose checks live elsewhere: ``fn(key, value)`` raises ConfigError or
    ParameterError naming the key."""

    fn: Callable[[str, Any], None]
    declared: Sequence[str] = ()  # keys of the repository's params.yaml this section may hold

    def check(self, key: str, value: Any) -> None:
        try:
            self.fn(key, value)
        except (ConfigError, ParameterError) as exc:
            raise Invalid(_strip(str(exc))) from None

    def keys(self, key: str) -> set[str]:
        return {f"{key}.{k}" for k in self.declared} or {key}


@dataclass(frozen=True)
class OptIn(Delegate):
    """A Delegate for an opt-in key that the repository's params.yaml leaves out (its comments show
    it): no key of the file's drift test (declared_keys)."""

    def keys(self, key: str) -> set[str]:
        return set()


@dataclass(frozen=True)
class Named(Node):
    """A mapping of fixed keys (``known``; those in ``required`` must be present) and of any other
    key, a user dataset's name, checked by ``other(name)``. ``examples``: the user
    datasets of the repository's params.yaml (for the drift test of declared_keys)."""

    known: Mapping[str, Node]
    other: Callable[[str], Node]
    required: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()

    def check(self, key: str, value: Any) -> None:
        if not isinstance(value, Mapping):
            raise Invalid(f"{key}: expected a mapping, got {quote(value)}")
        for k in self.required:
            if k not in value:
                raise Invalid(f"{_join(key, k)}: missing")
        for k, v in value.items():
            if str(k) in self.known:
                self.known[str(k)].check(_join(key, k), v)
            else:
                Delegate(_datasets.check_own_name).check(_join(key, k), k)  # one rule with `esnfed import`
                self.other(str(k)).check(_join(key, k), v)

    def keys(self, key: str) -> set[str]:
        out: set[str] = set()
        for k, node in self.known.items():
            out |= node.keys(_join(key, k))
        for name in self.examples:
            out |= self.other(name).keys(_join(key, name))
        return out


class _Any(Node):
    def check(self, key: str, value: Any) -> None:
        return None


_ANY = _Any()


def _join(key: str, k: Any) -> str:
    return f"{key}.{k}" if key else str(k)


def _strip(message: str) -> str:
    """Messages of the delegated checks without their own "params.yaml: " prefix."""
    return message.split("params.yaml: ", 1)[1] if message.startswith("params.yaml: ") else message
