"""An HTTP CONNECT proxy on loopback for the egress proxy's tests (docs/egress.md): it counts
tunnels, keeps the CONNECT lines and the Proxy-Authorization it was sent, checks credentials
when given some, refuses every tunnel when told to, and answers 502 for an address it cannot
reach. Only loopback addresses are ever connected to (the tests' rule)."""

from __future__ import annotations

import base64
import ipaddress
import socket
import ssl
import threading
from dataclasses import dataclass, field


@dataclass
class ConnectProxy:
    username: str = ""
    password: str = ""
    refuse: bool = False  # answer 403 to every CONNECT
    connects: list[str] = field(default_factory=list)  # the CONNECT targets, in order
    authorizations: list[str | None] = field(default_factory=list)
    tunnels: int = 0  # tunnels opened (200 sent)
    # The local ports of the tunnels' upstream connections: a server's peer port says whether a
    # request it got came through this proxy.
    upstream_ports: set[int] = field(default_factory=set)
    tls: ssl.SSLContext | None = None  # set: an https:// proxy (TLS to the proxy itself)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._stop = False

    def url(self, *, username: str | None = None, password: str | None = None) -> str:
        from urllib.parse import quote  # noqa: PLC0415

        user = self.username if username is None else username
        secret = self.password if password is None else password
        who = f"{quote(user, safe='')}:{quote(secret, safe='')}@" if user or secret else ""
        if self.tls is not None:
            return f"https://{who}localhost:{self.port}"  # the name its certificate carries
        return f"http://{who}127.0.0.1:{self.port}"

    def start(self) -> ConnectProxy:
        threading.Thread(target=self._serve, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop = True
        self._server.close()

    def _serve(self) -> None:
        while not self._stop:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(client,), daemon=True).start()

    def _handle(self, client: socket.socket) -> None:
        if self.tls is not None:
            try:
                client = self.tls.wrap_socket(client, server_side=True)
            except (OSError, ssl.SSLError):
                client.close()
                return
        with client:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = client.recv(4096)
                if not chunk:
                    return
                head += chunk
            lines = head.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            headers = {
                k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])
            }
            with self._lock:
                self.connects.append(target)
                self.authorizations.append(headers.get("proxy-authorization"))
            if method != "CONNECT":
                client.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
                return
            if self.username or self.password:
                expected = "Basic " + base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
                if headers.get("proxy-authorization") != expected:
                    client.sendall(
                        b"HTTP/1.1 407 Proxy Authentication Required\r\n"
                        b'Proxy-Authenticate: Basic realm="test"\r\nContent-Length: 0\r\n\r\n'
                    )
                    return
            if self.refuse:
                client.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
                return
            host, _, port = target.rpartition(":")
            host = host.strip("[]")
            if not ipaddress.ip_address(host).is_loopback:  # never anything but loopback
                client.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
                return
            try:
                upstream = socket.create_connection((host, int(port)), timeout=5)
            except OSError:
                client.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
                return
            with self._lock:
                self.tunnels += 1
                self.upstream_ports.add(upstream.getsockname()[1])
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            with upstream:
                pump = threading.Thread(target=_pipe, args=(upstream, client), daemon=True)
                pump.start()
                _pipe(client, upstream)
                pump.join(10)


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while chunk := src.recv(65536):
            dst.sendall(chunk)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass
