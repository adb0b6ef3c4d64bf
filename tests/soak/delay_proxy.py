#!/usr/bin/env python3
"""A TCP proxy on loopback in front of the Redis master of a Sentinel
group, adding a delay on demand: the soak's slow link.

    delay_proxy.py LISTEN_PORT MASTER_NAME DELAY_MS SENTINEL_PORT...

Each accepted connection is forwarded to the master the Sentinels name
at that moment (asked afresh per connection).  The Sentinels are asked
again every 200 ms; when they name another master, every forwarded
connection is closed, so that its client reconnects to the new master
(as a Sentinel-aware TCP proxy such as HAProxy's would).  SIGUSR1 turns
the delay on: every chunk from the client is delivered to Redis DELAY_MS
after it was read, in order (a round trip DELAY_MS longer); SIGUSR2 turns
it off.  Prints "ready" once it
listens.  Loopback only; stops on SIGTERM.
"""
import asyncio
import signal
import socket
import sys
import time

LISTEN = int(sys.argv[1])
NAME = sys.argv[2]
DELAY = int(sys.argv[3]) / 1000.0
SENTINELS = [int(p) for p in sys.argv[4:]]

state = {"delay": 0.0, "master": None, "conns": set()}


def ask_master():
    """The master's port as the first answering Sentinel names it."""
    for port in SENTINELS:
        try:
            with socket.create_connection(("127.0.0.1", port), 0.5) as s:
                s.settimeout(0.5)
                cmd = ["SENTINEL", "get-master-addr-by-name", NAME]
                s.sendall(("*%d\r\n" % len(cmd) + "".join(
                    "$%d\r\n%s\r\n" % (len(a), a) for a in cmd)).encode())
                data = b""
                while data.count(b"\r\n") < 5 and not data.startswith(b"*-1"):
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                parts = data.split(b"\r\n")
                if len(parts) >= 5 and parts[0] == b"*2":
                    return int(parts[4])
        except (OSError, ValueError):
            continue
    return None


async def pump(reader, writer, peer, delayed):
    """Copies reader to writer (when `delayed`, each chunk held back by
    the delay in force when it was read); closes both ends at the end."""
    queue = asyncio.Queue()

    async def deliver():
        while True:
            due, data = await queue.get()
            if data is None:
                break
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()

    sender = asyncio.ensure_future(deliver())
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            await queue.put((time.monotonic() +
                             (state["delay"] if delayed else 0), data))
        await queue.put((0, None))
        await sender
    except (OSError, asyncio.CancelledError):
        pass
    finally:
        sender.cancel()
        for w in (writer, peer):
            w.close()


async def handle(creader, cwriter):
    port = state["master"] or ask_master()
    if port is None:
        cwriter.close()
        return
    try:
        sreader, swriter = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port), 2)
    except (OSError, asyncio.TimeoutError):
        cwriter.close()
        return
    conn = (cwriter, swriter)
    state["conns"].add(conn)
    try:
        await asyncio.gather(pump(creader, swriter, cwriter, True),
                             pump(sreader, cwriter, swriter, False))
    finally:
        state["conns"].discard(conn)


async def follow():
    loop = asyncio.get_running_loop()
    while True:
        port = await loop.run_in_executor(None, ask_master)
        if port is not None and port != state["master"]:
            if state["master"] is not None:
                print("master moved to %d: closing %d connections"
                      % (port, len(state["conns"])), flush=True)
                for conn in list(state["conns"]):
                    for w in conn:
                        w.close()
            state["master"] = port
        await asyncio.sleep(0.2)


def set_delay(on):
    state["delay"] = DELAY if on else 0.0
    print("delay %s" % ("on" if on else "off"), flush=True)


async def main():
    loop = asyncio.get_running_loop()
    stop = loop.create_future()
    loop.add_signal_handler(signal.SIGUSR1, set_delay, True)
    loop.add_signal_handler(signal.SIGUSR2, set_delay, False)
    loop.add_signal_handler(signal.SIGTERM, stop.set_result, None)
    state["master"] = ask_master()
    server = await asyncio.start_server(handle, "127.0.0.1", LISTEN)
    follower = asyncio.ensure_future(follow())
    print("ready", flush=True)
    await stop
    follower.cancel()
    server.close()


if __name__ == "__main__":
    asyncio.run(main())
