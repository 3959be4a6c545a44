"""Boards in a labgrid farm: the ``labgrid`` transport kind (the only module that imports labgrid).

A device of kind ``labgrid`` names a coordinator (``HOST:PORT``) and either one place
(``labgrid_place``) or tags (``labgrid_tags``: any free place that has them). Opening its transport
acquires the place through labgrid's own client API (``labgrid.remote.client``: a ``ClientSession``
talking gRPC to the coordinator), waiting at most ``wait`` seconds while someone else holds it (a
message names the holder), reads the SSH address, port and user from the place's ``NetworkService``
resource, and runs the ordinary SSH transport. Closing it releases the place, on every exit path:
success, error and Ctrl-C (the ``cancel`` event, or KeyboardInterrupt in this thread).

Tags go through a labgrid reservation, so the coordinator hands each waiting run a different free
place: several devices with the same tags (a fleet run) spread over the free boards.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from edgeopt.deps import require
from edgeopt.errors import RemoteError, UsageError, did_you_mean

from .inventory import Device, TransportKind
from .transport import RunResult, StreamCallback, Transport

POLL_S = 0.5
CHANNEL_OPTIONS = [  # labgrid's own client keepalive settings (labgrid.remote.client.ClientSession)
    ("grpc.keepalive_time_ms", 7500),
    ("grpc.keepalive_timeout_ms", 10000),
    ("grpc.http2.ping_timeout_ms", 10000),
    ("grpc.http2.max_pings_without_data", 0),
]
DEFAULT_WAIT_S = 300.0


def _labgrid():
    require("labgrid", purpose="devices in a labgrid board farm")
    from labgrid.remote import client
    from labgrid.remote.common import Reservation, ReservationState
    from labgrid.remote.generated import labgrid_coordinator_pb2 as pb2

    return client, pb2, Reservation, ReservationState


@contextmanager
def coordinator_session(address: str) -> Iterator[tuple]:
    """(session, loop): a labgrid ClientSession on its own event loop (one per thread), closed after."""
    client, *_ = _labgrid()
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)  # grpc.aio binds its channel to the thread's current loop
    session = None
    try:
        try:
            session = _start_session(client, address, loop)
        except Exception as err:  # noqa: BLE001 - grpc/labgrid errors: one line naming the coordinator
            raise RemoteError(f"cannot reach the labgrid coordinator at {address}: {type(err).__name__}: {err}",
                              "is labgrid-coordinator running there? check the device's coordinator (HOST:PORT)") from err
        yield session, loop
    finally:
        if session is not None:
            try:
                loop.run_until_complete(session.stop())
                loop.run_until_complete(session.close())
            except Exception:  # noqa: BLE001, S110 - closing a session that failed is best effort
                pass
        loop.close()
        asyncio.set_event_loop(None)


def _start_session(client, address: str, loop):
    """``client.start_session`` with a channel of its own: grpc shares one connection between channels to
    the same target, and the coordinator tells clients apart by their connection, so two places
    acquired at once from one process (a fleet run) would collide."""
    import grpc
    from labgrid.remote.generated import labgrid_coordinator_pb2_grpc
    from labgrid.util.proxy import proxymanager

    session = client.ClientSession(proxymanager.get_grpc_address(address, default_port=20408), loop)
    shared = session.channel
    session.channel = grpc.aio.insecure_channel(
        target=session.address, options=[*CHANNEL_OPTIONS, ("grpc.use_local_subchannel_pool", 1)])
    session.stub = labgrid_coordinator_pb2_grpc.CoordinatorStub(session.channel)
    loop.run_until_complete(shared.close())  # never connected: channels connect on first use
    loop.run_until_complete(session.start())
    return session


def _holder(place) -> str:
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(place.changed)) if place.changed else None
    return f"{place.acquired}" + (f" since {since}" if since else "")


def _pump(loop, session, seconds: float) -> None:
    """Let the session's message pump run (place updates arrive), then sync."""
    loop.run_until_complete(asyncio.sleep(seconds))
    loop.run_until_complete(session.sync_with_coordinator())


