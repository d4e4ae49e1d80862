"""Cluster specs: devices (index = device id in a placement) and alpha-beta links.

Loaded from YAML (a path, or the name of a built-in in `simulator/clusters/`), in the
format of DESIGN.md ("Cluster"). Every link is a directed pair with a latency (alpha,
seconds) and a bandwidth (beta^-1, bytes/s); `links.default` covers unlisted pairs.
A link may say `by_sender: true`: the sending device does the copy itself (a CPU's
memcpy, no copy engine), so the copy occupies the sender instead of running beside its
compute (`simulator.engine`, rule 3 as extended there). Default false, DESIGN.md's rule.
A link may also say what reading a copy costs the reader: `read_latency` (seconds per
input an op reads from a copy) and `read_bandwidth` (bytes/s at which it reads the copy's
bytes), added to the op's time (defaults 0 and infinite: free, DESIGN.md's rule). On a
shared host the copy lies in another core's cache, so the op that reads it misses there
(`simulator.engine`, rule 1 as extended there).
A device may name its `host`, its `contention` and its `contention_waiting`: devices of
one host share its caches and memory, so an op slows by `contention` (a fraction) for
each other device of its host running an op when it starts, and by `contention_waiting`
for each one waiting for an input with ops still to run (`simulator.engine`, rule 1 as
extended there; `contention_waiting` defaults to `contention`), or by
`contention_waiting_large` instead for an op whose time alone is `large_from` (seconds)
or more (default: `contention_waiting` for every op). And its `wake_cost`
(seconds) with `wake_after` (seconds): an op that starts after its device has finished
nothing for `wake_after` or longer takes `wake_cost` longer (a worker that waited long
computes slower for a while after; rule 1 as extended there). And its `split_slowdown`
(a fraction) with `split_below` (seconds): an op whose time alone is under `split_below`
takes it x (1 + `split_slowdown` x the share of its host's op time, alone, that the
placement puts on the other devices of the host), all step long (rule 1 as extended there).
Defaults: the device is alone on its host, contention 0, no wake-up cost, no split
slowdown: DESIGN.md's independent devices.
An optional `device_types:` section adds roofline constants for device types the
built-in datasheet table does not know (see `simulator.devices.Roofline`).
Cluster files are data from other people: read with a size cap, unknown keys refused
(a misspelt key would silently do nothing), and YAML aliases refused (a dozen nested
ones expand to gigabytes: the "billion laughs"); no cluster needs them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import yaml

from simulator.devices import Roofline
from simulator.errors import ClusterError
from simulator.files import InputTooLarge, NoAliasLoader, YamlRefused, read_limited
from simulator.graph import BoolArray, FloatArray, IntArray, is_amount, short_repr


class _Loader(NoAliasLoader):
    """NoAliasLoader that also reads `16e9` as a float (YAML 1.1 wants `16.0e+9`)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)(?:[eE][-+]?[0-9]+)?$"
        r"|^[-+]?\.(?:inf|Inf|INF)$|^\.(?:nan|NaN|NAN)$"
    ),
    list("-+0123456789."),
)


def _too_long(node: yaml.ScalarNode) -> YamlRefused:
    """Python refuses to convert an integer of more than 4300 digits (a ValueError that
    would end a command in a traceback); no number here needs more than a float's 309."""
    return YamlRefused(
        f"an integer of {len(str(node.value))} digits is too long to read; every number "
        "must fit a float (below ~1.8e308)",
        node.start_mark,
    )


def _float_or_int(loader: _Loader, node: yaml.ScalarNode) -> float | int:
    text = str(loader.construct_scalar(node)).replace("_", "")
    if re.fullmatch(r"[-+]?[0-9]+", text):
        try:
            return int(text)
        except ValueError:
            raise _too_long(node) from None
    return float(loader.construct_yaml_float(node))


