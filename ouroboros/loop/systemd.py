"""Telling systemd how the run stands (`Type=notify`, `WatchdogSec=`), with no dependency: one
datagram per message on the AF_UNIX socket named by NOTIFY_SOCKET (a path, or `@name` for an
abstract one), as sd_notify(3) sends them. Without NOTIFY_SOCKET nothing is sent.

    READY=1       start-up is over: the server answered and the run is open
    STATUS=...    one line systemctl status shows (waiting for the server, the session, the end)
    WATCHDOG=1    every half of WATCHDOG_USEC, from the event loop: a hung loop stops pinging
                  and systemd restarts the unit
    STOPPING=1    the run is ending

    notify_systemd("READY=1")
    task = asyncio.ensure_future(keep_watchdog())   # nothing to do without WATCHDOG_USEC
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Mapping

from ouroboros.store import events as ev
from ouroboros.store.events import EventBase


def socket_address(value: str) -> str | bytes | None:
    """The address NOTIFY_SOCKET names: a path, or `@name` for the abstract `\\0name`;
    None for anything else (unset, empty, or not an AF_UNIX name)."""
    if value.startswith("@") and len(value) > 1:
        return b"\0" + value[1:].encode()
    if value.startswith("/"):
        return value
    return None


def watchdog_interval(env: Mapping[str, str], pid: int | None = None) -> float | None:
    """Seconds between WATCHDOG=1 pings: half of WATCHDOG_USEC, when it is set for this
    process (WATCHDOG_PID, when set, is ours); else None."""
    if env.get("WATCHDOG_PID") and env["WATCHDOG_PID"] != str(pid or os.getpid()):
        return None
    try:
        usec = int(env.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    return usec / 2e6 if usec > 0 else None


def notify_systemd(message: str, env: Mapping[str, str] | None = None) -> bool:
    """Send `message` ("READY=1", "STATUS=...") to NOTIFY_SOCKET; whether it went. A socket
    that is gone or refuses is not the run's failure."""
    address = socket_address((os.environ if env is None else env).get("NOTIFY_SOCKET", ""))
    if address is None:
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.sendto(message.encode(), address)
    except OSError:
        return False
    return True


async def keep_watchdog(env: Mapping[str, str] | None = None) -> None:
    """Send WATCHDOG=1 every half of WATCHDOG_USEC until cancelled (at once if not asked)."""
    interval = watchdog_interval(os.environ if env is None else env)
    if interval is None:
        return
    while True:
        notify_systemd("WATCHDOG=1", env)
        await asyncio.sleep(interval)


def status_line(event: EventBase) -> str | None:
    """The STATUS= text for an event that changes what the run is doing, else None."""
    match event:
        case ev.SessionStart():
            return f"session {event.session}: running"
        case ev.RunResumed():
            return f"resumed at turn {event.total_turns}"
        case ev.Retry(attempt=attempt, delay_secs=delay):
            return f"session {event.session}: model request retry {attempt} in {delay:g} s"
        case ev.Idle():
            return f"session {event.session}: idle pause"
        case ev.StopRequested(signal=name):
            return f"stopping ({name})"
        case ev.RunEnd(reason=reason, exit_code=code):
            return f"ended: {reason} (exit {code})"
    return None


def on_event(event: EventBase) -> None:
    """A log listener: STATUS= lines, and STOPPING=1 when the run ends or is asked to stop."""
    line = status_line(event)
    if line is not None:
        notify_systemd(f"STATUS={line}")
    if isinstance(event, (ev.StopRequested, ev.RunEnd)):
        notify_systemd("STOPPING=1")