class Lease:
    """A place acquired for this process (and its reservation, for tags); :meth:`release` frees both."""

    def __init__(self, address: str, place: str, token: str | None, ssh: dict):
        self.address, self.place, self.token, self.ssh = address, place, token, ssh
        self.released = False

    def describe(self) -> dict:
        return {"place": self.place, "coordinator": self.address, "ssh": f"{self.ssh.get('host')}:{self.ssh.get('port')}",
                "reserved_by_tags": self.token is not None}

    def release(self) -> None:
        if self.released:
            return
        _, pb2, *_ = _labgrid()
        try:
            with coordinator_session(self.address) as (session, loop):
                try:
                    loop.run_until_complete(session.stub.ReleasePlace(pb2.ReleasePlaceRequest(placename=self.place)))
                finally:
                    if self.token:
                        _cancel_reservation(session, loop, self.token)
        except Exception as err:  # noqa: BLE001 - grpc or a gone coordinator: say how to free the board
            why = err.message if isinstance(err, RemoteError) else f"{type(err).__name__}: {err}"
            raise RemoteError(f"could not release labgrid place '{self.place}': {why}",
                              f"release it with: labgrid-client -x {self.address} -p {self.place} release") from err
        self.released = True


def _cancel_reservation(session, loop, token: str) -> None:
    _, pb2, *_ = _labgrid()
    try:
        loop.run_until_complete(session.stub.CancelReservation(pb2.CancelReservationRequest(token=token)))
    except Exception:  # noqa: BLE001, S110 - already gone (expired or acquired and dropped)
        pass


def _network_service(session, place, device: Device) -> dict:
    """address/port/username of the place's NetworkService resource."""
    for (_, cls), resource in session.get_target_resources(place).items():
        if cls == "NetworkService":
            p = resource.params
            return {"host": p["address"], "port": int(p.get("port") or 22), "user": p.get("username") or device.user}
    raise RemoteError(f"{device.name}: labgrid place '{place.name}' has no NetworkService resource",
                      "export one for the board (address, port, username) and add-match it to the place")


def acquire(device: Device, *, wait: float | None = None, notify: Callable[[str], None] | None = None,
            cancel: threading.Event | None = None) -> Lease:
    """Acquire the device's place (or, by tags, any free matching place), waiting at most ``wait`` s."""
    _, pb2, Reservation, ReservationState = _labgrid()
    wait = DEFAULT_WAIT_S if wait is None else wait
    say = notify or (lambda m: None)
    deadline = time.monotonic() + wait
    with coordinator_session(device.coordinator) as (session, loop):
        token = None
        try:
            if device.labgrid_tags:
                name, token = _reserve(device, session, loop, pb2, Reservation, ReservationState, deadline, wait,
                                       say, cancel)
            else:
                name = _known_place(device, session)
            last = None
            while True:
                place = session.places[name]
                if not place.acquired:
                    try:
                        loop.run_until_complete(session.stub.AcquirePlace(pb2.AcquirePlaceRequest(placename=name)))
                        loop.run_until_complete(session.sync_with_coordinator())
                        break
                    except Exception as err:  # noqa: BLE001 - grpc: taken just before us; wait below
                        if "already acquired" not in str(err) and "was not reserved for" not in str(err):
                            why = err.details() if hasattr(err, "details") else str(err)
                            raise RemoteError(f"{device.name}: labgrid refused to acquire place '{name}': {why}") from err
                        _pump(loop, session, 0.05)
                        place = session.places[name]
                holder = _holder(place) if place.acquired else "a reservation of someone else"
                if holder != last:
                    say(f"{device.name}: labgrid place '{name}' is busy: held by {holder}; "
                        f"waiting up to {wait:g} s for it (--wait SECONDS)")
                    last = holder
                _check_wait(device, f"labgrid place '{name}' is held by {holder}", deadline, wait, cancel)
                _pump(loop, session, POLL_S)
            lease = Lease(device.coordinator, name, token, {})
        except BaseException:
            if token:
                _cancel_reservation(session, loop, token)
            raise
        try:
            lease.ssh = _network_service(session, session.places[name], device)
        except BaseException:
            lease.release()
            raise
    return lease


def _known_place(device: Device, session) -> str:
    name = device.labgrid_place
    if name not in session.places:
        hint = did_you_mean(name, list(session.places)) or (
            f"places there: {', '.join(sorted(session.places)) or 'none'}")
        raise UsageError(f"{device.name}: the labgrid coordinator {device.coordinator} has no place '{name}'", hint)
    return name


def _check_wait(device: Device, what: str, deadline: float, wait: float, cancel) -> None:
    if cancel is not None and cancel.is_set():
        raise KeyboardInterrupt
    if time.monotonic() >= deadline:
        raise RemoteError(f"{device.name}: {what} for more than {wait:g} s",
                          "try again later, or wait longer with --wait SECONDS")