def _int(loader: _Loader, node: yaml.ScalarNode) -> int:
    try:
        value: int = loader.construct_yaml_int(node)
    except ValueError:
        raise _too_long(node) from None
    try:  # hex, octal and binary are read without a digit limit, but not printed so
        str(value)
    except ValueError:
        raise _too_long(node) from None
    return value


_Loader.add_constructor("tag:yaml.org,2002:float", _float_or_int)
_Loader.add_constructor("tag:yaml.org,2002:int", _int)


@dataclass(frozen=True)
class Device:
    name: str
    type: str
    memory: float  # bytes
    host: str = ""  # devices with the same host contend; "" = alone on its own
    contention: float = 0.0  # op slowdown per other device of the host running (fraction)
    contention_waiting: float | None = None  # ... per other one waiting; None: `contention`
    wake_cost: float = 0.0  # seconds an op adds after its device idled `wake_after` or more
    wake_after: float = 0.0  # seconds
    split_slowdown: float = 0.0  # slowdown of its small ops per unit of its host's op time
    split_below: float = 0.0  # ... on its host-mates; small: under these seconds alone
    contention_waiting_large: float | None = None  # ... for ops of `large_from` or more
    large_from: float = float("inf")  # seconds alone


@dataclass(frozen=True, eq=False)
class Cluster:
    """Devices, directed link matrices, and any cluster-defined device types."""

    name: str
    devices: tuple[Device, ...]
    latency: FloatArray  # [D, D] seconds; diagonal 0 (same device: no copy)
    bandwidth: FloatArray  # [D, D] bytes/s; diagonal inf
    by_sender: BoolArray  # [D, D] the sending device does the copy itself; diagonal False
    read_latency: FloatArray  # [D, D] seconds an op pays per input read from a copy
    read_bandwidth: FloatArray  # [D, D] bytes/s at which it reads them; inf: free
    device_types: Mapping[str, Roofline]
    source: str

    @staticmethod
    def builtin_names() -> list[str]:
        folder = resources.files("simulator") / "clusters"
        return sorted(
            p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml")
        )

    @classmethod
    def load(cls, spec: str | os.PathLike[str]) -> Cluster:
        """Load a cluster from a YAML path or a built-in name such as `p100x4`."""
        text = str(spec)
        if Path(text).is_file():
            source = text
            try:
                raw = read_limited(Path(text)).decode("utf-8")
            except InputTooLarge as e:  # names the path, the limit and how to raise it
                raise ClusterError(str(e)) from None
            except (OSError, ValueError) as e:  # ValueError: bad UTF-8 or gzip stream
                raise ClusterError(f"cannot read cluster file {text}: {e}") from None
        elif text in cls.builtin_names():
            source = f"builtin:{text}"
            raw = (resources.files("simulator") / "clusters" / f"{text}.yaml").read_text("utf-8")
        elif text.endswith((".yaml", ".yml")) or os.sep in text:
            raise ClusterError(f"cluster file not found: {text}")
        else:
            raise ClusterError(
                f"unknown cluster {text!r}; built-ins: {', '.join(cls.builtin_names())} "
                "(or give a path to a cluster YAML file)"
            )
        try:
            doc = yaml.load(raw, Loader=_Loader)
        except YamlRefused as e:
            raise ClusterError(f"{source}, line {e.line}: {e.message}") from None
        except RecursionError:
            raise ClusterError(
                f"{source}: YAML nested too deeply to read (over ~1000 levels; a cluster file "
                "needs only a few)"
            ) from None
        except yaml.YAMLError as e:
            # One line: PyYAML's message spans several (CLI errors are one line).
            raise ClusterError(f"{source}: not valid YAML ({' '.join(str(e).split())})") from None
        try:
            return cls.from_dict(doc, source=source)
        except ClusterError as e:
            raise ClusterError(f"{source}: {e}") from None

    @classmethod
    def from_dict(cls, doc: Any, source: str = "dict") -> Cluster:
        if not isinstance(doc, Mapping):
            raise ClusterError("a cluster spec must be a mapping with 'devices' and 'links'")
        _known_keys(doc, _TOP_KEYS, "the cluster")
        devices = _parse_devices(doc.get("devices"))
        index = {d.name: i for i, d in enumerate(devices)}
        links = _parse_links(doc.get("links"), index)
        raw_types = doc.get("device_types") or {}
        if not isinstance(raw_types, Mapping):
            raise ClusterError("'device_types' must map a type name to roofline constants")
        types: dict[str, Roofline] = {}
        for key, value in raw_types.items():
            name = _name(key, "'device_types' key")
            try:
                types[name] = Roofline.from_dict(name, value)
            except OverflowError:  # float() of an int beyond a float's range
                raise ClusterError(
                    f"device type {name!r}: a number is too large for a float (below ~1.8e308)"
                ) from None
        for array in links:
            array.setflags(write=False)
        return cls(
            name=_name(doc.get("name", "cluster"), "cluster 'name'"),
            devices=devices,
            latency=links.latency,
            bandwidth=links.bandwidth,
            by_sender=links.by_sender,
            read_latency=links.read_latency,
            read_bandwidth=links.read_bandwidth,
            device_types=types,
            source=source,
        )

    @property
    def num_devices(self) -> int:
        return len(self.devices)

    @property
    def device_names(self) -> list[str]:
        return [d.name for d in self.devices]

    @property
    def memory(self) -> FloatArray:
        return np.array([d.memory for d in self.devices], dtype=np.float64)

    @cached_property
    def host_index(self) -> IntArray:
        """[D] which host each device is on (devices without a `host` are alone).
        Cached, like `contention`: every `simulate` call passes both to the kernel."""
        names = [d.host or f"\0{i}" for i, d in enumerate(self.devices)]
        first = {name: i for i, name in reversed(list(enumerate(names)))}
        index = np.array([first[name] for name in names], dtype=np.int64)
        index.setflags(write=False)
        return index

    @cached_property
    def contention(self) -> FloatArray:
        """[D, 8] op slowdown per other device of the host running an op or copy (column
        0) and per other one waiting for an input with ops still to run (column 1); the
        wake-up cost in seconds (column 2) and the idle time after which it applies (3);
        the split slowdown (4) and the time alone under which an op pays it (5); the
        slowdown per waiting one of an op whose time alone is column 7 or more (6)."""
        rates = []
        for d in self.devices:
            waiting = d.contention if d.contention_waiting is None else d.contention_waiting
            large = waiting if d.contention_waiting_large is None else d.contention_waiting_large
            rates.append((d.contention, waiting, d.wake_cost, d.wake_after, d.split_slowdown,
                          d.split_below, large, d.large_from))  # fmt: skip
        contention = np.array(rates, dtype=np.float64).reshape(-1, 8)
        contention.setflags(write=False)
        return contention

    def mirror(self) -> IntArray | None:
        """A relabelling of the devices under which the cluster is the same (device i ->
        `mirror[i]`): interchangeable devices (same type, memory, contention, wake-up cost
        and split slowdown) in reverse order, if that keeps every link and which devices
        share a host as they were; None if there is no such relabelling.

        A placement and its mirror image cost the same in the simulator, but on a real
        machine one core can run slower than its twin for minutes; measuring both and
        pooling cancels that (`simulator.hardware.fidelity`)."""
        groups: dict[tuple[Any, ...], list[int]] = {}
        for i, d in enumerate(self.devices):
            key = (d.type, d.memory, d.contention, d.contention_waiting, d.wake_cost,
                   d.wake_after, d.split_slowdown, d.split_below, d.contention_waiting_large,
                   d.large_from)  # fmt: skip
            groups.setdefault(key, []).append(i)
        perm = np.arange(self.num_devices)
        for members in groups.values():
            perm[members] = members[::-1]
        if (perm == np.arange(self.num_devices)).all():
            return None
        hosts = self.host_index
        shared_host = hosts[:, None] == hosts[None, :]
        same = all(
            np.array_equal(m[np.ix_(perm, perm)], m)
            for m in (
                self.latency,
                self.bandwidth,
                self.by_sender,
                self.read_latency,
                self.read_bandwidth,
                shared_host,
            )
        )
        return perm if same else None

    def index(self, device_name: str) -> int:
        for i, d in enumerate(self.devices):
            if d.name == device_name:
                return i
        raise ClusterError(
            f"no device named {device_name!r} in cluster {self.name!r}; "
            f"devices: {', '.join(self.device_names)}"
        )

    def transfer_time(self, nbytes: float, src: int, dst: int) -> float:
        """Alpha-beta copy time of `nbytes` from device `src` to `dst` (0 if equal)."""
        if src == dst:
            return 0.0
        return float(self.latency[src, dst] + nbytes / self.bandwidth[src, dst])


def _name(value: Any, what: str) -> str:
    """A name (of a device, type, host, link end or the cluster) as text. YAML reads
    `name: 0` as a number, kept as its text as always; a list, mapping or null is refused
    rather than turned into "['a']" (and an unhashable one would crash a lookup)."""
    if isinstance(value, str | int | float):
        return str(value)
    raise ClusterError(f"{what} must be a single name written as a string, got {short_repr(value)}")


def _positive(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ClusterError(f"{what} must be a number, got {short_repr(value)}")
    if not (is_amount(value) and value > 0):
        huge = "; numbers must be finite, below ~1.8e308" if value > 0 else ""
        raise ClusterError(f"{what} must be positive, got {short_repr(value)}{huge}")
    return float(value)


# what a contention fraction means, for its error message
_PER_MATE = "0.1: its ops run 10%% longer per other device of its host %s"


def _fraction(value: Any, name: str, key: str, example: str) -> float:
    if not is_amount(value):
        raise ClusterError(
            f"device {name!r} {key} must be a non-negative fraction ({example}), got "
            f"{short_repr(value)}"
        )
    return float(value)


def _seconds(value: Any, name: str, key: str) -> float:
    if not is_amount(value):
        raise ClusterError(
            f"device {name!r} {key} must be non-negative seconds, got {short_repr(value)}"
        )
    return float(value)


def _wake(d: Mapping[str, Any], name: str) -> tuple[float, float]:
    """A device's (wake_cost, wake_after), seconds; a cost needs the idle time it follows."""
    cost = _seconds(d.get("wake_cost", 0.0), name, "wake_cost")
    after = _seconds(d.get("wake_after", 0.0), name, "wake_after")
    if cost > 0 and after == 0:
        raise ClusterError(
            f"device {name!r} has a wake_cost but no wake_after: say after how many seconds "
            "without work an op pays it (e.g. wake_after: 0.3e-3)"
        )
    return cost, after


def _split(d: Mapping[str, Any], name: str) -> tuple[float, float]:
    """A device's (split_slowdown, split_below); a slowdown needs the op size it applies to."""
    slowdown = _fraction(d.get("split_slowdown", 0.0), name, "split_slowdown",
                         "0.1: its small ops run 10% longer per unit of its host's op time "
                         "on its host-mates")  # fmt: skip
    below = _seconds(d.get("split_below", 0.0), name, "split_below")
    if slowdown > 0 and below == 0:
        raise ClusterError(
            f"device {name!r} has a split_slowdown but no split_below: say under how many "
            "seconds alone an op pays it (e.g. split_below: 10e-6)"
        )
    return slowdown, below


def _large(d: Mapping[str, Any], name: str) -> tuple[float | None, float]:
    """A device's (contention_waiting_large, large_from); the rate needs the op size it
    applies from."""
    rate = d.get("contention_waiting_large")
    if rate is None:
        return None, float("inf")
    rate = _fraction(rate, name, "contention_waiting_large",
                     _PER_MATE % "waiting for an input, for its large ops")  # fmt: skip
    if "large_from" not in d:
        raise ClusterError(
            f"device {name!r} has a contention_waiting_large but no large_from: say from "
            "how many seconds alone an op pays it (e.g. large_from: 100e-6)"
        )
    return rate, _seconds(d["large_from"], name, "large_from")


# The keys each part of a cluster file may have: a misspelt key would otherwise be
# ignored without a word, and the simulator would price the cluster without it.
_TOP_KEYS = frozenset({"name", "devices", "links", "device_types"})
_DEVICE_KEYS = frozenset({"name", "type", "memory", "host", "contention", "contention_waiting",
                          "contention_waiting_large", "large_from", "wake_cost", "wake_after",
                          "split_slowdown", "split_below"})  # fmt: skip
_LINKS_KEYS = frozenset({"default", "pairs"})
_LINK_KEYS = frozenset({"bandwidth", "latency", "by_sender", "read_latency", "read_bandwidth"})
_PAIR_KEYS = _LINK_KEYS | {"src", "dst"}
# a size or time key that only says which ops pay its rate: alone it does nothing
_NEEDS_RATE = {"large_from": "contention_waiting_large", "split_below": "split_slowdown",
               "wake_after": "wake_cost"}  # fmt: skip


def _known_keys(d: Mapping[Any, Any], allowed: frozenset[str], what: str) -> None:
    unknown = sorted(map(str, d.keys() - allowed))
    if unknown:
        raise ClusterError(
            f"{what} has unknown key(s) {unknown}; allowed: {sorted(allowed)} (DESIGN.md, "
            "'Cluster')"
        )


def _parse_devices(raw: Any) -> tuple[Device, ...]:
    if not isinstance(raw, list) or not raw:
        raise ClusterError("'devices' must be a non-empty list of {name, type, memory}")
    devices: list[Device] = []
    for i, d in enumerate(raw):
        if isinstance(d, Mapping):  # first: a misspelt required key is named as such
            named = isinstance(d.get("name"), str)
            _known_keys(d, _DEVICE_KEYS, f"device {d['name']!r}" if named else f"devices[{i}]")
        if not isinstance(d, Mapping) or not {"name", "type", "memory"} <= d.keys():
            raise ClusterError(f"devices[{i}] must have 'name', 'type' and 'memory'")
        name = _name(d["name"], f"devices[{i}]: 'name'")
        for key, rate in _NEEDS_RATE.items():
            if key in d and rate not in d:
                raise ClusterError(
                    f"device {name!r} has a {key} but no {rate}: {key} only says which ops "
                    f"pay {rate}; add {rate} or remove {key}"
                )
        if any(x.name == name for x in devices):
            raise ClusterError(f"duplicate device name {name!r}; device names must be unique")
        memory = _positive(d["memory"], f"device {name!r} memory")
        contention = _fraction(d.get("contention", 0.0), name, "contention", _PER_MATE % "running")
        waiting = d.get("contention_waiting")
        if waiting is not None:
            waiting = _fraction(
                waiting, name, "contention_waiting", _PER_MATE % "waiting for an input"
            )
        # `host: 0` is host "0" (as `name: 0` is), not "no host": contention rides on it
        host = "" if d.get("host") is None else _name(d["host"], f"device {name!r}: 'host'")
        dev_type = _name(d["type"], f"device {name!r}: 'type'")
        wake_cost, wake_after = _wake(d, name)
        split, below = _split(d, name)
        large, large_from = _large(d, name)
        devices.append(Device(name, dev_type, memory, host, contention, waiting, wake_cost,
                              wake_after, split, below, large, large_from))  # fmt: skip
    return tuple(devices)


class Links(NamedTuple):
    """The link matrices of a cluster ([D, D] each, by source then destination device)."""

    latency: FloatArray
    bandwidth: FloatArray
    by_sender: BoolArray
    read_latency: FloatArray
    read_bandwidth: FloatArray


def _parse_links(raw: Any, index: Mapping[str, int]) -> Links:
    n = len(index)
    latency = np.full((n, n), np.nan)
    bandwidth = np.full((n, n), np.nan)
    by_sender = np.zeros((n, n), dtype=bool)
    read_latency = np.zeros((n, n))
    read_bandwidth = np.full((n, n), np.inf)
    raw = raw or {}
    if not isinstance(raw, Mapping):
        raise ClusterError("'links' must be a mapping with 'default' and/or 'pairs'")
    _known_keys(raw, _LINKS_KEYS, "'links'")

    def parse(
        link: Any, what: str, allowed: frozenset[str] = _LINK_KEYS
    ) -> tuple[float, float, bool, float, float]:
        if isinstance(link, Mapping):  # first: a misspelt required key is named as such
            _known_keys(link, allowed, what)
        if not isinstance(link, Mapping) or not {"bandwidth", "latency"} <= link.keys():
            raise ClusterError(f"{what} must have 'bandwidth' (bytes/s) and 'latency' (s)")
        sender = link.get("by_sender", False)
        if not isinstance(sender, bool):
            raise ClusterError(f"{what} by_sender must be true or false, got {short_repr(sender)}")
        lat = link["latency"]
        if not is_amount(lat):
            raise ClusterError(
                f"{what} latency must be a non-negative number, got {short_repr(lat)}"
            )
        read_lat = link.get("read_latency", 0.0)
        if not is_amount(read_lat):
            raise ClusterError(
                f"{what} read_latency must be non-negative seconds, got {short_repr(read_lat)}"
            )
        read_bw = link.get("read_bandwidth", np.inf)
        if read_bw != np.inf:
            read_bw = _positive(read_bw, f"{what} read_bandwidth")
        bw = _positive(link["bandwidth"], f"{what} bandwidth")
        return float(lat), bw, sender, float(read_lat), float(read_bw)

    if raw.get("default") is not None:
        lat, bw, sender, read_lat, read_bw = parse(raw["default"], "links.default")
        latency[:], bandwidth[:], by_sender[:] = lat, bw, sender
        read_latency[:], read_bandwidth[:] = read_lat, read_bw
    pairs = raw.get("pairs")
    if pairs is not None and not isinstance(pairs, list):
        raise ClusterError(f"links.pairs must be a list of links, got {short_repr(pairs)}")
    for k, pair in enumerate(pairs or []):
        if not isinstance(pair, Mapping) or not {"src", "dst"} <= pair.keys():
            raise ClusterError(f"links.pairs[{k}] must have 'src' and 'dst' device names")
        link = f"link {short_repr(pair['src'])} -> {short_repr(pair['dst'])}"
        src, dst = (
            _name(pair[key], f"{link} (links.pairs[{k}]): {key!r}") for key in ("src", "dst")
        )
        for end in (src, dst):
            if end not in index:
                raise ClusterError(
                    f"link {src!r} -> {dst!r} names unknown device {end!r}; "
                    f"devices: {', '.join(index)}"
                )
        s, d = index[src], index[dst]
        if s == d:
            raise ClusterError(f"link {src!r} -> {dst!r} joins a device to itself")
        link_at = (s, d)
        (latency[link_at], bandwidth[link_at], by_sender[link_at], read_latency[link_at],
         read_bandwidth[link_at]) = parse(pair, f"link {src!r} -> {dst!r}", _PAIR_KEYS)  # fmt: skip
    np.fill_diagonal(latency, 0.0)
    np.fill_diagonal(bandwidth, np.inf)
    np.fill_diagonal(by_sender, False)
    np.fill_diagonal(read_latency, 0.0)
    np.fill_diagonal(read_bandwidth, np.inf)
    missing = np.argwhere(np.isnan(latency))
    if len(missing):
        names = list(index)
        s, d = missing[0]
        raise ClusterError(
            f"no link from {names[s]!r} to {names[d]!r}; add links.default or a pair for it"
        )
    return Links(latency, bandwidth, by_sender, read_latency, read_bandwidth)