def _reserve(device, session, loop, pb2, Reservation, ReservationState, deadline, wait, say, cancel):
    """A reservation by tags, polled until the coordinator allocates a place: (place, token)."""
    tags = dict(device.labgrid_tags)
    request = pb2.CreateReservationRequest(filters={"main": pb2.Reservation.Filter(filter=tags)}, prio=0)
    res = Reservation.from_pb2(loop.run_until_complete(session.stub.CreateReservation(request)).reservation)
    token, said = res.token, False
    try:
        while True:
            poll = loop.run_until_complete(session.stub.PollReservation(pb2.PollReservationRequest(token=token)))
            res = Reservation.from_pb2(poll.reservation)
            if res.state in (ReservationState.allocated, ReservationState.acquired):
                loop.run_until_complete(session.sync_with_coordinator())
                return res.allocations["main"][0], token
            if res.state is not ReservationState.waiting:
                raise RemoteError(f"{device.name}: the labgrid reservation for {_tags(tags)} is {res.state.name}")
            matching = {n: p for n, p in session.places.items() if all(p.tags.get(k) == v for k, v in tags.items())}
            if not matching:
                raise UsageError(f"{device.name}: no labgrid place has the tags {_tags(tags)}",
                                 f"places there: {', '.join(sorted(session.places)) or 'none'}")
            held = ", ".join(f"{n} by {_holder(p)}" for n, p in sorted(matching.items()) if p.acquired)
            if not said:
                say(f"{device.name}: every labgrid place with {_tags(tags)} is busy ({held or 'reserved'}); "
                    f"waiting up to {wait:g} s for one (--wait SECONDS)")
                said = True
            _check_wait(device, f"every labgrid place with {_tags(tags)} is held ({held or 'reserved'})",
                        deadline, wait, cancel)
            _pump(loop, session, POLL_S)
    except BaseException:
        _cancel_reservation(session, loop, token)
        raise


def _tags(tags: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(tags.items()))


class LabgridTransport(Transport):
    """The SSH transport to an acquired place; closing it releases the place."""

    def __init__(self, inner: Transport, lease: Lease):
        self.inner, self.lease = inner, lease
        self.name, self.work_dir = inner.name, inner.work_dir

    @property
    def cancel(self):  # remote_bench sets it after opening: the SSH side watches it
        return self.inner.cancel

    @cancel.setter
    def cancel(self, event) -> None:
        self.inner.cancel = event

    def run(self, argv: list[str], timeout: float, stream: StreamCallback | None = None) -> RunResult:
        return self.inner.run(argv, timeout, stream)

    def put(self, local, remote: str) -> None:
        self.inner.put(local, remote)

    def get(self, remote: str, local) -> None:
        self.inner.get(remote, local)

    def sha256(self, remote: str) -> str | None:
        return self.inner.sha256(remote)

    def sha256_many(self, remotes: list[str]) -> dict[str, str | None]:
        return self.inner.sha256_many(remotes)

    def close(self) -> None:
        try:
            self.inner.close()
        finally:
            self.lease.release()


def open_labgrid_transport(device: Device, *, accept_new_host_key: bool = False, notify=None,
                           connect_timeout: float = 10.0, wait: float | None = None,
                           cancel: threading.Event | None = None) -> LabgridTransport:
    from .ssh import SshTransport

    lease = acquire(device, wait=wait, notify=notify, cancel=cancel)
    try:
        ssh = device.model_copy(update={"transport": TransportKind.SSH, "coordinator": None, "labgrid_place": None,
                                        "labgrid_tags": {}, **lease.ssh})
        if notify:
            notify(f"{device.name}: acquired labgrid place '{lease.place}' ({lease.ssh['host']}:{lease.ssh['port']})")
        inner = SshTransport.for_device(ssh, accept_new_host_key=accept_new_host_key, notify=notify,
                                        connect_timeout=connect_timeout)
    except BaseException:
        lease.release()
        raise
    return LabgridTransport(inner, lease)


def client_name() -> str:
    """The name labgrid records as the holder (``LG_HOSTNAME``/``LG_USERNAME`` override it)."""
    import getpass
    import socket

    return f"{os.environ.get('LG_HOSTNAME', socket.gethostname())}/{os.environ.get('LG_USERNAME', getpass.getuser())}"
